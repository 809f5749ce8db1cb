"""Fixtures for the conformance runner: one target object per session.

Why module scope for BMv2: compiling the P4 program and building the network
namespace take seconds, so the vectors of one module share them (the target
restarts simple_switch per vector for clean state); the namespace is gone before
the next module's tests, which assert that nothing is left behind.  Teardown always runs (fixture finaliser plus
an atexit backstop in the harness), so no namespace or process outlives pytest.
"""

from __future__ import annotations

import pytest

from agglab.softswitch import native
from agglab.testkit.soft_target import SoftTarget
from agglab.testkit.vectors import all_vectors


def pytest_configure(config):
    config.addinivalue_line("markers", "bmv2: needs BMv2 simple_switch and p4c")
    config.addinivalue_line("markers", "root: needs root (network namespaces, raw sockets)")


@pytest.fixture(scope="session")
def soft_target():
    return SoftTarget()


@pytest.fixture(scope="session")
def soft_batch_target():
    return SoftTarget(batch=True)


@pytest.fixture(scope="session")
def soft_native_target():
    if not native.AVAILABLE:
        pytest.skip(native.describe())
    return SoftTarget(native=True)


@pytest.fixture(scope="module")
def bmv2_target(tmp_path_factory):
    from agglab.testkit.bmv2_target import Bmv2Target, find_tools

    tools = find_tools()
    if tools is None:
        pytest.skip("needs BMv2 simple_switch, simple_switch_CLI and p4c (PATH or /opt/p4/bin)")
    ports = set()
    for vector in all_vectors():
        ports |= vector.ports
    target = Bmv2Target(tools, tmp_path_factory.mktemp("bmv2"), max(ports) + 1)
    try:
        target.start()
        yield target
    finally:
        target.close()
