"""`python -m agglab.bench`: what `make bench` runs (agglab/bench/cli.py)."""

import sys

from agglab.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
