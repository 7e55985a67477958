"""The compilation cache: one compiled program per (code, input signature, constants, device, flags).

A lookup is a dict access under a lock.  Every entry keeps its statistics, and every miss
records *why* it missed, compared with the nearest earlier entry for the same code:
``x: f32[10,10] -> f32[100,100]`` or ``axis: 0 -> 1 (constant)``.  Bounded (LRU).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Callable, Hashable

import numpy as np

from ..hlo.shapes import from_numpy_dtype
from .collector import older_objects_frozen


class CacheKey:
    """A cache key whose hash is computed once (keys hold signatures and tree structures)."""
    __slots__ = ("parts", "_hash")

    def __init__(self, *parts):
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, CacheKey) and self._hash == other._hash and self.parts == other.parts

    def __getitem__(self, i):
        return self.parts[i]


@dataclass
class CacheEntry:
    key: Hashable
    code_name: str
    signature: tuple                   # per argument leaf: ("array", shape, dtype) / ("static", type, value)
    leaf_names: list[str]
    device: str
    value: Any                         # what was compiled (a Compilation)
    compile_seconds: float
    explanation: str
    hits: int = 0
    created: float = field(default_factory=time.time)
    last_use: float = field(default_factory=time.time)

    def summary(self) -> str:
        return ", ".join(f"{n}: {describe_leaf(s)}" for n, s in zip(self.leaf_names, self.signature))


def describe_leaf(sig: tuple) -> str:
    if sig[0] == "array":
        _, shape, dtype = sig
        return f"{from_numpy_dtype(np.dtype(dtype))}[{','.join(map(str, shape))}]"
    return f"{sig[2]!r} (constant)"


def _describe_change(old: tuple, new: tuple) -> str:
    if old[0] == new[0] == "static":
        return f"{old[2]!r} -> {new[2]!r} (constant)"
    return f"{describe_leaf(old)} -> {describe_leaf(new)}"


def explain_miss(code_name: str, signature: tuple, names: list[str], earlier: list[CacheEntry]) -> str:
    """Why this signature needed a new compilation, against the closest earlier one."""
    if not earlier:
        return "first compilation"
    best_diff = None
    for entry in earlier:
        if len(entry.signature) != len(signature):
            diff = [f"arguments changed structure ({len(entry.signature)} -> {len(signature)} leaves)"]
        else:
            diff = [f"{name}: {_describe_change(old, new)}"
                    for name, old, new in zip(names, entry.signature, signature) if old != new]
        if best_diff is None or len(diff) < len(best_diff):
            best_diff = diff
    return "; ".join(best_diff) if best_diff else "same inputs, different device or flags"


class ShortcutTable(OrderedDict):
    """A caller's shortcut to entries; hashed by identity so the cache can hold it weakly."""
    __hash__ = object.__hash__


