"""The software switch daemon on real interfaces: veths into namespaces this test creates.

Why real namespaces and not mocks: what can break here is the kernel boundary
(raw sockets, our own transmissions echoing back, offloads corrupting
checksums, signals, socket files), and only real traffic exercises it.
Everything runs inside namespaces `agglab-t-<pid>-<tag>-hN` and veths `agc<tag>pN`
made here; the fixtures remove them even when a test fails.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest

from agglab.testkit.waits import wait_until
from agglab.ground import wire
from agglab.ground.addresses import SERVICE_IP
from agglab.softswitch.control import ControlClient, SwitchCommandError, SwitchNotReady, wait_ready
from agglab.softswitch.scratchnet import ScratchNet, icmp_ping, in_netns, program_aggregation
from agglab.softswitch.pcap import read_pcap

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, raw sockets)")]

REFLECT = ("--pipeline", "agglab.softswitch.bench_io:Reflect")


@pytest.fixture(scope="module")
def net():
    net = ScratchNet()
    try:
        net.add_host(1)
        net.add_host(2)
        net.static_arp()
        yield net
    finally:
        net.close()


def _start(net, tmp_path, *extra):
    proc, paths = net.start_switch(tmp_path, "--pcap-dir", str(tmp_path / "pcaps"), *extra)
    client = wait_ready(paths["control"], 20, log=paths["log"], process=proc)
    return SimpleNamespace(proc=proc, client=client, **paths)


def _stop(sw) -> None:
    sw.client.close()
    if sw.proc.poll() is None:
        sw.proc.terminate()
        try:
            sw.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            sw.proc.kill()
            sw.proc.wait()


@pytest.fixture
def switch(net, tmp_path):
    """The daemon with the real P4 pipeline on h1/h2's ports (fresh state per test)."""
    sw = _start(net, tmp_path, "--seed", "1")
    try:
        yield sw
    finally:
        _stop(sw)


@pytest.fixture
def reflector(net, tmp_path):
    """The daemon with a pipeline that bounces frames back: tests the daemon alone."""
    sw = _start(net, tmp_path, *REFLECT)
    try:
        yield sw
    finally:
        _stop(sw)


def _program_l3(client, hosts) -> None:
    for h in hosts:
        client.command(f"table_add ipv4_lpm ipv4_forward {h.ip}/32 => {h.mac} {h.port}")


def test_ping_through_l3_forwarding(switch, net):
    h1, h2 = net.hosts
    _program_l3(switch.client, net.hosts)
    assert icmp_ping(h1.ns, h2.ip, count=3) == 3
    assert icmp_ping(h2.ns, h1.ip, count=2) == 2
    stats = switch.client.port_stats()
    # exactly the echoes: had the switch seen its own transmissions, rx would double
    assert (stats["1"]["rx"], stats["2"]["rx"]) == (5, 5), stats
    assert (stats["1"]["tx"], stats["2"]["tx"]) == (5, 5), stats
    assert stats["1"]["ifname"] == h1.switch_if


