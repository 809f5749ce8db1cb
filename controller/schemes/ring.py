"""`--algorithm ring` on the controller: the hosts sum over TCP, so the job only installs IP
routes and recomputes them after a link failure (controller/forwarding_job.py)."""

from __future__ import annotations

from agglab.controller.forwarding_job import ForwardingJob

WIRE_MODEL = "ring"


def install(seat):
    return ForwardingJob(seat.graph, seat.clients, seat.workers, seat.spec.default_window(), seat.epoch_file,
                         job=seat.job, events=seat.events, algorithm=seat.spec.algorithm)
