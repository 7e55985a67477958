"""A straight-line runner for small entry programs: the steps written out as one Python
function (as ``collections.namedtuple`` writes its class), built once per executable.

Why: a program of two GEMVs on a 190x210 matrix does about 10 us of BLAS work, and the
general loop (``CpuExecutable.run``: a list of operands per step, then the thunk's own frames
around ``np.matmul``) added about 3 us to it.  Written out, a plain BLAS call is
``v3 = matmul(v0, v2, out=empty3())`` and an unsplit kernel is one ctypes call on the arrays;
every other step calls its thunk as the loop would.

Only entries whose results are fresh arrays (made during the run,
``CpuExecutable._results_are_fresh``) are written out: those need no alias check on results.
Steps the buffer plan places in the arena write into views of one arena made per run, as the
general loop's do (an SD-like block of 21 small steps: 150 -> 112 us on one core, XLA 108 us;
the loop, its operand lists and the thunks' frames were a quarter of the call).
"""

from __future__ import annotations

import functools

from typing import Callable

import numpy as np

from ..hlo.ir import Computation
from .blas_threads import one_thread_enabled
from .cpu_kernels import DotThunk, KernelThunk, data_pointer, worker_count
from .donation import uses_arena
from .update_gemv import blocked_update_product, update_product_steps
from .dual_gemv import available as dual_available, chained_gemv, dual_gemv, pair_caller, split_pair

# Longer entries keep the loop: the gain is per step of dispatch, the source grows with steps.
MAX_STEPS = 64


