"""The software switch's P4 pipeline: p4src/agglab.p4 in Python.

Why a second implementation of the P4 program: BMv2 manages a few thousand
aggregation packets per second, too few for multi-switch experiments; this
pipeline has the same tables, actions, registers and counters (same names,
same control commands) and emits byte-identical frames, which the conformance
vectors in p4src/vectors check against BMv2 itself.

    p = Pipeline(seed=1)
    p.command("table_add agg_job agg_child 1 0 0 1 => 0 2 1 0 1024 65535")
    out = p.process(1, frame)          # [(egress_port, frame_bytes), ...]
    p.registers["agg_values"]          # numpy uint32 array, live
    p.counters["agg_stats"]            # numpy uint64 packet counts, live
    p.counters["agg_rejects"]          # ... of rejected packets, by reason (REJ_*)
    p.tables["agg_job"]                # agglab.softswitch.tables.Table

`process` follows AgglabIngress/AgglabEgress: the port policer (policer.py: a port in no
job, over its meter, is dropped first), ingress drop simulator, parser
error check, the agg_job lookup (roles.py, JobRole) then aggregation (dense, or
the control its agg_h flag selects: softswitch/schemes; a dense completion re-arms the
slot's sparse state, SparseRearm) or forwarding, replication (ascending port order), then per
replica the egress drop simulator, agg_reply or flood pruning, and the IPv4 checksum.  It is
the daemon's per-packet hot path, hence the flat code.
"""

from __future__ import annotations

from agglab.ground import wire
from agglab.softswitch import cli, parser
from agglab.softswitch import native
from agglab.softswitch.batch import DenseBatch
from agglab.softswitch.aggregate import STAT_REJECT, Aggregate, make_state
from agglab.softswitch.deparser import update_ipv4_checksum
from agglab.softswitch.drop_sim import DropSim
from agglab.softswitch.forward import COPY, RESULT, Forward, flood_prune
from agglab.softswitch.multicast import Multicast
from agglab.softswitch.policer import PortPolicer
from agglab.softswitch.registers import CounterArray
from agglab.softswitch.roles import ACK_ONLY as _ACK_ONLY, REJ_MALFORMED, job_table, lookup_role
from agglab.softswitch.schemes import BRANCHES, MODULES

DROP_PORT = 511          # simple_switch's default drop port (egress_spec after mark_to_drop)
_AGG, _IPV4, _ERROR, _L2 = parser.AGG, parser.IPV4, parser.ERROR, parser.L2

# The P4 schemes' branches (softswitch/schemes: one module per P4 row of ground/schemes.py):
# flags & _ROLE_FLAGS select a control that takes agg_job's role, flags & _OWN_FLAGS one with
# a table of its own, branched to before that lookup; p4src/agglab.p4 branches on the same flags.
_ROLE_FLAGS = _OWN_FLAGS = 0
for _flag, _role in BRANCHES.values():
    if _role:
        _ROLE_FLAGS |= _flag
    else:
        _OWN_FLAGS |= _flag
_FLAGS_OFF = wire.AGG_OFFSET + 3


def _dispatch(role: bool) -> dict[int, str]:
    """Every value of flags & (the role-taking or the own-table branches' flags) -> the scheme
    whose control takes the packet: the first in the rows' order whose flag is set (the order
    of agglab.p4's if/else branches), else the one selected by flag 0 (dense)."""
    mask = _ROLE_FLAGS if role else _OWN_FLAGS
    out = {}
    for bits in range(256):
        if bits & mask == bits:
            named = [n for n, (flag, r) in BRANCHES.items() if r == role and (bits & flag if flag else not bits)]
            if named:
                out[bits] = named[0]
    return out


