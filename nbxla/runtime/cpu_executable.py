"""The CPU executable: programs of thunks over the computations of an optimized module.

Every computation that runs as a program -- the entry, and the condition, body, branches and
callees reached through ``while``, ``conditional`` and ``call`` -- becomes a flat list of
thunks, one per instruction: a native kernel call for a fusion (split across a thread pool
when it is large; ctypes releases the GIL during the call), a library call for ``dot``
(NumPy's BLAS) and for ``sort`` and ``convolution`` (``cpu_library``), a view for
reshape/bitcast, a host-driven loop or branch over the nested programs for control flow, and
the reference evaluator's rule for everything else (custom calls, ...).  The
kernels of all programs are compiled together, as one LLVM module.

The entry's kernels write into one arena per run, placed by the buffer plan.  Host-driven
nested programs allocate their outputs per call and never write into a value once made, so
values carried around a loop cannot be overwritten by a later iteration; what a control-flow
op returns to the entry is copied where it may share memory with its operands (arena
buffers, the caller's inputs) or with constants.  A loop run natively (``native_loops``) is
one C function whose programs follow the plan's nested plans (``BufferPlan.nested``).

The compilation record lists what still runs through the evaluator: ``interpreted`` (fusions
of any program that the code generator cannot emit) and ``interpreted_ops`` (standalone ops
offered to a native or library path that run through their rule instead, with the reason).
``kernel_symbols``, ``library_calls`` and ``programs`` say how the rest runs.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import Counter
from typing import Callable

import numpy as np

from ..codegen.convolution import native_convolution_refusal
from ..codegen.cpu import CompiledKernels, compile_kernels, emit_llvm_ir, light_kernel, target_fingerprint
from ..codegen.elemental import leading_unit_indexed
from ..codegen.kernels import standalone_computation, structure_key
from ..errors import InterpretedWarning
from ..hlo.opcodes import OWN_KERNEL
from ..hlo import Module
from ..hlo.evaluator import Interpreter
from ..hlo.aliasing import is_view, updated_parameter
from ..hlo.ir import Computation, Instruction, program_callees
from ..hlo.placement import CPU, placement
from ..hlo.printer import PrintOptions, print_module
from .cpu_control import ConditionalThunk, OwnedResult, WhileThunk, flatten_leaves, kernel_condition, \
    program_computations
from .cpu_kernels import ARRAY_DATA_OFFSET, c_strides, DotThunk, FullReductionThunk, KernelThunk, WidenedDotThunk
from .native_dots import native_dot_refusal, NativeGemmDot
from .thin_gemm import thin_gemm_refusal, ThinGemmDot
from .conv_epilogue import fold_convolution_epilogues, runs_as_library
from .donation import donated_output, uses_arena
from .gemm_epilogue import AccumulatingGemm, fold_gemm_epilogues, runs_as_gemm
from .execution_stage import describe_execution
from .cpu_library import library_thunk
from .sort_library import sort_has_library_call, sort_may_defer
from . import host_memory
from .host_memory import memory_owner
from .native_loops import (NativeLoopThunk, native_entry_outputs_runner, native_entry_runner, native_loops,
                           native_loops_enabled)
from .persistent_cache import default_cache
from .single_call import single_kernel_runner
from .straight_line import straight_line_runner
from .window_updates import WindowUpdateThunk, in_place_symbols, live_out_update_places, made_by_run, \
    window_update_fusions
from .thunks import structural_thunk

# Below this, temporaries are plain small allocations, not arena places: creating the arena
# and a view per output cost more than malloc's reuse of small blocks (tiny BLAS programs).
SMALL_ARENA = 64 << 10
# The module's text in cache keys: large constants by a hash of their bytes (printing them
# in full cost seconds per key).
KEY_TEXT = PrintOptions(large_constants="digest")


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
        fast = kernel_condition(self)
        if fast is not None:
            return fast.predicate
        run = self.run
        return lambda: (lambda state: run([state]))


class CpuExecutable:
    backend = "cpu (LLVM)"

    def __init__(self, module: Module, plan=None, compile_loops: bool | None = None,
                 kernels: CompiledKernels | None = None, symbols: dict[str, str] | None = None,
                 emitted=None, loop_thunks: dict | None = None):
        """``compile_loops=False`` keeps every loop host-driven (the profiler's twin, which
        times a native loop's kernels one by one); None follows ``NBXLA_NATIVE_LOOPS``.

        ``kernels``: machine code compiled earlier for this module's kernels (an instance of
        a program with unknown dimensions at one size: see ``nbxla/symbolic_compile.py``);
        its specs give this module's extents, ``symbols`` the kernel symbol of each fusion and
        kernel op by instruction name.  Native loops are not made then.  ``emitted``: the
        kernels' IR as ``kernel_llvm_ir`` gave it for this module (not emitted again).
        ``loop_thunks``: thunks of the entry's loops by instruction name, compiled elsewhere
        (an instance's loops over unknown sizes: ``symbolic_loops``), else a reason string."""
        self.module = module
        # Fusions that took the convolution they consume (computed in one kernel with it),
        # and whether each needs an output of its own (not its place in the arena).
        self.convolution_epilogues = fold_convolution_epilogues(module, plan)
        # (and fusions that took the GEMM they scale and add to: one ?gemm with alpha and beta;
        # not where the kernels were compiled or emitted before, for the unfolded program: a
        # program for unknown dimensions, its probes and instances, keeps the two steps)
        if kernels is None and emitted is None:
            self.convolution_epilogues.update(fold_gemm_epilogues(module, plan))
        self.plan = plan
        store = default_cache() if kernels is None else None
        # How each while of the entry runs: natively (one C function) or from the host, why.
        self.loops: dict[str, str] = {}
        self._native: dict[int, NativeLoopThunk] = {}
        whiles = [i for i in module.entry.instructions if i.opcode == "while"]
        if whiles and (native_loops_enabled() if compile_loops is None else compile_loops) and kernels is None:
            found = native_loops(whiles, print_module(module, KEY_TEXT), store, plan)
            for instr in whiles:
                if isinstance(found[id(instr)], NativeLoopThunk):
                    self._native[id(instr)] = found[id(instr)]
                    self.loops[instr.name] = "native: one compiled C function runs the whole loop"
                else:
                    self.loops[instr.name] = found[id(instr)]
        for instr in whiles if loop_thunks else ():
            given = loop_thunks.get(instr.name)
            if isinstance(given, str):
                self.loops[instr.name] = given
            elif given is not None:
                self._native[id(instr)] = given
                self.loops[instr.name] = "native: one compiled C function runs the whole loop, for every size"
        if kernels is not None and symbols is not None:
            # (an instance: its kernels are the compiled module's, by instruction name; finding
            # identical kernels again would print every kernel's instructions)
            distinct, compiled = [], [(symbols[i.name], i) for c in program_computations(module, frozenset())
                                      for i in c.instructions if i.name in symbols]
        else:
            distinct, compiled = kernel_computations(module, frozenset(self._native))
        # Kernels the code generator would refuse are not offered to it (each refusal cost an
        # emission of the module's other kernels again; a module of refusals alone, conv2d's,
        # an LLVM module and engine of nothing): fusions that run as the patch-GEMM library
        # call with their convolution, and convolutions the native kernel does not take (the
        # reason kept, as the refusal would have given it).
        refused = {symbol: native_convolution_refusal(instr) for symbol, instr in compiled
                   if instr.opcode == "convolution"}
        refused = {symbol: why for symbol, why in refused.items() if why is not None}
        library = {symbol for symbol, instr in compiled
                   if instr.opcode == "fusion" and (runs_as_library(instr) or runs_as_gemm(instr))}
        distinct = [(symbol, comp) for symbol, comp in distinct if symbol not in library and symbol not in refused]
        in_place = in_place_symbols(module, compiled)
        key = None
        if store is not None:
            names = ",".join(symbol for symbol, _ in compiled) + repr(sorted(in_place)) + \
                repr([(getattr(comp, "unknown_axes", None), getattr(comp, "unknown_shapes", None)) for _, comp in distinct])
            # (kernels emitted with leading size-1 dimensions indexed are other code)
            names += ",leading-unit-indexed" if leading_unit_indexed() else ""
            key = hashlib.sha256((target_fingerprint() + f"{ARRAY_DATA_OFFSET}," + names +
                                  print_module(module, KEY_TEXT)).encode()).hexdigest()
        self.kernels: CompiledKernels = kernels if kernels is not None else \
            compile_kernels(module.name, distinct, store, key, ARRAY_DATA_OFFSET, emitted,
                            light_kernel_symbols(module, distinct, compiled), in_place)
        # Kernel symbol of every fusion and standalone kernel op, by HLO instruction name
        # (identical kernels, the steps of a time loop, share one symbol).
        self.kernel_symbols = {i.name: symbol for symbol, i in compiled}
        self._kernel_of = {id(i): symbol for symbol, i in compiled}
        unsupported = {**refused, **self.kernels.unsupported}
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
        # Entry values whose memory the run makes itself (kernel and BLAS outputs, views of
        # them): the only ones a window update may write into (window_updates.py).
        self._made: set[int] = set()
        self._live_out_updates = live_out_update_places(plan)
        self._programs: dict[int, _Program] = {}
        self.donated: set[int] = set()      # parameters whose arrays a run writes an output into
        entry = self._program(module.entry)
        self._literal_owners = {id(memory_owner(lit)) for lit in entry.literals}
        # Every program by computation name: the entry's and those its control flow runs.
        self.programs = {p.computation.name: p for p in self._programs.values()}
        self._arena_bytes = self.plan.arena_bytes if self.plan is not None and \
            any(uses_arena(st[3]) for st in entry.steps) else 0
        self._new_arena = host_memory.allocator(self._arena_bytes + 64, np.uint8)
        self._fresh_results = self._results_are_fresh(entry)
        # (The entry's fields unpacked once: ``run`` reads them on every call.)
        self._plan = entry.size, entry.params, entry.steps, entry.root
        if kernels is None:     # (an instance over machine code compiled earlier: warned then)
            _warn_interpreted(module.name, {**self.interpreted, **self.interpreted_ops})
        direct = self._direct_runner(entry)
        if direct is not None:
            self.run = direct
        self.run_single = self._single_kernel_runner(entry, direct)
        loop_outputs = None
        if self.run_single is None and self._native:
            ops = [i for i in module.entry.instructions if i.opcode != "parameter"]
            fills = {id(i): step for i, step in zip(ops, entry.steps) if not i.operands}
            self.run_single = native_entry_runner(module.entry, self._native, self.run,
                                                  lambda instr: _fill_value(fills[id(instr)]))
            # (a tuple of the loop's results: its checks' extremes ride along)
            loop_outputs = native_entry_outputs_runner(module.entry, self._native, self.run,
                                                       lambda instr: _fill_value(fills[id(instr)]))
        self.run_tuple = None       # (a flat tuple root's arrays as a tuple: straight_line.py)
        if direct is None and self._fresh_results:
            written = straight_line_runner(entry.computation, entry.params, entry.steps, entry.root,
                                           _contiguous, (self._new_arena, self._arena_bytes))
            if written is not None:
                loop_single = self.run_single
                self.run, self.run_single, self.run_tuple = written
                for fn in written:
                    if fn is not None:
                        fn.executable = self    # the machine code lives as long as the executable
                if loop_single is not None:
                    # (the loop's own caller, its fills made once: trisolv's np.zeros_like
                    # filled on every call took a third of its time)
                    self.run_single = loop_single
        if loop_outputs is not None:
            self.run = loop_outputs

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
            if id(instr) in self._native:
                steps.append((self._native[id(instr)], [slot[id(o)] for o in instr.operands], slot[id(instr)], None))
                continue
            nested = [self._program(c) for c in program_callees(instr)]
            thunk = self._thunk(instr, nested, literals)
            if nested:
                callees += nested
                if is_entry:
                    thunk = OwnedResult(thunk, nested)
            places = self._arena_outputs(instr, thunk, slot) if is_entry else None
            if is_entry and made_by_run(instr, thunk, self._made):
                self._made.add(id(instr))
            steps.append((thunk, [slot[id(o)] for o in instr.operands], slot[id(instr)], places))
        program = _Program(comp, len(slot), params, steps, slot[id(comp.root)], literals, callees)
        self._programs[id(comp)] = program
        return program

    def _thunk(self, instr: Instruction, nested: list[_Program], literals: list) -> Callable:
        """The thunk of one instruction, by the CPU placement table (``hlo/placement.py``).  A
        compiled kernel runs whatever the instruction's kind (the kernel list is the codegen's
        say); an opcode the table places as a kernel whose kernel did not compile runs on the
        evaluator, its reason recorded."""
        kernel = self._kernel_of.get(id(instr))
        if kernel is not None and kernel in self.kernels.addresses:
            if instr.opcode == "sort" and sort_has_library_call(instr):
                # NumPy's sort, the kernel for the calls it cannot answer (NaN keys)
                return self._library_thunk(instr, nested, literals, self._kernel_thunk(instr, kernel))
            return self._kernel_thunk(instr, kernel)
        if instr.opcode == "fusion" and runs_as_library(instr):
            # (a dense convolution folded with its bias / relu: nbxla's patch-GEMM kernel as a
            # library call, conv_bias_act.py; the fusion's kernel was refused)
            self.interpreted.pop(instr.name, None)
            self.kernel_symbols.pop(instr.name, None)       # (it has no kernel: the profile says so)
            return self._library_thunk(instr, nested, literals)
        if instr.opcode == "fusion" and runs_as_gemm(instr):
            # (a GEMM folded with its scale-and-add: one ?gemm with alpha and beta)
            self.interpreted.pop(instr.name, None)
            self.kernel_symbols.pop(instr.name, None)
            return AccumulatingGemm(instr)
        how = placement(CPU, instr)
        if how.handler is None or how.kind == "kernel":
            return self._host_thunk(instr, nested, literals)
        return getattr(self, how.handler)(instr, nested, literals)

    def _kernel_thunk(self, instr: Instruction, kernel: str) -> Callable:
        spec = self.kernels.specs[kernel]
        if spec.style == "in-place":
            # (in place where the plan put the output into the operand's buffer and the run
            # made that memory itself; else into a copy of the operand)
            target = instr.operands[updated_parameter(instr.attrs["calls"])]
            reuse = self.plan is not None and instr.name in self.plan.operand_buffers and id(target) in self._made
            return WindowUpdateThunk(instr, self.kernels.addresses[kernel], spec.parallel_extent,
                                     spec.work_per_unit, reuse)
        if spec.style == "full-reduce":
            return FullReductionThunk(instr, self.kernels.addresses[kernel],
                                      self.kernels.addresses[spec.finish_name],
                                      spec.parallel_extent, spec.scratch_slots, spec.work_per_unit,
                                      self.kernels.addresses.get(spec.object_entry))
        return KernelThunk(instr, self.kernels.addresses[kernel], spec.parallel_extent,
                           spec.work_per_unit, self.kernels.addresses.get(spec.object_entry), spec.sizes, spec.style)

    def _constant_thunk(self, instr: Instruction, nested, literals: list) -> Callable:
        lit = _contiguous(instr.literal)
        literals.append(lit)
        return lambda ops: lit

    def _control_thunk(self, instr: Instruction, nested: list[_Program], literals) -> Callable:
        if instr.opcode == "while":
            return WhileThunk(*nested)
        if instr.opcode == "conditional":
            return ConditionalThunk(instr, nested)
        return nested[0].run                                    # call

    def _view_thunk(self, instr: Instruction, nested, literals) -> Callable:
        return structural_thunk(instr) or self._host_thunk(instr, nested, literals)

    def _library_thunk(self, instr: Instruction, nested, literals, fallback=None) -> Callable:
        """BLAS for the dots it takes; NumPy's sort, im2col convolutions and LAPACK custom calls
        (``cpu_library``); the evaluator, with the reason, for the rest.  ``fallback``: what a
        sort runs for the calls NumPy's sort cannot answer (else the evaluator's rule)."""
        if instr.opcode == "dot":
            if native_dot_refusal(instr) is None:
                return NativeGemmDot(instr)
            if thin_gemm_refusal(instr) is None:
                return ThinGemmDot(instr)
            for thunk in (DotThunk, WidenedDotThunk):
                if thunk.applies(instr):
                    return thunk(instr)
            return self._host_thunk(instr, nested, literals)
        rule_thunk = fallback or self._rule_thunk(instr)
        thunk, why = library_thunk(instr, rule_thunk)
        if thunk is not None:
            self.library_calls[instr.name] = instr.opcode
            # (a convolution its own kernel refused, the reason recorded above, runs here)
            self.interpreted_ops.pop(instr.name, None)
            return thunk
        if why is not None:
            self.interpreted_ops[instr.name] = why
        return self._host_thunk(instr, nested, literals, rule_thunk)

    def _host_thunk(self, instr: Instruction, nested, literals, rule_thunk=None) -> Callable:
        """The evaluator's rule, the reason recorded (a warning names it once per module)."""
        if instr.name not in self.interpreted_ops and instr.name not in self.interpreted:
            self.interpreted_ops[instr.name] = f"no native kernel or library call for {_describe_op(instr)}"
        return rule_thunk or self._rule_thunk(instr)

    def _rule_thunk(self, instr: Instruction) -> Callable:
        """The evaluator's rule for ``instr``, giving exactly its dtype (kernels rely on it)."""
        interp = self._interpreter

        def interpreted(ops):
            with np.errstate(all="ignore"):
                return _contiguous(interp.apply(instr, ops))
        return interpreted

    def _results_are_fresh(self, entry: _Program) -> bool:
        """Is every result of the entry an array made during the run by a kernel or a library
        call (or a view of one), each by its own, so that none can share memory with an input,
        a constant, the arena or another result?  Then ``run`` skips that check (a few us:
        small programs are dispatch)."""
        step_of = {id(i): step for i, step in
                   zip([i for i in entry.computation.instructions if i.opcode != "parameter"], entry.steps)}
        made: list = []                  # (the instruction, output) each result comes from

        def fresh(instr, index=()) -> bool:
            if instr.opcode == "tuple":
                return all(fresh(o) for o in instr.operands)
            step = step_of.get(id(instr))
            if step is None:
                return False
            thunk, places = step[0], step[3]
            if isinstance(thunk, WindowUpdateThunk) and thunk.reuse:       # (in its operand's memory)
                return fresh(instr.operands[thunk.target])
            if isinstance(thunk, NativeLoopThunk):
                # (a leaf the loop changes is a result it made for this call; one it passes
                # through is its operand's)
                if len(index) != 1 or any(e.is_tuple for e in instr.shape.elements):
                    return False
                if index[0] in thunk.fixed:
                    return fresh(instr.operands[0].operands[index[0]]) if instr.operands[0].opcode == "tuple" \
                        else False
                made.append((id(instr), index))
                return True
            if is_view(instr) and not isinstance(thunk, (KernelThunk, FullReductionThunk, DotThunk)):
                # a view or a name of its operand
                return fresh(instr.operands[0], (instr.attrs["index"],) + index
                             if instr.opcode == "get-tuple-element" else index)
            made.append((id(instr), index))
            # (library thunks that always return arrays of their own say so: ``fresh_results``)
            return (isinstance(thunk, (KernelThunk, FullReductionThunk, DotThunk, WindowUpdateThunk))
                    or getattr(thunk, "fresh_results", False)) and not uses_arena(places)
        # (CSE merges equal values: ``return np.zeros(n), np.zeros(n)`` is one kernel's output
        # twice in the root tuple, where NumPy gives two arrays.)
        return fresh(entry.computation.root) and len(set(made)) == len(made)

    def _arena_outputs(self, instr: Instruction, thunk, slot: dict) -> list | None:
        """(offset, dims, dtype) per output of a kernel whose outputs the buffer plan places
        in the arena; None when it has none (or is live-out: results get their own memory,
        so that what a caller keeps does not pin the whole arena); or a donated parameter's."""
        donated = donated_output(self.plan, self.module.entry, instr, thunk, slot, self.donated)
        if donated is not None:
            return donated
        if self.plan is None or not isinstance(thunk, (KernelThunk, FullReductionThunk, DotThunk, WindowUpdateThunk)) or \
                getattr(thunk, "reuse", False) or \
                _temporary_bytes(self.plan) < SMALL_ARENA or self.convolution_epilogues.get(instr.name):
            return None
        shapes = instr.shape.elements if instr.shape.is_tuple else [instr.shape]
        names = [f"{instr.name}{{{k}}}" for k in range(len(shapes))] if instr.shape.is_tuple else [instr.name]
        places = []
        for name, shape in zip(names, shapes):
            v = self.plan.values.get(name)
            if v is None or v.kind != "arena" or v.end >= self.plan.length or v.offset is None \
                    or v.allocation in self._live_out_updates:
                # (live-out: results get memory of their own; so does an array that window
                # updates later write into in place, when a result is their last one)
                return None
            places.append((v.offset, shape.dims, shape.dtype))
        return places

    @staticmethod
    def _one_kernel(entry: _Program):
        """(thunk, operands, pick) when the entry is one kernel on the parameters whose
        result is the entry's result, or whose tuple result's element ``pick`` is (argmax:
        the (value, index) reduction and the index taken from it); None otherwise."""
        steps, pick = entry.steps, None
        ops = [i for i in entry.computation.instructions if i.opcode != "parameter"]
        if len(steps) == 2 and ops[1].opcode == "get-tuple-element" and ops[1].operands[0] is ops[0] \
                and steps[1][2] == entry.root:
            steps, pick = steps[:1], ops[1].attrs["index"]
        elif len(steps) != 1 or steps[0][2] != entry.root:
            return None
        thunk, operands, _, places = steps[0]
        if not isinstance(thunk, (KernelThunk, FullReductionThunk)) or places is not None:
            return None
        return thunk, operands, pick

    def _direct_runner(self, entry: _Program) -> Callable | None:
        """For an entry that is one kernel on the parameters (a fused elementwise chain, the
        running example): ``run`` without the general loop over steps.  The kernel's outputs
        are fresh arrays, so no result needs the alias check either."""
        one = self._one_kernel(entry)
        if one is None:
            return None
        thunk, operands, pick = one
        number = dict(entry.params)
        order = [number[k] for k in operands]
        tuple_result = thunk.tuple_result and pick is None

        def run(inputs: list) -> list[np.ndarray]:
            args = [inputs[n] for n in order]
            for k, arr in enumerate(args):
                if type(arr) is not np.ndarray or not arr.flags.c_contiguous:
                    args[k] = _contiguous(arr)
            result = thunk(args)
            if pick is not None:
                return [result[pick]]
            return list(result) if tuple_result else [result]
        run.executable = self       # the machine code lives as long as the executable does
        return run

    def _single_kernel_runner(self, entry: _Program, general: Callable | None) -> Callable | None:
        """For a direct entry whose kernel takes array objects and whose result is one array:
        ``run_single(inputs)`` returns that array (a NumPy scalar for a 0-d result, as NumPy
        gives), calling the kernel straight from here.  The jit fast path calls it as is: on a
        20-op chain over 128 elements, the layers of calls it skips were a sixth of the whole
        call."""
        if general is None:
            return None
        thunk, operands, pick = self._one_kernel(entry)
        if thunk.object_fn is None or (thunk.tuple_result and pick is None):
            return None
        number = dict(entry.params)
        order = [number[k] for k in operands]
        fn, makers, extent, sizes = thunk.object_fn, thunk.makers, thunk.extent, getattr(thunk, "sizes", ())
        scalar = not thunk.outputs[pick or 0][0]
        # Arrays with these exact strides are C-contiguous (checking them is cheaper than
        # reading ``flags``); others, or other types, take the general runner.
        shape_of = {p.parameter_number: p.shape for p in self.module.entry.parameters}
        strides = [c_strides(shape_of[n].dims, shape_of[n].dtype.itemsize) for n in order]

        def fallback(inputs):
            value = general(inputs)[0]
            return value[()] if scalar else value

        run_single = single_kernel_runner(fn, makers, extent, order, strides, pick or 0, scalar, fallback, sizes,
                                          getattr(thunk, "call", None))
        run_single.executable = self
        return run_single

    def run(self, inputs: list) -> list[np.ndarray]:
        size, params, steps, root = self._plan
        values = [None] * size
        for k, number in params:
            arr = inputs[number]
            values[k] = arr if type(arr) is np.ndarray and arr.flags.c_contiguous else _contiguous(arr)
        arena = None
        if self._arena_bytes:
            raw = self._new_arena()                               # one allocation per run
            start = -raw.__array_interface__["data"][0] % 64      # (``ctypes.data`` costs ~1 us)
            arena = raw[start:start + self._arena_bytes]
        for thunk, operands, out, places in steps:
            if places is None:
                values[out] = thunk([values[k] for k in operands])
            else:
                outs = [np.ndarray(dims, dtype, buffer=arena, offset=offset) if type(offset) is int
                        else values[offset.slot] for offset, dims, dtype in places]
                result = thunk([values[k] for k in operands], outs)
                values[out] = result
        if self._fresh_results:
            return flatten_leaves(values[root])
        # Results never share memory with inputs, cached constants, the arena (reshapes and
        # some evaluator rules give views) or each other (CSE merged two equal results: NumPy
        # gives two arrays, and a write into one must not show in the other).
        foreign = self._literal_owners | {id(memory_owner(a)) for a in flatten_leaves(tuple(inputs))}
        if arena is not None:
            foreign.add(id(memory_owner(arena)))
        results = []
        for leaf in flatten_leaves(values[root]):
            owner = id(memory_owner(leaf))
            if owner in foreign:
                leaf = leaf.copy()
            else:
                foreign.add(owner)
            results.append(leaf)
        return results

    def describe(self) -> str:
        """The ``execution`` stage: how every instruction of every program runs."""
        return describe_execution(self)


def _describe_op(instr: Instruction) -> str:
    shapes = ", ".join(str(o.shape) for o in instr.operands)
    return f"{instr.opcode}({shapes})"


def _warn_interpreted(module_name: str, interpreted: dict[str, str]) -> None:
    """Say once per compilation what runs on the evaluator (no silent interpretation)."""
    if not interpreted:
        return
    lines = [f"  %{name}: {why}" for name, why in interpreted.items()]
    warnings.warn(InterpretedWarning(
        f"{len(interpreted)} instruction(s) of {module_name} run on the reference evaluator (slow): "
        f"the code generator cannot emit them yet\n" + "\n".join(lines[:20]) +
        (f"\n  ... and {len(lines) - 20} more" if len(lines) > 20 else "") +
        "\n(the fusion report and %xla_ir stage=execution mark them; please report the HLO)"),
        stacklevel=2)


def _fill_value(step) -> np.ndarray:
    """The value of an entry step without operands (a constant fill), computed now."""
    thunk, _, _, places = step
    if places is None:
        return thunk([])
    return thunk([], [np.empty(dims, dtype) for _, dims, dtype in places])


def _temporary_bytes(plan) -> int:
    """Bytes of the arena values that are no results (the arena's actual use; its size also
    covers the results it planned, which get their own memory).  Why: gemver's 320 KB result
    made a 323 KB arena, allocated on every call, for two 1.6 KB temporaries."""
    return sum(v.size for v in plan.values.values()
               if v.kind == "arena" and v.end < plan.length and v.offset is not None)


def kernel_computations(module: Module, native=frozenset()):
    """(symbol, computation) of each distinct kernel of the module's programs, and (symbol,
    instruction) for every fusion and standalone kernel op: what ``compile_kernels`` is given.
    The entry's window updates (``window_updates.py``) get kernels of their own."""
    return _share_identical_kernels(_kernel_symbols(program_computations(module, native)),
                                    window_update_fusions(module))


def kernel_llvm_ir(module: Module, light: frozenset = frozenset()):
    """The LLVM IR (before optimization), specs and refusals of the module's kernels
    (``EmittedKernels``), without compiling them: what a second probe of a program with
    unknown dimensions is compared by.  No kernel is light unless named in ``light``: whether
    one is depends on its size, which a program with unknown dimensions does not fix."""
    distinct, compiled = kernel_computations(module)
    return emit_llvm_ir(module.name, distinct, ARRAY_DATA_OFFSET, light, in_place_symbols(module, compiled))


def light_kernel_symbols(module: Module, distinct, compiled) -> frozenset:
    """The kernels whose loops LLVM does not unroll (``codegen.cpu.light_kernel``): small ones
    that only the entry runs, once per call (a loop body's run once per iteration)."""
    entry = {id(i) for i in module.entry.instructions}
    elsewhere = {symbol for symbol, instr in compiled if id(instr) not in entry}
    return frozenset(symbol for symbol, comp in distinct if symbol not in elsewhere and light_kernel(comp))


def _kernel_symbols(computations: list[Computation]) -> list[tuple[str, Instruction]]:
    """(symbol, instruction) for every fusion and standalone kernel op of the programs.

    Symbols get a prefix (a fusion named like a libm function, "cbrt", must not become the
    definition its own body calls) and are unique across computations (the entry's come
    first and keep the plain form)."""
    taken, out = set(), []
    for comp in computations:
        for instr in comp.instructions:
            if instr.opcode != "fusion" and instr.opcode not in OWN_KERNEL and not _dot_without_library(instr) \
                    and not _sort_without_library(instr):
                continue
            base = symbol = "nbxla_" + instr.name.replace(".", "_").replace("-", "_")
            suffix = 2
            while symbol in taken:
                symbol, suffix = f"{base}_v{suffix}", suffix + 1
            taken.add(symbol)
            out.append((symbol, instr))
    return out


def _dot_without_library(instr: Instruction) -> bool:
    """A dot no library call takes (integer, f16 or mixed element types): the native dot kernel
    (codegen/dot_kernels.py) computes it instead of the evaluator."""
    return instr.opcode == "dot" and not DotThunk.applies(instr) and not WidenedDotThunk.applies(instr)


def _sort_without_library(instr: Instruction) -> bool:
    """A sort whose comparator NumPy's sort cannot follow, or can only for calls without NaN
    keys (a plain float comparison): the native sort kernel (codegen/sort_kernel.py, the
    evaluator's merge sort) computes it (those calls) instead of the evaluator."""
    return instr.opcode == "sort" and (not sort_has_library_call(instr) or sort_may_defer(instr))


def _kernel_computation(instr: Instruction) -> Computation:
    return instr.attrs["calls"] if instr.opcode == "fusion" else standalone_computation(instr)


def _share_identical_kernels(compiled: list[tuple[str, Instruction]], updates=frozenset()):
    """(symbol, computation) of each distinct kernel, and every (symbol, instruction) with the
    symbol of the first identical kernel.  Why: a time loop unrolled by tracing gives the same
    few kernels once per step, and LLVM's optimizer costs tens of ms per kernel."""
    first: dict[str, str] = {}
    distinct, shared = [], []
    comps = [(symbol, instr, _kernel_computation(instr)) for symbol, instr in compiled]
    # (Identical kernels have as many instructions: a kernel alone in its count is keyed by its
    # symbol, not its text -- printing eos's 900-instruction kernel was 8 ms per emission.)
    counts = Counter((instr.opcode, len(comp.instructions)) for _, instr, comp in comps)
    for symbol, instr, comp in comps:
        if counts[instr.opcode, len(comp.instructions)] == 1:
            distinct.append((symbol, comp))
            shared.append((symbol, instr))
            continue
        # (with the axes known only at run time, which change the code: symbolic_compile.py)
        key = instr.opcode + ("-in-place" if id(instr) in updates else "") + "\n" + structure_key(comp) + \
            repr(getattr(comp, "unknown_axes", "")) + repr(getattr(comp, "unknown_shapes", ""))
        if key not in first:
            first[key] = symbol
            distinct.append((symbol, comp))
        shared.append((first[key], instr))
    return distinct, shared

