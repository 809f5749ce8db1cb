"""`python -m experiments`: run a sweep from a YAML config (see experiments/cli.py)."""

import sys

from experiments.cli import main

if __name__ == "__main__":
    sys.exit(main())
