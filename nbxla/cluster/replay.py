"""Running a session's operations eagerly: replaying the tape of earlier calls (a known
operation only makes its result stand-ins), materializing what was replayed when something
unknown comes, and the eager replay of a cluster with NumPy (``Session`` mixes this in)."""

from __future__ import annotations

import time
import weakref

import numpy as np

from .lazy import LazyArray
from .records import (ClusterRun, Op, Slot, ViewRecipe, flatten, root_of, tree_map,
                      write_targets)


def _keyed(x):
    """A replayed operation's argument as its log keeps it: a pending stand-in by its slot
    (the log holds no pending stand-in: it would keep it alive, an output of its cluster)."""
    return x.state.slot if isinstance(x, LazyArray) and x.state.value is None else x


_PLAIN_INDEX = (slice, int, type(None), type(Ellipsis))


def _logged(a):
    """``tree_map(a, _keyed)``, without the walk for an index tuple of slices, ints, None
    and ``...`` (immutable, no stand-in in it: the same tuple does)."""
    kind = type(a)
    if kind is LazyArray:
        return a.state.slot if a.state.value is None else a
    if kind is tuple:
        for item in a:
            if type(item) not in _PLAIN_INDEX:
                return tree_map(a, _keyed)
        return a
    return tree_map(a, _keyed) if kind is list or kind is dict else _keyed(a)


