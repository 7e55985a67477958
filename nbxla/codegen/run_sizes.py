"""Unknown dimensions as numbers the emitters compute with: one kernel for every size.

A program compiled for unknown dimensions (``symbolic_compile.py``) emits each kernel at two
probe sizes and requires the same LLVM IR: a kernel may read its size only through its
``[begin, end)`` range or through the sizes array the runtime passes after its buffers
(``toolkit.RunSizes``).  The emitters are written with plain ints for dims (strides, loop
bounds, a transpose's tile counts, a reverse's ``n - 1 - i``, a pad's edges...).  Rather than
give every emitter a second, symbolic spelling, a kernel whose fused computation has unknown
dimensions (``comp.unknown_shapes``, set by ``hlo/symbolic.mark_unknown_axes``) is emitted with
those dims replaced by ``RunSize`` numbers: ints holding the probe's value (so that the
emitter's own arithmetic and its choices run as written) that also remember how they were
computed from the sizes array.  ``elemental.const_i64`` turns one into LLVM values computed in
the kernel's prologue (a block of its own before the entry block: once per call, outside every
loop), reading the leaf sizes from the array.  The vectorized loops are LLVM's, over run-time
bounds: their remainder loops handle any count.

What keeps it safe: a size used where it cannot become an expression (an ``int()``, a list
length, a constant of another width) is baked into the IR as the probe's value, which differs
at the second probe: the compile refuses (``_same_code``).  Comparisons the emitter makes with a
size are answered only where every size >= the smallest one a dimension can take decides them
(``b >= 1``); any other comparison raises ``SymbolicDimensionError`` (the program then compiles
for its concrete sizes).  An equality of a size with a number is answered at the probe's value
(an emitter's ``n == 1`` shortcut; the probes differ in every size, so an equality that holds at
one and not the other gives other code, and a refusal) except for remainders (``n % 4 == 0``
holds at some sizes only, whatever the probes say): those raise.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.shapes import Shape, SymDim, SymbolicDimensionError, TupleShape

I64 = ir.IntType(64)

_SCOPE: contextvars.ContextVar = contextvars.ContextVar("nbxla_run_sizes", default=None)
# Each symbol's smallest size the program serves (its guard): 1 unless the compile says more.
_SMALLEST: contextvars.ContextVar = contextvars.ContextVar("nbxla_smallest_sizes", default={})


@contextmanager
def smallest_sizes(lower: dict):
    """Kernels emitted inside serve symbol ``name`` at sizes >= ``lower[name]`` only (the
    program's guard): comparisons of a size with a number are decided for those sizes."""
    token = _SMALLEST.set(dict(lower))
    try:
        yield
    finally:
        _SMALLEST.reset(token)


def _plain(x) -> int:
    return int.__index__(x)


def _key(x):
    return x.key if isinstance(x, RunSize) else _plain(x)


def _low(x):
    return x.low if isinstance(x, RunSize) else _plain(x)


class RunSize(int):
    """A size known when the kernel runs: its ``int`` value is the probe's; ``key`` says how it
    is computed (``("size", k)``: the sizes array's k-th entry, or ``(op, a, b)``); ``low`` is
    the least value it takes at any size (None: not known, perhaps negative)."""

    def __new__(cls, value: int, key, low, modular: bool = False):
        self = int.__new__(cls, value)
        self.key, self.low, self.modular = key, low, modular
        return self

    # ---- arithmetic: expressions ---------------------------------------------------------
    def _make(self, op: str, other, value: int, low, swapped: bool = False):
        a, b = (other, self) if swapped else (self, other)
        modular = op == "mod" or getattr(a, "modular", False) or getattr(b, "modular", False)
        return RunSize(value, (op, _key(a), _key(b)), low, modular)

    def __add__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        if not isinstance(other, RunSize) and other == 0:
            return self
        lo = None if self.low is None or _low(other) is None else self.low + _low(other)
        return self._make("add", other, _plain(self) + _plain(other), lo)

    __radd__ = __add__

    def __sub__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        if not isinstance(other, RunSize) and other == 0:
            return self
        lo = None
        if not isinstance(other, RunSize) and self.low is not None:
            lo = self.low - other
        return self._make("sub", other, _plain(self) - _plain(other), lo)

    def __rsub__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        return self._make("sub", other, _plain(other) - _plain(self), None, swapped=True)

    def __mul__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        if not isinstance(other, RunSize) and other == 1:
            return self
        if not isinstance(other, RunSize) and other == 0:
            return 0
        lo = None
        if self.low is not None and _low(other) is not None and self.low >= 0 and _low(other) >= 0:
            lo = self.low * _low(other)
        return self._make("mul", other, _plain(self) * _plain(other), lo)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not isinstance(other, int):
            return NotImplemented
        if not isinstance(other, RunSize) and other == 1:
            return self
        if isinstance(other, RunSize) or other <= 0:
            raise SymbolicDimensionError("a run-time size divided by another size")
        lo = None if self.low is None or self.low < 0 else self.low // other
        return self._make("floordiv", other, _plain(self) // other, lo)

    def __rfloordiv__(self, other):
        raise SymbolicDimensionError("a number divided by a run-time size")

    def __mod__(self, other):
        if isinstance(other, RunSize) or not isinstance(other, int) or other <= 0:
            raise SymbolicDimensionError("a remainder by a run-time size")
        return self._make("mod", other, _plain(self) % other, 0)

    def __rmod__(self, other):
        raise SymbolicDimensionError("a remainder by a run-time size")

    def __neg__(self):
        return self._make("sub", 0, -_plain(self), None, swapped=True)

    def __pos__(self):
        return self

    # ---- comparisons: decided for every size, or refused -----------------------------------
    def _undecided(self, op, other):
        raise SymbolicDimensionError(f"the kernel compares a size known only when it runs ({op} {_plain(other)})")

    def __eq__(self, other):
        if isinstance(other, RunSize):
            if other.key == self.key:
                return True
            if self.modular or other.modular:
                self._undecided("==", other)
            return _plain(self) == _plain(other)
        if not isinstance(other, int):
            return NotImplemented
        if self.low is not None and other < self.low:
            return False
        if self.modular:
            self._undecided("==", other)
        return _plain(self) == other

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self.key)

    def __lt__(self, other):
        if isinstance(other, RunSize) and other.key == self.key:
            return False
        if not isinstance(other, RunSize) and self.low is not None and other <= self.low:
            return False
        self._undecided("<", other)

    def __ge__(self, other):
        return not self.__lt__(other)

    def __gt__(self, other):
        if isinstance(other, RunSize) and other.key == self.key:
            return False
        if not isinstance(other, RunSize) and self.low is not None and other < self.low:
            return True
        self._undecided(">", other)

    def __le__(self, other):
        return not self.__gt__(other)

    def __bool__(self):
        if self.low is not None and self.low >= 1:
            return True
        raise SymbolicDimensionError("the kernel tests whether a run-time size is zero")

    def __index__(self):
        raise SymbolicDimensionError("the kernel uses a size known only when it runs as a count")

    __int__ = __index__

    def __repr__(self):
        return f"RunSize({_plain(self)}, {self.key})"

    # ---- LLVM ---------------------------------------------------------------------------------
    def emit(self) -> ir.Value:
        scope = _SCOPE.get()
        if scope is None or scope.function is None:
            raise UnsupportedError("a run-time size outside a kernel function")
        return scope.value(self.key)


_OPS = {"add": "add", "sub": "sub", "mul": "mul"}


class _Scope:
    """The run-time sizes of one kernel being emitted: the sizes array's values (at the probe)
    and, per kernel function, its prologue block and the values computed there."""

    def __init__(self, slot: int):
        self.slot = slot
        self.values: list[int] = []
        self.leaves: dict[int, RunSize] = {}
        self.functions: list = []           # [function, prologue builder or None, values cache]
        self.function = None

    def leaf(self, value: int, low: int) -> RunSize:
        """The run-time size whose value is ``value`` at the probe (an entry of the sizes array
        only once the kernel reads it: ``value``)."""
        found = self.leaves.get(value)
        if found is None:
            found = self.leaves[value] = RunSize(value, ("size", value), low)
        return found

    def begin_function(self, fn: ir.Function) -> None:
        """A kernel function is made (its entry block too): sizes emitted from now on are
        computed in its prologue."""
        self.function = [fn, None, {}]
        self.functions.append(self.function)

    def _prologue(self) -> ir.IRBuilder:
        """The function's prologue, made at its first size: a block before the entry block,
        holding the entry's stack slots (allocas belong in the function's first block) and
        the sizes.  (A kernel that reads no size keeps the code it has without unknown dims:
        the same text as a static compile's, whose machine code then serves.)"""
        fn, pb, cache = self.function
        if pb is None:
            entry = fn.blocks[0]
            prologue = fn.append_basic_block("sizes")
            fn.blocks.remove(prologue)
            fn.blocks.insert(0, prologue)
            for instr in [i for i in entry.instructions if isinstance(i, ir.AllocaInstr)]:
                entry.instructions.remove(instr)
                prologue.instructions.append(instr)
                instr.parent = prologue
            pb = self.function[1] = ir.IRBuilder(prologue)
            pb.branch(entry)
        pb.position_before(pb.block.terminator)
        return pb

    def value(self, key) -> ir.Value:
        fn, _, cache = self.function
        found = cache.get(key)
        if found is not None:
            return found
        if not isinstance(key, tuple):
            return ir.Constant(I64, key)
        if key[0] == "size":
            pb = self._prologue()
            if "array" not in cache:
                cache["array"] = pb.bitcast(pb.load(pb.gep(fn.args[0], [ir.Constant(I64, self.slot)])),
                                            I64.as_pointer(), name="sizes")
            if key[1] not in self.values:
                self.values.append(key[1])
            found = pb.load(pb.gep(cache["array"], [ir.Constant(I64, self.values.index(key[1]))]), name="size")
        else:
            op, a, b = key
            x, y = self.value(a), self.value(b)
            pb = self._prologue()
            if op in _OPS:
                found = getattr(pb, _OPS[op])(x, y)
            elif op == "floordiv":      # (floor, as Python's //: the divisor is positive)
                q = pb.sdiv(x, y)
                neg = pb.icmp_signed("<", pb.srem(x, y), ir.Constant(I64, 0))
                found = pb.sub(q, pb.zext(neg, I64))
            else:                       # mod: Python's, never negative for a positive divisor
                r = pb.srem(x, y)
                neg = pb.icmp_signed("<", r, ir.Constant(I64, 0))
                found = pb.select(neg, pb.add(r, y), r)
        cache[key] = found
        return found


def at_least(n, threshold: int, unknown: bool = True) -> bool:
    """``n >= threshold`` for a choice of speed, not of correctness (a heuristic's threshold):
    ``unknown`` where ``n`` is a run-time size the comparison cannot decide (both probes must
    choose alike)."""
    try:
        return n >= threshold
    except SymbolicDimensionError:
        return unknown


def may_equal(a, b) -> bool:
    """Can sizes ``a`` and ``b`` be equal at some size the kernel serves?  (Where a run-time
    size is involved and the answer is not decided: yes, the cautious answer.)"""
    if not isinstance(a, RunSize) and not isinstance(b, RunSize):
        return a == b
    try:
        return a == b if (isinstance(a, RunSize) and isinstance(b, RunSize) and a.key == b.key) else \
            (a == b or not _decided_unequal(a, b))
    except SymbolicDimensionError:
        return True


def _decided_unequal(a, b) -> bool:
    for x, y in ((a, b), (b, a)):
        if isinstance(x, RunSize) and not isinstance(y, RunSize) and x.low is not None and _plain(y) < x.low:
            return True
    return False


def current_scope():
    return _SCOPE.get()


def _run_shape(shape, sym, scope: _Scope):
    if shape.is_tuple:
        return TupleShape(tuple(_run_shape(s, t, scope) for s, t in zip(shape.elements, sym.elements)))
    if not any(isinstance(d, SymDim) for d in sym.dims):
        return shape
    smallest = _SMALLEST.get()
    dims = tuple(scope.leaf(d, t.coeff * smallest.get(t.name, 1)) if isinstance(t, SymDim) else d
                 for d, t in zip(shape.dims, sym.dims))
    out = Shape(shape.element_type, shape.dims, shape.layout)
    object.__setattr__(out, "dims", dims)
    return out


@contextmanager
def run_sizes(comp, slot: int):
    """Emit ``comp``'s kernel with its unknown dims as ``RunSize`` numbers (the sizes array at
    buffer ``slot``); yields the scope (its ``values``: the spec's ``sizes``), or None when
    ``comp`` has no unknown dimensions (the kernel is emitted as ever)."""
    shapes = getattr(comp, "unknown_shapes", None)
    if not shapes:
        yield None
        return
    scope = _Scope(slot)
    saved = []
    for instr in comp.instructions:
        sym = shapes.get(instr.name)
        if sym is not None:
            saved.append((instr, instr.shape))
            instr.shape = _run_shape(instr.shape, sym, scope)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)
        for instr, shape in saved:
            instr.shape = shape


def plain_spec_sizes(spec, scope) -> None:
    """The spec's numbers as plain ints (the probe's values, compared between the probes), and
    the sizes the kernel reads."""
    for name in ("parallel_extent", "work_per_unit", "scratch_slots"):
        value = getattr(spec, name)
        if isinstance(value, int):
            setattr(spec, name, _plain(value))
    if scope is not None and scope.values:
        spec.sizes = tuple(scope.values)
