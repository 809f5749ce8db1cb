"""The shell scripts under scripts/ (provisioning, system packages) parse and pass shellcheck.

They cannot be run here (they install packages and download BMv2/p4c), so static checks are
what CI can say about them; .ci/run installs Debian's shellcheck first."""

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
