"""The three ways into a simple_switch's control plane, and how agglab picks one.

Why three: users of p4-utils program BMv2 through its `SimpleSwitchThriftAPI` (Python calls:
table_add(table, action, keys, params), register_read(name), mc_node_create(rid, ports) ...),
so where p4-utils imports, that is what agglab uses too. Without p4-utils, BMv2's own
runtime_CLI module (the code behind simple_switch_CLI) takes the same command lines through
`onecmd`; without BMv2's Python modules, a simple_switch_CLI process per switch, fed through a pipe
(controller/bmv2_cli_session.py). Each way
takes simple_switch_CLI's command lines and answers in its words, so Bmv2Client
(controller/bmv2_client.py) speaks one language whichever is in use.
"""

from __future__ import annotations

import glob
import io
import os
import re
import shlex
import socket
import sys
import threading
import time

from agglab.controller.bmv2_tools import find_bmv2_tool
from agglab.controller.switch_client import SwitchCommandError

_ERROR = re.compile(r"Error|Invalid|exception|Traceback|\*\*\* Unknown")

# Where simple_switch's Thrift server is: this machine, unless the switch runs on another
# server (cluster mode passes that server's address, or a forwarded local port stays here)
THRIFT_IP = "127.0.0.1"


def _wait_for_port(name: str, thrift_port: int, timeout: float, thrift_ip: str = THRIFT_IP) -> None:
    """simple_switch opens its Thrift port once the program is loaded."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((thrift_ip, thrift_port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SwitchCommandError(f"{name}: no Thrift server on port {thrift_port}")
            time.sleep(0.2)


class _PerThreadStream(io.TextIOBase):
    """Stands for sys.stdout / sys.stderr: a thread inside `_captured` writes to its own
    buffer, every other thread to the stream this one replaced.

    Why not contextlib.redirect_stdout: it swaps the process's one sys.stdout, so captures in
    two threads had to take turns on one lock, and one Thrift call that never returns (BMv2's
    port_remove can deadlock under traffic, emulation/bmv2_ports.py) held that lock for good:
    the switch watcher, the reroute and the lab then waited on a switch that was not theirs.
    Here every switch's calls capture at once."""

    def __init__(self, real):
        super().__init__()
        self.real = real

    def write(self, text: str) -> int:
        buf = getattr(_LOCAL, "buf", None)
        return (buf if buf is not None else self.real).write(text)

    def flush(self) -> None:
        if getattr(_LOCAL, "buf", None) is None:
            self.real.flush()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name):                 # fileno, encoding, isatty ... of the real stream
        return getattr(self.real, name)


_LOCAL = threading.local()
_INSTALL = threading.Lock()


def _install_streams() -> None:
    """sys.stdout and sys.stderr as _PerThreadStream (again where someone, e.g. pytest's
    capture, has replaced them since)."""
    with _INSTALL:
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if not isinstance(current, _PerThreadStream):
                setattr(sys, name, _PerThreadStream(current))


def _captured(fn, *args):
    """Call fn with what it prints captured (both APIs print their answers and their errors),
    this thread's output only (_PerThreadStream)."""
    _install_streams()
    buf = io.StringIO()
    outer, _LOCAL.buf = getattr(_LOCAL, "buf", None), buf
    try:
        result = fn(*args)
    finally:
        _LOCAL.buf = outer
    return result, buf.getvalue()


def _check(name: str, what: str, out: str) -> str:
    if _ERROR.search(out):
        raise SwitchCommandError(f"{name}: {what!r}: {out.strip()}")
    return out


# -- the three ways in ------------------------------------------------------------------------------
def add_bmv2_python_path() -> None:
    """BMv2 installs its Python runtime (runtime_CLI, bm_runtime, sswitch_runtime) under
    PREFIX/lib/python3*/site-packages, which Debian's python does not search; p4-utils imports
    those modules too. PREFIX: that of simple_switch_CLI (which runs runtime_CLI), else of
    simple_switch; a prefix without the runtime (a second simple_switch build) adds nothing."""
    for tool in ("simple_switch_CLI", "simple_switch"):
        binary = find_bmv2_tool(tool)
        if not binary:
            continue
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(binary)))
        paths = [path for pattern in ("site-packages", "dist-packages")
                 for path in sorted(glob.glob(f"{prefix}/lib/python3*/{pattern}"))
                 if os.path.exists(os.path.join(path, "runtime_CLI.py"))]
        for path in paths:
            if path not in sys.path:
                sys.path.append(path)
        if paths:
            return


