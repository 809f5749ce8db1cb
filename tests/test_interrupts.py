"""A stop signal that arrives while Python runs its fork callbacks still stops the command.

Python runs logging's lock callbacks around every fork (os.fork, Popen with a preexec_fn, as
every process agglab starts has). A KeyboardInterrupt raised inside one is printed as
"Exception ignored" and dropped, and logging's module lock stays held: the interrupt was lost
and the next thread to log (the netlink link monitor) hung, so a SIGHUP during a lab's set-up
ended in "netlink link monitor did not start" instead of a clean stop.

The test makes the signal arrive exactly there: a trace function sends it on entry to
logging's after-fork callback, so the handler runs inside that callback."""

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import logging, os, signal, subprocess, sys, threading, time
    from agglab.ground import interrupts

    interrupts.arm()
    # logging's after-fork callback in the parent (renamed in Python 3.13)
    callback = getattr(logging, "_releaseLock", None) or logging._afterFork
    callback = callback.__code__

    def send_inside_callback(frame, event, arg):
        if event == "call" and frame.f_code is callback:
            sys.settrace(None)
            os.kill(os.getpid(), signal.SIGHUP)

    try:
        sys.settrace(send_inside_callback)
        subprocess.Popen(["true"], preexec_fn=lambda: None).wait()
        sys.settrace(None)
        time.sleep(60)     # ended by the re-sent signal's Interrupted; a lost signal sleeps it out
        print("not interrupted")
    except interrupts.Interrupted as exc:
        print("interrupted", exc.signum)
    logger = threading.Thread(target=lambda: logging.getLogger("probe").warning("logged"))
    logger.start()
    logger.join(5)
    print("logging lock held" if logger.is_alive() else "logging lock free", flush=True)
    os._exit(0)
""")


def test_a_signal_inside_a_fork_callback_is_handled_after_the_fork():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["interrupted 1", "logging lock free"], out.stdout + out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr


NAMESPACE_SCRIPT = textwrap.dedent("""
    import os, signal, subprocess, sys
    from agglab.ground import interrupts, netns

    interrupts.arm()
    ns = netns.RunNamespace()
    children = []
    real = subprocess.Popen._execute_child

    def signal_after_fork(self, args, *rest, **kw):
        real(self, args, *rest, **kw)
        if "add" in args and ns.name in args and not children:
            children.append(self.pid)
            os.kill(os.getpid(), signal.SIGTERM)   # handled here: inside Popen(), its child running

    subprocess.Popen._execute_child = signal_after_fork
    try:
        ns.create()
        print("not interrupted")
    except interrupts.Interrupted as exc:
        print("interrupted", exc.signum)
        ns.delete()                                # what EmulatedNetwork.stop() does
    try:
        os.waitpid(children[0], 0)                 # an orphaned `ip netns add` has finished now
    except ChildProcessError:
        pass                                       # reaped by subprocess.run: it was waited for
    left = (netns.NETNS_DIR / ns.name).exists()
    subprocess.run(["ip", "netns", "delete", ns.name], capture_output=True)
    print("left behind" if left else "removed", flush=True)
""")


@pytest.mark.root
def test_a_signal_while_a_namespace_is_made_leaves_no_namespace():
    """The signal arrives inside Popen(), after the fork of `ip netns add` (where CI's SIGTERM
    at set-up landed): the command still stops, and the namespace is gone once `ip` is."""
    out = subprocess.run([sys.executable, "-c", NAMESPACE_SCRIPT], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split("\n")[:2] == ["interrupted 15", "removed"], out.stdout + out.stderr
