"""Test harnesses that ship with agglab: the tests and `agglab exercise check` share them.

Why in the product and not under tests/: the exercise checker grades a student's code with
the conformance vectors and an in-process allreduce, and an installed agglab (`pip install .`)
has no tests/ directory. So the harnesses live here, tests/ imports them, and nothing in the
product imports tests/:

- vectors.py, frames.py: load p4src/vectors/*.yaml into frames and expected state
- conformance.py: run one vector on a target; soft_target.py, bmv2_target.py: the targets
  (netns.py: the BMv2 target's network namespace)
- fakenet.py: real agents through the software switch's pipeline over in-process wires
- treenet.py: a multi-switch network of pipelines for the controller's trees and reroutes
"""
