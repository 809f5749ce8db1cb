"""A reroute's results kept in place (controller/reroute/failover.kept_rows and friends), and
the BMv2 client's own encoding of single register cells (controller/bmv2_thrift.CellCodec)."""

from __future__ import annotations

import struct
from collections import Counter

import numpy as np
import pytest

from agglab.controller.reroute import failover
from agglab.controller.reroute.failover import CompletedVersion, drop_rows, kept_rows, preload_cells, reset_lines, slot_index
from agglab.controller.tree_install import Installation, SwitchRole
from agglab.controller.slot_partition import partition_slots
from agglab.ground import wire

K = wire.K


def test_preferred_slots_keep_their_tree_and_the_shares_do_not_change():
    old = partition_slots((0.25,) * 4, 128)
    # trees 3, 4, 5 of the new set are rooted where old trees 1, 2, 3 were
    prefer = [{1: [3], 2: [4], 3: [5]}.get(t, []) for t in old]
    new = partition_slots((1 / 6,) * 6, 128, prefer=prefer)
    assert Counter(new) == Counter(partition_slots((1 / 6,) * 6, 128))
    for t_old, t_new in ((1, 3), (2, 4), (3, 5)):
        moved = [new[i] for i, t in enumerate(old) if t == t_old]
        assert moved.count(t_new) == Counter(new)[t_new]     # its whole share from that old tree
    assert partition_slots((0.5, 0.5), 8, prefer=[[1]] * 8) == [1, 1, 1, 1, 0, 0, 0, 0]


def test_drop_rows_leaves_runs_of_whole_slot_versions():
    runs = [(10 * K, 4 * K), (20 * K, 2 * K)]
    assert drop_rows(runs, {11, 20}) == [(10 * K, K), (12 * K, 2 * K), (21 * K, K)]
    assert drop_rows(runs, set(range(30))) == []
    assert drop_rows([(3, 4)], {4}, per=1) == [(3, 1), (5, 2)]


class FillClient:
    def register_fill_lines(self, name, start, count, value=0):
        return [f"register_fill {name} {start} {count} {value}"]


def _filled(lines, name):
    cells = set()
    for line in lines:
        _, reg, start, count, _ = line.split()
        if reg == name:
            cells.update(range(int(start), int(start) + int(count)))
    return cells


def test_the_reset_leaves_kept_lanes_and_clears_everything_else():
    slots = (0, 8)
    kept = {slot_index(0, 0, 3), slot_index(1, 0, 5)}
    lines = reset_lines(FillClient(), slots, skip={"agg_values": kept})
    window = {slot_index(v, 0, s) for v in (0, 1) for s in range(8)}
    assert _filled(lines, "agg_values") == {r * K + lane for r in window - kept for lane in range(K)}
    assert _filled(lines, "agg_count") == window                       # scalars: reset as ever
    assert _filled(lines, "sp_values") == {r * K + lane for r in window for lane in range(K)}


def _role(sw, tree, root, children):
    return SwitchRole(sw, tree, root, children, None)


def _installation(roots: dict[int, str], leaves=("e1", "e2")) -> Installation:
    roles = {}
    for tree, root in roots.items():
        roles[root, tree] = _role(root, tree, True, list(leaves))
        for leaf in leaves:
            roles[leaf, tree] = _role(leaf, tree, False, [f"h-{leaf}"])
    return Installation(epoch=0, roles=roles)


def test_kept_rows_are_the_slots_whose_new_root_is_their_live_old_root():
    old = _installation({0: "c1", 1: "c2"})
    new = _installation({0: "c2", 1: "c3"})
    rows = kept_rows(old, [0, 1, 0, 1], new, [1, 0, 0, 1], slot_base=4)
    assert rows == {"c2": {slot_index(v, 4, 1) for v in (0, 1)}}          # slot 1: c2 before and after
    assert kept_rows(old, [0, 1, 0, 1], new, [1, 0, 0, 1], slot_base=4, down={"c2"}) == {}


def test_a_kept_result_is_preloaded_without_its_lanes_and_only_at_its_holder():
    new = _installation({0: "c2"})
    values = np.arange(K, dtype=np.int64)
    done = {0: CompletedVersion(0, 1, 5, None, block=7, holder="c2"),
            1: CompletedVersion(1, 0, 5, values, block=8, holder="c1")}
    cells = preload_cells(new, [0, 0], done)
    assert set(cells.lanes["c2"]["agg_values"]) == {slot_index(0, 0, 1)}    # slot 1's values, not slot 0's
    assert cells.rows["c2"][slot_index(1, 0, 0)]["agg_final"] == 1          # slot 0 still complete at the root
    with pytest.raises(ValueError, match="slot 0: result kept at c2, new root c3"):
        preload_cells(_installation({0: "c3"}), [0, 0], done)               # kept at c2, root now c3


