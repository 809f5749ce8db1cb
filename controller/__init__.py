"""Control plane: topology graph, addressing, Mininet builder, switch clients, and one
programmer module per P4 control (forward.py ↔ forward.p4, aggregate.py ↔ aggregate.p4,
drop_sim.py ↔ drop_sim.p4)."""
