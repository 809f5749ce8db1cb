"""Match-action tables with BMv2's control-plane behaviour.

Why BMv2's behaviour and not something simpler: the controller and the
conformance vectors drive both targets with the same command lines and parse
the same answers, so entry handles, duplicate-key errors and default actions
must behave alike.  BMv2 hands out the lowest free internal handle; deleting an
entry bumps an 8-bit version kept in bits 24..31 of the handle, so a handle
re-used after a delete reads e.g. 16777216, and a stale handle is rejected.

The lookup side is what the packet path uses: `exact` is a plain dict from key
tuple to (action, params), so an exact lookup is one dict.get; LPM tables keep
one dict per prefix length, probed longest first.
"""

from __future__ import annotations

from dataclasses import dataclass


class TableError(Exception):
    """A table operation BMv2 would refuse; str() is BMv2's error code name."""


@dataclass(frozen=True)
class KeySpec:
    field: str     # P4 expression, e.g. "hdr.agg.job"
    kind: str      # "exact" or "lpm"
    width: int     # bits


class Table:
    """One match-action table: keys, allowed actions (name -> param widths), entries."""

    def __init__(self, name: str, keys: list[KeySpec], actions: dict[str, list[tuple[str, int]]],
                 default: str, size: int = 1024):
        if sum(k.kind == "lpm" for k in keys) > 1:
            raise ValueError("at most one lpm key per table")
        self.name, self.keys, self.actions, self.size = name, keys, actions, size
        self._lpm_pos = next((i for i, k in enumerate(keys) if k.kind == "lpm"), None)
        self._initial_default = (default, ())
        self.default: tuple[str, tuple[int, ...]] = self._initial_default
        # exact tables: key tuple -> (action, params); lpm tables: prefix len -> that dict
        self.exact: dict[tuple, tuple[str, tuple[int, ...]]] = {}
        self.by_len: dict[int, dict[tuple, tuple[str, tuple[int, ...]]]] = {}
        self.lens: list[int] = []                  # prefix lengths present, longest first
        self._slots: list[tuple | None] = []       # internal handle -> stored key (None = free)
        self._versions: list[int] = []             # internal handle -> 8-bit version

    # ---- control plane -----------------------------------------------------------
    def check_action(self, action: str, params: tuple[int, ...]) -> None:
        spec = self.actions.get(action)
        if spec is None:
            raise TableError(f"Table {self.name} has no action {action}")
        if len(params) != len(spec):
            raise TableError(f"Action {action} needs {len(spec)} parameters, got {len(params)}")
        for (pname, width), value in zip(spec, params):
            if not 0 <= value < (1 << width):
                raise TableError(f"Parameter {pname} of {action}: {value} does not fit in {width} bits")

    def _stored_key(self, key: tuple) -> tuple:
        """Validate a key; for LPM the stored form is (masked fields..., prefix_len)."""
        if len(key) != len(self.keys):
            raise TableError(f"Table {self.name} needs {len(self.keys)} key fields")
        out = []
        plen = None
        for spec, part in zip(self.keys, key):
            if spec.kind == "lpm":
                value, plen = part
                if not 0 <= plen <= spec.width:
                    raise TableError(f"Prefix length {plen} out of range for {spec.field}")
                value &= ((1 << spec.width) - 1) ^ ((1 << (spec.width - plen)) - 1)
            else:
                value = part
            if not 0 <= value < (1 << spec.width):
                raise TableError(f"Key {spec.field}: {value} does not fit in {spec.width} bits")
            out.append(value)
        return tuple(out) if plen is None else (tuple(out), plen)

    def _bucket(self, stored: tuple) -> tuple[dict, tuple]:
        if self._lpm_pos is None:
            return self.exact, stored
        match, plen = stored
        if plen not in self.by_len:
            self.by_len[plen] = {}
            self.lens = sorted(self.by_len, reverse=True)
        return self.by_len[plen], match

    def add(self, key: tuple, action: str, params: tuple[int, ...]) -> int:
        self.check_action(action, params)
        stored = self._stored_key(key)
        bucket, match = self._bucket(stored)
        if match in bucket:
            raise TableError("DUPLICATE_ENTRY")
        try:
            internal = self._slots.index(None)
        except ValueError:
            if len(self._slots) >= self.size:
                raise TableError("TABLE_FULL") from None
            internal = len(self._slots)
            self._slots.append(None)
            self._versions.append(0)
        self._slots[internal] = stored
        bucket[match] = (action, tuple(params))
        return (self._versions[internal] << 24) | internal

    def _resolve(self, handle: int) -> tuple[int, tuple]:
        internal, version = handle & 0xFFFFFF, handle >> 24
        if internal >= len(self._slots) or self._slots[internal] is None:
            raise TableError("INVALID_HANDLE")
        if version != self._versions[internal]:
            raise TableError("EXPIRED_HANDLE")
        return internal, self._slots[internal]

    def lookup_handle(self, handle: int) -> None:
        """Raise TableError unless `handle` names a live entry."""
        self._resolve(handle)

    def modify(self, handle: int, action: str, params: tuple[int, ...]) -> None:
        self.check_action(action, params)
        _, stored = self._resolve(handle)
        bucket, match = self._bucket(stored)
        bucket[match] = (action, tuple(params))

    def delete(self, handle: int) -> None:
        internal, stored = self._resolve(handle)
        bucket, match = self._bucket(stored)
        del bucket[match]
        self._slots[internal] = None
        self._versions[internal] = (self._versions[internal] + 1) & 0xFF

    def clear(self) -> None:
        """Delete every entry (BMv2's table_clear keeps the default action)."""
        for internal, stored in enumerate(self._slots):
            if stored is not None:
                self.delete((self._versions[internal] << 24) | internal)

    def set_default(self, action: str, params: tuple[int, ...]) -> None:
        self.check_action(action, params)
        self.default = (action, tuple(params))

    def reset(self) -> None:
        self.clear()
        self.default = self._initial_default

    def entries(self) -> list[tuple[int, tuple, str, tuple[int, ...]]]:
        """(handle, stored key, action, params) of every entry, by handle."""
        out = []
        for internal, stored in enumerate(self._slots):
            if stored is not None:
                bucket, match = self._bucket(stored)
                action, params = bucket[match]
                out.append(((self._versions[internal] << 24) | internal, stored, action, params))
        return out

    def __len__(self) -> int:
        return sum(s is not None for s in self._slots)

    # ---- data plane ----------------------------------------------------------------
    def lookup(self, key: tuple) -> tuple[str, tuple[int, ...]]:
        """(action, params) for a packet's key; the default action on a miss."""
        if self._lpm_pos is None:
            return self.exact.get(key, self.default)
        pos, width = self._lpm_pos, self.keys[self._lpm_pos].width
        full = (1 << width) - 1
        value = key[pos]
        for plen in self.lens:
            masked = value & (full ^ ((1 << (width - plen)) - 1))
            hit = self.by_len[plen].get(key[:pos] + (masked,) + key[pos + 1:])
            if hit is not None:
                return hit
        return self.default
