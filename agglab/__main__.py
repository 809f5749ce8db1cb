import sys

from agglab.cli import main

sys.exit(main())
