"""Ground layer: what every other layer agrees on and nothing else.

The packet format (wire), file-system locations (paths), run directories and their
cleanup (rundir), addresses of hosts and the aggregation service (addresses) and the
run description (runspec). Imports no other agglab package.
"""