class Replaying:
    """The replay half of ``Session``."""

    def _replay_op(self, taped, fn, args, kwargs, lazies, kind, ufunc_method, writes,
                   target=None, flat=False):
        """An operation the tape knows: its result stand-ins (``target``, when given, is the
        one to use for its result), with no recording.  Only what a later flush may need is
        logged (``replayed``): the NumPy call with its pending operands as slots; the ``Op``
        list of an eager run is made from it only when one runs (``_logged_ops``).  ``flat``:
        the arguments are positional, none a container (nothing to walk into)."""
        results, numbers, slots, refs = [], [], [], []
        epoch = self.epoch
        for out in taped.outs:
            if out[0] == "new":
                x = LazyArray(self) if target is None else target
                state = x.state
                state.spec, state.slot, state.epoch = out[5], Slot(), epoch
                state.num, state.num_epoch = self.next_number, epoch
                self.next_number += 1
                if out[3]:
                    base = lazies[0]
                    state.root, state.view_key = (base, ViewRecipe(fn, args, kwargs, base)), out[4]
                ref = weakref.ref(x)
                self.members.append(ref)
                results.append(x)
                numbers.append(state.num)
                slots.append(state.slot)
                refs.append(ref)
            elif out[0] == "owner":
                results.append(lazies[out[1]])
            else:
                results.append(out[1])
        for x in lazies:                 # (they enter the graph, views with their bases)
            while x is not None and x.state.value is not None and x.state.epoch != epoch:
                x.state.epoch = epoch
                self.joined[id(x)] = self.root_writes.get(id(root_of(x)), 0)
                x = x.state.root[0] if x.state.root is not None else None
        if writes:
            for x in write_targets(fn, args, kwargs, kind, ufunc_method):
                root = id(root_of(x))
                self.root_writes[root] = self.root_writes.get(root, 0) + 1
        self.work += taped.work

        if flat:
            logged = (tuple([a.state.slot if type(a) is LazyArray and a.state.value is None
                             else a for a in args]), kwargs)
        else:                            # (an index tuple of slices, ints, None: kept as it is)
            logged = (tuple([_logged(a) for a in args]),
                      tree_map(kwargs, _keyed) if kwargs else kwargs)
        self.replayed.append((fn, logged, ufunc_method, writes, taped.location, numbers, slots,
                              refs, taped))
        self.node = taped.node
        return results[0] if taped.structure is None else taped.structure(results)

    def _op_count(self) -> int:
        """Operations in the pending graph (replayed or recorded)."""
        return len(self.replayed) if self.replaying else len(self.ops)

    def _op_location(self, i: int):
        return self.replayed[i][4] if self.replaying else self.ops[i].location

    def _logged_ops(self) -> list:
        """The pending graph's NumPy calls (``Op``s, for an eager run): while replaying, made
        from the replayed operations as recording would have logged them (concrete stand-ins
        by their arrays, plain arrays by their snapshots, pending values by slot)."""
        if self.replaying and len(self.ops) != len(self.replayed):
            def template(x):
                if isinstance(x, LazyArray):
                    return x.state.slot if x.state.value is None else x.state.value
                if type(x) is np.ndarray and id(x) in self.plain_params:
                    return self.plain_params[id(x)].state.value
                return x
            ops = []
            for fn, (args, kwargs), _, _, location, _, slots, _, taped in self.replayed:
                it = iter(slots)
                outs = [next(it) if out[0] == "new" else None for out in taped.outs]
                ops.append(Op(fn, tree_map(args, template), tree_map(kwargs, template), outs,
                              location, taped.work))
            self.ops = ops
        return self.ops

    def _materialize(self) -> None:
        """Stop replaying: record the operations replayed so far for real, in order, with the
        same stand-ins (or, for ones no longer alive, temporary ones)."""
        self.replaying = False
        replayed, self.replayed = self.replayed, []
        self.root_writes, self.joined = {}, {}
        if not replayed:
            return
        self.ops, self.work = [], 0
        by_slot = {}                     # id(replayed slot) -> the stand-in now recorded

        def real(x):
            return by_slot[id(x)] if type(x) is Slot else x
        for fn, keyed, ufunc_method, writes, location, numbers, slots, refs, _ in replayed:
            args, kwargs = tree_map(keyed, real)
            lazies = [x for x in flatten((args, kwargs), []) if isinstance(x, LazyArray)]
            _, _, made = self._record(fn, args, kwargs, lazies, writes, ufunc_method, location,
                                      targets=[r() for r in refs])
            for x, number, slot in zip(made, numbers, slots):
                x.state.num, x.state.num_epoch = number, self.epoch
                by_slot[id(slot)] = x

    def _flush_replayed(self) -> None:
        """Flush a replayed graph: the tape's cluster for this point runs on the numbered
        arrays (if the values alive now are among its outputs; else record it for real)."""
        members = [x for x in (r() for r in self.members) if x is not None and x.state.epoch == self.epoch]
        pending = [x for x in members if x.state.value is None]
        needed = {x.state.num for x in pending if x.state.root is None}
        needed.update(x.state.num for x in self.numbered.values()
                      if type(x) is LazyArray and x.state.root is None and self.pending(x))
        if not needed:                   # (nothing alive depends on the graph: as flush())
            return self._end_epoch(members, [], [x for x in pending if x.state.root is not None], None)
        entry = next((e for e in self.node.flushes if needed <= e.root_set), None)
        if entry is None:
            self._materialize()
            return self.flush()
        by_number = dict(self.numbered)
        by_number.update((x.state.num, x) for x in pending)
        roots = [by_number.get(n) for n in entry.roots]
        self.params = [by_number[n].state.value for n in entry.params]
        run = self._run_cluster(roots, entry)
        views = [x for x in pending if x.state.root is not None]
        roots = [x for x in roots if x is not None]
        self._end_epoch(members, roots, views, run)

    def _replay(self, roots, run: ClusterRun) -> None:
        """Run the logged NumPy calls eagerly, in order: exactly what eager NumPy would do."""
        start = time.perf_counter()
        values = self._eager_ops([id(x.state.slot) for x in roots if x is not None and x.state.value is None])
        for x in roots:
            if x is not None and x.state.value is None:
                x.state.value = values[id(x.state.slot)]
        run.run_ms = (time.perf_counter() - start) * 1e3
        self.log.eager_work += run.work

    def _eager_ops(self, keep=(), copies: dict | None = None) -> dict:
        """The logged NumPy calls run eagerly; id(slot) -> the value of each slot in ``keep``
        (ids).  A value is dropped after its last use, as eager NumPy drops temporaries:
        holding them all would keep the allocator from reusing their memory (fresh pages
        for every temporary cost more than the arithmetic).  With ``copies`` (a
        ``SharedCopies``), the calls see copies of the arrays instead of the arrays."""
        ops = self._logged_ops()
        last_use = {}
        for i, op in enumerate(ops):
            for leaf in flatten((op.args, op.kwargs), []):
                if type(leaf) is Slot:
                    last_use[id(leaf)] = i
        keep = set(keep)
        values = {}

        def value(x):
            if type(x) is Slot:
                return values[id(x)]
            if copies is not None and type(x) is np.ndarray:
                return copies(x)
            return x
        for i, op in enumerate(ops):
            args, kwargs = tree_map((op.args, op.kwargs), value)
            result = op.fn(*args, **kwargs)
            del args, kwargs
            leaves = flatten(result, []) if isinstance(result, (tuple, list)) else [result]
            for slot, leaf in zip(op.outs, leaves):
                if slot is not None and (id(slot) in keep or id(slot) in last_use):
                    values[id(slot)] = leaf
            del result, leaves
            for leaf in flatten((op.args, op.kwargs), []):
                if type(leaf) is Slot and last_use.get(id(leaf)) == i and id(leaf) not in keep:
                    values.pop(id(leaf), None)
        return values

    # ---- the end of the run -----------------------------------------------------------------
