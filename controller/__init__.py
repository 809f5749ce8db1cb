"""Control plane: topology graph, addressing, switch clients (software switch, BMv2), trees, the
jobs that install them and reroute on failures, and one
programmer module per P4 control (forward.py ↔ forward.p4, aggregate.py ↔ aggregate.p4,
drop_sim.py ↔ drop_sim.p4)."""
