"""What the schemes aggregated on the controller's trees share: their job is a TreeJob
(controller/tree_job.py), in the tenant's slot range when `--jobs J` partitions the slots,
given the scheme registry's carry factory from the seat (so the tree job and its reroute
never import the registry that imports them). A private module: not a scheme of its own."""

from __future__ import annotations

from agglab.controller.tree_job import TreeJob


def tree_job(seat):
    extra = {} if seat.slots is None else {"slot_base": seat.slot_base, "slots": seat.slots,
                                           "reply_ports": seat.reply_ports}
    return TreeJob(seat.graph, seat.clients, seat.spec.tree, seat.workers, seat.spec.default_window(),
                   seat.epoch_file, carry_for=seat.carry_for, algorithm=seat.spec.algorithm, job=seat.job,
                   events=seat.events, **extra)
