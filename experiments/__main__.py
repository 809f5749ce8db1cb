"""`python -m agglab.experiments`: run a sweep from a YAML config (see experiments/cli.py)."""

import sys

from agglab.experiments.cli import main

if __name__ == "__main__":
    sys.exit(main())