def straight_line_runner(comp: Computation, params: list, steps: list, root: int,
                         contiguous: Callable, arena: tuple | None = None) -> tuple | None:
    """``(run, single, as_tuple)`` for the entry ``comp`` given as the executable's steps:
    ``run(inputs)`` gives the list of result arrays; for a one-array root ``single(inputs)``
    gives it (a NumPy scalar when 0-d), for a flat tuple root ``as_tuple(inputs)`` gives the
    tuple of arrays (the other one is None).  None when the entry does not qualify (see the
    module docstring) -- the caller checked that its results are fresh.  ``arena``: (a maker
    of the raw arena block, the arena's bytes) when steps write into the arena (``places``)."""
    in_arena = any(uses_arena(places) for *_, places in steps)
    if not steps or len(steps) > MAX_STEPS or (in_arena and arena is None):
        return None
    ops = [i for i in comp.instructions if i.opcode != "parameter"]
    env: dict = {"ndarray": np.ndarray, "contiguous": contiguous, "matmul": np.matmul}
    lines = ["def run(inputs):"]
    if in_arena:
        # (as CpuExecutable.run: one block per run, its start aligned to 64 bytes)
        # (sizes and offsets are names, not literals, as the extents below: ``_code``)
        env["new_arena"], env["address"], env["arena_bytes"] = arena[0], data_pointer, arena[1]
        lines += ["    raw = new_arena()",
                  "    start = -address(raw) % 64",
                  "    arena = raw[start:start + arena_bytes]"]
    used = {k for _, operands, _, _ in steps for k in operands} | {root} | \
        {offset.slot for *_, places in steps for offset, _, _ in places or () if not type(offset) is int}
    for k, number in params:
        if k in used:
            lines += [f"    v{k} = inputs[{number}]",
                      f"    if type(v{k}) is not ndarray or not v{k}.flags.c_contiguous:",
                      f"        v{k} = contiguous(v{k})"]
    pairs = _shared_matrix_pairs(ops, steps, params)
    updates = update_product_steps(ops, steps, params, set(pairs))
    moved = {d for d, _ in updates.values()}
    for n, (instr, (thunk, operands, out, places)) in enumerate(zip(ops, steps)):
        args = ", ".join(f"v{k}" for k in operands)
        if n in moved:
            continue                        # (computed with the kernel making its matrix)
        if n in updates:
            d, vector = updates[n]
            product = steps[d][2]
            env[f"update{n}"], env[f"make{d}"] = blocked_update_product(thunk), steps[d][0].make
            lines += [f"    v{out} = {_kernel_output(n, thunk, places, env)}",
                      # (an array of its own: its arena place may be in use until the GEMV's turn)
                      f"    v{product} = make{d}()",
                      f"    update{n}([{args}], v{out}, v{vector}, v{product})"]
        elif n in pairs:
            if pairs[n] is None:
                continue                    # (computed with its partner)
            later, kind = pairs[n]
            vec_mat, mat_vec = (n, later) if steps[n][0].how.startswith("GEMV (vector") else (later, n)
            (r, a), s_out = steps[vec_mat][1], steps[vec_mat][2]
            (_, p), q_out = steps[mat_vec][1], steps[mat_vec][2]
            env[f"rows{n}"], env[f"cols{n}"] = ops[mat_vec].operands[0].shape.dims
            rows, cols = f"rows{n}", f"cols{n}"
            lines += [f"    v{s_out} = {_pair_output(vec_mat, steps[vec_mat], env)}",
                      f"    v{q_out} = {_pair_output(mat_vec, steps[mat_vec], env)}"]
            big = ops[mat_vec].operands[0].shape.byte_size > DUAL_MAX_BYTES and not one_thread_enabled() \
                and worker_count() > 1
            element_type = ops[n].shape.element_type
            # (unsplit: the built-in caller where there is one, its sizes in an array; the
            # GIL released for matrices that take long enough for other threads to matter)
            release = ops[mat_vec].operands[0].shape.byte_size >= RELEASE_PAIR_BYTES
            fast = None if big else pair_caller(element_type, kind == "chained", release=release)
            # (named by what it is: the same text wherever the same caller runs, see ``_code``)
            caller = f"pair_{element_type}_{int(release)}_{kind}"
            if fast is not None:
                env[caller], env[f"dims{n}"] = fast, np.array([env[rows], env[cols]], np.int64)
            if kind == "dual":
                env["dual"] = dual_gemv(element_type)
                lines.append(f"    split_pair(dual, False, v{a}, v{p}, v{r}, v{s_out}, v{q_out}, {rows}, {cols})" if big
                             else f"    {caller}(v{a}, v{p}, v{r}, v{s_out}, v{q_out}, dims{n})" if fast is not None
                             else f"    dual(v{a}, v{p}, v{r}, v{s_out}, v{q_out}, {rows}, {cols})")
            else:
                env["chained"] = chained_gemv(element_type)
                lines.append(f"    split_pair(chained, True, v{a}, v{p}, None, v{s_out}, v{q_out}, {rows}, {cols})"
                             if big else f"    {caller}(v{a}, v{p}, v{s_out}, v{q_out}, dims{n})" if fast is not None
                             else f"    chained(v{a}, v{p}, v{s_out}, v{q_out}, {rows}, {cols})")
            env["split_pair"] = split_pair
        elif places is not None:
            lines += _arena_step(n, thunk, args, out, places, env)
        elif instr.opcode == "tuple":
            lines.append(f"    v{out} = ({args}{',' if len(operands) == 1 else ''})")
        elif instr.opcode == "get-tuple-element" and not isinstance(thunk, KernelThunk):
            lines.append(f"    v{out} = v{operands[0]}[{instr.attrs['index']}]")
        elif isinstance(thunk, DotThunk) and thunk.plain and thunk.controls is None:
            env[f"make{n}"] = thunk.make
            lines.append(f"    v{out} = matmul({args}, out=make{n}())")
        elif isinstance(thunk, KernelThunk) and thunk.object_fn is not None and not thunk.tuple_result:
            # (Every value here is an exact C-contiguous ndarray: parameters were made so
            # above, kernels, BLAS calls, constants and views give such arrays.)
            env[f"make{n}"] = thunk.makers[0]
            lines += [f"    v{out} = make{n}()", _kernel_call(n, thunk, args, out, env)]
        elif instr.opcode == "while" and getattr(thunk, "flat", None) is not None \
                and instr.operands[0].opcode == "tuple":
            env[f"loop{n}"] = thunk.flat            # (a native loop on its state's leaves)
            lines.append(f"    v{out} = loop{n}(*{args})")
        else:
            env[f"thunk{n}"] = thunk
            lines.append(f"    v{out} = thunk{n}([{args}])")
    body = "\n".join(lines)
    paired = {ops[n].name for n in pairs}
    env["blocked names"] = {ops[d].name for d in moved}
    root_instr = comp.root
    if root_instr.shape.is_tuple:
        if root_instr.opcode != "tuple" or any(o.shape.is_tuple for o in root_instr.operands):
            return None                     # nested tuples: the general flattening
        return (_define(body + f"\n    return list(v{root})", env, paired), None,
                _define(body + f"\n    return v{root}", env, paired))
    scalar = root_instr.shape.rank == 0
    return (_define(body + f"\n    return [v{root}]", env, paired),
            _define(body + (f"\n    return v{root}[()]" if scalar else f"\n    return v{root}"), env, paired),
            None)


