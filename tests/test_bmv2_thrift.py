"""simple_switch_CLI lines -> BMv2 Thrift requests (controller/bmv2_thrift.py), and the
Bmv2Client batches built on them, against the stand-in Thrift client of test_bmv2_client.py.
Tables and multicast need BMv2's runtime_CLI module: tests/test_bmv2_client_real.py."""

from __future__ import annotations

import pytest

from agglab.controller.bmv2_client import Bmv2Client
from agglab.controller.bmv2_thrift import BatchTranslator, describe_error, port_map
from agglab.controller.switch_batches import run_batches
from agglab.controller.switch_client import SwitchCommandError
from test_bmv2_client import FakeP4Utils


def requests(batch: BatchTranslator, line: str):
    return [(r.service, r.method, r.args) for r in batch.translate(line).requests]


def test_port_map_is_the_pre_bitmap_with_port_zero_rightmost():
    assert port_map(["1", "2", "4"]) == "10110"
    assert port_map(["0"]) == "1"
    assert port_map([]) == ""
    with pytest.raises(ValueError, match=r"bad port in \['-1'\]"):
        port_map(["-1"])


def test_equal_values_are_one_range_write_with_an_exclusive_end():
    batch = BatchTranslator([], tables=False, range_cells=8)
    assert requests(batch, "register_write_range agg_count 10 0 0 0") == [
        ("standard", "bm_register_write_range", (0, "agg_count", 10, 13, 0))]
    assert requests(batch, "register_fill agg_values 64 4096 0") == [
        ("standard", "bm_register_write_range", (0, "agg_values", 64, 4160, 0))]
    assert requests(batch, "register_write_range agg_count 3 5 6") == [
        ("standard", "bm_register_write", (0, "agg_count", 3, 5)),
        ("standard", "bm_register_write", (0, "agg_count", 4, 6))]


def test_ranges_of_a_register_share_one_whole_read_when_they_are_a_large_part_of_it():
    small = ["register_read_range big 10 256", "register_read_range big 600 256"]   # 512 of 131,072
    batch = BatchTranslator(small, tables=False, range_cells=8, sizes={"big": 131072})
    assert len(requests(batch, small[0])) == 256                  # single reads
    large = ["register_read_range big 10 1100", "register_read_range big 600 1100"]   # 2,200 cells: over 1/64
    batch = BatchTranslator(large, tables=False, range_cells=8, sizes={"big": 131072})
    first, second = batch.translate(large[0]), batch.translate(large[1])
    assert [(r.method, r.args) for r in first.requests] == [("bm_register_read_all", (0, "big"))]
    assert second.requests == []                                  # the same read serves it
    first.requests[0].result = list(range(2000))
    assert second.answer() == "big[600:1700]= " + ", ".join(str(i) for i in range(600, 1700))


def test_range_reads_answer_as_the_software_switch_prints_them():
    batch = BatchTranslator(["register_read_range r 4 3"], tables=False, range_cells=8)
    got = batch.translate("register_read_range r 4 3")
    for req, value in zip(got.requests, (7, 8, 9)):
        req.result = value
    assert got.answer() == "r[4:7]= 7, 8, 9"


def test_lines_it_does_not_know_are_left_to_the_api():
    batch = BatchTranslator([], tables=False, range_cells=8)
    assert batch.translate("table_num_entries agg_job") is None
    assert batch.translate("table_add agg_job x 1 => 2") is None      # tables: runtime_CLI only
    with pytest.raises(ValueError, match="register_write NAME INDEX VALUE"):
        batch.translate("register_write agg_count 1")
    with pytest.raises(ValueError, match="not a number"):
        batch.translate("register_fill agg_count 0 ten 0")


class TableOperationErrorCode:
    _VALUES_TO_NAMES = {17: "DUPLICATE_ENTRY"}


class InvalidTableOperation(Exception):
    def __init__(self, code):
        super().__init__()
        self.code = code


def test_operation_errors_are_named_as_runtime_cli_names_them():
    assert describe_error(InvalidTableOperation(17)) == "InvalidTableOperation DUPLICATE_ENTRY"
    assert describe_error(InvalidTableOperation(99)) == "InvalidTableOperation 99"
    assert describe_error(OSError("reset")) == "OSError('reset')"


class RangeThrift:
    """The stand-in Thrift client plus bm_register_write_range (end exclusive, as BMv2's)."""

    def __init__(self, fake):
        self.fake = fake

    def __getattr__(self, name):
        return getattr(self.fake, name)

    def send_bm_register_write_range(self, cxt, name, start, end, value):
        def do():
            cells = self.fake._cell(name, start)
            self.fake._cell(name, end - 1)
            cells[start:end] = [value] * (end - start)
        self.fake._queue(do)

    def recv_bm_register_write_range(self):
        return self.fake._answer()


def _client(name):
    api = FakeP4Utils()
    api.client = RangeThrift(api.client)
    return Bmv2Client(name, 9090, api=api, via="p4-utils"), api


def test_a_batch_is_sent_to_every_switch_before_any_answer_is_read():
    (c1, api1), (c2, api2) = _client("s1"), _client("s2")
    api1.client.regs["agg_values"][:] = list(range(1, 65))
    pending = c1.send_commands(["register_fill agg_values 8 4 0", "register_read_range agg_values 6 4"])
    assert api1.client.wire == ["send"] * 5                      # fill + 4 single reads, none read yet
    assert pending() == ["", "agg_values[6:10]= 7, 8, 0, 0"]
    outs = run_batches({"s1": c1, "s2": c2}, {"s1": ["register_write agg_count 1 5"],
                                              "s2": ["register_fill agg_count 0 8 3"]})
    assert outs == {"s1": [""], "s2": [""]}
    assert api1.client.regs["agg_count"][1] == 5 and api2.client.regs["agg_count"] == [3] * 8


def test_a_failed_request_names_its_line_after_every_answer_is_read():
    client, api = _client("s1")
    with pytest.raises(SwitchCommandError, match="register_fill agg_count 4 9 1"):
        client.commands(["register_fill agg_count 0 2 1", "register_fill agg_count 4 9 1",
                         "register_write agg_count 3 7"])
    assert not api.client._pending
    assert api.client.regs["agg_count"][:4] == [1, 1, 0, 7]
