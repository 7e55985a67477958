"""The driver of an ahead-of-time object: C that runs an optimized module's programs.

The jit runtime walks a list of thunks from Python; here every program (the entry, and the
condition, body, branches and callees reached through ``while``, ``conditional`` and
``call``) becomes one C function::

    static int P(void *const *in, void *const *out, char *scratch);

``in`` holds the program's parameter leaves (tuples flattened), ``out`` the memory its result
leaves must end in, ``scratch`` its temporaries.  Every array value is a *leaf buffer*: a
parameter leaf, a constant (a global of the kernels' object), a caller's result leaf, or a
place in the scratch area.  Views (``tuple``, ``get-tuple-element``, a row-major
``reshape``/``bitcast``) name existing buffers; kernels (``fusion``, ``scatter``,
``reduce-window``, depthwise ``convolution``), the C routines of ``aot_runtime.c`` (``dot``,
other ``convolution``s, ``sort``, ``topk``, ``select-and-scatter``, ``fft``, LAPACK's Cholesky
and XLA's TopK custom calls: their steps are in ``aot_library``) and control flow write new
ones.

**Planning.**  Instructions run in their order in the computation (the schedule the passes
left).  A value whose buffer is a result leaf is written straight into ``out[k]``; the other
results are copied there at the end.  Every program's buffers follow its buffer plan
(``passes.buffer_assignment``: the module's plan and its nested plans when the driver is given
them, else the same planner run here): how long each temporary lives (the views of
``hlo/aliasing.py``, each value's last reader, results living out), and which outputs are
written into an operand's buffer (``operand_buffers``: an update fusion writing its window in
place, a loop's state kept in its initial buffers).  The plan's arena places the temporaries
(``place_by_lifetime``: best fit, 64-byte aligned, reusing the memory of values whose last
reader has run).  After the planned
area comes one region that each step may use while it runs (a loop's second state buffer and
its condition's and body's scratch, a full reduction's partial slots, a dot's converted,
transposed or packed operands, a sort's permutation): everything is sized at compile time, so one block of
``scratch_bytes`` serves a whole call and the entry point is reentrant.

**Loops.**  A ``while`` keeps its state in two sets of buffers and swaps them after each
iteration (the body reads one and writes the other); leaves the body passes on unchanged
stay in one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import AotError
from ..hlo.aliasing import is_byte_view, passed_through, scatters_in_place, updated_parameter
from ..hlo.evaluator_common import label
from ..hlo.ir import Computation, Instruction
from ..hlo.placement import AOT, placement
from ..hlo.shapes import Shape
from ..passes.buffer_assignment import BufferPlan, leaf_paths, place_by_lifetime, plan_computation, value_name
from .aot_library import ALIGN, CUSTOM_CALLS, LibrarySteps, align_up
from .convolution import native_convolution_refusal

MAX_THREADS = 64          # NBXLA_MAX_THREADS in aot_runtime.c
_INDEX_C_TYPES = {"pred": "unsigned char", "s32": "int32_t", "s64": "int64_t", "u32": "uint32_t",
                  "u64": "uint64_t", "s8": "int8_t", "u8": "uint8_t", "s16": "int16_t", "u16": "uint16_t"}


def branch_computations(conditional: Instruction) -> list:
    a = conditional.attrs
    return list(a["branch_computations"]) if "branch_computations" in a else \
        [a["true_computation"], a["false_computation"]]


def branch_pick(conditional: Instruction, selector: str) -> str:
    """C setting ``int64_t k`` to the branch ``conditional`` runs; ``selector``: the C pointer
    expression of its branch index (or predicate)."""
    t = conditional.operands[0].shape.element_type
    if t not in _INDEX_C_TYPES:
        raise AotError(f"{label(conditional)}: a branch index of type {t} cannot be compiled ahead of time")
    value = f"*(const {_INDEX_C_TYPES[t]} *){selector}"
    if "branch_computations" in conditional.attrs:    # an out-of-range index runs the last branch (XLA)
        n = len(conditional.attrs["branch_computations"])
        return f"int64_t k = (int64_t)({value}); if (k < 0 || k >= {n}) k = {n - 1};"
    return f"int64_t k = ({value}) ? 0 : 1;"


def moved_leaves(instr: Instruction, values: dict, constant) -> list | None:
    """The leaves of an instruction that only moves data: a constant (its one leaf made by
    ``constant(bytes)``), a tuple, a get-tuple-element or a byte view, from ``values`` (id of
    an instruction -> its leaves); None for any other instruction.  Both AOT drivers (planned
    buffers here, size expressions in ``aot_symbolic``) answer these the same way."""
    op = instr.opcode
    if op == "constant":
        if instr.shape.is_tuple:
            raise AotError(f"{label(instr)}: a tuple constant cannot be compiled ahead of time yet")
        return [constant(np.ascontiguousarray(np.asarray(instr.literal, dtype=instr.shape.dtype)).tobytes())]
    if op == "tuple":
        return [leaf for o in instr.operands for leaf in values[id(o)]]
    if op == "get-tuple-element":
        elements = instr.operands[0].shape.elements
        index = instr.attrs["index"]
        start = sum(len(leaf_shapes(e)) for e in elements[:index])
        return values[id(instr.operands[0])][start:start + len(leaf_shapes(elements[index]))]
    if is_byte_view(instr):
        return values[id(instr.operands[0])]
    return None


def leaf_shapes(shape) -> list[Shape]:
    return shape.leaves() if shape.is_tuple else [shape]


@dataclass(eq=False)
class Buffer:
    """Where one array value lives: ``in[k]``, ``out[k]``, a constant, or scratch + offset."""
    nbytes: int
    kind: str                  # "in", "out", "const", "temp"
    index: int | str = 0       # in/out: leaf number; const: symbol; temp: offset (once placed)
    last_use: int = -1
    data: bytes = b""          # const: the bytes, made a global when first named (a constant
    source: object = None      # that only a prepacked dot reads is not stored twice)

    @property
    def c(self) -> str:
        if self.kind in ("in", "out"):
            return f"{self.kind}[{self.index}]"
        if self.kind == "const":
            if not self.index:
                self.index = self.source.constant(self.data)
            return f"(void *){self.index}"
        return f"(void *)(scratch + {self.index})"


class KernelSource:
    """What the driver needs from the kernel side (codegen/aot.py): a compiled kernel per
    fusion or standalone op, a kernel per scalar computation (a sort's comparator), a global
    per constant, convert kernels."""

    def kernel(self, instr: Instruction):           # -> KernelSpec (name, style, extent, ...)
        raise NotImplementedError

    def in_place(self, instr: Instruction):         # -> KernelSpec of a fusion rooted at a
        raise NotImplementedError                       # dynamic-update-slice, writing its window only

    def scalar(self, comp: Computation, role: str):  # -> KernelSpec of a computation on scalars
        raise NotImplementedError                       # (a sort's comparator, ...; role names it)

    def constant(self, data: bytes) -> str:         # -> the symbol of a global holding data
        raise NotImplementedError

    def loop(self, step: "WhileStep") -> str | None:   # -> the symbol of a native function
        return None     # ``void f(void *const *in, void *const *out, char *scratch)`` running
        #                 the loop (None: the driver writes it in C)

    def convert(self, shape: Shape, to: str):       # -> KernelSpec of convert(shape) -> to
        raise NotImplementedError


@dataclass
class Program:
    """One computation as a C function (see the module docstring)."""
    symbol: str
    computation: Computation
    text: str = ""
    scratch_bytes: int = 0
    identity: list[bool] = field(default_factory=list)   # result leaf k is parameter leaf k
    donation_kept: bool = True     # every parameter leaf written in place is returned in place
    # The same steps as data, for programs of kernels, copies and loops only (else None): what
    # ``aot_loops`` compiles into LLVM, so that a loop of small kernels runs as one function
    # (see ``KernelSource.loop``).  Items: ("kernel", symbol, [Buffer], extent, elements),
    # ("copy", out leaf, Buffer, nbytes), ("while", WhileStep).
    ops: list | None = None


@dataclass
class WhileStep:
    """A ``while`` of a program, as ``_ProgramEmitter._while`` runs it: the state starts as
    ``init`` copied into ``state``; each iteration the condition reads ``cur`` and the body
    writes ``nxt`` (``second[k]``: leaf k's second buffer, an offset in the step's region, or
    None where the body returns the leaf in place); ``region`` is where the condition's and
    the body's scratch starts (an offset in the step's region, after ``pred`` at ``pred``)."""
    cond: Program
    body: Program
    init: list
    state: list
    second: list
    pred: int
    region: int


class Driver:
    """Builds the C functions of every program reached from the entry."""

    def __init__(self, prefix: str, kernels: KernelSource, parallel_threshold: int, host_lapack: bool = False,
                 plan: BufferPlan | None = None):
        """``host_lapack``: the library will be loaded by the jit runtime, which hands it
        NumPy's LAPACK (``nbxla_set_lapack``); an AOT object has none.  ``plan``: the module's
        buffer plan, whose nested plans cover the programs its control flow runs."""
        self.prefix, self.kernels, self.threshold = prefix, kernels, parallel_threshold
        self.host_lapack = host_lapack
        self.plan = plan
        self.programs: dict[int, Program] = {}
        self.order: list[Program] = []                 # callees before callers
        self.count = 0
        self.called_from_c: set[str] = set()         # programs some C calls (the others run in LLVM)

    def program(self, comp: Computation, donated: bool = False) -> Program:
        """The C function of ``comp``; ``donated``: its parameter leaves are the caller's to
        overwrite (a loop body's state), so that updates of a leaf the body returns at the same
        place are made in that leaf's buffer."""
        found = self.programs.get((id(comp), donated))
        if found is None:
            self.count += 1     # (callees are numbered while their caller is emitted)
            symbol = f"{self.prefix}_p{self.count}"
            found = _ProgramEmitter(self, comp, symbol, donated).emit()
            if donated and not found.donation_kept:
                found = _ProgramEmitter(self, comp, symbol, False).emit()
            self.programs[(id(comp), donated)] = found
            self.order.append(found)
        return found

    def source(self, roots: list[Program]) -> str:
        """The C of ``roots`` (the entry points' programs) and of every program C calls (a
        program only a native loop runs is not compiled twice)."""
        return "\n".join(p.text for p in self.order if any(p is r for r in roots) or p.symbol in self.called_from_c)

    def plan_of(self, comp: Computation, donated: bool) -> BufferPlan:
        """``comp``'s buffer plan: from the module's plan when it covers ``comp`` as it is now
        (a donated program is a loop body), else made by the same planner here."""
        found = self.plan.for_computation(comp, loop_body=donated) if self.plan is not None else None
        return found if found is not None else plan_computation(comp, loop_body=donated)


class _ProgramEmitter(LibrarySteps):
    def __init__(self, driver: Driver, comp: Computation, symbol: str, donated: bool = False):
        self.driver, self.comp, self.symbol, self.donated = driver, comp, symbol, donated
        self.plan = driver.plan_of(comp, donated)       # lifetimes and in-place steps
        self.values: dict[int, list[Buffer]] = {}
        self.sharers: dict[int, list[Instruction]] = {}  # by buffer id: the values living in it
        self.in_place: set[int] = set()                  # steps writing into an operand's buffer
        self.written: list[Buffer] = []                  # the buffers those steps write
        self.produced: list[list[Buffer]] = []          # per step: the buffers it writes
        self.local = 0                                  # bytes of the per-step region
        self.lines: list[str] = []
        self.ops: list | None = []                      # (see Program.ops)

    # ---- buffers --------------------------------------------------------------------------

    def _new(self, instr: Instruction) -> list[Buffer]:
        return [Buffer(s.byte_size, "temp") for s in leaf_shapes(instr.shape)]

    def _buffers(self, instr: Instruction, params_base: dict[int, int]) -> list[Buffer] | None:
        """The leaf buffers of ``instr``; None when the instruction writes new ones."""
        op = instr.opcode
        if op == "parameter":
            base = params_base[instr.parameter_number]
            return [Buffer(s.byte_size, "in", base + k) for k, s in enumerate(leaf_shapes(instr.shape))]
        return moved_leaves(instr, self.values,
                            lambda data: Buffer(len(data), "const", "", data=data, source=self.driver.kernels))

    def _taken_over(self, instr: Instruction) -> list[Buffer] | None:
        """The buffers ``instr`` writes its result into in place, as the buffer plan decided
        (``operand_buffers``), or None: for a fusion that updates a window of an operand, that
        operand's buffer; for a ``while``, its initial state's buffers for the kept leaves."""
        kept = self.plan.operand_buffers.get(instr.name)
        if kept is None:
            return None
        if instr.opcode == "fusion" or scatters_in_place(instr):
            k = updated_parameter(instr.attrs["calls"]) if instr.opcode == "fusion" else 0
            (buf,) = self.values[id(instr.operands[k])]
            self.written.append(buf)
            return [buf]
        leaves = self.values[id(instr.operands[0])]
        fixed = passed_through(instr.attrs["body"])
        # (a leaf the body passes on unchanged is only read: the loop reads it where it is)
        self.written += [leaves[k] for k in kept if k not in fixed]
        return [leaves[k] if k in kept else Buffer(s.byte_size, "temp")
                for k, s in enumerate(leaf_shapes(instr.shape))]

    def _leaves(self, instr: Instruction) -> list[str]:
        return [b.c for b in self.values[id(instr)]]

    def _array(self, instr: Instruction) -> str:
        (c,) = self._leaves(instr)
        return c

    # ---- the program ----------------------------------------------------------------------

    def emit(self) -> Program:
        comp = self.comp
        params_base, n = {}, 0
        for p in comp.parameters:
            params_base[p.parameter_number] = n
            n += len(leaf_shapes(p.shape))
        steps: list[Instruction] = []
        for instr in comp.instructions:
            buffers = self._buffers(instr, params_base)
            if buffers is None:
                buffers = self._taken_over(instr)
                if buffers is not None:
                    self.in_place.add(id(instr))
                else:
                    buffers = self._new(instr)
                steps.append(instr)
                self.produced.append([b for b in buffers if not self.sharers.get(id(b))])
            self.values[id(instr)] = buffers
            for buf in buffers:
                self.sharers.setdefault(id(buf), []).append(instr)
        root = self.values[id(comp.root)]
        # Results written in place: the first use of a new buffer among the result leaves.
        copies = []
        for k, buf in enumerate(root):
            if buf.kind == "temp":
                buf.kind, buf.index = "out", k
            else:
                copies.append((k, buf))
        self._plan(steps)
        for instr in steps:
            self._step(instr)
        for k, buf in copies:
            self.lines.append(f"if (out[{k}] != {buf.c}) memcpy(out[{k}], {buf.c}, {buf.nbytes});")
            self._op("copy", k, buf, buf.nbytes)
        program = Program(self.symbol, comp)
        program.ops = self.ops
        program.identity = [b.kind == "in" and b.index == k for k, b in enumerate(root)]
        written = {b.index for b in self.written if b.kind == "in"}
        program.donation_kept = all(program.identity[k] if k < len(root) else False for k in written)
        program.scratch_bytes = self.arena_bytes + self.local
        body = "\n".join("    " + line for line in self.lines)
        program.text = (f"/* {comp.name} */\nstatic int {self.symbol}(void *const *in, void *const *out, "
                        f"char *scratch) {{\n    int rc = 0;\n    (void)in; (void)out; (void)scratch;\n"
                        f"{body}\n    return rc;\n}}\n")
        return program

    def _plan(self, steps: list[Instruction]) -> None:
        """Offsets of the temporaries: live from their step to their last reader's, as the buffer
        plan of this computation says (``passes.buffer_assignment``: the same views, the same
        last uses, results living out).  A buffer several values live in (an update written in
        place, a loop's state) lives until the last of theirs."""
        plan = self.plan
        instructions = self.comp.instructions
        position = {id(instr): i for i, instr in enumerate(steps)}

        def last_step(buf: Buffer) -> int:
            last = -1
            for sharer in self.sharers[id(buf)]:
                for (index, _), leaf in zip(leaf_paths(sharer.shape), self.values[id(sharer)]):
                    if leaf is buf:
                        end = plan[value_name(sharer, index)].end
                        last = max(last, len(steps) if end >= plan.length else position[id(instructions[end])])
            return last

        lifetimes = []
        for i, produced in enumerate(self.produced):
            for buf in produced:
                buf.last_use = max(last_step(buf), i)
            # (a zero-byte temporary still gets a place of its own: pointers stay distinct)
            lifetimes.append([(buf, max(buf.nbytes, 1), buf.last_use) for buf in produced
                              if buf.kind == "temp"])
        offsets, top = place_by_lifetime(lifetimes)
        for buf, offset in offsets.items():
            buf.index = offset
        self.arena_bytes = align_up(top)

    def _region(self, nbytes: int) -> None:
        """The step being emitted uses ``nbytes`` of the per-step region."""
        self.local = max(self.local, align_up(nbytes))

    def local_place(self, offset: int = 0) -> str:
        # (The region starts after the planned area, whose size is known once planning ran.)
        return f"(scratch + {self.arena_bytes + offset})"

    # ---- steps ----------------------------------------------------------------------------

    def _step(self, instr: Instruction) -> None:
        """One step, by the AOT placement table (``hlo/placement.py``): its handler writes it."""
        self.lines.append(f"/* %{instr.name} = {instr.opcode} */")
        how = placement(AOT, instr)
        before = len(self.ops) if self.ops is not None else -1
        getattr(self, how.handler)(instr)
        if self.ops is not None and len(self.ops) == before:
            self.ops = None         # (a step only C runs: the program stays C)

    def _op(self, *op) -> None:
        if self.ops is not None:
            self.ops.append(op)

    def local_offset(self, offset: int = 0) -> int:
        return self.arena_bytes + offset

    def _call_step(self, instr: Instruction) -> None:
        callee = self.driver.program(instr.attrs["to_apply"])
        self._call(callee, [c for o in instr.operands for c in self._leaves(o)], self._leaves(instr),
                   self.local_place())
        self._region(callee.scratch_bytes)

    def _convolution_step(self, instr: Instruction) -> None:
        if native_convolution_refusal(instr) is None:
            self._kernel(instr)              # (depthwise ones: the LLVM kernel)
        else:
            self._convolution(instr)

    def _custom_call(self, instr: Instruction) -> None:
        method = CUSTOM_CALLS.get(instr.attrs.get("custom_call_target"))
        if method is None:
            self._kernel(instr)         # (refused there, the target named)
        else:
            getattr(self, method)(instr)

    def _refused(self, instr: Instruction) -> None:
        raise AotError(f"{label(instr)} cannot be compiled ahead of time: the object file has no native "
                       f"implementation of {instr.opcode} ({placement(AOT, instr).how}); under jit it "
                       "runs through the reference evaluator, in Python. Rewrite that part of the "
                       "function, or use nbxla.jit")

    def _pointer_list(self, name: str, items: list[str]) -> str:
        return f"void *{name}[{max(1, len(items))}] = {{{', '.join(items) or '0'}}};"

    def _call(self, callee: Program, ins: list[str], outs: list[str], scratch: str) -> None:
        self.driver.called_from_c.add(callee.symbol)
        self.lines += ["{", "    " + self._pointer_list("pi", ins), "    " + self._pointer_list("po", outs),
                       f"    if ((rc = {callee.symbol}(pi, po, {scratch}))) return rc;", "}"]

    def _kernel(self, instr: Instruction) -> None:
        # (a scatter in its operand's buffer is its own kernel: it copies only where they differ)
        if id(instr) in self.in_place and instr.opcode == "fusion":
            spec = self.driver.kernels.in_place(instr)
            ins = [self._array(o) for o in instr.operands]
            self.lines += ["{", "    " + self._pointer_list("b", ins + self._leaves(instr)),
                           "    " + self._range_call(spec), "}"]
            self._kernel_op(spec, [b for o in instr.operands for b in self.values[id(o)]] + self.values[id(instr)])
            return
        spec = self.driver.kernels.kernel(instr)
        ins = [self._array(o) for o in instr.operands]
        outs = self._leaves(instr)
        extent, work = spec.parallel_extent, spec.work_per_unit
        if spec.style == "full-reduce":
            # As the jit runtime's FullReductionThunk: parts only where they pay off.
            parts = max(1, min(MAX_THREADS, extent, extent * work // max(1, self.driver.threshold // 2)))
            if parts == 1:      # both phases right here (no thread count to ask for)
                self.lines += ["{", "    " + self._pointer_list("p", ins + [self.local_place()]),
                               f"    {spec.name}(p, 0, {extent});",
                               "    " + self._pointer_list("b", ins + outs + [self.local_place()]),
                               f"    {spec.finish_name}(b, 1, 0);", "}"]
                self._region(8 * max(1, spec.scratch_slots))
                self._op("full-reduce", spec.name, spec.finish_name, [b for o in instr.operands for b in self.values[id(o)]],
                         self.values[id(instr)], extent, self.local_offset())
                return
            self.lines += ["{", "    " + self._pointer_list("b", ins + outs + ["0"]),
                           f"    nbxla_full_reduce({spec.name}, {spec.finish_name}, b, {len(ins)}, "
                           f"{len(outs)}, {extent}, {parts}, {spec.scratch_slots}, {self.local_place()});", "}"]
            self._region(8 * max(1, spec.scratch_slots) * parts)
            return
        self.lines += ["{", "    " + self._pointer_list("b", ins + outs), "    " + self._range_call(spec), "}"]
        self._kernel_op(spec, [b for o in instr.operands for b in self.values[id(o)]] + self.values[id(instr)])

    def _kernel_op(self, spec, buffers: list) -> None:
        """The kernel call as an op, where it runs on this thread (no thread split: that is C)."""
        extent, work = spec.parallel_extent, spec.work_per_unit
        if not (extent >= 2 and extent * work >= self.driver.threshold):
            self._op("kernel", spec.name, list(buffers), extent, extent * work)

    def _range_call(self, spec) -> str:
        """The call of a kernel over its whole range, split over threads where that pays."""
        extent, work = spec.parallel_extent, spec.work_per_unit
        if extent >= 2 and extent * work >= self.driver.threshold:
            return f"nbxla_parallel({spec.name}, b, {extent});"
        return f"{spec.name}(b, 0, {extent});"

    def _while(self, instr: Instruction) -> None:
        cond = self.driver.program(instr.attrs["condition"])
        body = self.driver.program(instr.attrs["body"], donated=True)
        state = self.values[id(instr)]
        init = self._leaves(instr.operands[0])
        # The region: the second state buffers (not for leaves the body passes on), the
        # condition's result, then the condition's or the body's scratch.
        offsets, used = [], 0
        for buf, same in zip(state, body.identity):
            offsets.append(None if same else used)
            used += 0 if same else align_up(max(buf.nbytes, 1))
        pred = used
        nested = used + ALIGN
        count = len(state)
        self._region(nested + max(cond.scratch_bytes, body.scratch_bytes))
        if cond.ops is not None and body.ops is not None:
            step = WhileStep(cond, body, list(self.values[id(instr.operands[0])]), list(state),
                             [None if off is None else self.local_offset(off) for off in offsets],
                             self.local_offset(pred), self.local_offset(nested))
            symbol = self.driver.kernels.loop(step)
            if symbol is not None:
                self._op("while", step)
                self.lines.append(f"{symbol}(in, out, scratch);")
                return
        self.driver.called_from_c.update((cond.symbol, body.symbol))
        self.lines += ["{", f"    void *cur[{max(1, count)}] = {{{', '.join(b.c for b in state) or '0'}}};",
                       f"    void *nxt[{max(1, count)}] = {{{', '.join(b.c if off is None else self.local_place(off) for b, off in zip(state, offsets)) or '0'}}};",
                       f"    unsigned char *pred = (unsigned char *){self.local_place(pred)};",
                       "    void *pd[1] = {pred};"]
        self.lines += [f"    memcpy(cur[{k}], {src}, {b.nbytes});" for k, (src, b) in enumerate(zip(init, state))
                       if src != b.c]
        swaps = [f"t = cur[{k}]; cur[{k}] = nxt[{k}]; nxt[{k}] = t;" for k, off in enumerate(offsets)
                 if off is not None]
        self.lines += ["    for (;;) {",
                       f"        if ((rc = {cond.symbol}(cur, pd, {self.local_place(nested)}))) return rc;",
                       "        if (!*pred) break;",
                       f"        if ((rc = {body.symbol}(cur, nxt, {self.local_place(nested)}))) return rc;",
                       "        void *t; (void)t;"] + ["        " + s for s in swaps] + ["    }"]
        self.lines += [f"    if (cur[{k}] != {b.c}) memcpy({b.c}, cur[{k}], {b.nbytes});"
                       for k, b in enumerate(state)] + ["}"]

    def _conditional(self, instr: Instruction) -> None:
        branches = [self.driver.program(c) for c in branch_computations(instr)]
        self.lines += ["{", "    " + branch_pick(instr, self._array(instr.operands[0])), "    switch (k) {"]
        for k, branch in enumerate(branches):
            self.lines.append(f"    case {k}:")
            self.lines += ["    " + line for line in self._call_lines(
                branch, self._leaves(instr.operands[1 + k]), self._leaves(instr), self.local_place())]
            self.lines.append("        break;")
        self.lines += ["    }", "}"]
        self._region(max(b.scratch_bytes for b in branches))

    def _call_lines(self, callee: Program, ins, outs, scratch) -> list[str]:
        saved, self.lines = self.lines, []
        self._call(callee, ins, outs, scratch)
        lines, self.lines = self.lines, saved
        return lines