def _arena_step(n: int, thunk, args: str, out: int, places: list, env: dict) -> list[str]:
    """The lines of a step whose outputs the plan places in the arena: views made here, then
    the kernel's array entry point, ``np.matmul`` or the thunk, writing into them."""
    views = []
    for j, (offset, dims, dtype) in enumerate(places):
        if type(offset) is not int:             # (a donated parameter's array: donation.py)
            views.append(f"v{offset.slot}")
            continue
        env[f"dims{n}_{j}"], env[f"dtype{n}_{j}"], env[f"offset{n}_{j}"] = dims, dtype, offset
        views.append(f"ndarray(dims{n}_{j}, dtype{n}_{j}, buffer=arena, offset=offset{n}_{j})")
    if isinstance(thunk, KernelThunk) and thunk.object_fn is not None and not thunk.tuple_result:
        return [f"    v{out} = {views[0]}", _kernel_call(n, thunk, args, out, env)]
    if isinstance(thunk, DotThunk) and thunk.plain and thunk.controls is None:
        return [f"    v{out} = matmul({args}, out={views[0]})"]
    env[f"thunk{n}"] = thunk
    return [f"    v{out} = thunk{n}([{args}], [{', '.join(views)}])"]


def _kernel_output(n: int, thunk, places: list | None, env: dict) -> str:
    """The expression making kernel step ``n``'s one output array: its place (the arena, a
    donated parameter's array) or a fresh array."""
    if places is None:
        env[f"make{n}"] = thunk.makers[0]
        return f"make{n}()"
    (offset, dims, dtype), = places
    if type(offset) is not int:
        return f"v{offset.slot}"
    env[f"dims{n}_0"], env[f"dtype{n}_0"], env[f"offset{n}_0"] = dims, dtype, offset
    return f"ndarray(dims{n}_0, dtype{n}_0, buffer=arena, offset=offset{n}_0)"


def _pair_output(n: int, step: tuple, env: dict) -> str:
    """The expression making the result array of GEMV step ``n`` of a pair: its view of the
    arena where the buffer plan put it there (products of a few thousand elements), else a
    fresh array."""
    thunk, _, _, places = step
    if places is None:
        env[f"make{n}"] = thunk.make
        return f"make{n}()"
    (offset, dims, dtype), = places
    if type(offset) is not int:                 # (a donated parameter's array: donation.py)
        return f"v{offset.slot}"
    env[f"dims{n}_0"], env[f"dtype{n}_0"], env[f"offset{n}_0"] = dims, dtype, offset
    return f"ndarray(dims{n}_0, dtype{n}_0, buffer=arena, offset=offset{n}_0)"