# AGGLAB_BMV2_API picks one way in: "p4-utils" or "runtime_CLI" (it must import, else the
# switch's start fails with why), "simple_switch_CLI"; unset, the first of them that imports.
# CI runs the BMv2 tests once with p4-utils installed and once with AGGLAB_BMV2_API=runtime_CLI,
# so the VM's path (p4-utils) and the plain kit's are both checked.
API_ENV = "AGGLAB_BMV2_API"
API_CHOICES = ("p4-utils", "runtime_CLI", "simple_switch_CLI")


def chosen_api() -> str | None:
    """The way in AGGLAB_BMV2_API names, or None (the first that imports)."""
    choice = os.environ.get(API_ENV, "").strip()
    if choice and choice not in API_CHOICES:
        raise SwitchCommandError(f"{API_ENV}={choice!r}: one of {', '.join(API_CHOICES)}, or unset")
    return choice or None


def connect_api(name: str, thrift_port: int, thrift_ip: str = THRIFT_IP):
    """(api, via): p4-utils' SimpleSwitchThriftAPI, else BMv2's runtime_CLI, else (None, CLI
    program); AGGLAB_BMV2_API picks one of them instead."""
    choice = chosen_api()
    if choice == "simple_switch_CLI":
        return None, choice
    add_bmv2_python_path()
    try:
        from p4utils.utils.sswitch_thrift_API import SimpleSwitchThriftAPI  # type: ignore  # lazy: p4-utils, only for its API way (may be missing)
    except ImportError as exc:
        if choice == "p4-utils":
            raise SwitchCommandError(f"{name}: {API_ENV}=p4-utils, but p4-utils does not import ({exc})") from None
        SimpleSwitchThriftAPI = None
    if choice == "runtime_CLI":
        SimpleSwitchThriftAPI = None
    try:
        if SimpleSwitchThriftAPI is not None:
            # p4-utils fixes the PRE to SimplePreLAG, which simple_switch serves; it reads the
            # program's JSON from the switch when json_path is not given
            api, _ = _captured(SimpleSwitchThriftAPI, thrift_port, thrift_ip)
            _accelerate(api)
            _bound_calls(api)
            return api, "p4-utils"
        api = _runtime_cli_api(thrift_port, thrift_ip)
        _bound_calls(api)
        return api, "runtime_CLI"
    except ImportError as exc:
        if choice == "runtime_CLI":
            raise SwitchCommandError(f"{name}: {API_ENV}=runtime_CLI, but BMv2's runtime_CLI does not import ({exc})") from None
        return None, "simple_switch_CLI"
    except SystemExit as exc:           # both exit on connection errors
        raise SwitchCommandError(f"{name}: Thrift connection to port {thrift_port} failed") from exc


def _accelerate(api) -> None:
    """p4-utils' connections (BMv2's bmpy_utils.thrift_connect) speak Thrift's pure-Python
    binary protocol: a reroute's whole-register reads then decode one readI64 call per cell,
    and its install took 450-650 ms where runtime_CLI's C codec took 250 (py-spy: 1.6 s of
    readI64 and buffered reads across the switches' threads). The same connection, same
    bytes on the wire, decoded and encoded with the accelerated protocol where python3-thrift
    has it (as _runtime_cli_api does)."""
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol  # lazy: BMv2's Python, on the path only where BMv2 is

    fast = getattr(TBinaryProtocol, "TBinaryProtocolAccelerated", None)
    for client in (getattr(api, name, None) for name in ("client", "mc_client", "sswitch_client")):
        proto = getattr(client, "_iprot", None)
        name = getattr(proto, "serviceName", None)
        if fast is None or name is None or proto is not getattr(client, "_oprot", None):
            continue                              # not the shape thrift_connect builds: as it is
        client._iprot = client._oprot = TMultiplexedProtocol.TMultiplexedProtocol(fast(proto.trans), name)


# A Thrift call answered after this long is not coming: BMv2's port_remove can deadlock under
# traffic (emulation/bmv2_ports.py), and a call without a bound then held its thread for good.
# Far above any call agglab makes (a 131,072-cell register reads in ~40 ms; a reroute's batch
# of 8,192 writes in well under a second on a loaded machine).
CALL_TIMEOUT = 60.0


def _bound_calls(api, seconds: float = CALL_TIMEOUT) -> None:
    """Every Thrift connection of `api` (standard and PRE, p4-utils' simple_switch one) gives up
    on an answer after `seconds`, raising a TTransportException (a timeout) instead of waiting."""
    for client in (getattr(api, name, None) for name in ("client", "mc_client", "sswitch_client")):
        trans = getattr(getattr(client, "_iprot", None), "trans", None)
        sock = getattr(trans, "_TBufferedTransport__trans", trans)
        if hasattr(sock, "setTimeout"):
            sock.setTimeout(seconds * 1000)