class Pipeline:
    def __init__(self, seed: int | None = None, clock=None):
        self.register_arrays, self.stats = make_state()
        self.generation = 0                      # bumped by every command: tables are changed only so
        self.rejects = CounterArray("agg_rejects", wire.CONST["AGG_REJECTS_SIZE"])
        self.policer = PortPolicer(self.stats, self.rejects, **({"clock": clock} if clock else {}))
        self.meters = {"port_meter": self.policer}
        self.counter_arrays = {c.name: c for c in (self.stats, self.rejects)}
        self.drop_sim = DropSim(self.stats, seed)
        self.agg_job = job_table()               # JobRole: one lookup for both pipelines
        self.aggregate = Aggregate(self.register_arrays, self.stats)   # the base: every result's egress
        self.forward = Forward()
        self.mc = Multicast()
        self.tables = {t.name: t for t in (
            self.policer.table, self.drop_sim.ingress_table, self.agg_job, self.forward.ipv4_lpm,
            self.forward.l2_exact, self.drop_sim.egress_table, self.aggregate.agg_reply, self.forward.copy_dst)}
        # every P4 scheme's control (softswitch/schemes), each adding its state and tables
        self.controls = {name: module.build(self) for name, module in MODULES.items()}
        self.registers = {name: reg.data for name, reg in self.register_arrays.items()}
        self.counters = {name: c.packets for name, c in self.counter_arrays.items()}
        self._cli = cli.Cli(self)
        self._batch = DenseBatch(self, other_flags=_ROLE_FLAGS | _OWN_FLAGS)   # every branch's flag but dense's 0
        # the same path in C where it was built (softswitch/native.py); None: Python only
        self.native = native.NativeDense(self, _ROLE_FLAGS | _OWN_FLAGS) if native.enabled() else None
        # flags & _ROLE_FLAGS -> the branch's ingress(port, frame, role); flags & _OWN_FLAGS ->
        # ingress(port, frame) of a branch with its own table
        self._branch = {bits: self.controls[n].ingress for bits, n in _dispatch(True).items()}
        self._own = {bits: self.controls[n].ingress for bits, n in _dispatch(False).items()}

    def process_batch(self, ingress_port: int, rows, lens):
        """A whole receive batch at once where that is exactly `process` frame after frame
        (softswitch/batch.py): (outputs, drops), outputs [(egress_port, uint8 array of
        frames)], or None (nothing changed): run the frames through `process` instead."""
        return self._batch.run(ingress_port, rows, lens)

    def command(self, line: str) -> str:
        """Run one simple_switch_CLI command; raises cli.CommandError when BMv2 would refuse it."""
        self.generation += 1                     # tables may change: caches of them (native.py) refresh
        return self._cli.execute(line)

    def reset_state(self) -> None:
        """Empty tables (defaults restored), zero registers and counters, no multicast groups."""
        self.generation += 1
        for table in self.tables.values():
            table.reset()
        for reg in self.register_arrays.values():
            reg.reset()
        for counter in self.counter_arrays.values():
            counter.reset()
        self.policer.reset()
        self.mc.reset()

    def process(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """Frames emitted for `frame` arriving on `ingress_port`, as (egress_port, bytes)."""
        if self.policer.table.exact and self.policer.red(ingress_port, len(frame)):
            return []
        return self.process_admitted(ingress_port, frame)

    def process_admitted(self, ingress_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """`process` for a frame the port policer already let through (the daemon meters
        whole receive batches at once: PortPolicer.admit)."""
        drop_sim = self.drop_sim
        if drop_sim.ingress(ingress_port, len(frame)):
            return []
        ptype = parser.parse(frame)
        if ptype == _AGG and frame[_FLAGS_OFF] & _OWN_FLAGS:
            if frame[_FLAGS_OFF] & _ACK_ONLY == _ACK_ONLY:      # agg_h alone: no values to add
                self.stats.count(STAT_REJECT, len(frame))
                self.rejects.count(REJ_MALFORMED, len(frame))
                return []
            decision = self._own[frame[_FLAGS_OFF] & _OWN_FLAGS](ingress_port, frame)
        elif ptype == _AGG:
            role = lookup_role(self.agg_job, ingress_port, frame)
            if role.__class__ is int:          # agg_reject (job.p4), and why
                self.stats.count(STAT_REJECT, len(frame))
                self.rejects.count(role, len(frame))
                return []
            decision = self._branch[role[-1] & _ROLE_FLAGS](ingress_port, frame, role)
        elif ptype == _IPV4:
            decision = self.forward.ipv4(frame)
        elif ptype == _ERROR:
            self.stats.count(STAT_REJECT, len(frame))
            self.rejects.count(REJ_MALFORMED, len(frame))
            return []
        else:
            decision = self.forward.l2(frame)
        if decision is None:
            return []
        buf, egress_spec, mgrp, kind = decision
        if mgrp:
            replicas = self.mc.replicate(mgrp)
        elif egress_spec == DROP_PORT:
            return []
        else:
            replicas = ((egress_spec, 0),)
        if kind != RESULT and ptype != _L2:    # forwarded IPv4 or an inner switch's partial
            update_ipv4_checksum(buf)          # deparser; nothing in egress changes IPv4
            buf = bytes(buf)
        out = []
        for port, rid in replicas:
            if drop_sim.egress(port, len(buf)):
                continue
            if kind == RESULT:
                frame_out = self.aggregate.reply(port, buf)
                if frame_out is not None:
                    out.append((port, frame_out))
            elif kind == COPY:
                copy = self.forward.copy(rid, buf)
                if copy is not None:
                    update_ipv4_checksum(copy)
                    out.append((port, bytes(copy)))
            elif not flood_prune(kind, port, ingress_port):
                out.append((port, buf))
        return out
