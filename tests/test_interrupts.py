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
