"""Track every process and interface a run creates, and remove them after a crash.

Why: the classic Mininet/P4 pain is leftover state ("RTNETLINK answers: File exists",
stray simple_switch processes) after a run is killed. Each run writes what it starts
into its own directory under RUN_ROOT; `agglab clean` (ground/cleanup.py) removes
whatever belongs to a run whose owner process is gone. It is idempotent: a second call finds
nothing, and it never touches a live run's processes, interfaces or directory; interfaces
that no run records are left to `agglab clean --all` (see cleanup.clean()).

The run root is checked before every use (`secure_dir`): owned by us, not group- or
world-writable, not a symlink; otherwise the run is refused with one line (`Refused`).
Cleaning walks it with lstat and never follows a symlink.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

from agglab.ground.fdwait import readable
from agglab.ground.paths import RUN_ROOT

class Refused(Exception):
    """A run that must not go ahead, said in one line (the CLI prints it, no traceback):
    an unsafe run directory, another network holding the machine (ground/netlease.py)."""

    exit_code = 1


class UnsafeRunDir(Refused):
    """The run root is not ours alone: another user's, writable by others, or a symlink."""


def secure_dir(path: Path) -> Path:
    """Create `path` (mode 0700) if missing, then check it is a real directory (not a
    symlink), owned by this user and not group- or world-writable; raise UnsafeRunDir with
    one line otherwise. Why: root writes into and deletes from its run directories; a
    directory another user planted (or a symlink to elsewhere) would let them own or steer
    what root writes and deletes."""
    path = Path(path)
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o755, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeRunDir(f"run directory {path} is a symlink: refusing to use it (remove it, "
                           "or set AGGLAB_RUN_ROOT to a directory of your own)")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeRunDir(f"run directory {path} is not a directory: refusing to use it")
    if st.st_uid != os.geteuid():
        raise UnsafeRunDir(f"run directory {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                           "refusing to use it (another user may have planted it; remove it)")
    if st.st_mode & 0o022:
        raise UnsafeRunDir(f"run directory {path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):o}): "
                           f"refusing to use it (chmod 700 {path})")
    return path


# Interfaces our networks create: s1-eth1, h3-eth0, (any node name)-ethN.
_OUR_INTF = re.compile(r"^[a-z]+\d+-eth\d+$")


MAKING = ".making-"       # + pid + name: a run directory being created (RunRecord.create)


class RunRecord:
    """The directory of one run: owner pid, pids started, interfaces created."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, prefix: str = "run") -> "RunRecord":
        secure_dir(RUN_ROOT)
        name = f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        # made under a hidden name and renamed once it names its owner: a run that cleans
        # meanwhile (runs now start side by side) never sees it without one and removes it
        making = RUN_ROOT / f"{MAKING}{os.getpid()}-{name}"
        making.mkdir(mode=0o700)
        (making / "owner.pid").write_text(str(os.getpid()))
        path = RUN_ROOT / name
        making.rename(path)
        return cls(path)

    def add_pid(self, pid: int, what: str) -> None:
        with open(self.path / "pids", "a") as f:
            f.write(f"{pid} {what}\n")

    def add_interfaces(self, names: list[str]) -> None:
        """Record interfaces this run created; call it only once the kernel has made them
        (`agglab clean` and the run's teardown delete what is recorded here)."""
        with open(self.path / "interfaces", "a") as f:
            f.writelines(f"{n}\n" for n in names)

    def link_group(self) -> int:
        """The interface group (`ip link ... group G`) this run's veths are created in, chosen
        once per run. Why: `ip link delete group G` removes them all in one kernel batch,
        where one `link delete` per interface waits for the network stack each time (the
        384 veth pairs of a k=8 fat-tree: 7.7 s instead of 0.1 s)."""
        f = self.path / "link_group"
        if not f.exists():
            f.write_text(str(free_link_group()))
        return int(f.read_text())

    def recorded_link_group(self) -> int | None:
        """The link group if one was chosen (a crashed run's, for clean())."""
        try:
            return int((self.path / "link_group").read_text())
        except (OSError, ValueError):
            return None

    def set_netns(self, name: str) -> None:
        """Record the run's network namespace (ground/netns.py) before it is made, so that
        `agglab clean` deletes it whatever moment the run dies at."""
        (self.path / "netns").write_text(name)

    def netns(self) -> str | None:
        """The run's network namespace's name, if it had one."""
        try:
            return (self.path / "netns").read_text().strip() or None
        except OSError:
            return None

    def pids(self) -> list[int]:
        """The pids recorded ([] once the run's own teardown has removed its directory)."""
        try:
            return [int(line.split()[0]) for line in (self.path / "pids").read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return []

    def interfaces(self) -> list[str]:
        try:
            return [n for n in (self.path / "interfaces").read_text().split() if n]
        except FileNotFoundError:
            return []

    def remove(self, keep: Path | None = None) -> None:
        """Copy the run to `keep` first if given (`--keep`), then remove its directory, whether
        or not the copy worked: the end of every network's stop()."""
        try:
            if keep:
                self.keep(keep)
        finally:
            shutil.rmtree(self.path, ignore_errors=True)

    def keep(self, dest: Path) -> Path:
        """Copy what the run wrote (logs, commands, events, pcaps, worker reports) to `dest`,
        leaving out what only a live run needs (sockets, the owner's pid). When run with sudo
        the copy belongs to the user who ran sudo, so it can be read and removed without root."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)

        def skipped(_dir, names):
            return [n for n in names if n == "owner.pid" or n.endswith((".sock", ".ipc"))]

        shutil.copytree(self.path, dest, ignore=skipped, dirs_exist_ok=True)
        uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
        if os.geteuid() == 0 and uid and gid:
            for p in [dest, *dest.rglob("*")]:
                try:
                    os.chown(p, int(uid), int(gid), follow_symlinks=False)
                except OSError:
                    pass
        return dest

    def owner_alive(self) -> bool:
        try:
            return _alive(int((self.path / "owner.pid").read_text()))
        except (OSError, ValueError):
            return False


def alive(pid: int) -> bool:
    """The process runs (a zombie counts as gone)."""
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def kill_pids(pids: list[int], grace: float = 2.0, gone_within: float = 60.0) -> int:
    """SIGTERM, wait up to `grace` for them to exit, then SIGKILL the rest and wait until they
    are gone (up to `gone_within`: only a process stuck in the kernel takes that long).
    Returns how many were alive. Why pidfds: each process is waited on by its own descriptor
    (readable when it exits), not polled by pid with sleeps, and a pid the kernel reuses after
    the wait began is never signalled."""
    live = [p for p in pids if p > 1 and p != os.getpid() and _alive(p)]
    fds = _pidfds(live)
    try:
        for pid, fd in fds.items():
            with _quiet():
                signal.pidfd_send_signal(fd, signal.SIGTERM)
        left = _wait_gone(fds, grace)
        for pid in left:
            with _quiet():
                signal.pidfd_send_signal(fds[pid], signal.SIGKILL)
        _wait_gone({pid: fds[pid] for pid in left}, gone_within)
    finally:
        for fd in fds.values():
            os.close(fd)
    return len(live)


def _pidfds(pids: list[int]) -> dict[int, int]:
    """pid -> a pidfd of it, for those still running."""
    fds = {}
    for pid in pids:
        try:
            fds[pid] = os.pidfd_open(pid)
        except ProcessLookupError:
            pass
    return fds


def _wait_gone(fds: dict[int, int], timeout: float) -> list[int]:
    """Wait until every process of `fds` (pid -> pidfd) has exited, at most `timeout` s;
    the pids still running then."""
    left = {fd: pid for pid, fd in fds.items() if _alive(pid)}     # a zombie has exited already
    deadline = time.monotonic() + timeout
    while left and (remaining := deadline - time.monotonic()) > 0:
        for fd in readable(list(left), remaining):
            del left[fd]
    return list(left.values())


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], (ProcessLookupError, PermissionError))


def free_link_group() -> int:
    """A random interface group no interface of the root namespace is in (0 is everyone's)."""
    used = set()
    for p in Path("/sys/class/net").iterdir():
        try:
            used.add(int((p / "netdev_group").read_text()))
        except (OSError, ValueError):
            pass
    while True:
        group = random.randrange(1 << 16, 1 << 31)
        if group not in used:
            return group


def delete_link_group(group: int) -> None:
    """Delete every interface of the root namespace in `group`, in one request (a veth's
    peer goes with it, whichever namespace it is in); no error when there is none."""
    if group:
        subprocess.run(["ip", "link", "delete", "group", str(group)], capture_output=True)


def _present() -> set[str]:
    net = Path("/sys/class/net")
    return {p.name for p in net.iterdir()} if net.exists() else set()


def group_of(name: str) -> int | None:
    """The interface group of root-namespace interface `name` (None: no such interface)."""
    try:
        return int(Path(f"/sys/class/net/{name}/netdev_group").read_text())
    except (OSError, ValueError):
        return None


def delete_interfaces(names: list[str], group: int | None = None) -> int:
    """Delete the root-namespace interfaces `names` that exist; with `group`, only those in
    that interface group (a run's own: a name it recorded may since belong to another run)."""
    present = _present()
    count = 0
    for name in names:
        if name in present and (group is None or group_of(name) == group):
            subprocess.run(["ip", "link", "delete", name], capture_output=True)
            count += 1
    return count


def stray_interfaces() -> list[str]:
    """Interfaces in the root namespace named like ours (s1-eth1, h2-eth0)."""
    net = Path("/sys/class/net")
    return sorted(p.name for p in net.iterdir() if _OUR_INTF.match(p.name)) if net.exists() else []
