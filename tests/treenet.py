"""Moved to agglab/testkit/treenet.py (beside the fake network it builds on). Kept so tests
written against the old name still import; new tests import agglab.testkit.treenet."""
from agglab.testkit.treenet import *  # noqa: F401,F403
