"""`--algorithm ps` on the hosts: hosts/ps.py over the kept TCP connections (_tcp.py)."""

from __future__ import annotations

from agglab.hosts.schemes._tcp import host_baseline

allreduce, prepare = host_baseline("agglab.hosts.ps", lambda spec: {"layout": spec.ps_layout})