def _runtime_cli_api(thrift_port: int, thrift_ip: str = THRIFT_IP):
    """BMv2's runtime_CLI API on a connection of our own: the same services as
    simple_switch_CLI, over Thrift's accelerated binary protocol (C encoding and decoding,
    where python3-thrift has it: a 131,072-cell register reads in ~40 ms instead of ~105)."""
    import runtime_CLI  # type: ignore  # lazy: BMv2's module, installed beside simple_switch
    from sswitch_CLI import SimpleSwitchAPI  # type: ignore  # lazy: BMv2's Python, on the path only where BMv2 is
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol  # lazy: BMv2's Python, on the path only where BMv2 is
    from thrift.transport import TSocket, TTransport  # lazy: BMv2's Python, on the path only where BMv2 is

    services = runtime_CLI.RuntimeAPI.get_thrift_services(runtime_CLI.PreType.SimplePreLAG)
    services.extend(SimpleSwitchAPI.get_thrift_services())
    transport = TTransport.TBufferedTransport(TSocket.TSocket(thrift_ip, thrift_port))
    protocol = getattr(TBinaryProtocol, "TBinaryProtocolAccelerated", TBinaryProtocol.TBinaryProtocol)(transport)
    std, mc, ss = (cls(TMultiplexedProtocol.TMultiplexedProtocol(protocol, name)) for name, cls in services)
    try:
        transport.open()
    except TTransport.TTransportException:
        raise SystemExit(1) from None            # as runtime_CLI's thrift_connect does
    _load_program(runtime_CLI, std)
    return SimpleSwitchAPI(runtime_CLI.PreType.SimplePreLAG, std, mc, ss)


def _load_program(runtime_CLI, std) -> None:
    """runtime_CLI's tables, actions and registers from the program the switch runs (module
    state: every switch of a run runs the same program)."""
    quiet = io.StringIO()          # runtime_CLI announces itself on the stdout bound at import time
    runtime_CLI.load_json_str(runtime_CLI.utils.get_json_config(std, None, out=quiet))


def load_runtime_cli_program(api) -> bool:
    """Load runtime_CLI's parsers for the program behind p4-utils' `api` (its standard client),
    so that batches can be encoded as Thrift requests; False where runtime_CLI does not import."""
    try:
        import runtime_CLI  # type: ignore  # lazy: BMv2's Python, on the path only where BMv2 is
    except ImportError:
        return False
    _captured(_load_program, runtime_CLI, api.client)
    return True


# Commands whose words after the name group into lists for p4-utils: "=>" splits match keys
# from action parameters; a trailing number after the parameters is a priority.
_LIST_ARGS = {"table_add", "table_set_default", "table_modify", "mc_node_create", "mc_node_update"}


def _p4utils_command(api, line: str) -> str:
    """A simple_switch_CLI line as the p4-utils call a user would write, e.g.
    `table_add t a 1 2 => 3` -> api.table_add("t", "a", ["1", "2"], ["3"])."""
    words = shlex.split(line)
    if not words:
        return ""
    verb, args = words[0], words[1:]
    method = getattr(api, verb, None)
    if method is None:
        return f"*** Unknown syntax: {line}"
    if verb == "table_add":
        keys, _, params = " ".join(args[2:]).partition("=>")
        call = (args[0], args[1], keys.split(), params.split())
    elif verb in ("table_set_default",):
        call = (args[0], args[1], args[2:])
    elif verb == "table_modify":
        _, _, params = " ".join(args[3:]).partition("=>")
        call = (args[0], args[1], args[2], (params or " ".join(args[3:])).split())
    elif verb in ("mc_node_create", "mc_node_update"):
        ports, _, lags = " ".join(args[1:]).partition("|")
        call = (args[0], ports.split(), lags.split())
    elif verb == "meter_set_rates":
        # the CLI's `RATE:BURST` words are p4-utils' list of (rate, burst) pairs
        call = (args[0], args[1], [tuple(word.split(":", 1)) for word in args[2:]])
    else:
        call = tuple(args)
    result, out = _captured(method, *call)
    return out + _describe(verb, args, result)


def _describe(verb: str, args: list[str], result) -> str:
    """The answer simple_switch_CLI would print for what p4-utils returns silently."""
    if verb == "register_read" and result is not None:
        if len(args) > 1:
            return f"{args[0]}[{args[1]}]= {result}"
        return f"{args[0]}= " + ", ".join(str(v) for v in result)
    if verb == "table_num_entries" and result is not None:
        return str(result)
    return ""
