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

from ..errors import NbxlaError, NotCompilableError, UnsupportedError
from ..flags import current_flags
from ..frontend.cell_ast import check_function_no_random
from ..frontend.trace import leaf_signature, trace, tree_flatten
from ..passes import CallInliner, CommonSubexpressionElimination, DeadCodeElimination, Pipeline
from .analysis import ParamInfo, analyze
from .plan import DaskPlan, DaskSplitError, make_plan

__all__ = ["call", "run_cell", "explain", "is_dask_array", "worker_compile_counts", "DaskPlan",
           "DaskSplitError"]

_PLANS: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()
_LAST: "weakref.WeakKeyDictionary[object, DaskPlan]" = weakref.WeakKeyDictionary()
_LAST_ANY: list = [None]            # the last plan run, of a function or a cell


def is_dask_array(x) -> bool:
    return hasattr(type(x), "__dask_graph__") and hasattr(x, "chunks") and hasattr(x, "dtype")


def _leaf_key(leaf):
    if is_dask_array(leaf):
        return ("dask", leaf.shape, np.dtype(leaf.dtype).str, leaf.chunks)
    return leaf_signature(leaf)


def _stand_in(x) -> np.ndarray:
    """What tracing sees of a dask array: its shape and dtype (a zero-strided view, no memory)."""
    return np.broadcast_to(np.zeros((), x.dtype), x.shape)


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
    _LAST[cf] = _LAST_ANY[0] = plan
    return plan.run(leaves)


def _plan(cf, args, kwargs, leaves, treedef) -> DaskPlan:
    if cf.device not in ("cpu", "auto"):
        raise UnsupportedError(
            f"{cf.__name__} is compiled for device={cf.device!r}; with dask arguments the kernels "
            "run on the workers' CPU backend: use nbxla.jit(fn) (device='cpu')")
    check_function_no_random(cf.fn)
    stand_ins: dict[int, np.ndarray] = {}
    traced_leaves = []
    for leaf, leaf_name in zip(leaves, cf.leaf_names(args, kwargs)):
        if is_dask_array(leaf) and any(np.isnan(c) for ch in leaf.chunks for c in ch):
            raise DaskSplitError(f"{leaf_name} has unknown chunk sizes (a dask array after boolean "
                                 f"indexing or similar); call {leaf_name}.compute_chunk_sizes() first")
        if is_dask_array(leaf):
            if id(leaf) not in stand_ins:
                stand_ins[id(leaf)] = _stand_in(leaf)
            traced_leaves.append(stand_ins[id(leaf)])
        else:
            traced_leaves.append(leaf)
    name = getattr(cf.fn, "__name__", "fn")
    name = name if name.isidentifier() else "lambda_fn"
    try:
        program = trace(cf.fn, traced_leaves, treedef, name=name,
                        leaf_names=cf.leaf_names(args, kwargs), memory_checked=False)
    except ValueError as e:
        if "read-only" in str(e):
            raise NotCompilableError(f"the function writes into a dask array argument ({e}); dask "
                                     "arrays cannot change in place", hint="return the new value "
                                     "instead (y = x + 1, not x += 1)") from None
        raise
    return _plan_program(name, program, leaves)


def _plan_program(name: str, program, leaves: list) -> DaskPlan:
    """Analyse a traced program whose arguments ``leaves`` (some dask arrays) were traced."""
    if program.writebacks:
        raise NotCompilableError("the code writes into an argument; with dask arguments nothing "
                                 "is written back (dask arrays cannot change in place)",
                                 hint="bind the new value to a name instead")
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
            param_chunks[number] = chunks
            params.append(ParamInfo(p.name, chunks))
        else:
            params.append(ParamInfo(p.name, None))
    analysis = analyze(module, params, _describe)
    return make_plan(name, program, analysis, param_chunks)


def _describe(instr) -> str:
    """``file:line: `source` (HLO opcode)`` for messages and the report."""
    loc = instr.location
    where = f"{loc.file}:{loc.line}" if loc is not None else f"%{instr.name}"
    src = f"`{loc.source.strip()}`" if loc is not None and loc.source else "the code"
    return f"{where}: {src} (HLO {instr.opcode})"


def explain(fn=None) -> str:
    """The last dask plan of a jit function (or, without one, of the last call or ``%%xla``
    cell with dask inputs): chunked axes, stages with their per-chunk kernels, what ran as
    dask operations (tree reductions, rechunks, halos) and the task count."""
    plan = _LAST.get(fn) if fn is not None else _LAST_ANY[0]
    if plan is None:
        raise NbxlaError(f"{getattr(fn, '__name__', 'nothing')} has not run with dask arrays yet")
    return plan.report()


# ---- %%xla cells with dask inputs -------------------------------------------------------------
_CELLS: dict = {}


def cell_reads_dask(source: str, user_ns: dict) -> bool:
    """Whether a cell reads a name bound to a dask array (the magic then calls ``run_cell``)."""
    from ..frontend.cell_ast import analyze as analyze_cell
    return any(is_dask_array(user_ns.get(name)) for name in analyze_cell(source).reads)


def run_cell(source: str, user_ns: dict, *, label: str = "cell", filename: str | None = None,
             name: str = "cell", filename_display=None):
    """Run a ``%%xla`` cell that reads dask arrays: the names it binds become dask arrays
    (lazy; their tasks run compiled kernels), exactly as ``jit`` does for functions."""
    from types import SimpleNamespace

    from ..cell import CellResult, gather_inputs, register_source, trace_cell
    from ..frontend.cell_ast import analyze as analyze_cell
    analysis = analyze_cell(source)
    originals = {n: user_ns[n] for n in analysis.reads if is_dask_array(user_ns.get(n))}
    traced_ns = dict(user_ns)
    traced_ns.update({n: _stand_in(x) for n, x in originals.items()})
    inputs = gather_inputs(analysis, traced_ns)
    back = {id(traced_ns[n]): x for n, x in originals.items()}
    leaves = [back.get(id(leaf), leaf) for leaf in inputs.leaves]
    key = (source.strip(), current_flags(), tuple(_leaf_key(x) for x in leaves), inputs.treedef,
           inputs.signature[len(inputs.leaves):])
    entry = _CELLS.get(key)
    if entry is None:
        filename = filename or register_source(source)
        program, bindings, display = trace_cell(analysis, inputs, traced_ns, filename=filename,
                                                label=label, name=name,
                                                filename_display=filename_display)
        entry = _CELLS[key] = (_plan_program(name, program, leaves), bindings, display)
    plan, bindings, display = entry
    _LAST_ANY[0] = plan
    outputs = plan.run(leaves)
    cell = SimpleNamespace(bindings=bindings, display=display)
    given = SimpleNamespace(leaves=leaves)
    return CellResult(cell, given, list(outputs), []).commit(user_ns)


def last_plan(fn) -> DaskPlan | None:
    return _LAST.get(fn)


def worker_compile_counts(client) -> dict[str, int]:
    """Kernels compiled so far by each worker of ``client``'s cluster."""
    from .worker import compile_count
    return client.run(compile_count)

