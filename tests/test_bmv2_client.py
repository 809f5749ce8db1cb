"""Bmv2Client against stand-ins of p4-utils' SimpleSwitchThriftAPI and BMv2's Thrift client.

The fakes behave as the real ones do where it matters to the client (checked against p4-utils
83b118b and BMv2 1.15.5): p4-utils' methods take Python lists, return handles or values and
*print* their errors instead of raising; the standard Thrift client has send_X/recv_X pairs
whose recv raises on a bad operation. The bmv2-marked tests run the real ones.
"""

from __future__ import annotations

import pytest

from agglab.controller.bmv2_client import ANSWER_BYTES, Bmv2Client
from agglab.controller.bmv2_ways import _p4utils_command
from agglab.controller.switch_client import SwitchCommandError


class InvalidRegisterOperation(Exception):
    pass


class FakeThrift:
    """BMv2's standard Thrift client: registers as lists; a log of the wire order."""

    def __init__(self, sizes: dict[str, int]):
        self.regs = {name: [0] * n for name, n in sizes.items()}
        self.wire: list[str] = []
        self._pending: list = []

    def _queue(self, fn):
        self.wire.append("send")
        self._pending.append(fn)

    def _answer(self):
        self.wire.append("recv")
        fn = self._pending.pop(0)
        return fn()

    def _cell(self, name, index):
        if name not in self.regs or not 0 <= index < len(self.regs[name]):
            raise InvalidRegisterOperation(f"{name}[{index}]")
        return self.regs[name]

    def send_bm_register_write(self, cxt, name, index, value):
        def do():
            self._cell(name, index)[index] = value
        self._queue(do)

    def recv_bm_register_write(self):
        return self._answer()

    def send_bm_register_read_all(self, cxt, name):
        self._queue(lambda: list(self._cell(name, 0)))

    def recv_bm_register_read_all(self):
        return self._answer()

    def send_bm_register_read(self, cxt, name, index):
        self._queue(lambda: self._cell(name, index)[index])

    def recv_bm_register_read(self):
        return self._answer()

    def send_bm_register_reset(self, cxt, name):
        def do():
            self.regs[name] = [0] * len(self._cell(name, 0))
        self._queue(do)

    def recv_bm_register_reset(self):
        return self._answer()


class FakeP4Utils:
    """SimpleSwitchThriftAPI's surface as agglab uses it: calls recorded, errors printed."""

    def __init__(self):
        self.client = FakeThrift({"agg_values": 64, "agg_count": 8})
        self.calls: list[tuple] = []
        self.tables: dict[str, dict[int, tuple]] = {"agg_job": {}, "agg_reply": {}}
        self.next_handle = 0

    def table_add(self, table_name, action_name, match_keys, action_params=[], prio=0):
        self.calls.append(("table_add", table_name, action_name, match_keys, action_params))
        if table_name not in self.tables:
            print(f"Error: Invalid table name ({table_name})")
            return None
        handle, self.next_handle = self.next_handle, self.next_handle + 1
        self.tables[table_name][handle] = (action_name, tuple(match_keys), tuple(action_params))
        print("Entry has been added with handle", handle)
        return handle

    def table_delete(self, table_name, entry_handle, quiet=False):
        self.calls.append(("table_delete", table_name, entry_handle))
        if int(entry_handle) not in self.tables[table_name]:
            print("Invalid table operation (INVALID_HANDLE)")
            return
        del self.tables[table_name][int(entry_handle)]

    def mc_mgrp_create(self, mgrp):
        self.calls.append(("mc_mgrp_create", mgrp))
        return int(mgrp)

    def mc_node_create(self, rid, ports, lags=[]):
        self.calls.append(("mc_node_create", rid, list(ports), list(lags)))
        print("node was created with handle", 7)
        return 7

    def mc_node_associate(self, mgrp, l1_hdl):
        self.calls.append(("mc_node_associate", mgrp, l1_hdl))

    def counter_read(self, counter_name, index):
        self.calls.append(("counter_read", counter_name, index))
        return 1500, 3

    def port_remove(self, port_num):
        self.calls.append(("port_remove", port_num))


@pytest.fixture
def api():
    return FakeP4Utils()


@pytest.fixture
def client(api):
    return Bmv2Client("s1", 9090, api=api, via="p4-utils")


def test_typed_table_add_passes_lists_as_p4utils_users_do(client, api):
    handle = client.table_add("agg_job", "agg_child", [1, 0, 0, 3], [2, 4, 1, 0])
    assert handle == 0
    assert api.calls[-1] == ("table_add", "agg_job", "agg_child", ["1", "0", "0", "3"], ["2", "4", "1", "0"])
    assert api.tables["agg_job"][0] == ("agg_child", ("1", "0", "0", "3"), ("2", "4", "1", "0"))


