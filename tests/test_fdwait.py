"""agglab.ground.fdwait: waits that work for descriptors above FD_SETSIZE, where select() refuses."""

from __future__ import annotations

import os
import select
import socket

import pytest

from agglab.ground.fdwait import readable


@pytest.fixture
def high_fds():
    """Hold descriptors until the next one opened is at or above 1024 (as in a process that
    built a 208-node Mininet network)."""
    held = []
    while not held or held[-1] < 1024:
        held.append(os.open(os.devnull, os.O_RDONLY))
    yield
    for fd in held:
        os.close(fd)


def test_a_pipe_above_fd_setsize_is_waited_for(high_fds):
    r, w = os.pipe()
    try:
        assert r >= 1024
        with pytest.raises(ValueError, match="filedescriptor out of range in select"):
            select.select([r], [], [], 0)            # what this module exists to avoid
        assert readable([r], 0.01) == []
        os.write(w, b"x")
        assert readable([r], 1.0) == [r]
        os.close(w)
        w = -1
        os.read(r, 1)
        assert readable([r], 1.0) == [r]             # end of file: readable, as select says
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_sockets_come_back_as_given_and_only_the_ready_ones(high_fds):
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    with a, b, c, d:
        b.send(b"ping")
        assert readable([a, c], 1.0) == [a]
        assert readable([], 0.0) == []