def _abort_on_close(sock: socket.socket) -> None:
    """Close with a reset, leaving no FIN_WAIT/LAST_ACK state behind: a FIN the
    kernel retransmitted after this test's switch stopped would reach the next
    test's switch on the same ports (CI once saw one in a reflector's capture)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_tcp_bulk_transfer_through_the_switch(switch, net):
    """Full-size frames both ways, checksums verified by the receiving TCP stack."""
    h1, h2 = net.hosts
    _program_l3(switch.client, net.hosts)
    data = os.urandom(2 << 20)

    def listen():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((h2.ip, 5001))
        s.listen(1)
        return s
    server = in_netns(h2.ns, listen)
    client = in_netns(h1.ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    received = bytearray()

    def serve():
        conn, _ = server.accept()
        with conn:
            while chunk := conn.recv(1 << 16):
                received.extend(chunk)
            _abort_on_close(conn)
    reader = threading.Thread(target=serve)
    reader.start()
    try:
        client.settimeout(20)
        client.connect((h2.ip, 5001))
        client.sendall(data)
        client.shutdown(socket.SHUT_WR)
        reader.join(timeout=30)
    finally:
        _abort_on_close(client)
        client.close()
        reader.join(timeout=30)
        server.close()
    assert bytes(received) == data
    stats = switch.client.port_stats()
    assert stats["1"]["rx"] > 1400 and stats["1"]["tx_drop"] == stats["2"]["tx_drop"] == 0


def test_pipeline_refusals_come_back_as_errors(switch):
    ok, out = switch.client.request("table_add nosuch_table x 1 => 2")
    assert (ok, out) == (False, "Error: Invalid table name (nosuch_table)")   # worded like BMv2
    with pytest.raises(SwitchCommandError, match="Unknown syntax"):
        switch.client.command("frobnicate")
    assert switch.client.command("ping") == "pong"          # the switch carries on


def test_large_reply_is_delivered_whole(switch):
    out = switch.client.command("register_read agg_values")   # megabytes: needs EPOLLOUT
    assert len(out.split("=", 1)[1].split(",")) == 2 * wire.SLOTS * wire.K
    assert switch.client.command("ping") == "pong"


def _udp_socket(h, port: int = wire.UDP_PORT):
    """A UDP socket bound to (host h's address, port) inside h's namespace (a context)."""
    def make():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((h.ip, port))
        return s
    return in_netns(h.ns, make)


def _recv(sock, timeout: float = 3.0):
    if not select.select([sock], [], [], timeout)[0]:
        return None
    return sock.recvfrom(4096)


def test_aggregation_two_workers_both_get_the_result(switch, net):
    h1, h2 = net.hosts
    program_aggregation(switch.client, net.hosts, job=1)
    v1 = [i - 30 for i in range(wire.K)]
    v2 = [1000 * i for i in range(wire.K)]
    socks = [_udp_socket(h) for h in net.hosts]
    try:
        for child, (s, vals, exp) in enumerate(zip(socks, (v1, v2), (3, 5))):
            payload = wire.pack_agg(job=1, slot=7, worker=child, exp=wire.EXP_BIAS + exp, block=42)
            s.sendto(payload + struct.pack(f"!{wire.K}i", *vals), (SERVICE_IP, wire.UDP_PORT))
        for s, h in zip(socks, net.hosts):
            got = _recv(s)
            assert got is not None, f"{h.name} got no result; stats {switch.client.port_stats()}"
            data, (src, sport) = got
            assert (src, sport) == (SERVICE_IP, wire.UDP_PORT)
            hdr = wire.unpack_agg(data)
            assert hdr["flags"] & wire.FLAG_RESULT and hdr["slot"] == 7 and hdr["block"] == 42
            assert hdr["exp"] == wire.EXP_BIAS + 5
            assert list(struct.unpack_from(f"!{wire.K}i", data, wire.AGG_HEADER_BYTES)) == \
                [a + b for a, b in zip(v1, v2)]
    finally:
        for s in socks:
            s.close()
    stats = switch.client.port_stats()
    assert stats["1"]["rx"] == stats["2"]["rx"] == 1
    assert stats["1"]["tx"] == stats["2"]["tx"] == 1
    assert stats["1"]["drop"] + stats["2"]["drop"] == 1      # the first contribution is absorbed


def test_aggregation_bursts_take_the_batched_path(switch, net):
    """48 slots from each worker while the daemon is stopped, so each port's first receive
    batch holds them all: Pipeline.process_batch must take both batches (port_stats
    `batched`) and every worker must get all 48 exact sums."""
    from agglab.ground.mmsg import MsgBatch

    slots = 48
    program_aggregation(switch.client, net.hosts, job=1)
    vals = [[(w + 1) * 1000 + s * 7 + i for i in range(wire.K)] for s in range(slots) for w in (0, 1)]
    socks = [_udp_socket(h) for h in net.hosts]
    received = [f"/sys/class/net/{h.switch_if}/statistics/rx_packets" for h in net.hosts]
    before = [int(open(f).read()) for f in received]
    os.kill(switch.proc.pid, signal.SIGSTOP)
    try:
        for w, s in enumerate(socks):
            burst = MsgBatch(slots, 2048, fd=s.fileno(), dest=(SERVICE_IP, wire.UDP_PORT))
            for slot in range(slots):
                burst.put(slot, wire.pack_agg(job=1, slot=slot, worker=w, exp=wire.EXP_BIAS, block=slot)
                          + struct.pack(f"!{wire.K}i", *vals[2 * slot + w]))
            assert burst.send(burst.fd, slots) == slots
        wait_until(lambda: all(int(open(f).read()) >= b + slots for f, b in zip(received, before)),
                   what="the bursts to reach the stopped switch's ports")
    finally:
        os.kill(switch.proc.pid, signal.SIGCONT)
    try:
        for s, h in zip(socks, net.hosts):
            seen = set()
            while len(seen) < slots:
                got = _recv(s)
                assert got is not None, f"{h.name} got {len(seen)} results; {switch.client.port_stats()}"
                hdr = wire.unpack_agg(got[0])
                slot = hdr["slot"]
                assert hdr["flags"] & wire.FLAG_RESULT and hdr["block"] == slot and slot not in seen
                assert list(struct.unpack_from(f"!{wire.K}i", got[0], wire.AGG_HEADER_BYTES)) == \
                    [a + b for a, b in zip(vals[2 * slot], vals[2 * slot + 1])]
                seen.add(slot)
    finally:
        for s in socks:
            s.close()
    stats = switch.client.port_stats()
    assert stats["1"]["batched"] == stats["2"]["batched"] == slots, stats
    assert stats["1"]["tx"] == stats["2"]["tx"] == slots, stats
    assert stats["1"]["drop"] + stats["2"]["drop"] == slots, stats   # first contributions
    pcaps = sorted((switch.pcaps).glob("*_out.pcap"))
    switch.client.command("pcap_flush")
    assert [len(read_pcap(p)) for p in pcaps] == [slots, slots]        # batched outputs captured


def test_pcaps_are_written_and_readable(reflector, net):
    h1, h2 = net.hosts

    def udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((h1.ip, 9999))
        return s
    sent_after = time.time()
    with in_netns(h1.ns, udp) as s:
        s.sendto(b"hello switch", (h2.ip, 9999))
        got = _recv(s)                                # the reflector swaps the addresses
    received_before = time.time()
    assert got == (b"hello switch", (h2.ip, 9999))
    assert reflector.client.command("pcap_flush").startswith("flushed")
    frames_in = read_pcap(reflector.pcaps / f"{h1.switch_if}_in.pcap")
    frames_out = read_pcap(reflector.pcaps / f"{h1.switch_if}_out.pcap")
    assert len(frames_in) == len(frames_out) == 1
    (t_in, f_in), (_, f_out) = frames_in[0], frames_out[0]
    assert f_in[0:6] == bytes.fromhex(h2.mac.replace(":", "")) and f_in.endswith(b"hello switch")
    assert f_out[0:6] == bytes.fromhex(h1.mac.replace(":", "")) and len(f_out) == len(f_in)
    # the capture timestamp is the frame's arrival (pcap stores microseconds: round outward)
    assert sent_after - 2e-6 <= t_in <= received_before + 2e-6
    # nothing of ours entered from h2 (its kernel may still speak: only our payload counts)
    assert [f for _, f in read_pcap(reflector.pcaps / f"{h2.switch_if}_in.pcap")
            if f.endswith(b"hello switch")] == []


def test_a_burst_of_many_batches_comes_back_whole_and_in_order(reflector, net):
    """Frames move a batch per system call; none may be lost, duplicated or reordered."""
    h1, h2 = net.hosts
    count = 1000                                      # ~16 receive batches of 64

    def udp():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: hold the whole burst
        s.bind((h1.ip, 9998))
        return s
    with in_netns(h1.ns, udp) as s:
        for i in range(count):
            s.sendto(i.to_bytes(4, "big") + bytes(i % 1000), (h2.ip, 9998))
        got = []
        while len(got) < count and (r := _recv(s)) is not None:
            got.append(r)
    assert [int.from_bytes(data[:4], "big") for data, _ in got] == list(range(count))
    assert all(len(data) == 4 + i % 1000 and addr == (h2.ip, 9998) for i, (data, addr) in enumerate(got))
    stats = reflector.client.port_stats()
    assert stats["1"]["rx"] == stats["1"]["tx"] == count and stats["2"]["tx"] == 0, stats


def test_control_protocol(reflector):
    c = reflector.client
    assert c.command("ping") == "pong"
    stats = json.loads(c.command("port_stats"))
    assert set(stats) == {"1", "2"} and {"rx", "tx", "drop", "tx_drop"} <= set(stats["1"])
    ok, out = c.request("table_add nothing here")
    assert not ok and "no tables" in out
    with pytest.raises(SwitchCommandError, match="no tables"):
        c.command("register_read agg_count 0")
    # raw protocol: two commands in one write, two JSON lines back, in order
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(reflector.control))
        s.sendall(b"ping\nbogus\n")
        buf = b""
        while buf.count(b"\n") < 2:
            buf += s.recv(4096)
    first, second = (json.loads(line) for line in buf.splitlines())
    assert first == {"ok": True, "output": "pong"} and second["ok"] is False
    log = reflector.log.read_text()
    assert "cmd 'bogus' -> ERROR" in log and "cmd 'ping' -> ok pong" in log


def test_held_ports_wait_while_commands_are_served(reflector, net):
    """`ports_hold` (a reroute's rounds): frames wait in the kernel until the release, none is
    lost; commands are answered meanwhile, and logged once the hold ends."""
    h1, h2 = net.hosts
    c = reflector.client
    assert c.command("ports_hold 10000").startswith("held for at most 10000 ms")
    with _udp_socket(h1, 9997) as s:
        for i in range(3):
            s.sendto(b"held %d" % i, (h2.ip, 9997))
        assert _recv(s, timeout=0.3) is None               # not forwarded while held
        assert c.command("ping") == "pong"                  # but commands are served
        assert c.port_stats()["1"]["rx"] == 0
        assert "ports_hold" not in reflector.log.read_text()   # logged after the hold
        assert c.command("ports_release") == "released"
        got = [_recv(s) for _ in range(3)]
    assert [data for data, _addr in got] == [b"held 0", b"held 1", b"held 2"]
    log = reflector.log.read_text()
    assert "cmd 'ports_hold 10000'" in log and "cmd 'ping' -> ok pong" in log
    assert c.command("ports_release") == "not held"


def test_a_hold_ends_by_itself(reflector, net):
    h1, h2 = net.hosts
    c = reflector.client
    for bad in ("ports_hold", "ports_hold 0", "ports_hold 999999", "ports_hold x"):
        ok, out = c.request(bad)
        assert not ok and "ports_hold" in out, (bad, out)
    c.command("ports_hold 200")
    with _udp_socket(h1, 9996) as s:
        s.sendto(b"late", (h2.ip, 9996))
        got = _recv(s, timeout=10)
    assert got is not None and got[0] == b"late"
    assert c.command("ports_release") == "not held"


def test_a_held_switch_sleeps_between_commands(reflector):
    """A hold runs at real-time priority where allowed: its loop must wait in poll, never spin
    (a spinning real-time process would starve everything else on its core)."""
    def state() -> str:
        """The daemon's scheduler state: S (waiting in a system call) or R (running / runnable)."""
        return open(f"/proc/{reflector.proc.pid}/stat").read().rsplit(")", 1)[1].split()[0]
    seen = []

    def waited_five_times() -> bool:             # a spinning loop is never seen waiting
        seen.append(state())
        return seen.count("S") >= 5

    reflector.client.command("ports_hold 10000")
    try:
        wait_until(waited_five_times, 8, lambda: f"the held switch to wait in poll; states: {''.join(seen)}")
        assert reflector.client.command("ping") == "pong"
    finally:
        released = reflector.client.command("ports_release")
    assert released == "released"                # the looks were all during the hold


def test_sigterm_removes_socket_and_pidfile(reflector):
    assert reflector.pidfile.read_text().strip() == str(reflector.proc.pid)
    reflector.proc.send_signal(signal.SIGTERM)
    assert reflector.proc.wait(timeout=60) == 0
    assert not reflector.control.exists() and not reflector.pidfile.exists()
    assert "received SIGTERM" in reflector.log.read_text()
    for f in reflector.pcaps.iterdir():
        read_pcap(f)                                   # complete files after a clean stop


def test_shutdown_command_stops_the_switch(reflector):
    assert reflector.client.command("shutdown") == "shutting down"
    assert reflector.proc.wait(timeout=60) == 0
    assert not reflector.control.exists()


def test_wait_ready_explains_a_switch_that_died(net, tmp_path):
    proc, paths = net.start_switch(tmp_path, "--port", "9=agcnosuchif", *REFLECT, name="sbad")
    with pytest.raises(SwitchNotReady, match=r"(?s)exited \(1\).*agcnosuchif.*does not exist"):
        wait_ready(paths["control"], 20, log=paths["log"], process=proc)
    assert not paths["pidfile"].exists()
    with pytest.raises(SwitchNotReady, match="not ready after"):
        wait_ready(tmp_path / "never.sock", 0.3, log=paths["log"])
    with pytest.raises(SwitchCommandError, match="cannot connect"):
        ControlClient(tmp_path / "never.sock").command("ping")


def test_lab_teardown_leaves_nothing(tmp_path):
    with ScratchNet() as net:
        h = net.add_host(1)
        proc, paths = net.start_switch(tmp_path, *REFLECT)
        wait_ready(paths["control"], 20, log=paths["log"], process=proc).close()
    assert proc.poll() == 0
    assert h.ns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    wait_until(lambda: not os.path.exists(f"/sys/class/net/{h.switch_if}"),  # netns deletion is asynchronous
               what=f"{h.switch_if} to go with its namespace")
