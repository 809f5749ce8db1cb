"""`python -m experiments`: run a sweep from a YAML config (see experiments/runner.py)."""

import sys

from experiments.runner import main

if __name__ == "__main__":
    sys.exit(main())
