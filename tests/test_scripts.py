"""The shell scripts under scripts/ (provisioning, system packages) parse and pass shellcheck.

They cannot be run here (they install packages and download BMv2/p4c), so static checks are
what CI can say about them; .ci/run installs shellcheck through scripts/install-system.sh first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parent.parent / "scripts").glob("*.sh"))


def test_provisioning_script_exists_and_vagrant_calls_it():
    names = [p.name for p in SCRIPTS]
    assert "provision-vm.sh" in names
    vagrantfile = (SCRIPTS[0].parent.parent / "Vagrantfile").read_text()
    assert "scripts/provision-vm.sh" in vagrantfile


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_parses(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck (apt-get install shellcheck)")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script):
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# The program each Debian package provides that the tests (or what they start) run.
PACKAGE_OF = {"cpp": "cpp", "shellcheck": "shellcheck", "tshark": "tshark", "ping": "iputils-ping",
              "dot": "graphviz", "chromium": "chromium", "chromedriver": "chromium-driver",
              "sshd": "openssh-server", "ssh": "openssh-server", "tmux": "tmux", "mnexec": "mininet",
              "mn": "mininet", "tc": "iproute2", "ip": "iproute2", "ethtool": "ethtool",
              "tcpdump": "tcpdump", "bash": None, "sh": None, "sudo": None, "p4c": None, "simple_switch": None,
              "simple_switch_CLI": None, "git": None, "env": None, "kill": None, "flock": None,
              "pgrep": "procps", "ps": "procps", "make": "make", "sleep": None, "true": None, "unshare": None, "setpriv": None,
              "nsenter": None, "python3": None, "gcc": "build-essential", "cc": "build-essential"}


def _system_packages() -> set[str]:
    """The `pkgs=(...)` array of scripts/install-system.sh."""
    import re
    text = (SCRIPTS[0].parent / "install-system.sh").read_text()
    body = re.search(r"^pkgs=\((.*?)\)", text, re.S | re.M).group(1)
    return set(body.split())


def _programs_the_tests_run() -> set[str]:
    """Every program name a test looks up (shutil.which) or starts as the first word of an
    argument list (subprocess.run / Popen / check_output with a literal list)."""
    import re
    found = set()
    for path in (SCRIPTS[0].parent.parent / "tests").rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r'shutil\.which\(\s*"([\w.+-]+)"', text))
        found |= set(re.findall(r'(?:run|Popen|check_output|check_call)\(\s*\[\s*"([\w.+-]+)"', text))
    return found


def test_install_system_installs_every_program_the_tests_run():
    """A fresh Debian 12 with --no-install-recommends has none of these unless the script
    names them; a test that runs a program the script does not install passes only on a
    machine that happens to have it."""
    programs = _programs_the_tests_run()
    unknown = sorted(p for p in programs if p not in PACKAGE_OF and not p.startswith(("/", ".")))
    assert not unknown, f"tests run {unknown}: add them to PACKAGE_OF and scripts/install-system.sh"
    needed = {PACKAGE_OF[p] for p in programs if PACKAGE_OF.get(p)} | {"cpp", "shellcheck"}
    assert needed <= _system_packages(), f"install-system.sh lacks {sorted(needed - _system_packages())}"


def test_ci_and_make_setup_install_through_the_same_script():
    root = SCRIPTS[0].parent.parent
    ci = (root / ".ci" / "run").read_text()
    assert "\nmake setup\n" in ci or "bash scripts/install-system.sh" in ci      # make setup runs it
    assert "make test" in ci
    assert "p4kit/install.sh" in ci and "P4KIT_PYTHON=.venv/bin/python" in ci   # BMv2 and p4-utils too
    assert "scripts/install-system.sh" in (root / "Makefile").read_text()
