"""Which kernel style emits a computation: the dispatcher above the kernel-style modules.

Each style lives in a module of its own and knows nothing of the others' existence; this module
picks one per fused computation (or standalone op) in order from most to least specialized:
a dot with its epilogue, scatter, select-and-scatter, reduce-window, random-bits, sort (comparators
no library call reads) and convolution kernels, then a whole-array reduction, a column reduction
(grouped when few columns), a row reduction, a tiled transpose, and the elementwise loop kernel
for everything else.
"""

from __future__ import annotations

import re

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.low_precision import STEPWISE_OPS, involves_low_precision
from ..hlo.printer import PrintOptions, print_instruction
from ..passes.fused_dots import fused_dot
from . import column_groups
from .convolution import emit_convolution_kernel
from .dot_kernels import emit_dot_kernel
from .column_reductions import column_plan, emit_column_reduction, rows_unknown
from .full_reductions import emit_full_reduction
from .loops import emit_loop_kernel
from .random_bits import emit_rng_kernel
from .reductions import emit_reduction_kernel
from .scatter import emit_scatter_kernel
from .select_scatter import emit_select_and_scatter_kernel
from .sort_kernel import emit_sort_kernel
from .run_sizes import plain_spec_sizes, run_sizes
from .toolkit import full_reduction_plan, KernelSpec, reducer_opcode, single_unit
from .transposes import emit_run_copy_kernel, emit_transpose_kernel, minor_transpose, run_copy_transpose
from .windows import emit_reduce_window_kernel


def emit_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    if not _reads_run_sizes(comp):
        return _emit_one_style(module, name, comp)
    # A kernel of a program with unknown dimensions: those dims are numbers the kernel reads
    # from its sizes array when it runs (``run_sizes``), after its buffers.
    root = comp.root
    buffers = len(comp.parameters) + (len(root.shape.elements) if root.shape.is_tuple else 1)
    with run_sizes(comp, buffers) as scope:
        spec = _emit_one_style(module, name, comp)
    if scope is not None and scope.values and spec.style == "full-reduce":
        # (its partial and finish calls take the scratch slots after the inputs: no sizes)
        raise UnsupportedError(f"a whole-array reduction reading a size when it runs (%{comp.root.name})")
    plain_spec_sizes(spec, scope)
    return spec


def _reads_run_sizes(comp: Computation) -> bool:
    """Styles whose emitters compute their sizes as run-time numbers (``run_sizes``) when the
    computation has unknown dimensions: reductions, transposes, loop, dot and reduce-window
    kernels (an operand's stride over an unknown side, a window's bounds test).  (The scatter,
    sort, random-bits and convolution kernels keep their sizes as compiled, reading only the
    sizes they name from ``RunSizes``: where two probes of them differ, the program compiles
    for its concrete sizes.)"""
    if not getattr(comp, "unknown_shapes", None):
        return False
    if comp.root.opcode in ("scatter", "select-and-scatter", "rng-bit-generator", "sort"):
        return False
    return not any(i.opcode == "convolution" for i in comp.instructions)


