"""The software switch's control plane: BMv2-compatible answers, handles and refusals.

Why: the controller parses these answers and reuses handles identically on
both targets; a refused command must raise (the daemon reports it as an error)
with a message that says what was wrong.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from agglab.softswitch.cli import CommandError
from agglab.softswitch.pipeline import Pipeline
from agglab.testkit.frames import build


@pytest.fixture
def p():
    return Pipeline(seed=0)


def test_entry_handles_reuse_slot_with_version(p):
    assert p.command("table_add agg_reply drop 1 =>").endswith("handle 0")
    assert p.command("table_add agg_reply drop 2 =>").endswith("handle 1")
    p.command("table_delete agg_reply 0")
    assert p.command("table_add agg_reply drop 3 =>").endswith(f"handle {1 << 24}")
    with pytest.raises(CommandError, match="EXPIRED_HANDLE"):
        p.command("table_delete agg_reply 0")
    with pytest.raises(CommandError, match="INVALID_HANDLE"):
        p.command("table_delete agg_reply 7")
    p.command("table_clear agg_reply")
    assert p.command("table_num_entries agg_reply") == "0"


def test_several_entries_deleted_in_one_command_all_or_none(p):
    handles = [int(p.command(f"table_add agg_reply drop {port} =>").rsplit(" ", 1)[1]) for port in (1, 2, 3)]
    with pytest.raises(CommandError, match="INVALID_HANDLE"):
        p.command(f"table_delete agg_reply {handles[0]},{handles[1]},77")
    with pytest.raises(CommandError, match="named twice"):
        p.command(f"table_delete agg_reply {handles[0]},{handles[0]}")
    assert p.command("table_num_entries agg_reply") == "3"           # nothing deleted
    out = p.command(f"table_delete agg_reply {handles[0]},{handles[2]}")
    assert out.splitlines() == [f"Deleting entry {h} from agg_reply" for h in (handles[0], handles[2])]
    assert p.command("table_num_entries agg_reply") == "1"


@pytest.mark.parametrize("line, message", [
    ("table_add nosuch drop 1 =>", r"Invalid table name \(nosuch\)"),
    ("table_add agg_reply nosuch 1 =>", "has no action nosuch"),
    ("table_add agg_job agg_child 1 0 0 => 0 2 1 0 1024 65535", "needs 4 key fields"),
    ("table_add agg_job agg_child 1 0 0 1 => 0 2 1", "needs 6 parameters"),
    ("table_add agg_job agg_child 256 0 0 1 => 0 2 1 0 1024 65535", "does not fit in 8 bits"),
    ("table_add ipv4_lpm drop 10.0.0.1 =>", "needs a /length"),
    ("table_add l2_exact l2_forward 02:00:00 => 1", "invalid value"),
    ("register_read agg_count 4096", r"Invalid register operation \(INVALID_INDEX\)"),
    ("register_read nosuch 1", r"Invalid register name"),
    ("counter_read agg_stats 8", r"Invalid counter operation \(INVALID_INDEX\)"),
    ("mc_node_associate 1 0", r"Invalid PRE operation \(INVALID_L1_HANDLE\)"),
    ("frobnicate", "Unknown syntax"),
])
def test_refusals_raise_with_reason(p, line, message):
    with pytest.raises(CommandError, match=message):
        p.command(line)


def test_duplicate_key_refused(p):
    p.command("table_add agg_job agg_child 1 0 0 1 => 0 2 1 0 1024 65535")
    with pytest.raises(CommandError, match=r"Invalid table operation \(DUPLICATE_ENTRY\)"):
        p.command("table_add agg_job agg_child 1 0 0 1 => 1 2 1 0 1024 65535")


def test_registers_and_counters_answers(p):
    p.command("register_write agg_exp 3 300")              # BMv2 keeps the low 8 bits
    assert p.command("register_read agg_exp 3") == "agg_exp[3]= 44"
    assert p.registers["agg_exp"][3] == 44                 # live numpy view
    whole = p.command("register_read agg_exp")
    assert whole.startswith("agg_exp= 0, 0, 0, 44, 0") and whole.count(",") == 2047
    p.command("register_reset agg_exp")
    assert p.registers["agg_exp"].sum() == 0
    p.command("register_write agg_exp 3 1")
    p.command("register_write sp_block 7 2")
    p.command("register_reset agg_exp,sp_block")              # several in one (an extension)
    assert p.registers["agg_exp"].sum() == 0 and p.registers["sp_block"].sum() == 0
    with pytest.raises(CommandError, match=r"Invalid register name \(nosuch\)"):
        p.command("register_reset agg_exp,nosuch")
    assert p.command("counter_read agg_stats 4") == "agg_stats[4]= BmCounterValue(packets=0, bytes=0)"
    p.process(1, build({"raw": "02a667fffffe02000000000188b5"}))   # not IPv4: l2 drop, no count
    p.process(1, build({"raw": "02a667fffffe020000000001080045"}))  # short IPv4: parser error
    assert p.counters["agg_stats"][4] == 1
    assert re.search(r"packets=1, bytes=15", p.command("counter_read agg_stats 4"))
    p.command("counter_reset agg_stats")
    assert p.counters["agg_stats"].sum() == 0


def test_multicast_handles_and_groups(p):
    p.command("mc_mgrp_create 5")
    assert p.command("mc_node_create 0 3 1").endswith("handle 0")
    assert "port map 1010" in p.command("mc_node_create 9 1 3 | ")   # BMv2's map string
    p.command("mc_node_associate 5 0")
    p.command("mc_node_associate 5 1")
    with pytest.raises(CommandError, match="ERROR"):
        p.command("mc_node_associate 5 1")
    assert [port for port, _ in p.mc.replicate(5)] == [1, 1, 3, 3]
    p.command("mc_node_destroy 0")
    assert p.command("mc_node_create 0 2").endswith("handle 0")
    p.command("mc_node_associate 5 0")
    assert [port for port, _ in p.mc.replicate(5)] == [1, 2, 3]
    p.command("mc_node_dissociate 5 1")
    assert [port for port, _ in p.mc.replicate(5)] == [2]
    p.command("mc_mgrp_destroy 5")
    assert p.mc.replicate(5) == ()


def test_lpm_longest_prefix_and_modify(p):
    h8 = p.command("table_add ipv4_lpm ipv4_forward 10.0.0.0/8 => 0x020000000008 8")
    p.command("table_add ipv4_lpm ipv4_forward 10.1.0.0/16 => 02:00:00:00:00:10 16")
    p.command("table_add ipv4_lpm ipv4_forward 0.0.0.0/0 => 02:00:00:00:00:01 1")
    lpm = p.tables["ipv4_lpm"]
    look = lambda ip: lpm.lookup((int.from_bytes(bytes(map(int, ip.split("."))), "big"),))[1][1]
    assert (look("10.1.2.3"), look("10.2.0.1"), look("192.0.2.1")) == (16, 8, 1)
    handle = int(h8.split()[-1])
    p.command(f"table_modify ipv4_lpm ipv4_forward {handle} => 02:00:00:00:00:09 9")
    assert look("10.2.0.1") == 9
    p.command(f"table_delete ipv4_lpm {handle}")
    assert look("10.2.0.1") == 1


def test_set_default_and_reset_state(p):
    p.command("table_set_default l2_exact l2_forward 4")
    frame = build({"eth": {"dst": "02:00:00:00:00:77", "src": "02:00:00:00:00:01", "type": 0x88B5}})
    assert p.process(1, frame) == [(4, frame)]
    p.command("register_write agg_bitmap 1 5")
    p.command("reset_state")
    assert p.process(1, frame) == []
    assert not np.any(p.registers["agg_bitmap"])


def test_binary_register_runs_read_and_write(p):
    """register_write_runs/register_read_runs (the reroute's bulk forms): cells of several
    runs in one command, base64 little-endian; low W bits kept as register_write does."""
    import base64

    values = np.array([7, 300, -1, 2**33 + 5], dtype="<i8")      # agg_exp is bit<8>
    p.command("register_write_runs agg_exp 3+2,10+2 i8:" + base64.b64encode(values.tobytes()).decode())
    assert [p.command(f"register_read agg_exp {i}") for i in (3, 4, 10, 11)] == [
        "agg_exp[3]= 7", "agg_exp[4]= 44", "agg_exp[10]= 255", "agg_exp[11]= 5"]
    kind, _, text = p.command("register_read_runs agg_exp 2+3,10+2").partition(":")
    assert kind == "u1"
    assert np.frombuffer(base64.b64decode(text), dtype="<u1").tolist() == [0, 7, 44, 255, 5]
    p.command("register_write agg_values 70 4000000000")
    assert p.command("register_read_runs agg_values 70+1") == "u4:" + base64.b64encode(
        np.array([4000000000], dtype="<u4").tobytes()).decode()
    # several registers at the same cells: each one's in turn, in the widest type (bit<8>, bit<32>)
    p.command("register_write agg_block 4 70000")
    kind, _, text = p.command("register_read_runs agg_exp,agg_block 3+2,10+1").partition(":")
    assert kind == "u4"
    assert np.frombuffer(base64.b64decode(text), dtype="<u4").tolist() == [7, 44, 255, 0, 70000, 0]


def test_binary_register_cells_write_by_index(p):
    """register_write_cells: scattered cells named by index (u4 or u8), values as for runs."""
    import base64

    def b64(a, t):
        return base64.b64encode(np.asarray(a, dtype="<" + t).tobytes()).decode()
    p.command(f"register_write_cells agg_exp u4:{b64([2, 9, 2047], 'u4')} i8:{b64([7, 300, -1], 'i8')}")
    assert [int(p.registers["agg_exp"][i]) for i in (2, 9, 2047, 3)] == [7, 44, 255, 0]
    p.command(f"register_write_cells agg_values u8:{b64([5, 131071], 'u8')} u4:{b64([4000000000, 1], 'u4')}")
    assert [int(p.registers["agg_values"][i]) for i in (5, 131071)] == [4000000000, 1]
    # several registers at the same cells, their values one register after the other
    p.command(f"register_write_cells agg_count,agg_block,agg_exp u4:{b64([4, 6], 'u4')} "
              f"i8:{b64([1, 2, 70000, 8, 259, 3], 'i8')}")
    assert [[int(p.registers[n][i]) for i in (4, 6)] for n in ("agg_count", "agg_block", "agg_exp")] == [
        [1, 2], [70000, 8], [3, 3]]                                   # agg_exp is bit<8>: 259 -> 3


@pytest.mark.parametrize("line,error", [
    ("register_write_cells agg_exp u4:BQAAAAMAAAA= u4:AQAAAAEAAAA=", r"strictly increasing"),
    ("register_write_cells agg_exp u4:AAgAAA== u4:AQAAAA==", r"outside register"),
    ("register_write_cells agg_exp i4:AQAAAA== u4:AQAAAA==", r"u4 or u8"),
    ("register_write_cells agg_exp u4:AQAAAA== u4:AQAAAAEAAAA=", r"2 values for 1 cells"),
    ("register_write_cells agg_exp u4:AQAA u4:AQAAAA==", r"not a whole number"),
    ("register_write_cells agg_exp,agg_count u4:AQAAAA== u4:AQAAAA==", r"1 values for 2 cells"),
    ("register_write_cells agg_exp,agg_values u4:AAgAAA== u4:AQAAAAEAAAA=", r"outside register agg_exp"),
    ("register_write_runs agg_exp 0+2 i8:" + "A" * 12, r"not a whole number"),
    ("register_write_runs agg_exp 0+2 u4:AQAAAA==", r"1 values for 2 cells"),
    ("register_write_runs agg_exp 0+1 x9:AQAAAA==", r"T:BASE64"),
    ("register_write_runs agg_exp 0+1 u4:!!!!", r"not base64"),
    ("register_read_runs agg_exp 2047+2", r"outside register"),
    ("register_read_runs agg_exp 5", r"start\+count"),
])
def test_binary_register_runs_refusals_write_nothing(p, line, error):
    with pytest.raises(CommandError, match=error):
        p.command(line)
    assert p.registers["agg_exp"].sum() == 0
