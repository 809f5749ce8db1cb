"""Start software-switch processes by forking one that has already imported the switch.

Why: a switch process spends about 0.2 CPU-seconds importing Python, numpy and the
pipeline before it can serve a packet; the 80 switches of a k=8 fat-tree spent 16 of them,
most of what a 2-core machine did while the network started. `python -m softswitch.launcher`
imports all of that once and then forks one child per switch on request. Each child is a
switch process as before (its own pid, session, log file and exit code; it crashes alone),
it only starts with everything imported (the pages are shared copy-on-write).

Protocol, over a SOCK_SEQPACKET socket pair (one JSON object per message):
  client -> launcher  {"argv": [ARGS of `python -m softswitch ARGS`], "out": PATH}
  launcher -> client  {"pid": N}, the child's pidfd attached (SCM_RIGHTS), or {"error": TEXT}
  launcher -> client  {"exited": N, "code": C} once child N has exited (C as Popen.returncode)
The launcher exits when the client closes its end. Children it started keep running: the
caller stops them, as it stops processes it spawned itself (and `agglab clean` after a crash).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback

from ground import lifeline
from softswitch import __main__ as switch_main
from softswitch import daemon as _daemon, pipeline as _pipeline  # noqa: F401 - imported once, for the children

MAX_MESSAGE = 1 << 20
UNKNOWN_EXIT = -1          # a child's exit code when the launcher died before reporting it


# -- the launcher process ---------------------------------------------------------------------
def serve(sock: socket.socket) -> int:
    """Fork a switch per request until the client hangs up; report every child's exit."""
    poll = select.poll()
    poll.register(sock.fileno(), select.POLLIN)
    children: dict[int, int] = {}             # pidfd -> pid
    launcher = os.getpid()
    while True:
        for fd, _events in poll.poll():
            if fd != sock.fileno():
                pid = children.pop(fd)
                poll.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                if not _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)}):
                    return 0
                continue
            data = sock.recv(MAX_MESSAGE)
            if not data:                      # the client closed its end: done
                return 0
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                if not _send(sock, {"error": str(exc)}):
                    return 0
                continue
            if pid == 0:
                _child(request, [sock.fileno(), *children], launcher)
            pidfd = os.pidfd_open(pid)        # before it can be reaped: always this child
            children[pidfd] = pid
            poll.register(pidfd, select.POLLIN)
            try:
                socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
            except OSError:
                return 0


def _send(sock: socket.socket, message: dict) -> bool:
    try:
        sock.send(json.dumps(message).encode())
        return True
    except OSError:                           # the client is gone
        return False


def _child(request: dict, inherited: list[int], launcher: int) -> None:
    """Become switch `request["argv"]`, as `python -m softswitch ARGV` would; never returns.
    It dies with the launcher, which dies with the network's process (ground/lifeline.py)."""
    code = 1
    try:
        lifeline.die_with_parent(launcher)
        os.setsid()                           # as Popen(start_new_session=True): no terminal's signals
        for fd in inherited:
            os.close(fd)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        argv = [str(a) for a in request["argv"]]
        sys.argv = ["python -m softswitch", *argv]
        _name_process(argv)
        code = switch_main.main(argv)
    except SystemExit as exc:                 # argparse refusals exit 2, as they would
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:                     # noqa: BLE001 - reported in SWITCH.out, exit 1
        traceback.print_exc()
    finally:
        import logging

        logging.shutdown()                    # what the interpreter's exit would flush
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code if isinstance(code, int) else 1)


def _name_process(argv: list[str]) -> None:
    """Every child's command line is the launcher's: put the switch's name in its comm
    (what top and `ps -o comm` show) instead."""
    try:
        import ctypes

        name = argv[argv.index("--name") + 1] if "--name" in argv else "?"
        ctypes.CDLL(None).prctl(15, f"softswitch:{name}".encode()[:15], 0, 0, 0)   # PR_SET_NAME
    except (OSError, AttributeError, ValueError):
        pass


def main() -> int:
    return serve(socket.socket(fileno=int(sys.argv[1])))


# -- the client side ---------------------------------------------------------------------------
class Launcher:
    """A running `python -m softswitch.launcher` and the switches it forked for us."""

    def __init__(self, out_path, cwd=None, env=None):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(out_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "softswitch.launcher", str(theirs.fileno())],
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True,
                                         preexec_fn=lifeline.preexec())
        theirs.close()
        self.out_path = out_path
        self._sock = mine
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._gone = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def spawn(self, argv: list[str], out_path) -> "ForkedProcess":
        """Start `python -m softswitch ARGV` (stdout and stderr appended to `out_path`)."""
        with self._lock:
            if self._gone:
                raise RuntimeError(f"the switch launcher has exited; see {self.out_path}")
            self._sock.send(json.dumps({"argv": list(argv), "out": str(out_path)}).encode())
            while True:
                message, fds = self._receive()
                if message is None:
                    raise RuntimeError(f"the switch launcher exited before starting {argv}; see {self.out_path}")
                if "pid" in message:
                    return ForkedProcess(self, message["pid"], fds[0], argv)
                if "error" in message:
                    raise RuntimeError(f"the switch launcher could not start {argv}: {message['error']}")

    def exit_code(self, pid: int) -> int:
        """Child `pid`'s exit code, once it has exited (reported right after the exit)."""
        with self._lock:
            while pid not in self._exits:
                message, _fds = self._receive()
                if message is None:
                    return UNKNOWN_EXIT
            return self._exits[pid]

    def _receive(self) -> tuple[dict | None, list[int]]:
        """One message (exit reports are filed on the way); None once the launcher is gone."""
        if self._gone:
            return None, []
        try:
            data, fds, _flags, _addr = socket.recv_fds(self._sock, MAX_MESSAGE, 1)
        except OSError:
            data, fds = b"", []
        if not data:
            self._gone = True
            return None, []
        message = json.loads(data)
        if "exited" in message:
            self._exits[message["exited"]] = message["code"]
        return message, fds

    def close(self, timeout: float = 3.0) -> None:
        """Let the launcher exit (its children are left running: stop them first)."""
        with self._lock:
            self._gone = True
            self._sock.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkedProcess:
    """What callers use of a Popen (pid, returncode, poll, wait, send_signal, terminate,
    kill), for a switch the launcher forked: not our child, so its exit is seen on its pidfd
    (open as long as this object lives: signals never reach a recycled pid) and its exit
    code comes from the launcher."""

    def __init__(self, launcher: Launcher, pid: int, pidfd: int, args):
        self.launcher, self.pid, self.args = launcher, pid, args
        self.returncode: int | None = None
        self._pidfd = pidfd

    def _exited(self, timeout: float | None) -> bool:
        if self.returncode is None:
            poll = select.poll()
            poll.register(self._pidfd, select.POLLIN)
            if not poll.poll(None if timeout is None else max(0, int(timeout * 1000))):
                return False
            self.returncode = self.launcher.exit_code(self.pid)
        return True

    def poll(self) -> int | None:
        self._exited(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:            # exited just now: nothing to signal
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self):
        try:
            os.close(self._pidfd)
        except (OSError, AttributeError):
            pass


if __name__ == "__main__":
    sys.exit(main())