# -- CellCodec against the generated client -------------------------------------------------------
def _generated():
    from agglab.controller.bmv2_ways import add_bmv2_python_path

    add_bmv2_python_path()
    standard = pytest.importorskip("bm_runtime.standard.Standard")
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
    from thrift.transport import TTransport

    return standard, TBinaryProtocol, TMultiplexedProtocol, TTransport


@pytest.mark.parametrize("method,args", [("bm_register_write", (0, "agg_values", 70_000, 0xFFFFFFFF)),
                                         ("bm_register_read", (0, "sp_block", 3))])
def test_cells_are_encoded_as_the_generated_client_encodes_them(method, args):
    standard, binary, multiplexed, transport = _generated()
    from agglab.controller.bmv2_thrift import CellCodec

    buf = transport.TMemoryBuffer()
    client = standard.Client(multiplexed.TMultiplexedProtocol(binary.TBinaryProtocol(buf), "standard"))
    getattr(client, "send_" + method)(*args)
    assert CellCodec("standard").encode(method, args) == buf.getvalue()


def _reply(method: str, result: bytes) -> bytes:
    name = method.encode()
    return struct.pack(">Ii", 0x80010002, len(name)) + name + struct.pack(">i", 0) + result


def _reader(data: bytes):
    at = [0]

    def read(n: int) -> bytes:
        if at[0] + n > len(data):
            raise AssertionError("read past the answer")
        at[0] += n
        return data[at[0] - n:at[0]]
    return read, at


class _InvalidRegisterOperation(Exception):
    """Where BMv2's bindings are not installed: the generated exception's constructor."""

    def __init__(self, code=None):
        super().__init__(code)
        self.code = code


def test_answers_are_read_to_their_last_byte_and_errors_raise_as_generated():
    """The answers are bytes written here, so this runs without BMv2's bindings (with them, the
    generated exception class is the one raised)."""
    from agglab.controller.bmv2_ways import add_bmv2_python_path
    from thrift.Thrift import TApplicationException

    add_bmv2_python_path()
    try:
        from bm_runtime.standard.ttypes import InvalidRegisterOperation  # type: ignore
    except ImportError:
        InvalidRegisterOperation = _InvalidRegisterOperation

    from agglab.controller.bmv2_thrift import CellCodec

    errors = (InvalidRegisterOperation, TApplicationException)
    value = _reply("bm_register_read", struct.pack(">bhqb", 10, 0, -5, 0))
    written = _reply("bm_register_write", b"\x00")
    bad = _reply("bm_register_write", bytes.fromhex("0c0001" "080001" "00000002" "00" "00"))
    stream = value + written + bad + value
    read, at = _reader(stream)
    assert CellCodec.receiver(read, "bm_register_read", errors)() == -5
    assert CellCodec.receiver(read, "bm_register_write", errors)() is None
    with pytest.raises(InvalidRegisterOperation, match=r"code=2") as exc:
        CellCodec.receiver(read, "bm_register_write", errors)()
    assert exc.value.code == 2
    assert CellCodec.receiver(read, "bm_register_read", errors)() == -5     # the stream stays in step
    assert at[0] == len(stream)
    app = struct.pack(">Ii", 0x80010003, 4) + b"nope" + struct.pack(">i", 0) \
        + bytes.fromhex("0b0001") + struct.pack(">i", 3) + b"bad" + bytes.fromhex("080002") + struct.pack(">i", 1) + b"\x00"
    read, _ = _reader(app)
    with pytest.raises(TApplicationException, match="bad"):
        CellCodec.receiver(read, "bm_register_read", errors)()


def test_failover_snapshot_reads_no_kept_values():
    """A kept slot version is carried with its holder and no values; nothing is read for it."""
    old = _installation({0: "c1"})

    class NoReads:
        pipelined_batches = True
        atomic_batches = False

        def send_commands(self, lines):
            raise AssertionError(f"read {lines[:2]}")

    window = [0, 0]
    regs = {"c1": {name: np.zeros(2 * wire.SLOTS, dtype=np.int64) for name in failover.SNAPSHOT_SCALARS}}
    for slot in (0, 1):
        r = slot_index(0, 0, slot)
        regs["c1"]["agg_count"][r] = 2
        regs["c1"]["agg_bitmap"][r] = 1
    keep = {"c1": {slot_index(v, 0, s) for v in (0, 1) for s in (0, 1)}}
    found = failover.snapshot({"c1": NoReads()}, old, window, regs=regs, keep=keep)
    assert sorted(found) == [0, 1]
    assert all(done.values is None and done.holder == "c1" for done in found.values())
