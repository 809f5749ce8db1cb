"""What the schemes aggregated on the controller's trees share: their job is a TreeJob
(controller/tree_job.py), in the tenant's slot range when `--jobs J` partitions the slots.
A private module: not a scheme of its own."""

from __future__ import annotations


def tree_job(seat):
    from agglab.controller.tree_job import TreeJob  # lazy: circle: TreeJob uses agglab.controller.reroute, whose carry.py builds CARRIES from this package's modules (discovery, unseen by tests/test_layers.py)

    extra = {} if seat.slots is None else {"slot_base": seat.slot_base, "slots": seat.slots,
                                           "reply_ports": seat.reply_ports}
    return TreeJob(seat.graph, seat.clients, seat.spec.tree, seat.workers, seat.spec.default_window(),
                   seat.epoch_file, job=seat.job, events=seat.events, **extra)
