"""Start Python programs by forking one process that has already imported them.

Why: a Python process spends 0.1-0.2 CPU-seconds importing Python, numpy and its own code
before it does anything. The 80 switches of a k=8 fat-tree spent 16 of them, and its 128
workers another 16, most of what a 2-core machine did while a run started.
`python -m agglab.ground.forkserver FD MODULE...` imports the MODULEs once and then forks one child
per request. Each child is a process as before (its own pid, session, log file and exit
code; it crashes alone), it only starts with everything imported (the pages are shared
copy-on-write, so what one more costs in memory is its own pages: its PSS, not its RSS).

A child can be put into another process's network namespace (a Mininet host's: `netns`,
as `mnexec -a PID` does), and be handed descriptors (`fds`, placed at the numbers given,
as Popen's pass_fds keeps them) and its own environment and working directory.

Protocol, over a SOCK_SEQPACKET socket pair (one JSON object per message):
  client -> server  {"module": M, "argv": [ARGS], "out": PATH, "name": COMM, "env": {...} | null,
                     "cwd": DIR | null, "netns": PID | null, "fds": [N, ...]}  (descriptors attached)
  server -> client  {"pid": N}, the child's pidfd attached (SCM_RIGHTS), or {"error": TEXT}
  server -> client  {"exited": N, "code": C} once child N has exited (C as Popen.returncode)
The child runs `importlib.import_module(M).main(ARGS)` and exits with what it returns. The
server exits when the client closes its end. Children it started keep running: the caller
stops them, as it stops processes it spawned itself (and `agglab clean` after a crash).
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback

from agglab.ground import lifeline

MAX_MESSAGE = 1 << 20
MAX_FDS = 16
UNKNOWN_EXIT = -1          # a child's exit code when the server died before reporting it
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000


# -- the server process -------------------------------------------------------------------------
def serve(sock: socket.socket) -> int:
    """Fork a child per request until the client hangs up; report every child's exit."""
    poll = select.poll()
    poll.register(sock.fileno(), select.POLLIN)
    children: dict[int, int] = {}             # pidfd -> pid
    server = os.getpid()
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
            try:
                data, passed, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
            except OSError:
                return 0
            if not data:                      # the client closed its end: done
                return 0
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                for p in passed:
                    os.close(p)
                if not _send(sock, {"error": str(exc)}):
                    return 0
                continue
            if pid == 0:
                _child(request, passed, [sock.fileno(), *children], server)
            for p in passed:                  # the child holds them now (a pipe's end held here
                os.close(p)                   # would keep its reader from ever seeing EOF)
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


def _setns(pid: int) -> None:
    """Enter process `pid`'s network namespace (and its mount namespace if it has its own),
    as `mnexec -a PID` does for Mininet's popen."""
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, flag in (("net", CLONE_NEWNET), ("mnt", CLONE_NEWNS)):
        path = f"/proc/{pid}/ns/{kind}"
        if kind == "mnt" and os.stat(path).st_ino == os.stat(f"/proc/self/ns/{kind}").st_ino:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.setns(fd, flag) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({path}): {os.strerror(err)}")
        finally:
            os.close(fd)


def _child(request: dict, passed: list[int], inherited: list[int], server: int) -> None:
    """Become `request["module"]`'s main(argv); never returns. It dies with the server, which
    dies with the process that started it (ground/lifeline.py)."""
    code = 1
    try:
        lifeline.die_with_parent(server)
        os.setsid()                           # as Popen(start_new_session=True): no terminal's signals
        for fd in inherited:
            os.close(fd)
        targets = request.get("fds") or []
        high = [fcntl_dup_above(fd, 256) for fd in passed]   # out of every target number's way first
        for fd, target in zip(high, targets):
            os.dup2(fd, target, inheritable=True)
            os.close(fd)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if request.get("netns"):
            _setns(int(request["netns"]))
        if request.get("env") is not None:
            os.environ.clear()
            os.environ.update(request["env"])
        if request.get("cwd"):
            os.chdir(request["cwd"])
        argv = [str(a) for a in request["argv"]]
        sys.argv = [f"python -m {request['module']}", *argv]
        _name_process(request.get("name") or request["module"])
        code = importlib.import_module(request["module"]).main(argv)
    except SystemExit as exc:                 # argparse refusals exit 2, as they would
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:                     # noqa: BLE001 - reported in its out file, exit 1
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()               # what the interpreter's exit would run (logging's
                                              # flush, a transport's last staged frames)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code if isinstance(code, int) else 1)


def fcntl_dup_above(fd: int, lowest: int) -> int:
    """A copy of `fd` numbered at least `lowest` (the original is closed)."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, lowest)
    os.close(fd)
    return new


def _name_process(name: str) -> None:
    """Every child's command line is the server's: put its own name in its comm (what top and
    `ps -o comm` show) instead."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)   # PR_SET_NAME
    except (OSError, AttributeError, ValueError):
        pass


def main() -> int:
    for module in sys.argv[2:]:               # what every child starts with
        importlib.import_module(module)
    return serve(socket.socket(fileno=int(sys.argv[1])))


# -- the client side ---------------------------------------------------------------------------
class Launcher:
    """A running `python -m agglab.ground.forkserver` (importing `preload`) and what it forked for us."""

    def __init__(self, out_path, preload=(), cwd=None, env=None, what: str = "launcher"):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(out_path, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "agglab.ground.forkserver", str(theirs.fileno()), *preload],
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True,
                                         preexec_fn=lifeline.preexec())
        theirs.close()
        self.out_path, self.what = out_path, what
        self._sock = mine
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._gone = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def spawn(self, module: str, argv: list[str], out_path, *, name: str | None = None, env: dict | None = None,
              cwd=None, netns: int | None = None, pass_fds: dict[int, int] | None = None) -> "ForkedProcess":
        """Start `python -m MODULE ARGV` (MODULE's main(argv)), stdout and stderr appended to
        `out_path`; `netns`: the pid whose network namespace it runs in; `pass_fds`: {our
        descriptor: its number in the child}."""
        fds = dict(pass_fds or {})
        request = {"module": module, "argv": list(argv), "out": str(out_path), "name": name, "env": env,
                   "cwd": None if cwd is None else str(cwd), "netns": netns, "fds": list(fds.values())}
        with self._lock:
            if self._gone:
                raise RuntimeError(f"the {self.what} has exited; see {self.out_path}")
            socket.send_fds(self._sock, [json.dumps(request).encode()], list(fds))
            while True:
                message, got = self._receive()
                if message is None:
                    raise RuntimeError(f"the {self.what} exited before starting {argv}; see {self.out_path}")
                if "pid" in message:
                    return ForkedProcess(self, message["pid"], got[0], argv)
                if "error" in message:
                    raise RuntimeError(f"the {self.what} could not start {argv}: {message['error']}")

    def exit_code(self, pid: int) -> int:
        """Child `pid`'s exit code, once it has exited (reported right after the exit)."""
        with self._lock:
            while pid not in self._exits:
                message, _fds = self._receive()
                if message is None:
                    return UNKNOWN_EXIT
            return self._exits[pid]

    def _receive(self) -> tuple[dict | None, list[int]]:
        """One message (exit reports are filed on the way); None once the server is gone."""
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
        """Let the server exit (its children are left running: stop them first)."""
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
    kill), for a process the server forked: not our child, so its exit is seen on its pidfd
    (open as long as this object lives: signals never reach a recycled pid) and its exit
    code comes from the server."""

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
