"""Bmv2Client against a real simple_switch running the compiled agglab.p4, through BMv2's
runtime_CLI module and, where p4-utils is installed (the VM), through SimpleSwitchThriftAPI.

No packets here: the switch runs without ports; tables, multicast and registers are checked by
reading back what was written."""

from __future__ import annotations

import json
import subprocess

import pytest

from controller.switch_client import SwitchCommandError, find_bmv2_tool

pytestmark = [pytest.mark.bmv2]

THRIFT_PORT = 29517            # above the range the emulator hands out (9090 + switches)


@pytest.fixture(scope="module")
def program():
    from emulation.p4build import compile_p4

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
    with pytest.raises(SwitchCommandError):
        client.commands([f"register_write {name} {size} 1"])       # one past the end
    client.register_reset(name)
    assert set(client.register_read(name)) == {0}
    h1 = client.table_add("ipv4_lpm", "ipv4_forward", ["10.0.0.1/32"], ["02:00:00:00:00:01", 1])
    h2 = client.table_add("ipv4_lpm", "ipv4_forward", ["10.0.0.2/32"], ["02:00:00:00:00:02", 2])
    assert h2 != h1
    assert client.command("table_num_entries ipv4_lpm").strip().endswith("2")
    client.command(f"table_delete ipv4_lpm {h1}")
    assert client.command("table_num_entries ipv4_lpm").strip().endswith("1")
    with pytest.raises(SwitchCommandError):
        client.table_add("ipv4_lpm", "no_such_action", ["10.0.0.3/32"], [])
    handle = client.mc_group(7, [1, 2, 3])
    assert handle >= 0
    client.commands([f"mc_node_dissociate 7 {handle}", f"mc_node_destroy {handle}", "mc_mgrp_destroy 7"])


def test_runtime_cli_path(switch):
    from controller.bmv2_client import Bmv2Client, _runtime_cli_api, _wait_for_port, add_bmv2_python_path

    add_bmv2_python_path()
    _wait_for_port("s", THRIFT_PORT, 10)
    client = Bmv2Client("s", THRIFT_PORT, api=_runtime_cli_api(THRIFT_PORT), via="runtime_CLI")
    _exercise(client, switch)


def test_p4utils_path(switch):
    from controller.bmv2_client import Bmv2Client, add_bmv2_python_path

    add_bmv2_python_path()
    pytest.importorskip("p4utils.utils.sswitch_thrift_API",
                        reason="p4-utils not installed (not on PyPI; scripts/provision-vm.sh installs it)")
    client = Bmv2Client("s", THRIFT_PORT, timeout=10)
    assert client.via == "p4-utils"
    _exercise(client, switch)
