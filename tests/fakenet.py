"""Moved to agglab/testkit/fakenet.py (the exercise checker uses it, and agglab never imports
tests/). Kept so tests written against the old name still import; new tests import
agglab.testkit.fakenet."""
from agglab.testkit.fakenet import *  # noqa: F401,F403
from agglab.testkit.fakenet import _get  # noqa: F401
