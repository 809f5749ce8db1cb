"""Standby trees: a niced child process computes the trees for single-link failures ahead.

Why a process: tree computation is pure Python (rat: an LP per call; ~1 s under load), and a
thread in the controller would hold the GIL that the reroute and the link monitor need the
moment a link fails. Why a plain subprocess (`python -m agglab.controller.standby`) and not
multiprocessing: spawn re-imports the caller's main script, which a user's program need not
guard.

Protocol: length-prefixed pickles. Parent -> child: (gen, tree, graph, workers,
[(u, v, key), ...]); child -> parent: (gen, key, TreeSet or TreeError), one per link, in
order. A newer task replaces the one in progress (checked between two links). The child
exits when its stdin closes (the controller exited or stopped it).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading

from agglab.ground import lifeline
from agglab.ground.paths import IMPORT_ROOT

_LEN = struct.Struct("!I")


def _write(f, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _exactly(f, n: int) -> bytes:
    """n bytes from `f` (raw files may return fewer per read); EOFError at end of file."""
    out = bytearray()
    while len(out) < n:
        chunk = f.read(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def _read(f):
    (n,) = _LEN.unpack(_exactly(f, _LEN.size))
    return pickle.loads(_exactly(f, n))


class StandbyWorker:
    """The controller's side: one child per controller process (`get()`), the newest task's
    results handed to its `store(key, trees)`."""

    running: "StandbyWorker | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "StandbyWorker | None":
        with cls._lock:
            if cls.running is None or cls.running.proc.poll() is not None:
                try:
                    cls.running = cls()
                except OSError:
                    return None
            return cls.running

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(IMPORT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "agglab.controller.standby"], cwd=IMPORT_ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=lifeline.preexec(then=_nice),
                                     start_new_session=True)
        self.gen, self.store = 0, None
        self._send = threading.Lock()
        threading.Thread(target=self._collect, name="standby-results", daemon=True).start()

    def submit(self, tree: str, g, workers: list[str], links: list, store) -> None:
        with self._send:
            self.gen += 1
            self.store = store
            try:
                _write(self.proc.stdin, (self.gen, tree, g, list(workers), links))
            except (OSError, ValueError):
                pass                                  # the child is gone: reroutes compute

    def cancel(self) -> None:
        """Stop the task in progress (the job stopped)."""
        self.submit(None, None, [], [], None)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _collect(self) -> None:
        while True:
            try:
                gen, key, got = _read(self.proc.stdout)
            except (EOFError, OSError, ValueError, pickle.UnpicklingError):
                return
            store = self.store
            if store is not None and gen == self.gen:
                store(key, got)


def _nice() -> None:
    """Niceness 19, in a session of its own (start_new_session): with autogroup scheduling on
    (ground/priority.py) the niceness weighs it only against the rest of its session, so in the
    controller's session it shared one share among ~30 with the controller itself, and during
    the network's start (the controller busy) it got almost none; its own session gets one
    share, like a switch. While a reroute runs, the controller's threads are real-time."""
    try:
        os.nice(19)
    except OSError:
        pass


def warm_up() -> None:
    """Import every tree algorithm and run each once on a small graph, before the first task:
    rat and packing import scipy and load its LP solver (~0.8 s of CPU), which under a
    running job's load took longer than the job took to reach a failure halfway through."""
    from agglab.controller import topologies, trees  # lazy: only the child loads the trees (networkx, scipy): the controller imports this module to start it
    from agglab.controller.topology import workers  # lazy: as above

    g = topologies.build("leafspine", racks=2, hosts_per_rack=2, spines=2)
    for name in trees.TREE_ALGORITHMS:
        try:
            trees.compute(name, g, workers(g))
        except Exception:                            # a tree algorithm that does not fit this graph
            pass


def main() -> int:
    """The child: compute each link's trees, newest task first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C is the controller's to handle:
                                                        # it closes our stdin, and we exit
    from agglab.controller import trees  # lazy: only the child loads the trees (see warm_up)
    from agglab.controller.trees.base import TreeError  # lazy: as above

    warm_up()

    tasks, results = sys.stdin.buffer.raw, sys.stdout.buffer     # raw: select() sees every byte
    task = None
    while True:
        try:
            task = task or _read(tasks)
        except EOFError:
            return 0
        gen, tree, g, workers, links = task
        task = None
        for u, v, key in links:
            if select.select([tasks], [], [], 0)[0]:      # a newer task (or EOF) replaces this one
                break
            g.edges[u, v]["up"] = False
            try:
                got = trees.compute(tree, g, workers, epoch=0)
            except TreeError as exc:
                got = exc
            except Exception:                         # a standby is an optimisation: reroute computes
                got = None
            g.edges[u, v]["up"] = True
            if got is not None:
                try:
                    _write(results, (gen, key, got))
                except (BrokenPipeError, OSError):
                    return 0


if __name__ == "__main__":
    sys.exit(main())
