"""Bmv2Client against a real simple_switch running the compiled agglab.p4, through BMv2's
runtime_CLI module and, where p4-utils is installed (the VM), through SimpleSwitchThriftAPI.

No packets here: the switch runs without ports; tables, multicast and registers are checked by
reading back what was written."""

from __future__ import annotations

import json
import subprocess

import pytest

from agglab.controller.bmv2_tools import find_bmv2_tool
from agglab.controller.switch_client import SwitchCommandError

pytestmark = [pytest.mark.bmv2]

THRIFT_PORT = 29517            # above the range the emulator hands out (9090 + switches)


@pytest.fixture(scope="module")
def program():
    from agglab.emulation.p4build import compile_p4

    return compile_p4()


@pytest.fixture
def switch(program, tmp_path):
    proc = subprocess.Popen([find_bmv2_tool("simple_switch"), "--device-id", "91", "--thrift-port",
                             str(THRIFT_PORT), "--notifications-addr", f"ipc://{tmp_path}/notify.ipc",
                             "--log-file", str(tmp_path / "ss"), str(program)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield program
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _biggest_register(program) -> tuple[str, int]:
    regs = json.loads(program.read_text())["register_arrays"]
    reg = max(regs, key=lambda r: r["size"])
    return reg["name"], reg["size"]


def _exercise(client, program):
    name, size = _biggest_register(program)
    values = [(i * 7919) & 0xFFFFFFFF for i in range(size)]
    client.commands(client.register_write_range_lines(name, 0, values))
    assert client.register_read(name) == values
    assert client.register_read_ranges(name, [(5, 3), (size - 2, 2)]) == [values[5:8], values[-2:]]
    assert client.register_read(name, 9) == values[9]
    with pytest.raises(SwitchCommandError, match=f"'register_write {name} {size} 1': .*INVALID_INDEX"):
        client.commands([f"register_write {name} {size} 1"])       # one past the end
    client.register_reset(name)
    assert set(client.register_read(name)) == {0}
    h1 = client.table_add("ipv4_lpm", "ipv4_forward", ["10.0.0.1/32"], ["02:00:00:00:00:01", 1])
    h2 = client.table_add("ipv4_lpm", "ipv4_forward", ["10.0.0.2/32"], ["02:00:00:00:00:02", 2])
    assert h2 != h1
    assert client.command("table_num_entries ipv4_lpm").strip().endswith("2")
    client.command(f"table_delete ipv4_lpm {h1}")
    assert client.command("table_num_entries ipv4_lpm").strip().endswith("1")
    with pytest.raises(SwitchCommandError, match="(?i)table ipv4_lpm has no action no_such_action"):
        client.table_add("ipv4_lpm", "no_such_action", ["10.0.0.3/32"], [])
    # the policer's set-up (meter rates as RATE:BURST words), read back in the CLI's words
    from agglab.controller.policer import policer_lines

    client.commands(policer_lines([1, 2], pps=2000, burst=50))
    rates = client.command("meter_get_rates port_meter 2")
    assert rates.count("info rate = 0.002, burst size = 50") == 2, rates
    handle = client.mc_group(7, [1, 2, 3])
    assert handle >= 0
    client.commands([f"mc_node_dissociate 7 {handle}", f"mc_node_destroy {handle}", "mc_mgrp_destroy 7"])


def test_runtime_cli_path(switch):
    from agglab.controller.bmv2_client import Bmv2Client
    from agglab.controller.bmv2_ways import _runtime_cli_api, _wait_for_port, add_bmv2_python_path

    add_bmv2_python_path()
    _wait_for_port("s", THRIFT_PORT, 10)
    client = Bmv2Client("s", THRIFT_PORT, api=_runtime_cli_api(THRIFT_PORT), via="runtime_CLI")
    _exercise(client, switch)


def test_p4utils_path(switch, monkeypatch):
    from agglab.controller.bmv2_client import Bmv2Client
    from agglab.controller.bmv2_ways import API_ENV, add_bmv2_python_path

    monkeypatch.setenv(API_ENV, "p4-utils")          # also in CI's runtime_CLI pass
    add_bmv2_python_path()
    pytest.importorskip("p4utils.utils.sswitch_thrift_API",
                        reason="p4-utils not installed (not on PyPI; scripts/provision-vm.sh installs it)")
    client = Bmv2Client("s", THRIFT_PORT, timeout=10)
    assert client.via == "p4-utils"
    # its connections decode with Thrift's C codec (a reroute's register reads took twice as
    # long in pure Python), where python3-thrift has one (Debian's does: CI's)
    from thrift.protocol import TBinaryProtocol

    if TBinaryProtocol.TBinaryProtocolAccelerated(None)._fast_decode is not None:
        assert client._thrift._iprot._fast_decode is not None
        assert client._mc._iprot._fast_decode is not None
    _exercise(client, switch)


def test_simple_switch_cli_path(switch, monkeypatch):
    """The third way in, simple_switch_CLI fed through a pipe (no BMv2 Python modules in the
    controller's interpreter). It ran the script under whatever python3 came first on PATH,
    which under pyenv or a venv has no `thrift`, so every batch died on the script's import;
    and it started a CLI process per line, so a fat-tree's set-up took many minutes: one
    process now serves every call, and a CLI that died is replaced at the next call."""
    from agglab.controller.bmv2_client import Bmv2Client
    from agglab.controller.bmv2_ways import API_ENV

    monkeypatch.setenv(API_ENV, "simple_switch_CLI")
    client = Bmv2Client("s", THRIFT_PORT, timeout=10)
    assert client.via == "simple_switch_CLI"
    name, size = _biggest_register(switch)
    client.commands([f"register_write {name} 3 77", "table_add ipv4_lpm ipv4_forward 10.0.0.7/32 => 02:00:00:00:00:07 7"])
    cli = client._cli.proc.pid
    assert client.command(f"register_read {name} 3").endswith("= 77")
    assert client.command("table_num_entries ipv4_lpm").strip().endswith("1")
    with pytest.raises(SwitchCommandError, match=f"'register_write {name} {size} 1': .*INVALID_INDEX"):
        client.commands([f"register_write {name} {size} 1"])       # one past the end
    assert client.register_read(name, 3) == 77                     # the same CLI goes on after an error
    assert client._cli.proc.pid == cli
    client.command("table_clear ipv4_lpm")
    client._cli.proc.kill()
    client._cli.proc.wait()
    _exercise(client, switch)                                       # a new CLI, every call through it
    assert client._cli.proc.pid != cli
    client.close()
    assert client._cli.proc is None


def test_one_batch_as_pipelined_requests(switch, monkeypatch):
    """A reroute-shaped batch over runtime_CLI's connection: entries, a multicast node, range
    writes and reads sent as Thrift requests, a line runtime_CLI must run (table_num_entries)
    in its place between them, and the answers in simple_switch_CLI's words."""
    import re

    from agglab.controller.bmv2_client import Bmv2Client
    from agglab.controller.bmv2_ways import _runtime_cli_api, _wait_for_port, add_bmv2_python_path

    add_bmv2_python_path()
    _wait_for_port("s", THRIFT_PORT, 10)
    client = Bmv2Client("s", THRIFT_PORT, api=_runtime_cli_api(THRIFT_PORT), via="runtime_CLI")
    name, size = _biggest_register(switch)
    lines = ["table_add ipv4_lpm ipv4_forward 10.0.0.9/32 => 02:00:00:00:00:09 9",
             "mc_mgrp_create 12", "mc_node_create 0 1 3",
             f"register_write_range {name} 100 7 7 7 7",
             f"register_write_range {name} 104 1 2 3",
             "table_num_entries ipv4_lpm",
             f"register_read_range {name} 99 9",
             *client.register_fill_lines(name, 101, 2, 5),
             f"register_read_range {name} 99 9"]
    outs = client.send_commands(lines)()
    assert re.fullmatch(r"Entry has been added with handle \d+", outs[0])
    assert re.fullmatch(r"node was created with handle \d+", outs[2])
    assert outs[5].strip().endswith("1")
    assert outs[6] == f"{name}[99:108]= 0, 7, 7, 7, 7, 1, 2, 3, 0"
    assert outs[8] == f"{name}[99:108]= 0, 7, 5, 5, 7, 1, 2, 3, 0"
    node = int(outs[2].rsplit(" ", 1)[1])
    client.commands([f"mc_node_associate 12 {node}"])
    monkeypatch.setattr("agglab.controller.bmv2_client.RANGE_CELLS", 4)    # now one whole read serves both
    client._sizes = {}
    assert client.commands([f"register_read_range {name} 99 3", f"register_read_range {name} 105 3"]) == [
        f"{name}[99:102]= 0, 7, 5", f"{name}[105:108]= 2, 3, 0"]
    with pytest.raises(SwitchCommandError, match="DUPLICATE_ENTRY"):
        client.commands([lines[0]])
    with pytest.raises(SwitchCommandError, match=f"register_read_range {name} {size - 1} 2"):
        client.commands([f"register_read_range {name} {size - 1} 2"])
    assert client.command(f"register_read {name} 100") == f"{name}[100]= 7"     # still in step


def test_a_reroute_sized_batch_is_all_in_flight_before_an_answer_is_read(switch):
    """A reroute's round is one batch per switch, sent to every switch before any answer is
    read. With 256 requests in flight at most, a switch's batch of a few hundred writes
    stopped half-way to wait for its answers, one switch after the other; the connection's
    receive buffer now bounds the answers in flight instead (8 MB asked, as root)."""
    from agglab.controller.bmv2_client import ANSWER_BYTES, Bmv2Client
    from agglab.controller.bmv2_ways import _runtime_cli_api, _wait_for_port, add_bmv2_python_path

    add_bmv2_python_path()
    _wait_for_port("s", THRIFT_PORT, 10)
    client = Bmv2Client("s", THRIFT_PORT, api=_runtime_cli_api(THRIFT_PORT), via="runtime_CLI")
    assert client.answer_budget >= 2 << 20                       # 8 MB asked, half usable, halved again
    name, size = _biggest_register(switch)
    cells = 4096
    values = [(i * 31 + 5) & 0xFFFFFFFF for i in range(cells)]
    collect = client.send_commands(client.register_write_range_lines(name, 0, values)
                                   + [f"register_read_range {name} 0 {cells}"])
    assert len(client._posted) >= cells                           # nothing read back yet
    assert cells * ANSWER_BYTES < client.answer_budget
    assert collect()[-1] == f"{name}[0:{cells}]= " + ", ".join(map(str, values))
    assert not client._posted and client._in_flight == 0
