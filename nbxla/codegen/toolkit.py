"""The kernel-building toolkit every kernel style shares: the kernel signature and its buffers,
counted loops, flat and per-dimension indexing, reducer recognition and combining, the
NaN-tracking max/min accumulator, and the plan of a whole-array reduction.

Kernel styles (loops, reductions, column_reductions, full_reductions, column_groups,
arg_reductions, windows, gpu) import from here; this module imports none of them.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.ir import Computation, Instruction
from ..hlo.opcodes import LINEAR_INDEXABLE, NATIVE_COMBINERS
from ..hlo.reducers import reducer_op
from ..hlo.shapes import compute_type, is_complex, is_float
from . import math_calls
from .run_sizes import current_scope
from .elemental import (I1, I8, I32, I64, ElementalEmitter, const_i64, from_storage, linear_index, llvm_type,
                        storage_type, to_storage)


BLOCK = 4096


@dataclass
class KernelSpec:
    """How the runtime calls one kernel."""
    name: str
    style: str                 # "linear", "rows", "reduce", "full-reduce"
    parallel_extent: int       # size of the [begin, end) range
    work_per_unit: int         # elements computed per unit of the range (for threading decisions)
    finish_name: str | None = None
    scratch_slots: int = 0     # full reductions: 8-byte partial results per chunk
    object_entry: str | None = None   # the same kernel taking array objects (see cpu.py)
    # Sizes the kernel reads when it runs (``RunSizes``): their values at compile time, in the
    # order of the i64 array the runtime passes after the kernel's buffers.  Only kernels of a
    # program with unknown dimensions have any (``unknown_axes``).
    sizes: tuple = ()


def unknown_axes(comp: Computation, instr: Instruction) -> tuple[int, ...]:
    """Axes of ``instr``'s shape whose size is known only when the kernel runs: a program
    compiled for unknown dimensions marks its fused computations (``symbolic_compile.py`` sets
    ``comp.unknown_axes``, instruction name -> axes); () in every other kernel."""
    return getattr(comp, "unknown_axes", {}).get(instr.name, ())


def unknown_leaf_axes(comp: Computation, instr: Instruction, leaf: int) -> tuple[int, ...]:
    """As ``unknown_axes``, of leaf ``leaf`` of a tuple-shaped ``instr``."""
    return getattr(comp, "unknown_axes", {}).get((instr.name, leaf), ())


class RunSizes:
    """Sizes a kernel reads at run time instead of compiling them in: an i64 array whose
    pointer follows the kernel's buffers.  Why: a loop bound over an unknown dimension (a
    column sum's row count) cannot be a constant when one kernel serves every size; a bound
    read once per call costs nothing measurable, and the loop's vectorized body and remainder
    handle any count."""

    def __init__(self, b: ir.IRBuilder, buffers_arg, slot: int):
        self.b, self.slot, self.buffers = b, slot, buffers_arg
        self.array = None               # (loaded with the first size: a kernel may read none)
        self.scope = current_scope()
        if self.scope is not None:      # (the kernel's unknown dims share one array: run_sizes)
            self.values = self.scope.values
            return
        self.values: list[int] = []

    def size(self, value: int) -> ir.Value:
        """The run-time size whose value is ``value`` at compile time (loaded where the builder
        is: call it in the entry block)."""
        if self.scope is not None:
            return const_i64(self.scope.leaf(int.__index__(value), 1))     # (read: an entry)
        if self.array is None:
            self.array = self.b.bitcast(self.b.load(self.b.gep(self.buffers, [const_i64(self.slot)])),
                                        I64.as_pointer())
        self.values.append(value)
        return self.b.load(self.b.gep(self.array, [const_i64(len(self.values) - 1)]), name="size")


def kernel_function(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    fnty = ir.FunctionType(ir.VoidType(), [I8.as_pointer().as_pointer(), I64, I64])
    fn = ir.Function(module, fnty, name)
    fn.args[0].name, fn.args[1].name, fn.args[2].name = "buffers", "begin", "end"
    for arg in (fn.args[0],):
        arg.add_attribute("noalias")
    block = fn.append_basic_block("entry")
    scope = current_scope()        # (unknown dims: computed in a prologue: run_sizes)
    if scope is not None:
        scope.begin_function(fn)
    return fn, ir.IRBuilder(block)


def single_unit(emitter):
    """``emitter(module, name, comp) -> KernelSpec`` made to emit a kernel whose range is one
    unit (every output one element: a loop's counter step, its condition, a one-element
    update) without the range loop: the emitter's function (``NAME__one``, inlined and
    internal) called at [0, 1) from ``NAME`` when the range is not empty.  Why: the loop over
    an unknown [begin, end) was vectorized and unrolled by LLVM (a 1-element compare grew 6x,
    most of a loop program's LLVM time went to such kernels) and its checks ran on every
    iteration of the loop that calls the kernel.  Kernels with a second phase (a full
    reduction's finish) or a range of more than one unit keep their range: ``NAME`` forwards it."""
    def emit(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
        outputs = comp.root.operands if comp.root.opcode == "tuple" else [comp.root]
        if any(o.shape.is_tuple or product(o.shape.dims) != 1 for o in outputs):
            return emitter(module, name, comp)
        spec = emitter(module, f"{name}__one", comp)
        inner = module.globals[spec.name]
        inner.linkage = "internal"
        inner.attributes.add("alwaysinline")
        fn, b = kernel_function(module, name)
        if spec.finish_name is not None or spec.scratch_slots or spec.parallel_extent != 1:
            b.call(inner, [fn.args[0], fn.args[1], fn.args[2]])    # (as emitted: a forward)
        else:
            with b.if_then(b.icmp_signed("<", fn.args[1], fn.args[2])):
                b.call(inner, [fn.args[0], const_i64(0), const_i64(1)])
        b.ret_void()
        spec.name = name
        return spec
    emit.__name__ = emitter.__name__      # (kernel caches key on the emitter's name)
    return emit


class KernelBuffers:
    """Typed pointers to the kernel's buffers, loaded once in the entry block.

    ``first_output``: where the outputs start among the buffers, for a kernel that reads each
    input only at the index it writes when an input and an output share memory (the buffer
    plan writes a loop fusion's output in place of an operand only then:
    ``passes/buffer_assignment._reads_elementwise``).  Its loads from inputs and stores to
    outputs are then marked as not aliasing each other (LLVM alias scopes).  Why: the
    vectorizer otherwise guards its loop by a run-time overlap check that an output written
    in place of its operand always fails (the distance is 0), and such kernels ran their
    scalar loop -- a GELU epilogue written over its GEMM's result took 4x its vector time."""

    def __init__(self, b: ir.IRBuilder, arg, shapes: list, first_output: int | None = None):
        self.ptrs = []
        for k, shape in enumerate(shapes):
            raw = b.load(b.gep(arg, [const_i64(k)]))
            self.ptrs.append(b.bitcast(raw, storage_type(shape.element_type).as_pointer()))
        self.shapes = shapes
        self.entry, self.scalars = b.block, {}
        self.first_output = first_output
        # One scope per kernel, and a distinct node LLVM clones per inlined copy (see
        # _SelfNamedNode): the claim holds between this kernel's own loads and stores only.
        # With one module-wide scope named by a string, two kernels inlined into a native loop
        # (``aot_loops``) had one kernel's store to a temporary "not aliasing" the next one's
        # load of it, which LLVM was then free to move above the store: LU's rolled trailing
        # update read stale scratch (NaN at n=2 once its box update read the divided column
        # directly; right with the marks off, or with the C driver's uninlined calls).
        self.input_scope = (_alias_scope_list(b.module, f"inputs.{b.function.name}")
                            if first_output is not None else None)

    def _mark(self, instr, k: int) -> None:
        if self.input_scope is None:
            return
        instr.set_metadata("alias.scope" if k < self.first_output else "noalias", self.input_scope)

    def scalar(self, b, k: int) -> ir.Value:
        """The value of the rank-0 buffer ``k``, loaded once in the entry block.  Why: LLVM
        cannot tell the kernel's stores from that buffer (all pointers come from one array),
        so a load in the loop stays there, with the index clamping it feeds -- a dynamic
        slice at a loop index kept Floyd-Warshall's min-plus kernel scalar (8 ns an element)."""
        if k not in self.scalars:
            with b.goto_block(self.entry):
                self.scalars[k] = self.load(b, k, const_i64(0))
        return self.scalars[k]

    def load(self, b, k: int, offset) -> ir.Value:
        if is_complex(self.shapes[k].element_type):
            # Two scalar loads (re, im): interleaved accesses LLVM's vectorizer understands.
            p = b.gep(self.ptrs[k], [offset])
            v = ir.Constant(self.ptrs[k].type.pointee, ir.Undefined)
            for part in (0, 1):
                loaded = b.load(b.gep(p, [ir.Constant(I32, 0), ir.Constant(I32, part)]))
                self._mark(loaded, k)
                v = b.insert_value(v, loaded, part)
            return v
        loaded = b.load(b.gep(self.ptrs[k], [offset]))
        self._mark(loaded, k)
        return from_storage(b, self.shapes[k].element_type, loaded)

    def store(self, b, k: int, offset, value) -> None:
        if is_complex(self.shapes[k].element_type):
            p = b.gep(self.ptrs[k], [offset])
            for part in (0, 1):
                self._mark(b.store(b.extract_value(value, part), b.gep(p, [ir.Constant(I32, 0), ir.Constant(I32, part)])), k)
            return
        self._mark(b.store(to_storage(b, self.shapes[k].element_type, value), b.gep(self.ptrs[k], [offset])), k)


# A module's alias scopes (kernel name -> its scope list) live on the module itself, under this
# attribute: they die with it.  (Kept in a WeakKeyDictionary before, the scopes -- metadata nodes
# that hold their module -- kept every emitted module alive, with all its instructions: a
# process's memory and the garbage collector's work grew with every compile.)
ALIAS_SCOPES_ATTRIBUTE = "nbxla_alias_scopes"


class _SelfNamedNode(ir.values.MDValue):
    """``!N = distinct !{!N, operands...}``: a metadata node whose first operand is itself (an
    alias scope or its domain).  Why not a node named by a string: such a node is uniqued by
    its contents, so when LLVM inlines kernels into one function (a native loop's kernels) it
    cannot give each inlined copy scopes of its own -- it does so by cloning self-referencing
    nodes -- and every copy shares one scope: the stores of one kernel were then "not aliasing"
    the loads of the next kernel that reads what they wrote, and LLVM reordered them (a
    stencil loop's boundary rows read before the stencil had written them).  Compared by
    identity: two scopes are never the same node."""

    def descr(self, buf):
        rest = "".join(", " + op.get_reference() for op in self.operands)
        buf += (f"distinct !{{ {self.get_reference()}{rest} }}", "\n")

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return id(self)


def _self_named(module: ir.Module, operands: list) -> _SelfNamedNode:
    # (named as Module.add_metadata names its nodes: by their count, so names stay unique)
    return _SelfNamedNode(module, operands, name=str(len(module.metadata)))


def _alias_scope_list(module: ir.Module, name: str):
    """``!{scope}``: a list of one alias scope (in its own domain) of ``module``, made once per
    module and name (a kernel's: see ``KernelBuffers``); scope and domain are self-referencing
    distinct nodes (``_SelfNamedNode``), which LLVM clones for each place a kernel is inlined."""
    cache = getattr(module, ALIAS_SCOPES_ATTRIBUTE, None)
    if cache is None:
        cache = {}
        setattr(module, ALIAS_SCOPES_ATTRIBUTE, cache)
    if name not in cache:
        # (labelled by their order, not by ``name``: a kernel's name in the IR's text would make
        # the object-code key, object_keys.py, differ between two spellings of one program)
        label = f"nbxla.scope{len(cache)}"
        domain = _self_named(module, [ir.MetaDataString(module, f"{label}.domain")])
        scope = _self_named(module, [domain, ir.MetaDataString(module, label)])
        cache[name] = module.add_metadata([scope])
    return cache[name]


def counted_loop(b: ir.IRBuilder, begin, end, name: str, body, step=None, interleave: int = 1,
                 vectorize_first: bool = False, vectorize: bool = True, widen_math: bool = False) -> None:
    """``for (i = begin; i < end; i += step) body(i)`` (step 1 by default); leaves the
    builder after the loop.  ``interleave`` > 1 asks LLVM's vectorizer for that many vector
    iterations in flight (see ``_loop_metadata``).  ``vectorize_first``: the loop is not
    unrolled before LLVM's vectorizer has seen it (the loops it leaves may be): see
    ``_VECTORIZE_FIRST``.  ``vectorize=False``: LLVM's vectorizer leaves the loop alone
    (``llvm.loop.vectorize.enable`` false: a cold path, not worth its copies of the body).
    ``widen_math``: where the body calls transcendentals (``math_calls``), the ``interleave``
    vector iterations become one iteration of vectors ``interleave`` times as wide
    (``math_calls.widened_loop``)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    loop = b.append_basic_block(f"{name}.body")
    after = b.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name)
    i.add_incoming(begin, pre)
    b.cbranch(b.icmp_signed("<", i, end), loop, after)
    b.position_at_end(loop)
    widened = None
    if widen_math and vectorize and interleave > 1:
        with math_calls.widened_loop(interleave) as width:
            body(i)
        widened = width()
    else:
        body(i)
    nxt = b.add(i, const_i64(1) if step is None else step, name=f"{name}.next")
    i.add_incoming(nxt, b.block)
    latch = b.branch(head)
    hints = []
    if widened:
        hints.append([ir.MetaDataString(b.module, "llvm.loop.vectorize.width"), ir.Constant(I32, widened)])
        hints.append([ir.MetaDataString(b.module, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 1)])
    elif interleave > 1:
        hints.append([ir.MetaDataString(b.module, "llvm.loop.interleave.count"), ir.Constant(I32, interleave)])
    if not vectorize:
        hints.append([ir.MetaDataString(b.module, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 0)])
    if _no_unrolling.get():
        hints.append([ir.MetaDataString(b.module, "llvm.loop.unroll.disable")])
    elif vectorize_first:
        hints += _vectorize_first(b.module)
    if hints:
        latch.set_metadata("llvm.loop", _loop_metadata(b.module, hints))
    b.position_at_end(after)


def _vectorize_first(module: ir.Module) -> list[list]:
    """The hints of a ``vectorize_first`` loop.  Why: LLVM fully unrolls a loop of a few
    iterations (a row of 6 or 16 elements) *before* its loop vectorizer runs; the loop around
    it is then the innermost one, and the vectorizer vectorizes that one across rows, with
    gathers or shuffles for the rows' strided elements.  Measured (``relu(y + b)``, 4096
    rows, f32): 16 columns 57 us that way, 9 us with the row's own loop vectorized; 6
    columns 6.5 -> 4.6 us.  So: no unrolling of the loop itself, and the loops the vectorizer
    makes of it (vector body, remainder) carry only ``llvm.loop.isvectorized``, which lets
    the late unroller unroll them (a row of 100 f32: six 16-wide vectors and a 4-wide one,
    no loop left)."""
    followup = module.add_metadata([ir.MetaDataString(module, "llvm.loop.isvectorized"), ir.Constant(I32, 1)])
    return [[ir.MetaDataString(module, "llvm.loop.unroll.disable")],
            [ir.MetaDataString(module, "llvm.loop.vectorize.followup_all"), followup]]


# Set while a light kernel is emitted (see ``no_unrolling``).
_no_unrolling = contextvars.ContextVar("no_unrolling", default=False)


@contextmanager
def no_unrolling(on: bool = True):
    """Inside: every ``counted_loop`` asks LLVM not to unroll it (``llvm.loop.unroll.disable``,
    which the vectorized loop and its remainder inherit).  For the kernels where unrolling
    costs compile time and buys nothing (codegen/cpu.py's LIGHT_KERNEL_ELEMENTS)."""
    token = _no_unrolling.set(on)
    try:
        yield
    finally:
        _no_unrolling.reset(token)


def _loop_metadata(module: ir.Module, hints: list[list]):
    """A loop ID carrying ``hints`` (lists of metadata operands).  Interleave counts: the
    module's vectorizer does not interleave (it slowed memory-bound loops and doubled compile
    times), but a reduction whose combiner is a long dependency chain (NaN-propagating max: six
    instructions per vector) runs at the chain's latency with one accumulator; several
    accumulators hide it."""
    inner = [module.add_metadata(h) for h in hints]
    loop_id = module.add_metadata(inner)
    loop_id.operands = (loop_id, *inner)      # loop IDs refer to themselves (LLVM LangRef)
    return loop_id


def nest_ranges(b, ranges: list, name: str, body, index=()) -> None:
    """Nested loops over ``[lo, hi)`` per dimension (i64 values); ``body(index_list)``."""
    if len(index) == len(ranges):
        body(list(index))
        return
    lo, hi = ranges[len(index)]
    counted_loop(b, lo, hi, f"{name}{len(index)}", lambda i: nest_ranges(b, ranges, name, body, index + (i,)))


def compute_then_store(b, module: ir.Module, libc, em, value: Instruction, dims, loop, store) -> None:
    """``value`` at every index ``loop(name, body)`` visits, computed into a temporary first and
    then handed to ``store(index, element)``: for an update whose new value reads positions the
    store overwrites.  ``libc(module, name, result, args)`` declares malloc and free."""
    i8p = ir.IntType(8).as_pointer()
    # (16 bytes an element: room for any element type, complex128 included)
    raw = b.call(libc(module, "malloc", i8p, [I64]), [const_i64(16 * product(dims))])
    temp = b.bitcast(raw, llvm_type(value.shape.element_type).as_pointer())

    def compute(index):
        em.reset_memo()
        b.store(em.value(value, index), b.gep(temp, [linear_index(b, index, dims)]))
    loop("w", compute)
    loop("c", lambda index: store(index, b.load(b.gep(temp, [linear_index(b, index, dims)]))))
    b.call(libc(module, "free", ir.VoidType(), [i8p]), [raw])


def nest(b, dims, name, body, index=()):
    """Nested loops over ``dims`` (ints, or i64 values read when the kernel runs);
    ``body(index_list)``."""
    if not dims:
        body(list(index))
        return
    bound = const_i64(dims[0]) if isinstance(dims[0], int) else dims[0]
    counted_loop(b, const_i64(0), bound, f"{name}{len(index)}",
          lambda i: nest(b, dims[1:], name, body, index + (i,)))


def kernel_outputs(comp: Computation) -> list[Instruction]:
    root = comp.root
    return list(root.operands) if root.opcode == "tuple" else [root]


def is_linear(instructions: list[Instruction], dims) -> bool:
    """Can every value be indexed by the output's flat index?"""
    for instr in instructions:
        if instr.opcode == "tuple":
            continue
        if instr.shape.is_tuple:
            return False
        n = instr.shape.size
        same = instr.shape.dims == dims or (n == product(dims) and instr.opcode in ("reshape", "bitcast"))
        if instr.opcode == "broadcast" and instr.operands[0].shape.rank == 0:
            continue
        if instr.shape.rank == 0 and instr.opcode in ("constant", "parameter"):
            continue
        if not same:
            return False
        if not (instr.is_elementwise or instr.opcode in LINEAR_INDEXABLE):
            return False
        if instr.opcode in ("reshape", "bitcast") and instr.operands[0].shape.size != n:
            return False
    return True


def product(dims) -> int:
    out = 1
    for n in dims:
        out *= n
    return out


class LinearEmitter(ElementalEmitter):
    """Elemental emitter over flat indices: reshapes are free, parameters are read at i."""

    flat_index = True

    def _reshape(self, instr, index):
        return self.value(instr.operands[0], index)

    def _bitcast(self, instr, index):
        return self._same_bits(instr, self._reshape(instr, index))

    def _broadcast(self, instr, index):
        return self.value(instr.operands[0], [])


def load_at(b, bufs, k, dims, index):
    """Element ``index`` of input ``k`` (an operand of the kernel, read before it stores)."""
    if not dims:
        return bufs.scalar(b, k)
    return bufs.load(b, k, linear_index(b, index, dims))


def reducer_opcode(reduce: Instruction) -> str | None:
    """The reducer's op (``hlo/reducers.py``) when it has a native accumulator, else None."""
    op = reducer_op(reduce.attrs["to_apply"])
    return op if op in NATIVE_COMBINERS else None


def combine_values(b: ir.IRBuilder, em: ElementalEmitter, opcode: str, t: str, acc, x, ordered=False):
    """``acc (op) x``.  Float sums and products may be reassociated (row reductions vectorize
    along the row that way) unless ``ordered``."""
    fast = () if ordered else ("reassoc", "nsz")
    if is_complex(t):
        (p, q), (r, s) = em.parts(acc), em.parts(x)
        if opcode == "add":
            return em.pack(b.fadd(p, r, flags=fast), b.fadd(q, s, flags=fast))
        if opcode == "multiply":
            return em.pack(*em.complex_multiply(p, q, r, s))
        raise UnsupportedError(f"complex {opcode} reductions have no native code path")
    if opcode == "add":
        if t == "pred":
            return b.or_(acc, x)            # (a one-bit add would be xor; pred add is "or")
        return b.fadd(acc, x, flags=fast) if is_float(t) else b.add(acc, x)
    if opcode == "multiply":
        if t == "pred":
            return b.and_(acc, x)
        return b.fmul(acc, x, flags=fast) if is_float(t) else b.mul(acc, x)
    if opcode in ("and", "or"):
        return getattr(b, opcode + "_")(acc, x)
    return em.minmax(t, x, acc, opcode == "maximum")


class NanTrackingExtreme:
    """A float max/min accumulation split in two: the max (min) of the numbers, one ``vmaxps``
    per vector (``maxnum`` with no-NaN flags), and a flag set by any NaN; the result is NaN
    when the flag is set.  Why: the NaN-propagating ``llvm.maximum`` (with -0 < +0) is a
    six-instruction dependency chain per vector on x86; this leaves one instruction on the
    chain.  (A NaN makes the max poison under those flags, but the result then is the NaN.)"""

    def __init__(self, b: ir.IRBuilder, t: str, is_max: bool, init):
        self.b, self.ty = b, llvm_type(t)
        self.intrinsic = b.module.declare_intrinsic("llvm.maxnum" if is_max else "llvm.minnum", [self.ty],
                                                    ir.FunctionType(self.ty, [self.ty, self.ty]))
        self.acc, self.nan = entry_alloca(b, self.ty), entry_alloca(b, I1)
        self.reset(init)

    @staticmethod
    def applies(opcode: str, t: str) -> bool:
        return opcode in ("maximum", "minimum") and is_float(t) and not is_complex(t)

    def reset(self, init) -> None:
        self.b.store(init, self.acc)
        self.b.store(self.b.fcmp_unordered("uno", init, init), self.nan)

    def add(self, x) -> None:
        b = self.b
        b.store(b.or_(b.load(self.nan), b.fcmp_unordered("uno", x, x)), self.nan)
        b.store(b.call(self.intrinsic, [b.load(self.acc), x], fastmath=("nnan", "nsz")), self.acc)

    def result(self):
        b = self.b
        return b.select(b.load(self.nan), ir.Constant(self.ty, float("nan")), b.load(self.acc))


class ReductionPlan:
    def __init__(self, comp: Computation):
        self.reduces = [i for i in comp.instructions if i.opcode == "reduce"]
        # Variadic (argmax) or custom reducers: only the row kernel, which applies the
        # reducer computation element by element in the evaluator's order, handles them.
        self.custom = any(r.shape.is_tuple or reducer_opcode(r) is None for r in self.reduces)
        first = self.reduces[0]
        self.in_dims = first.operands[0].shape.dims
        self.reduced = tuple(sorted(first.attrs["dimensions"]))
        self.outer_dims = tuple(n for i, n in enumerate(self.in_dims) if i not in self.reduced)
        self.red_dims = tuple(self.in_dims[i] for i in self.reduced)

    def require_recognized(self) -> None:
        if self.custom:
            raise UnsupportedError("variadic or custom reducers have no native code path yet")

    def merge(self, outer_index, red_index):
        """The input-space index from an outer index and a reduced index."""
        it_o, it_r = iter(outer_index), iter(red_index)
        return [next(it_r) if d in self.reduced else next(it_o) for d in range(len(self.in_dims))]


def narrow_float(b: ir.IRBuilder, value, ty):
    """double -> ty; to half through float (a direct double->half truncation is a libcall
    that MCJIT cannot resolve)."""
    if isinstance(ty, ir.LiteralStructType):
        return componentwise(b, lambda v: narrow_float(b, v, ty.elements[0]), ty, value)
    if isinstance(ty, ir.HalfType):
        return b.fptrunc(b.fptrunc(value, ir.FloatType()), ty)
    return b.fptrunc(value, ty)


def entry_alloca(b: ir.IRBuilder, ty: ir.Type):
    """A stack slot in the entry block (mem2reg turns it into registers), not in a loop."""
    entry = b.function.entry_basic_block
    here = b.block
    if entry.is_terminated:
        b.position_before(entry.terminator)
    else:
        b.position_at_end(entry)
    slot = b.alloca(ty)
    b.position_at_end(here)
    return slot


MINMAX_INTERLEAVE = 4


def squeeze_dims(dims):
    return tuple(n for n in dims if n != 1)


def expand_index(outer_index, outer_dims, dims):
    """Map an outer-space index to a shape equal to it up to size-1 dims."""
    it = iter([i for i, n in zip(outer_index, outer_dims) if n != 1])
    return [const_i64(0) if n == 1 else next(it) for n in dims]


def full_reduction_plan(comp: Computation) -> ReductionPlan | None:
    """A plan when the fusion reduces everything in one phase from linear-indexable inputs."""
    plan = ReductionPlan(comp)
    if plan.custom or plan.outer_dims and product(plan.outer_dims) != 1:
        return None
    if any(is_complex(r.shape.element_type) for r in plan.reduces):
        return None                       # (partial results are 8-byte slots)
    reduce_ids = {id(r) for r in plan.reduces}
    feeding = ancestors([r.operands[0] for r in plan.reduces])
    if reduce_ids & {id(i) for i in feeding}:
        return None                       # a reduction feeds another: several phases
    feeding_ids = {id(f) for f in feeding}
    prefix = [i for i in comp.instructions if id(i) in feeding_ids]
    if not prefix or not is_linear(prefix, plan.in_dims):
        return None
    if any(o.shape.is_tuple or squeeze_dims(o.shape.dims) for o in kernel_outputs(comp)):
        return None                       # (the finish kernel writes scalar outputs only)
    if any(_reads_input_directly(o, reduce_ids) for o in kernel_outputs(comp)):
        return None                       # (the finish kernel sees the reductions' results only)
    return plan


def _reads_input_directly(value: Instruction, reduce_ids: set) -> bool:
    """Does ``value`` read a parameter other than through one of the reductions (a size-1
    slice of the input beside a full reduction: np.all(a) with np.diff(a) of 2 elements)?"""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen or id(v) in reduce_ids:
            continue
        seen.add(id(v))
        if v.opcode == "parameter" and v.shape.rank:
            return True             # (a scalar parameter -- a count, a scale -- the finish reads)
        stack.extend(v.operands)
    return False


def ancestors(roots: list[Instruction]) -> list[Instruction]:
    seen: dict[int, Instruction] = {}
    stack = list(roots)
    while stack:
        i = stack.pop()
        if id(i) not in seen:
            seen[id(i)] = i
            stack.extend(i.operands)
    return list(seen.values())


def partial_type(r: Instruction):
    t = compute_type(r.shape.element_type)
    return ir.DoubleType() if reducer_opcode(r) == "add" and t in ("f32", "f16") else llvm_type(t)


def componentwise(b, fn, ty, *values):
    """``fn`` on each component of struct (complex) values, or on the values themselves."""
    if not isinstance(values[0].type, ir.LiteralStructType):
        return fn(*values)
    out = ir.Constant(ty, ir.Undefined)
    for part in (0, 1):
        out = b.insert_value(out, fn(*[b.extract_value(v, part) for v in values]), part)
    return out
