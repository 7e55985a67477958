"""The CPU executable: programs of thunks over the computations of an optimized module.

Every computation that runs as a program -- the entry, and the condition, body, branches and
callees reached through ``while``, ``conditional`` and ``call`` -- becomes a flat list of
thunks, one per instruction: a native kernel call for a fusion (split across a thread pool
when it is large; ctypes releases the GIL during the call), a library call for ``dot``
(NumPy's BLAS) and for ``sort`` and ``convolution`` (``cpu_library``), a view for
reshape/bitcast, a host-driven loop or branch over the nested programs for control flow, and
the reference evaluator's rule for everything else (custom calls, ...).  The
kernels of all programs are compiled together, as one LLVM module.

The buffer plan covers the entry program only: its kernels write into one arena per run.
Nested programs allocate their outputs per call and never write into a value once made, so
values carried around a loop cannot be overwritten by a later iteration; what a control-flow
op returns to the entry is copied where it may share memory with its operands (arena
buffers, the caller's inputs) or with constants.

The compilation record lists what still runs through the evaluator: ``interpreted`` (fusions
of any program that the code generator cannot emit) and ``interpreted_ops`` (standalone ops
offered to a native or library path that run through their rule instead, with the reason).
``kernel_symbols``, ``library_calls`` and ``programs`` say how the rest runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..codegen.cpu import CompiledKernels, compile_kernels, target_fingerprint
from ..codegen.loops import STANDALONE_KERNEL_OPS
from ..hlo import Module
from ..hlo.evaluator import RULES, Interpreter
from ..hlo.evaluator import _conform as conform
from ..hlo.ir import Computation, Instruction
from ..hlo.printer import print_module
from .cpu_library import library_thunk
from .persistent_cache import default_cache
from .thunks import structural_thunk

# Kernels doing less work than this run on the calling thread (threads cost ~10 µs).
PARALLEL_THRESHOLD = 1 << 17
_KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def worker_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:       # not on Linux
        return max(1, os.cpu_count() or 1)


_pool: ThreadPoolExecutor | None = None


def _thread_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=worker_count(), thread_name_prefix="nbxla")
    return _pool


def _data_pointer(arr: np.ndarray) -> int:
    # Through the buffer protocol: ~0.4 us, against ~1.5 us for arr.ctypes.data (this is paid
    # per buffer per call, and dispatch overhead matters for small computations).
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (TypeError, ValueError):          # read-only or empty arrays
        return arr.__array_interface__["data"][0]


class _KernelThunk:
    """Calls one compiled kernel on its operand arrays, writing fresh output arrays."""

    def __init__(self, instr: Instruction, address: int, extent: int, work_per_unit: int):
        self.fn = _KERNEL_TYPE(address)
        self.outputs = [(s.dims, s.dtype) for s in
                        (instr.shape.elements if instr.shape.is_tuple else [instr.shape])]
        self.pointer_array = ctypes.c_void_p * (len(instr.operands) + len(self.outputs))
        self.extent = extent
        self.parallel = extent >= 2 and extent * work_per_unit >= PARALLEL_THRESHOLD
        self.tuple_result = instr.shape.is_tuple

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        if outs is None:
            outs = [np.empty(dims, dtype) for dims, dtype in self.outputs]
        ptrs = self.pointer_array()       # per call: executables may run on several threads
        for k, arr in enumerate(operands):
            ptrs[k] = _data_pointer(arr)
        for k, arr in enumerate(outs, len(operands)):
            ptrs[k] = _data_pointer(arr)
        if self.parallel:
            n = min(worker_count(), self.extent)
            bounds = [self.extent * i // n for i in range(n + 1)]
            futures = [_thread_pool().submit(self.fn, ptrs, bounds[i], bounds[i + 1])
                       for i in range(1, n)]
            self.fn(ptrs, bounds[0], bounds[1])
            for f in futures:
                f.result()
        else:
            self.fn(ptrs, 0, self.extent)
        return tuple(outs) if self.tuple_result else outs[0]


class _FullReductionThunk:
    """A full reduction: chunks reduced in parallel into 8-byte slots, then one finish call."""

    def __init__(self, instr: Instruction, address: int, finish: int, extent: int, slots: int):
        self.partial, self.finish = _KERNEL_TYPE(address), _KERNEL_TYPE(finish)
        self.outputs = [(s.dims, s.dtype) for s in
                        (instr.shape.elements if instr.shape.is_tuple else [instr.shape])]
        self.n_in = len(instr.operands)
        self.extent, self.slots = extent, slots
        self.parts = max(1, min(worker_count(), extent // (PARALLEL_THRESHOLD // 2)))
        self.tuple_result = instr.shape.is_tuple

    def __call__(self, operands: list[np.ndarray], outs: list | None = None):
        scratch = np.empty(self.parts * self.slots, np.float64)      # 8-byte slots
        base = [_data_pointer(a) for a in operands]
        calls = []
        for c in range(self.parts):
            ptrs = (ctypes.c_void_p * (self.n_in + 1))(*base, _data_pointer(scratch) + 8 * self.slots * c)
            calls.append((ptrs, self.extent * c // self.parts, self.extent * (c + 1) // self.parts))
        futures = [_thread_pool().submit(self.partial, *call) for call in calls[1:]]
        self.partial(*calls[0])
        for f in futures:
            f.result()
        if outs is None:
            outs = [np.empty(dims, dtype) for dims, dtype in self.outputs]
        ptrs = (ctypes.c_void_p * (self.n_in + len(outs) + 1))(
            *base, *[_data_pointer(o) for o in outs], _data_pointer(scratch))
        self.finish(ptrs, self.parts, 0)
        return tuple(outs) if self.tuple_result else outs[0]


class _MatmulThunk:
    """A dot in matmul form ([batch..., m, k] x [batch..., k, n], same float dtype): one
    np.matmul (NumPy's BLAS) into the planned buffer, without the reference rule's generality."""

    def __init__(self, instr: Instruction):
        self.dims, self.dtype = instr.shape.dims, instr.shape.dtype

    @staticmethod
    def applies(instr: Instruction) -> bool:
        a, b = (o.shape for o in instr.operands)
        nb = len(instr.attrs.get("lhs_batch_dims", ()))
        batch = tuple(range(nb))
        return (a.rank == b.rank == nb + 2
                and a.element_type == b.element_type == instr.shape.element_type
                and a.element_type in ("f32", "f64", "c64", "c128")
                and tuple(instr.attrs.get("lhs_batch_dims", ())) == batch
                and tuple(instr.attrs.get("rhs_batch_dims", ())) == batch
                and tuple(instr.attrs.get("lhs_contracting_dims", ())) == (nb + 1,)
                and tuple(instr.attrs.get("rhs_contracting_dims", ())) == (nb,))

    def __call__(self, operands, outs=None):
        out = outs[0] if outs else np.empty(self.dims, self.dtype)
        np.matmul(operands[0], operands[1], out=out)
        return out


def _contiguous(value):
    if isinstance(value, tuple):
        return tuple(_contiguous(v) for v in value)
    arr = np.asarray(value)
    # (np.ascontiguousarray would turn 0-d arrays into 1-d ones)
    return arr if arr.flags.c_contiguous else np.array(arr, order="C")


class _Program:
    """One computation as flat steps ``(thunk, operand slots, result slot, arena places)`` over
    a list of values: running it does no dictionary work (dispatch overhead matters for
    small computations and for loops with many cheap iterations)."""

    def __init__(self, comp: Computation, size: int, params: list, steps: list, root: int,
                 literals: list[np.ndarray], callees: list["_Program"]):
        self.computation = comp
        self.size, self.params, self.steps, self.root = size, params, steps, root
        self.literals = literals        # its constants, which results must not hand out
        self.callees = callees          # the programs its control flow runs

    def run(self, args: list):
        """The program on parameter values (nested programs: no arena, fresh outputs)."""
        values = [None] * self.size
        for k, number in self.params:
            values[k] = args[number]
        for thunk, operands, out, _ in self.steps:
            values[out] = thunk([values[k] for k in operands])
        return values[self.root]

    def reachable_literals(self) -> list[np.ndarray]:
        found, stack, seen = [], [self], set()
        while stack:
            program = stack.pop()
            if id(program) not in seen:
                seen.add(id(program))
                found += program.literals
                stack += program.callees
        return found

    def predicate_factory(self) -> Callable[[], Callable]:
        """For a while condition: a maker of ``state -> truth value`` (one per loop run)."""
        fast = _kernel_condition(self)
        if fast is not None:
            return fast.predicate
        run = self.run
        return lambda: (lambda state: run([state]))


class _KernelCondition:
    """A condition that picks parts of its one parameter and feeds them to one native kernel
    producing a pred scalar: per iteration only the operand pointers are set and the kernel
    called (the pointer array and the result scalar live as long as the loop)."""

    def __init__(self, kernel: "_KernelThunk", pickers: list[Callable]):
        self.kernel, self.pickers = kernel, pickers

    def predicate(self) -> Callable:
        fn, extent, pickers = self.kernel.fn, self.kernel.extent, self.pickers
        result = np.empty((), np.bool_)
        ptrs = self.kernel.pointer_array()
        ptrs[len(pickers)] = _data_pointer(result)

        def holds(state) -> bool:
            for k, pick in enumerate(pickers):
                ptrs[k] = _data_pointer(pick(state))
            fn(ptrs, 0, extent)
            return result[()]
        return holds


def _kernel_condition(program: _Program) -> _KernelCondition | None:
    """The condition ``program`` as a _KernelCondition, or None when it is not of that form."""
    paths: dict[int, tuple] = {}
    comp = program.computation
    steps = {out: (thunk, operands) for thunk, operands, out, _ in program.steps}
    for slot, instr in enumerate(comp.instructions):
        if instr.opcode == "parameter":
            paths[slot] = ()
        elif instr.opcode == "get-tuple-element" and steps[slot][1][0] in paths:
            paths[slot] = paths[steps[slot][1][0]] + (instr.attrs["index"],)
        elif instr is not comp.root:
            return None
    thunk, operands = steps.get(program.root, (None, ()))
    if not isinstance(thunk, _KernelThunk) or thunk.parallel or thunk.outputs != [((), np.dtype(np.bool_))] \
            or not all(k in paths for k in operands):
        return None
    return _KernelCondition(thunk, [_picker(paths[k]) for k in operands])


def _picker(path: tuple) -> Callable:
    if len(path) == 1:
        index = path[0]
        return lambda state: state[index]

    def pick(state):
        for index in path:
            state = state[index]
        return state
    return pick


class _WhileThunk:
    """``while``: the condition and body programs run from the host until the condition fails."""

    def __init__(self, condition: _Program, body: _Program):
        self.make_predicate = condition.predicate_factory()
        self.body = body

    def __call__(self, operands):
        holds, run_body = self.make_predicate(), self.body.run
        state = operands[0]
        while holds(state):
            state = run_body([state])
        return state


class _ConditionalThunk:
    """``conditional``: one branch program, chosen by a pred (true, false) or an index (an
    out-of-range index runs the last branch, as in XLA)."""

    def __init__(self, instr: Instruction, branches: list[_Program]):
        self.branches = branches
        self.indexed = "branch_computations" in instr.attrs

    def __call__(self, operands):
        if self.indexed:
            index = int(operands[0])
            if not 0 <= index < len(self.branches):
                index = len(self.branches) - 1
        else:
            index = 0 if bool(operands[0]) else 1
        return self.branches[index].run([operands[1 + index]])


class _OwnedResult:
    """Wraps a control-flow thunk of the entry: its result may be its operand (a loop that
    does not run, a branch that passes its input on) or a nested constant; those leaves are
    copied, so that nothing the entry overwrites later (the arena, donated inputs) or the
    caller keeps aliases them."""

    def __init__(self, thunk: Callable, callees: list[_Program]):
        self.thunk = thunk
        self.constants = [lit for p in callees for lit in p.reachable_literals()]

    def __call__(self, operands):
        foreign = _flatten(tuple(operands)) + self.constants
        return _copy_shared(self.thunk(operands), foreign)


def _copy_shared(value, foreign: list[np.ndarray]):
    if isinstance(value, tuple):
        return tuple(_copy_shared(v, foreign) for v in value)
    if any(np.may_share_memory(value, f) for f in foreign):
        return value.copy()
    return value


class CpuExecutable:
    backend = "cpu (LLVM)"

    def __init__(self, module: Module, plan=None):
        self.module = module
        self.plan = plan
        computations = program_computations(module)
        compiled = _kernel_symbols(computations)
        store = default_cache()
        key = None
        if store is not None:
            names = ",".join(symbol for symbol, _ in compiled)
            key = hashlib.sha256((target_fingerprint() + names + print_module(module)).encode()).hexdigest()
        self.kernels: CompiledKernels = compile_kernels(
            module.name, [(symbol, i.attrs["calls"] if i.opcode == "fusion" else _single_instruction_computation(i))
                          for symbol, i in compiled], store, key)
        # Kernel symbol of every fusion and standalone kernel op, by HLO instruction name.
        self.kernel_symbols = {i.name: symbol for symbol, i in compiled}
        self._kernel_of = {id(i): symbol for symbol, i in compiled}
        unsupported = self.kernels.unsupported
        # Fusions the code generator could not emit, by HLO instruction name, with the reason.
        self.interpreted = {i.name: unsupported[s] for s, i in compiled
                            if s in unsupported and i.opcode == "fusion"}
        # Standalone ops offered to a native or library path that run through the evaluator's
        # rule instead (a scatter with a custom combiner, an unrecognized sort comparator).
        self.interpreted_ops = {i.name: unsupported[s] for s, i in compiled
                                if s in unsupported and i.opcode != "fusion"}
        # sort / convolution instructions run as library calls, by name.
        self.library_calls: dict[str, str] = {}
        self._interpreter = Interpreter()
        self._programs: dict[int, _Program] = {}
        entry = self._program(module.entry)
        self._literal_ids = {id(lit) for lit in entry.literals}
        # Every program by computation name: the entry's and those its control flow runs.
        self.programs = {p.computation.name: p for p in self._programs.values()}
        self._arena_bytes = self.plan.arena_bytes if self.plan is not None and \
            any(st[3] is not None for st in entry.steps) else 0
        self._plan = entry.size, entry.params, entry.steps, entry.root
        # (instruction, thunk) of the entry, in order: how each instruction runs.
        entry_ops = [i for i in module.entry.instructions if i.opcode != "parameter"]
        self._steps = [(instr, step[0]) for instr, step in zip(entry_ops, entry.steps)]

    def _program(self, comp: Computation) -> _Program:
        """``comp`` as a program (built once; the entry's kernels write into the arena)."""
        program = self._programs.get(id(comp))
        if program is not None:
            return program
        is_entry = comp is self.module.entry
        slot, params, steps, literals, callees = {}, [], [], [], []
        for instr in comp.instructions:
            slot[id(instr)] = len(slot)
            if instr.opcode == "parameter":
                params.append((slot[id(instr)], instr.parameter_number))
                continue
            nested = [self._program(c) for c in _program_callees(instr)]
            thunk = self._thunk(instr, nested, literals)
            if nested:
                callees += nested
                if is_entry:
                    thunk = _OwnedResult(thunk, nested)
            places = self._arena_outputs(instr, thunk) if is_entry else None
            steps.append((thunk, [slot[id(o)] for o in instr.operands], slot[id(instr)], places))
        program = _Program(comp, len(slot), params, steps, slot[id(comp.root)], literals, callees)
        self._programs[id(comp)] = program
        return program

    def _thunk(self, instr: Instruction, nested: list[_Program], literals: list) -> Callable:
        op = instr.opcode
        kernel = self._kernel_of.get(id(instr))
        if kernel is not None and kernel in self.kernels.addresses:
            spec = self.kernels.specs[kernel]
            if spec.style == "full-reduce":
                return _FullReductionThunk(instr, self.kernels.addresses[kernel],
                                           self.kernels.addresses[spec.finish_name],
                                           spec.parallel_extent, spec.scratch_slots)
            return _KernelThunk(instr, self.kernels.addresses[kernel], spec.parallel_extent,
                                spec.work_per_unit)
        if op == "dot" and _MatmulThunk.applies(instr):
            return _MatmulThunk(instr)
        if op == "constant":
            lit = _contiguous(instr.literal)
            literals.append(lit)
            return lambda ops: lit
        if op == "while":
            return _WhileThunk(*nested)
        if op == "conditional":
            return _ConditionalThunk(instr, nested)
        if op == "call":
            return nested[0].run
        structural = structural_thunk(instr)
        if structural is not None:
            return structural
        rule_thunk = self._rule_thunk(instr)
        if op in ("sort", "convolution"):
            thunk, why = library_thunk(instr, rule_thunk)
            if thunk is not None:
                self.library_calls[instr.name] = op
                return thunk
            self.interpreted_ops[instr.name] = why
        return rule_thunk

    def _rule_thunk(self, instr: Instruction) -> Callable:
        """The evaluator's rule for ``instr``, giving exactly its dtype (kernels rely on it)."""
        rule, interp = RULES[instr.opcode], self._interpreter

        def interpreted(ops):
            with np.errstate(all="ignore"):
                return _contiguous(conform(instr, instr.shape, rule(instr, ops, interp), False))
        return interpreted

    def _arena_outputs(self, instr: Instruction, thunk) -> list | None:
        """(offset, dims, dtype) per output of a kernel whose outputs the buffer plan places
        in the arena; None when it has none (or is live-out: results get their own memory,
        so that what a caller keeps does not pin the whole arena)."""
        if self.plan is None or not isinstance(thunk, (_KernelThunk, _FullReductionThunk, _MatmulThunk)):
            return None
        shapes = instr.shape.elements if instr.shape.is_tuple else [instr.shape]
        names = [f"{instr.name}{{{k}}}" for k in range(len(shapes))] if instr.shape.is_tuple else [instr.name]
        places = []
        for name, shape in zip(names, shapes):
            v = self.plan.values.get(name)
            if v is None or v.kind != "arena" or v.end >= self.plan.length or v.offset is None:
                return None
            places.append((v.offset, shape.dims, shape.dtype))
        return places

    def run(self, inputs: list) -> list[np.ndarray]:
        size, params, steps, root = self._plan
        values = [None] * size
        for k, number in params:
            arr = inputs[number]
            values[k] = arr if type(arr) is np.ndarray and arr.flags.c_contiguous else _contiguous(arr)
        arena = None
        if self._arena_bytes:
            raw = np.empty(self._arena_bytes + 64, np.uint8)      # one allocation per run
            start = -raw.ctypes.data % 64
            arena = raw[start:start + self._arena_bytes]
        for thunk, operands, out, places in steps:
            if places is None:
                values[out] = thunk([values[k] for k in operands])
            else:
                outs = [np.ndarray(dims, dtype, buffer=arena, offset=offset) for offset, dims, dtype in places]
                result = thunk([values[k] for k in operands], outs)
                values[out] = result
        # Results never alias inputs or cached constants (reshapes are views).
        return [leaf if leaf.base is None and not self._is_literal(leaf) else leaf.copy()
                for leaf in _flatten(values[root])]

    def _is_literal(self, arr) -> bool:
        return id(arr) in self._literal_ids


def _program_callees(instr: Instruction) -> list[Computation]:
    """The computations ``instr`` runs as programs (not reducers, comparators or fusions)."""
    at = instr.attrs
    if instr.opcode == "while":
        return [at["condition"], at["body"]]
    if instr.opcode == "conditional":
        return list(at["branch_computations"]) if "branch_computations" in at else \
            [at["true_computation"], at["false_computation"]]
    if instr.opcode == "call":
        return [at["to_apply"]]
    return []


def program_computations(module: Module) -> list[Computation]:
    """The entry and every computation reached from it through while/conditional/call."""
    order, seen = [], set()

    def visit(comp):
        if id(comp) not in seen:
            seen.add(id(comp))
            order.append(comp)
            for instr in comp.instructions:
                for callee in _program_callees(instr):
                    visit(callee)
    visit(module.entry)
    return order


def _kernel_symbols(computations: list[Computation]) -> list[tuple[str, Instruction]]:
    """(symbol, instruction) for every fusion and standalone kernel op of the programs.

    Symbols get a prefix (a fusion named like a libm function, "cbrt", must not become the
    definition its own body calls) and are unique across computations (the entry's come
    first and keep the plain form)."""
    taken, out = set(), []
    for comp in computations:
        for instr in comp.instructions:
            if instr.opcode != "fusion" and instr.opcode not in STANDALONE_KERNEL_OPS:
                continue
            base = symbol = "nbxla_" + instr.name.replace(".", "_").replace("-", "_")
            suffix = 2
            while symbol in taken:
                symbol, suffix = f"{base}_v{suffix}", suffix + 1
            taken.add(symbol)
            out.append((symbol, instr))
    return out


def _single_instruction_computation(instr: Instruction) -> Computation:
    """``instr`` applied to parameters: how a standalone op is handed to the code generator."""
    params = [Instruction("parameter", o.shape, attrs={"parameter_number": k}, name=f"{instr.name}.p{k}")
              for k, o in enumerate(instr.operands)]
    root = Instruction(instr.opcode, instr.shape, params, dict(instr.attrs), name=instr.name)
    return Computation(f"{instr.name}.computation", params + [root], root)


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _flatten(v)]
    return [np.asarray(value)]
