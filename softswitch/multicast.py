"""Packet replication engine (multicast groups), numbered like BMv2's simple PRE.

Why mimic BMv2's numbering: the controller creates a node, parses the handle
from the answer and associates it, identically on both targets.  Node handles
are the lowest free number starting at 0; a group's handle is its id.  One
difference on purpose: destroying a group also dissociates its nodes (BMv2
leaves them pointing at the dead group).

The packet path calls `replicate(mgrp)`, which returns a cached tuple of
(port, rid) sorted by port, so replicas leave in a deterministic order.
"""

from __future__ import annotations


class McError(Exception):
    """A PRE operation BMv2 would refuse; str() is BMv2's error code name."""


class Multicast:
    def __init__(self):
        self.groups: dict[int, list[int]] = {}                # mgrp -> node handles
        self.nodes: dict[int, tuple[int, tuple[int, ...]]] = {}  # handle -> (rid, ports)
        self.node_group: dict[int, int] = {}                  # handle -> mgrp it belongs to
        self._cache: dict[int, tuple[tuple[int, int], ...]] = {}

    def mgrp_create(self, mgrp: int) -> int:
        if not 0 <= mgrp < (1 << 16):
            raise McError("INVALID_MGID")
        self.groups.setdefault(mgrp, [])       # BMv2: re-creating is a silent no-op
        self._cache.pop(mgrp, None)
        return mgrp

    def mgrp_destroy(self, mgrp: int) -> None:
        for handle in self.groups.pop(mgrp, []):
            self.node_group.pop(handle, None)
        self._cache.clear()

    def node_create(self, rid: int, ports: list[int]) -> int:
        if len(set(ports)) != len(ports):
            raise McError("duplicate port number")
        handle = 0
        while handle in self.nodes:
            handle += 1
        self.nodes[handle] = (rid, tuple(sorted(ports)))
        return handle

    def node_update(self, handle: int, ports: list[int]) -> None:
        if handle not in self.nodes:
            raise McError("INVALID_L1_HANDLE")
        self.nodes[handle] = (self.nodes[handle][0], tuple(sorted(ports)))
        self._cache.clear()

    def node_associate(self, mgrp: int, handle: int) -> None:
        if handle not in self.nodes:
            raise McError("INVALID_L1_HANDLE")
        if mgrp not in self.groups:
            raise McError("INVALID_MGRP_HANDLE")
        if handle in self.node_group:
            raise McError("ERROR")             # already associated (BMv2 says just ERROR)
        self.groups[mgrp].append(handle)
        self.node_group[handle] = mgrp
        self._cache.clear()

    def node_dissociate(self, mgrp: int, handle: int) -> None:
        if handle not in self.nodes:
            raise McError("INVALID_L1_HANDLE")
        if mgrp not in self.groups:
            raise McError("INVALID_MGRP_HANDLE")
        if self.node_group.get(handle) != mgrp:
            raise McError("ERROR")
        self.groups[mgrp].remove(handle)
        del self.node_group[handle]
        self._cache.clear()

    def node_destroy(self, handle: int) -> None:
        if handle not in self.nodes:
            raise McError("INVALID_L1_HANDLE")
        mgrp = self.node_group.pop(handle, None)
        if mgrp is not None:
            self.groups[mgrp].remove(handle)
        del self.nodes[handle]
        self._cache.clear()

    def reset(self) -> None:
        self.__init__()

    def replicate(self, mgrp: int) -> tuple[tuple[int, int], ...]:
        """(egress port, rid) of every replica, ascending port; () for an unknown group."""
        out = self._cache.get(mgrp)
        if out is None:
            reps = [(port, self.nodes[h][0]) for h in self.groups.get(mgrp, ())
                    for port in self.nodes[h][1]]
            out = self._cache[mgrp] = tuple(sorted(reps, key=lambda pr: pr[0]))
        return out