@single_unit
def _emit_one_style(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    check_narrow_floats(comp)
    if fused_dot(comp) is not None:
        return emit_dot_kernel(module, name, comp)
    if comp.root.opcode == "scatter":
        return emit_scatter_kernel(module, name, comp)
    if comp.root.opcode == "select-and-scatter":
        return emit_select_and_scatter_kernel(module, name, comp)
    if comp.root.opcode == "reduce-window":
        return emit_reduce_window_kernel(module, name, comp)
    if comp.root.opcode == "rng-bit-generator":
        return emit_rng_kernel(module, name, comp)
    if comp.root.opcode == "sort":
        return emit_sort_kernel(module, name, comp)
    if any(i.opcode == "convolution" for i in comp.instructions):
        return emit_convolution_kernel(module, name, comp)
    if any(i.opcode == "reduce" for i in comp.instructions):
        plan = full_reduction_plan(comp)
        if plan is not None:
            return emit_full_reduction(module, name, comp, plan)
        plan = column_plan(comp)
        if plan is not None:
            # (grouped kernels divide the rows into whole groups when compiled: not for an
            # unknown row count)
            if not plan.custom and not rows_unknown(comp, plan) and column_groups.applies(comp, plan):
                return column_groups.emit_grouped_column_reduction(module, name, comp, plan)
            return emit_column_reduction(module, name, comp, plan)
        return emit_reduction_kernel(module, name, comp)
    if minor_transpose(comp) is not None:
        return emit_transpose_kernel(module, name, comp)
    if run_copy_transpose(comp) is not None:
        return emit_run_copy_kernel(module, name, comp)
    return emit_loop_kernel(module, name, comp)


def check_narrow_floats(comp: Computation) -> None:
    """UnsupportedError (the runtime then runs the evaluator's rule) for what the kernels
    cannot compute as XLA does on narrow floats (see ``bf16.py``, ``f8.py``): a bf16 / f8
    reduce whose reducer is not a single recognized combiner, and the ``STEPWISE_OPS`` (the
    optimizer gives those their f32 form first: passes/float_normalization.py)."""
    for instr in comp.instructions:
        shapes = [instr.shape] + [o.shape for o in instr.operands]
        if not any(involves_low_precision(s) for s in shapes):
            continue
        if instr.opcode == "reduce" and (instr.shape.is_tuple or reducer_opcode(instr) is None):
            raise UnsupportedError(f"a narrow-float reduce with a custom or variadic reducer (%{instr.name}) "
                                   "has no native code path yet")
        if instr.opcode in STEPWISE_OPS:
            raise UnsupportedError(f"narrow-float {instr.opcode} (%{instr.name}) has no native code path yet")


def standalone_computation(instr: Instruction) -> Computation:
    """``instr`` applied to parameters: how a standalone op (``OWN_KERNEL``) is handed to
    ``emit_kernel``."""
    params = [Instruction("parameter", o.shape, attrs={"parameter_number": k}, name=f"{instr.name}.p{k}")
              for k, o in enumerate(instr.operands)]
    root = Instruction(instr.opcode, instr.shape, params, dict(instr.attrs), name=instr.name)
    comp = Computation(f"{instr.name}.computation", params + [root], root)
    # (the axes of unknown size, where the op runs in a program for every size: its
    # computation's marks -- ``hlo/symbolic.mark_unknown_axes`` -- under the new names)
    marks = getattr(instr.parent, "unknown_axes", {})
    axes = {p.name: marks[o.name] for p, o in zip(params, instr.operands) if o.name in marks}
    axes.update((key, found) for key, found in marks.items()
                if key == instr.name or (isinstance(key, tuple) and key[0] == instr.name))
    if axes:
        comp.unknown_axes = axes
    # (and their symbolic shapes, for the emitters that compute with run-time sizes: run_sizes)
    entry_shapes = getattr(instr.parent, "entry_unknown_shapes", {})
    shapes = {p.name: entry_shapes[o.name] for p, o in zip(params, instr.operands) if o.name in entry_shapes}
    if instr.name in entry_shapes:
        shapes[root.name] = entry_shapes[instr.name]
    if shapes:
        comp.unknown_shapes = shapes
    return comp


_NAME = re.compile(r"%([\w.\-]+)")
_STRUCTURE_OPTIONS = PrintOptions(operand_shapes=True, metadata=False, large_constants="digest")


def structure_key(comp: Computation) -> str:
    """The computation's text with its own instructions renamed by position: equal for
    kernels that compute the same thing on the same shapes (so that the identical kernels of
    an unrolled time loop are compiled once)."""
    local = {i.name: f"v{k}" for k, i in enumerate(comp.instructions)}
    text = "\n".join(print_instruction(i, _STRUCTURE_OPTIONS) for i in comp.instructions)
    return _NAME.sub(lambda m: "%" + local.get(m.group(1), m.group(1)), text) + \
        f"\nroot {local[comp.root.name]}"