class CompilationCache:
    def __init__(self, max_entries: int = 256):
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, CacheEntry] = OrderedDict()
        self._lock = threading.RLock()
        self._hits = 0
        self.misses = 0
        self.evictions = 0
        # Bumped whenever entries leave the cache, so shortcuts to entries can tell they are stale.
        self.generation = 0
        # Hits found without a lookup (``touch``), not yet counted: entries.
        self._pending: deque = deque()
        # Callers' shortcut tables to entries (jit's fast path): emptied whenever entries
        # leave, so that they release the compiled programs with the cache.
        self._shortcuts: weakref.WeakSet = weakref.WeakSet()
        _ALL_CACHES.add(self)

    def shortcut_table(self) -> "ShortcutTable":
        """A new (LRU-ordered) table for a caller's keys -> entries, cleared whenever entries
        leave the cache."""
        table = ShortcutTable()
        self._shortcuts.add(table)
        return table

    def _drop_shortcuts(self) -> None:
        for table in list(self._shortcuts):
            table.clear()

    def touch(self, entry: CacheEntry) -> None:
        """Count a hit on an entry found without a lookup (a caller's shortcut).

        Called on every fast-path jit call, where taking the lock costs a fifth of the dispatch
        budget: the hit is queued (a deque append is atomic) and counted under the lock the next
        time anything reads or changes the cache (its time of use: the time it is counted;
        reading the clock here cost as much as the queueing)."""
        pending = self._pending
        pending.append(entry)
        if len(pending) > 4096:
            with self._lock:
                self._count_pending()

    def _count_pending(self) -> None:
        """(Under the lock.)  Apply the queued hits to the statistics and the LRU order."""
        pending = self._pending
        if not pending:
            return
        when = time.time()
        # Counted per entry, not per hit: thousands of queued hits are mostly one or two hot
        # entries (per hit, the LRU bookkeeping cost ~0.5 us of every fast-path call).
        # (only ever called under the lock; hits queued meanwhile stay queued.  The passes over
        # the thousands of items run in C -- ``map`` of popleft, ``id``, Counter -- as Python
        # loops they cost ~0.1 us per fast-path call.)
        items = list(map(deque.popleft, repeat(pending, len(pending))))
        counts = Counter(map(id, items))
        # most recent last in the LRU order: by each entry's last hit (found from the end: the
        # few distinct entries are near it)
        latest: dict = {}
        for e in reversed(items):
            if id(e) not in latest:
                latest[id(e)] = e
                if len(latest) == len(counts):
                    break
        for key, entry in reversed(latest.items()):
            n = counts[key]
            entry.hits += n
            entry.last_use = max(entry.last_use, when)
            self._hits += n
            if entry.key in self._entries:          # CacheKey hashes are precomputed: cheap
                self._entries.move_to_end(entry.key)

    @property
    def hits(self) -> int:
        with self._lock:
            self._count_pending()
            return self._hits

    def lookup(self, key: Hashable) -> CacheEntry | None:
        with self._lock:
            self._count_pending()
            entry = self._entries.get(key)
            if entry is not None:
                entry.hits += 1
                entry.last_use = time.time()
                self._entries.move_to_end(key)
                self._hits += 1
            return entry

    def contains(self, key: Hashable) -> bool:
        """Is ``key`` cached (without counting a hit)?"""
        with self._lock:
            return key in self._entries

    def get_or_compile(self, key: Hashable, code_key: Hashable, code_name: str, signature: tuple,
                       names: Callable[[], list[str]], device: str,
                       compile_fn: Callable[[], Any]) -> tuple[CacheEntry, bool]:
        """The entry for ``key``, compiling it on a miss; returns (entry, was_hit)."""
        entry = self.lookup(key)
        if entry is not None:
            return entry, True
        with self._lock:                        # one compilation at a time; re-check first
            entry = self._entries.get(key)
            if entry is not None:
                entry.hits += 1
                self._hits += 1
                return entry, True
            leaf_names = names()
            earlier = [e for e in self._entries.values() if e.key[0] == code_key]
            explanation = explain_miss(code_name, signature, leaf_names, earlier)
            start = time.perf_counter()
            with older_objects_frozen():        # (collections walk only the compilation's objects)
                value = compile_fn()
            seconds = time.perf_counter() - start
            entry = CacheEntry(key, code_name, signature, leaf_names, device, value, seconds, explanation)
            self._entries[key] = entry
            self.misses += 1
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self.evictions += 1
                self.generation += 1
                self._drop_shortcuts()
            return entry, False

    def entries(self) -> list[CacheEntry]:
        with self._lock:
            self._count_pending()
            return list(self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._pending.clear()
            self._hits = self.misses = self.evictions = 0
            self.generation += 1
            self._drop_shortcuts()

    def table(self) -> str:
        """A plain-text table of the entries (the notebook renders richer views)."""
        rows = [("code", "inputs", "device", "hits", "compile ms", "last use", "why compiled")]
        for e in self.entries():
            rows.append((e.code_name, e.summary(), e.device, str(e.hits),
                         f"{e.compile_seconds * 1e3:.1f}", time.strftime("%H:%M:%S", time.localtime(e.last_use)),
                         e.explanation))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append(f"{len(self._entries)} entries, {self.hits} hits, {self.misses} misses, "
                     f"{self.evictions} evictions")
        return "\n".join(lines)


_ALL_CACHES: weakref.WeakSet = weakref.WeakSet()


def _new_locks_after_fork() -> None:
    """A forked child inherits locks another parent thread may have held (a compilation in
    progress): nothing in the child would ever release them."""
    for cache in list(_ALL_CACHES):
        cache._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_after_fork)

DEFAULT_CACHE = CompilationCache()
