"""The ways into BMv2 (controller/bmv2_ways.py) without a switch: per-thread capture of what
the APIs print, bounded Thrift calls, and the AGGLAB_BMV2_API choice."""

from __future__ import annotations

import socket
import sys
import threading

import pytest

from agglab.controller import bmv2_ways
from agglab.controller.switch_client import SwitchCommandError


def test_two_threads_capture_at_once_and_each_gets_its_own_output():
    """A call blocked inside one thread's capture (a Thrift call that does not return) does not
    hold up another thread's capture, and neither sees the other's output."""
    inside, release = threading.Event(), threading.Event()
    results = {}

    def stuck():
        print("from the stuck call")
        inside.set()
        release.wait(60)
        return "stuck"

    def worker():
        results["stuck"] = bmv2_ways._captured(stuck)

    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(60)
    try:
        result, out = bmv2_ways._captured(lambda: print("from the other switch") or 7)
        assert (result, out) == (7, "from the other switch\n")
    finally:
        release.set()
        t.join(60)
    assert results["stuck"] == ("stuck", "from the stuck call\n")


def test_output_outside_a_capture_reaches_the_real_stream(capsys):
    bmv2_ways._captured(lambda: print("captured"))
    print("not captured")
    sys.stdout.flush()
    assert capsys.readouterr().out == "not captured\n"


def test_a_thrift_call_without_an_answer_gives_up():
    """A switch that accepts the connection and never answers (BMv2 wedged in port_remove):
    the read raises instead of waiting for ever."""
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", server.getsockname()[1]))
    transport.open()
    peer, _ = server.accept()

    class Client:
        _iprot = TBinaryProtocol.TBinaryProtocol(transport)

    class Api:
        client = Client()

    try:
        bmv2_ways._bound_calls(Api(), seconds=0.2)
        with pytest.raises(TTransport.TTransportException, match="unexpected exception"):
            Client._iprot.readI32()
    finally:
        transport.close()
        peer.close()
        server.close()


@pytest.mark.parametrize("value", ["p4utils", "thrift", "runtime_cli"])
def test_a_misspelt_way_in_is_one_clear_error(monkeypatch, value):
    monkeypatch.setenv(bmv2_ways.API_ENV, value)
    with pytest.raises(SwitchCommandError, match="one of p4-utils, runtime_CLI, simple_switch_CLI"):
        bmv2_ways.connect_api("s1", 1)


def test_the_cli_program_way_needs_no_python_runtime(monkeypatch):
    monkeypatch.setenv(bmv2_ways.API_ENV, "simple_switch_CLI")
    assert bmv2_ways.connect_api("s1", 1) == (None, "simple_switch_CLI")
