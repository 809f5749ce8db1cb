"""The lab's command line on the live page: the lab's own commands, typed in the browser.

Why a module of its own: the page must run exactly what the terminal runs (the same LabCLI
methods, the same session and Actions) without becoming a shell. So a page command goes
through a second LabCLI object that shares the session and Actions but runs no prompt loop,
and only the lab's own commands (LabCLI's do_* methods, and `help`) reach it: Mininet's
host commands (`h1 ping`, `sh`, `py`, `xterm`, ...) are refused with one line, as is
`exit` (the lab ends at its terminal).

Two rules keep the terminal and the page apart:
- One command at a time: the terminal's LabCLI.onecmd and a page command take the same lock
  (`LabCLI.lock`); a page command that finds the terminal busy is refused (`Busy`), a
  terminal command that finds the page busy says so and waits its turn (`take_turn`).
- A page command's output goes to the page only: LabCLI prints with print(), i.e. to
  sys.stdout, so while the page console is open sys.stdout is a `ThreadSinks` that writes a
  thread's output to that thread's sink when it has one (the page command's buffer) and to the
  terminal otherwise. Events and an allreduce's outcome (the lab's `say`, writing to
  `terminal()`) reach the terminal, never a page command's output.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading

from agglab.controller import drawing

BUSY_WAIT = 2.0          # seconds a page command waits for a terminal command to end
MAX_LINE = 1000          # characters of one typed command
MAX_OUTPUT = 200_000     # characters of one command's output the page gets
ENDS_THE_LAB = ("exit", "quit", "EOF")
HELP = "help [COMMAND]: the lab's commands, or one command's help"


class Refused(ValueError):
    """Not something the page runs (one line: the endpoint's 400)."""


class Busy(RuntimeError):
    """The terminal runs a command (one line: the endpoint's 409)."""


class ThreadSinks:
    """sys.stdout while the page console is open: a thread with a sink writes there, every
    other thread to the real stdout (the terminal), which answers everything else
    (isatty, fileno, encoding: input()'s readline and the prompt see the terminal). Not an
    io.TextIOBase: its `encoding` of None would hide the terminal's from input()."""

    def __init__(self, real):
        self.real = real
        self._local = threading.local()

    @property
    def sink(self):
        return getattr(self._local, "sink", None)

    @contextlib.contextmanager
    def capture(self):
        """This thread's output, meanwhile, into a fresh buffer (yielded)."""
        buf = io.StringIO()
        self._local.sink = buf
        try:
            yield buf
        finally:
            self._local.sink = None

    def write(self, text: str) -> int:
        return (self.sink or self.real).write(text)

    def flush(self) -> None:
        (self.sink or self.real).flush()

    def isatty(self) -> bool:
        return False if self.sink is not None else self.real.isatty()

    def __getattr__(self, name):
        return getattr(self.real, name)


def terminal():
    """The lab's terminal: sys.stdout, or what a ThreadSinks there writes to (the lab's events
    and an allreduce's outcome go there even when said in a page command's thread)."""
    return sys.stdout.real if isinstance(sys.stdout, ThreadSinks) else sys.stdout


@contextlib.contextmanager
def take_turn(lock, waiting: str = "(the live page is running a command: yours runs when it ends)"):
    """The terminal's side of the lock: say so when it has to wait, then wait."""
    if not lock.acquire(blocking=False):
        print(waiting, flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def lab_commands(cli_class) -> list[str]:
    """The lab's own commands: the do_* methods its class defines (not Mininet's), and help."""
    names = {n[3:] for c in cli_class.__mro__ if c.__module__.startswith("agglab") for n in vars(c)
             if n.startswith("do_")}
    return sorted((names | {"help"}) - set(ENDS_THE_LAB))


class PageConsole:
    """Runs one typed line at a time for the page; `run(line)` returns its output text."""

    def __init__(self, cli_class, session, actions, background: list):
        self.cli_class = cli_class
        self.commands = lab_commands(cli_class)
        cli = cli_class.__new__(cli_class)        # no prompt loop: Mininet's CLI.__init__ would run one
        cli.session, cli.actions, cli.background = session, actions, background
        cli.mn, cli.inputFile, cli.locals = session.net.net, None, {}
        cli.stdin, cli.stdout, cli.cmdqueue, cli.completekey, cli.lastcmd = None, None, [], None, ""
        self.cli = cli
        self.lock = cli_class.lock
        self.sinks: ThreadSinks | None = None
        self.running: str | None = None           # the page's command that holds the lab, if one does

    # -- life cycle: sys.stdout routed while the page is served -------------------------
    def open(self) -> "PageConsole":
        if not isinstance(sys.stdout, ThreadSinks):
            sys.stdout = ThreadSinks(sys.stdout)
        self.sinks = self.cli.stdout = sys.stdout
        return self

    def close(self) -> None:
        if sys.stdout is self.sinks:
            sys.stdout = self.sinks.real

    # -- one command --------------------------------------------------------------------
    def check(self, line: str) -> str:
        """The command a typed line names, or Refused with the one line that says why."""
        if not isinstance(line, str) or not line.strip():
            raise Refused("type a lab command ('help' lists them)")
        if len(line) > MAX_LINE or "\n" in line.strip() or "\x00" in line:
            raise Refused(f"one line of at most {MAX_LINE} characters, please")
        name, _, _ = self.cli.parseline(line.strip())
        word = line.split()[0]
        if name in ENDS_THE_LAB:
            raise Refused(f"{word}: the lab ends at its terminal (closing the page leaves it running)")
        if name not in self.commands:
            raise Refused(f"{word}: not a lab command; the page runs the lab's own commands ('help' lists "
                          "them), Mininet's host commands and the shell stay at the lab's terminal")
        return name

    def run(self, line: str) -> str:
        """Run one line as the lab would (its output, one line for a refusal); blocks while
        the command runs (`wait` until the allreduce ends): call it off the event loop."""
        name = self.check(line)
        if not self.lock.acquire(timeout=BUSY_WAIT):
            if self.running:
                raise Busy(f"'{self.running}' from the page is still running: try again when it ends "
                           "(the cancel button stops an allreduce)")
            raise Busy("the lab's terminal is running a command: try again when it ends")
        self.running = name
        try:
            with self.sinks.capture() as out:
                try:
                    self._one(name, line.strip())
                except Exception as exc:     # noqa: BLE001 - as LabCLI.onecmd: one line, the lab goes on
                    print(f"{name} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        finally:
            self.running = None
            self.lock.release()
        text = out.getvalue().rstrip("\n")
        if len(text) > MAX_OUTPUT:
            text = text[:MAX_OUTPUT] + f"\n... ({len(text) - MAX_OUTPUT} more characters: the lab's terminal " \
                                       "shows all)"
        return text

    def _one(self, name: str, line: str) -> None:
        cli, arg = self.cli, line[len(line.split()[0]):].strip()
        if name == "help":
            print(self.help(arg))
            return
        if name == "show" and arg:
            print("show FILE writes a file on the lab's machine: type it at the lab's terminal "
                  "(here, show prints the trees; the page draws them)")
            return
        if name == "show":
            ts = cli.actions.note_trees()
            print(drawing.as_text(cli.session.g, ts, cli.actions.previous_trees(ts.epoch)))
            return
        cli.actions.note_trees()              # as LabCLI.precmd: `show` says what changed since
        before = cli.actions.run
        cli.onecmd(line)
        # `wait` and `cancel` end with the allreduce's outcome, which the allreduce's own
        # thread says on the terminal: the page gets it as the command's output
        if name in ("wait", "cancel") and cli.actions.run is before and before.outcome and \
                before.finished.is_set() and not self.sinks.sink.getvalue().strip():
            print(before.outcome)

    def help(self, arg: str) -> str:
        """`help`: the lab's commands with the first line of each one's help; `help CMD`: all of it."""
        if arg:
            doc = getattr(self.cli_class, f"do_{arg}", None).__doc__ if arg in self.commands else None
            if arg == "help":
                return HELP
            return " ".join(doc.split()) if doc else f"no lab command {arg!r} ('help' lists them)"
        lines = ["the lab's commands ('help COMMAND' for one; up/down arrows recall earlier lines):"]
        for name in self.commands:
            doc = " ".join(((getattr(self.cli_class, f"do_{name}", None).__doc__ or "") if name != "help" else
                            HELP).split())
            usage, _, what = doc.partition(": ") if ": " in doc else (name, "", doc)
            usage = usage if len(usage) <= 25 else " ".join(usage.split()[:2]) + " ..."
            lines.append(f"  {usage:<25} {what.split('. ')[0].rstrip('.')}")
        return "\n".join(lines)