def _kernel_call(n: int, thunk: KernelThunk, args: str, out: int, env: dict) -> str:
    """The line calling step ``n``'s unsplit kernel on its operands ``args`` and its output:
    through its built-in caller (fastcall.py: it adds the sizes and the extent itself) when
    it has one, else through ctypes on the arrays."""
    if thunk.call is not None:
        env[f"kernel{n}"] = thunk.call
        return f"    kernel{n}({args}{', ' if args else ''}v{out})"
    env[f"kernel{n}"] = thunk.object_fn
    sizes = ""
    if thunk.sizes:                         # (the sizes a kernel reads at run time, last)
        env[f"sizes{n}"], sizes = thunk.sizes[0], f", sizes{n}"
    # (the extent a name, not a literal: the instances of a program with unknown dimensions
    # then write the same text, compiled once: ``_code``)
    env[f"extent{n}"] = thunk.extent
    return f"    kernel{n}({args}{', ' if args else ''}v{out}{sizes}, 0, extent{n})"


# Beyond this matrix size the one-pass kernel runs over row blocks on all threads
# (dual_gemv.split_pair), as NumPy's two GEMVs run on OpenBLAS's threads; below it, thread
# hand-offs cost more than they save.
DUAL_MAX_BYTES = 1 << 21
# From this matrix size an unsplit pair releases the GIL while it runs (tens of us and more:
# other Python threads may run meanwhile, as they did when ctypes called it); smaller ones keep
# it (releasing and taking it back costs more than they take).
RELEASE_PAIR_BYTES = 1 << 18


def _shared_matrix_pairs(ops: list, steps: list, params: list) -> dict:
    """Pairs of a ``vector @ A`` and an ``A @ vector`` GEMV reading the same matrix:
    {earlier step: (later step, kind), later step: None}.  ``chained`` when the vector of the
    first is the result of the second (``(A @ p) @ A``), ``dual`` when neither needs the
    other's result.  They run as one pass over ``A`` (dual_gemv.py) at the earlier step's
    place, so every operand of the later one must be ready by then."""
    made_at = {k: -1 for k, _ in params}
    for n, (_, _, out, _) in enumerate(steps):
        made_at[out] = n
    waiting: dict = {}                  # (matrix slot, the side still wanted) -> step
    products: dict = {}                 # result slot of an unpaired ``A @ vector`` -> (step, A)
    pairs: dict = {}
    for n, (thunk, operands, out, places) in enumerate(steps):
        # (a product written into a donated parameter's array stays at its own step: the pair
        # runs at the earlier one, where the parameter may still be read)
        if not ((places is None or len(places) == 1 and uses_arena(places)) and isinstance(thunk, DotThunk)
                and thunk.plain and thunk.split is None
                and thunk.how.startswith("GEMV") and dual_available(ops[n].shape.element_type)
                and min(ops[n].operands[0].shape.dims + ops[n].operands[1].shape.dims) > 0):
            continue
        vector_first = thunk.how.startswith("GEMV (vector")
        matrix = operands[1] if vector_first else operands[0]
        source = products.get(operands[0]) if vector_first else None
        if source is not None and source[1] == matrix and source[0] not in pairs:
            pairs[source[0]], pairs[n] = (n, "chained"), None
            continue
        partner = waiting.pop((matrix, not vector_first), None)
        if partner is not None and partner not in pairs and all(made_at[k] < partner for k in operands):
            pairs[partner], pairs[n] = (n, "dual"), None
            continue
        waiting[(matrix, vector_first)] = n
        if not vector_first:
            products[out] = (n, matrix)
    return pairs


@functools.lru_cache(maxsize=256)
def _code(source: str):
    """Compiled once per text: the instances of a program with unknown dimensions (one per
    size) write the same text, only their thunks differ (``env``)."""
    return compile(source, "<nbxla straight-line entry>", "exec")


def _define(source: str, env: dict, paired: set) -> Callable:
    namespace = dict(env)
    exec(_code(source), namespace)
    run = namespace["run"]
    run.source = source                     # (for reading what runs; tests look at it too)
    run.paired = paired                     # dots run as one pass with a partner, by name
    run.with_kernel = env.get("blocked names", set())   # GEMVs run with their matrix's kernel
    return run
