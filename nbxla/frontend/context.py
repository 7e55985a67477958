"""The trace context: where traced NumPy operations become HLO instructions.

One ``TraceContext`` lives for one trace.  It owns the HLO builder, turns Python and NumPy
values into constants, and stamps every instruction with the user's source line (the
innermost stack frame outside nbxla and NumPy), so that errors and the stage viewer can
point at the cell line that produced each instruction.
"""

from __future__ import annotations

import dis
import linecache
import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import HloShapeError, NotCompilableError, ResourceError, source_excerpt
from ..hlo import Builder, Shape, SourceLocation, from_numpy_dtype
from ..hlo.ir import Instruction
from ..hlo.shapes import LOW_PRECISION_DTYPES

_NBXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))
_SKIP_DIRS = (_NBXLA_DIR + os.sep, _NUMPY_DIR + os.sep)
_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]


@dataclass
class Check:
    """A condition NumPy would raise on, known only when the program runs (``add_check``)."""
    value: Instruction
    fail: Callable
    fold: tuple[str, ...]


class TraceContext:
    # The trace running now: a rule whose traced operand is not among the values it looks at
    # (np.where(traced_mask, 1, 2) promotes the two Python ints) still finds its context.
    active: ContextVar["TraceContext | None"] = ContextVar("nbxla_trace_context", default=None)

    def __init__(self, name: str, filename_display: Callable[[str], str | None] | None = None):
        self.builder = Builder(name)
        # Maps a code filename (e.g. IPython's cell file) to what users see ("cell [3]").
        self.filename_display = filename_display or (lambda f: None)
        self._constants: dict[tuple, Instruction] = {}
        # Lines to subtract for display (cells are compiled with a leading blank line).
        self.line_offsets: dict[str, int] = {}
        # Conditions NumPy would raise on, known only when the program runs: (value, fail),
        # where ``value`` becomes an extra output and ``fail(host value)`` gives the error
        # to raise (None when all is well).  See ``add_check``.
        self.checks: list[Check] = []
        # Comparisons user code makes on sizes, logged while a program with unknown dimensions
        # is traced (observed_sizes.py); None otherwise.
        self.size_observations: list | None = None
        # (line, "rolled" | "unrolled", why) per Python loop over traced values (loops.py).
        self.loop_decisions: list[tuple[int, str, str]] = []
        self.rolling = 0         # loop bodies being traced once, one inside the other
        # (body code, line) -> the run-time checks its last rolled trace made (loops.py): a
        # loop traced again -- inside another loop's next trace -- starts with their slots
        # instead of tracing once more to learn them (nested loops traced 2^depth times).
        self.loop_checks_seen: dict[tuple, list] = {}
        # Short loops found cheap to unroll (cheap_loops.key): reached again, unrolled at once.
        self.cheap_loops: set[tuple] = set()
        self.loop_condition = False      # a rolled loop's condition is being traced
        # (builder, index, size, axis) ids -> (builder, index instruction) checked already
        self.bounds_checked: dict[tuple, tuple] = {}
        # (builder, condition) per branch of an ``if`` on a traced value being traced, outermost
        # first: the condition under which NumPy would run that branch (None: not at hand, in
        # an HLO conditional's branch).  See ``dynamic._Plan._int``.
        self.branch_path: list[tuple] = []
        # Names bound in loops are outputs (a cell's): see trace(names_outlive=...)
        self.names_outlive = False
        # NumPy arrays made inside the compiled code that became traced on a traced write:
        # id -> (the array, kept alive so that its id stays its own; its Tracer).  Every
        # reference to the array -- a helper's parameter, the caller's name, a list item --
        # reads the one Tracer (promotion.ld), as every reference to a NumPy array sees a write.
        self.promoted: dict[int, tuple] = {}
        # NumPy views taken in converted code: id -> (view, base, how), where how(Tracer of
        # base) makes the same view of it (control.getitem / control.call, promotion.ld)
        self.views: dict[int, tuple] = {}
        # Values of names that alias one array or another depending on a traced ``if``:
        # id -> (value, the error a write into it raises)
        self.ambiguous: dict[int, tuple] = {}
        # Arrays larger than memory are refused (NumPy's MemoryError), except where the
        # program runs in pieces (nbxla.dask traces whole arrays, each task gets a chunk).
        self.memory_checked = True

    def branch_condition(self):
        """The condition under which NumPy would run the code being traced, when that is inside
        ``if``s on traced values of this computation only (a traced bool scalar); None outside
        any such branch, or where a condition is not at hand here (an outer computation's)."""
        if not self.branch_path or any(builder is not self.builder or cond is None
                                       for builder, cond in self.branch_path):
            return None
        result = self.branch_path[0][1]
        for _, cond in self.branch_path[1:]:
            result = np.logical_and(result, cond)
        return result

    # ---- source locations -------------------------------------------------------------------

    def user_frame(self):
        """The innermost stack frame of the user's code (outside nbxla and NumPy)."""
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not filename.startswith(_SKIP_DIRS) and not filename.startswith("<frozen"):
                return frame
            frame = frame.f_back
        return None

    def user_location(self) -> SourceLocation | None:
        frame = self.user_frame()
        if frame is None:
            return None
        filename, line = frame.f_code.co_filename, frame.f_lineno
        shown = self.filename_display(filename)
        source = linecache.getline(filename, line) or None
        return SourceLocation(filename if shown is None else shown,
                              line - self.line_offsets.get(filename, 0), None,
                              frame.f_code.co_name, source)

    def user_is_storing_item(self) -> bool:
        """Is the user's code in the middle of ``a[key] = value``?  (NumPy asks a Tracer for
        its values when ``a`` is a NumPy array: that is where such a write fails.)"""
        frame = self.user_frame()
        if frame is None:
            return False
        code = frame.f_code.co_code
        return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _STORE_SUBSCR

    def not_compilable(self, what: str, hint: str | None = None) -> NotCompilableError:
        return NotCompilableError(what, self.user_location(), hint)

    # ---- emitting ---------------------------------------------------------------------------

    def emit(self, opcode: str, *operands: Instruction, shape=None, **attrs) -> Instruction:
        self.builder.location = self.user_location()
        try:
            instr = self.builder.op(opcode, *operands, shape=shape, **attrs)
        except HloShapeError as e:
            # A lowering rule built an invalid instruction for these inputs: an nbxla gap,
            # reported at the user's line rather than as a bare IR error.
            raise self.not_compilable(
                f"nbxla cannot compile this operation for these inputs ({e})",
                "compute this step outside the compiled code, and please report it") from None
        if self.memory_checked and not instr.shape.is_tuple and instr.shape.byte_size > allocatable_bytes():
            # NumPy would fail to allocate this array (MemoryError); compiled code might fuse
            # it away, or loop over its 10**12 elements for hours: refuse it as NumPy does.
            where = self.builder.location
            source = f"\n    {source_excerpt(where.source)}" if getattr(where, "source", None) else ""
            raise ResourceError(
                f"{opcode} makes an array {instr.shape.to_text(with_layout=False)} of "
                f"{instr.shape.byte_size / 2**30:.3g} GiB at {where or 'this line'}, more than this "
                f"machine's memory and swap ({allocatable_bytes() / 2**30:.3g} GiB): NumPy cannot "
                f"allocate it (MemoryError). Use a smaller shape or compute it in pieces.{source}")
        return instr

    @contextmanager
    def subcomputation(self, builder: Builder):
        """Trace into ``builder`` (a loop body, a branch) for the duration of the block, with
        a constant table of its own (a constant of the enclosing computation is not an operand
        the sub-computation can name); the enclosing builder and its constants come back after,
        also when the block raises."""
        outer, outer_constants = self.builder, self._constants
        self.builder, self._constants = builder, {}
        try:
            yield builder
        finally:
            self.builder, self._constants = outer, outer_constants

    def add_check(self, value: Instruction, fail: Callable, fold: tuple[str, ...]) -> None:
        """Check ``value`` after every run: ``fail(np.ndarray)`` returns the error NumPy would
        have raised (already located at the current user line), or None.  ``fold`` says, per
        element of ``value`` (a vector), whether its "min" or its "max" over many values fails
        whenever one of them does: a rolled loop checks the fold over its iterations."""
        self.checks.append(Check(value, fail, fold))

    def parameter(self, shape, name: str) -> Instruction:
        self.builder.location = None     # inputs come from the caller, not from a line
        return self.builder.parameter(shape, name)

    def constant(self, value, dtype=None) -> Instruction:
        """A constant instruction for a NumPy/Python value (deduplicated by value)."""
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype == object or arr.dtype.kind in "USVMm" and arr.dtype not in LOW_PRECISION_DTYPES:
            raise self.not_compilable(f"a constant of dtype {arr.dtype} cannot be part of a "
                                      "compiled computation", "use numeric arrays only")
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        # (Not shared while probing unknown dimensions: a size equal to a literal -- a mean's
        # count of 2 and the 2 of ``x ** 2`` -- would make one constant at that size and two at
        # others, another program; the optimizer's CSE shares them later.)
        instr = self._constants.get(key) if self.size_observations is None else None
        if instr is None:
            self.builder.location = self.user_location()
            instr = self.builder.op("constant", shape=Shape(from_numpy_dtype(arr.dtype), arr.shape),
                                    literal=arr.copy())
            self._constants[key] = instr
        return instr


_ALLOCATABLE: list[int] = []


def allocatable_bytes() -> int:
    """Physical memory plus swap: Linux's default overcommit refuses a single allocation
    larger than that, so NumPy's ``np.zeros``/``np.empty`` raise MemoryError beyond it."""
    if not _ALLOCATABLE:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") \
            else 1 << 40
        try:
            with open("/proc/meminfo") as f:
                swap = next((int(line.split()[1]) * 1024 for line in f if line.startswith("SwapTotal:")), 0)
        except OSError:
            swap = 0
        _ALLOCATABLE.append(total + swap)
    return _ALLOCATABLE[0]