def test_printed_error_becomes_an_exception(client):
    with pytest.raises(SwitchCommandError, match="Invalid table name"):
        client.table_add("nosuch", "drop", [1], [])
    with pytest.raises(SwitchCommandError, match="INVALID_HANDLE"):
        client.command("table_delete agg_job 42")


def test_cli_lines_become_the_same_calls(api):
    _p4utils_command(api, "table_add agg_reply agg_set_dst 3 => 02:a6:67:ff:ff:fe 10.255.255.254")
    assert api.calls[-1] == ("table_add", "agg_reply", "agg_set_dst", ["3"], ["02:a6:67:ff:ff:fe", "10.255.255.254"])
    _p4utils_command(api, "mc_node_create 0 1 2 4")
    assert api.calls[-1] == ("mc_node_create", "0", ["1", "2", "4"], [])
    _p4utils_command(api, "port_remove 3")
    assert api.calls[-1] == ("port_remove", "3")
    assert _p4utils_command(api, "frobnicate 1").startswith("*** Unknown syntax")


def test_multicast_group_through_the_pre_calls(client, api):
    assert client.mc_group(5, [3, 1, 2]) == 7
    assert api.calls[-3:] == [("mc_mgrp_create", 5), ("mc_node_create", 0, [1, 2, 3], []),
                              ("mc_node_associate", 5, 7)]


def test_counter_read_takes_packets_from_the_tuple(client):
    assert client.counter_read("agg_stats", 2) == 3


def test_register_writes_are_pipelined_in_windows(client, api):
    window = client.answer_budget // ANSWER_BYTES     # a stand-in has no socket: 256 small answers
    assert window == 256
    lines = [f"register_write agg_values {i} {i * 10}" for i in range(64)]
    lines = lines * (window // 64 + 1)                # more than one window
    client.commands(lines)
    assert api.client.regs["agg_values"] == [i * 10 for i in range(64)]
    wire = api.client.wire
    first = wire[:2 * window]
    assert first == ["send"] * window + ["recv"] * window
    assert wire.count("send") == len(lines) and not api.client._pending
    assert not any(c[0] == "register_write" for c in api.calls)   # not through the API's per-call path


def test_writes_keep_their_place_between_other_commands(client, api):
    client.table_add("agg_job", "agg_child", [1, 0, 0, 3], [2, 4, 1, 0])
    client.commands(["register_write agg_count 1 5", "table_delete agg_job 0", "register_write agg_count 2 6"])
    assert api.client.regs["agg_count"][1:3] == [5, 6] and api.tables["agg_job"] == {}


def test_bad_write_raises_after_reading_every_answer(client, api):
    with pytest.raises(SwitchCommandError, match="agg_count"):
        client.commands(["register_write agg_count 1 5", "register_write agg_count 99 1",
                         "register_write agg_count 2 6"])
    assert not api.client._pending                    # the connection is still in step
    assert api.client.regs["agg_count"][1:3] == [5, 6]


def test_whole_register_read_is_one_call(client, api, monkeypatch):
    api.client.regs["agg_values"][10:13] = [7, 8, 9]
    assert client.register_read_ranges("agg_values", [(10, 2), (12, 1)]) == [[7, 8], [9]]
    assert api.client.wire == ["send"] * 3 + ["recv"] * 3          # few cells: single reads, pipelined
    api.client.wire.clear()
    monkeypatch.setattr("agglab.controller.bmv2_client.RANGE_CELLS", 2)
    assert client.register_read_ranges("agg_values", [(10, 2), (12, 1)]) == [[7, 8], [9]]
    assert api.client.wire == ["send", "recv"]                        # many: the whole register
    assert client.register_read("agg_values", 11) == 8
    client.register_reset("agg_values")
    assert client.register_read("agg_values") == [0] * 64


def test_resets_are_posted_and_settled_by_the_next_call(client, api):
    api.client.regs["agg_count"][3] = 9
    client.commands(["register_reset agg_count", "register_reset agg_values"])
    assert api.client.wire == ["send", "send"] and len(api.client._pending) == 2   # not waited for
    assert client.register_read("agg_count", 3) == 0          # the next call reads them first
    assert not api.client._pending


def test_a_failed_posted_reset_raises_at_the_next_call(client, api):
    client.command("register_reset nosuch")
    with pytest.raises(SwitchCommandError, match="nosuch"):
        client.table_add("agg_job", "agg_child", [1, 0, 0, 3], [2, 4, 1, 0])
    assert client.table_add("agg_job", "agg_child", [1, 0, 0, 3], [2, 4, 1, 0]) == 0   # in step again
