"""nbxla on dask: ``nbxla.jit(fn)(dask_x, dask_y)`` returns dask arrays whose tasks run
nbxla-compiled kernels on the workers.

    import dask.array as da, nbxla
    x = da.random.random((2**24,), chunks=2**20).astype(np.float32)
    f = nbxla.jit(lambda x, y: np.mean(3 * x**2 + y))
    f(x, y)                      # a lazy 0-d dask array; .compute() runs it on the cluster
    print(nbxla.dask.explain(f))  # stages, per-chunk kernels, dask operations, task count

The function is traced once per signature (shapes, dtypes, chunks, constants) on the whole
arrays, the HLO is split the way dask splits work (``analysis`` / ``stages``), every block's
kernel is optimized here and shipped as HLO text, and each worker compiles a kernel once
(``worker``).  Dask stays optional: this package is imported only when an argument is a
dask collection (``nbxla/__init__.py`` registers it with ``api``).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import NbxlaError, NotCompilableError
from ..flags import current_flags
from ..frontend.cell_ast import check_function_no_random
from ..frontend.trace import leaf_signature, trace, tree_flatten
from ..passes import CallInliner, CommonSubexpressionElimination, DeadCodeElimination, Pipeline
from .analysis import ParamInfo, analyze
from .plan import DaskPlan, DaskSplitError, make_plan

__all__ = ["call", "explain", "is_dask_array", "worker_compile_counts", "DaskPlan", "DaskSplitError"]

_PLANS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_LAST: "weakref.WeakKeyDictionary[object, DaskPlan]" = weakref.WeakKeyDictionary()


def is_dask_array(x) -> bool:
    return hasattr(type(x), "__dask_graph__") and hasattr(x, "chunks") and hasattr(x, "dtype")


def _leaf_key(leaf):
    if is_dask_array(leaf):
        return ("dask", leaf.shape, np.dtype(leaf.dtype).str, leaf.chunks)
    return leaf_signature(leaf)


def call(cf, args: tuple, kwargs: dict):
    """``cf(*args, **kwargs)`` for a ``CompiledFunction`` some of whose arguments are dask
    arrays: plan once per signature, then build this call's dask graph."""
    leaves, treedef = tree_flatten((args, kwargs))
    ids = [id(x) for x in leaves]
    key = (current_flags(), tuple(_leaf_key(x) for x in leaves), treedef,
           tuple(ids.index(i) for i in ids))
    plans = _PLANS.setdefault(cf, {})
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = _plan(cf, args, kwargs, leaves, treedef)
    _LAST[cf] = plan
    return plan.run(leaves)


def _plan(cf, args, kwargs, leaves, treedef) -> DaskPlan:
    check_function_no_random(cf.fn)
    stand_ins: dict[int, np.ndarray] = {}
    traced_leaves = []
    for leaf in leaves:
        if is_dask_array(leaf):
            # shape and dtype are all tracing reads: a zero-strided view costs no memory
            if id(leaf) not in stand_ins:
                stand_ins[id(leaf)] = np.broadcast_to(np.zeros((), leaf.dtype), leaf.shape)
            traced_leaves.append(stand_ins[id(leaf)])
        else:
            traced_leaves.append(leaf)
    name = getattr(cf.fn, "__name__", "fn")
    name = name if name.isidentifier() else "lambda_fn"
    try:
        program = trace(cf.fn, traced_leaves, treedef, name=name,
                        leaf_names=cf._leaf_names(args, kwargs))
    except ValueError as e:
        if "read-only" in str(e):
            raise NotCompilableError(f"the function writes into a dask array argument ({e}); dask "
                                     "arrays cannot change in place", hint="return the new value "
                                     "instead (y = x + 1, not x += 1)") from None
        raise
    module = Pipeline([CallInliner(), CommonSubexpressionElimination(), DeadCodeElimination()],
                      verify=False, record_text=False).run(program.module).module
    program.module = module
    params = []
    param_chunks = {}
    for number, leaf_index in enumerate(program.param_leaves):
        leaf = leaves[leaf_index]
        p = module.entry.parameters[number]
        if is_dask_array(leaf):
            chunks = tuple(tuple(int(c) for c in ch) for ch in leaf.chunks)
            if any(np.isnan(c) for ch in leaf.chunks for c in ch):
                raise DaskSplitError(f"{p.name} has unknown chunk sizes; call "
                                     f"{p.name}.compute_chunk_sizes() first")
            param_chunks[number] = chunks
            params.append(ParamInfo(p.name, chunks))
        else:
            params.append(ParamInfo(p.name, None))
    analysis = analyze(module, params, _describe)
    return make_plan(name, program, analysis, param_chunks)


def _describe(instr) -> str:
    loc = instr.location
    where = f"{loc.file}:{loc.line}" if loc is not None else f"%{instr.name}"
    src = f" `{loc.source.strip()}`" if loc is not None and loc.source else ""
    return f"{where}: {instr.opcode}{src}"


def explain(fn) -> str:
    """The last dask plan of a jit function: chunked axes, stages with their per-chunk
    kernels, what ran as dask operations (tree reductions, rechunks, halos), task count."""
    plan = _LAST.get(fn)
    if plan is None:
        raise NbxlaError(f"{getattr(fn, '__name__', fn)} has not been called with dask arrays yet")
    return plan.report()


def last_plan(fn) -> DaskPlan | None:
    return _LAST.get(fn)


def worker_compile_counts(client) -> dict[str, int]:
    """Kernels compiled so far by each worker of ``client``'s cluster."""
    from .worker import compile_count
    return client.run(compile_count)

