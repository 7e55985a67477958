"""Loops of small kernels compiled as one LLVM function, beside the kernels they call.

Why: the driver's C (``aot_driver``) runs a ``while`` by calling its condition's and body's
programs, which call each kernel through a pointer array in another object file, so nothing
is inlined: a scalar loop (an IIR filter, a histogram, CRC-16) paid five calls and the
kernels' setup per iteration, 8-15 ns, where numba's loop takes 1-2 ns.  When a loop's
condition and body (and the loops inside them) consist only of kernels run on one thread,
views and copies (``Program.ops``), the whole loop is emitted here in LLVM IR into the
kernels' module: LLVM inlines the kernels, keeps the state's pointers in registers and
optimizes across the body.  The function has the signature of a driver program,
``void f(void *const *in, void *const *out, char *scratch)``, and resolves buffers exactly
as the C would (the same ``Buffer`` plan), so the driver simply calls it in the loop's place.
Where every program of a module is of this kind, ``entry_point`` makes the entry points in
LLVM as well and the module needs no C at all (``aot.compile_native_loops``: the jit's native
loops are then loaded by LLVM's JIT, with no C compiler or linker run).
"""

from __future__ import annotations

import os

from llvmlite import ir

from .aot_driver import Program, WhileStep

_I8 = ir.IntType(8)
_I64 = ir.IntType(64)
_PTR = _I8.as_pointer()
_PTRS = _PTR.as_pointer()
_PROGRAM = ir.FunctionType(ir.VoidType(), [_PTRS, _PTRS, _PTR])
SMALL_STATE = 64        # bytes: a loop's state leaves up to this size live in registers
# Kernels computing at least this many elements are called, not inlined into the loop: inlined,
# a kernel's loop lost the vectorization it gets alone (its buffers then come from the loop's
# swapped state pointers), and a complex Mandelbrot update ran scalar, 12.5 ns per element
# instead of 1.8 (0.2x NumPy at 12000 points, 0.9x at 480); a call costs a few ns.  Scalar
# loops (an IIR filter, CRC-16) and small kernels still inline, where the call was the cost.
# Measured: 64 made LU's and Cholesky's row updates (~100 elements) 10-20% slower; 256 and
# 1024 left them as they were.
CALLED_KERNEL_ELEMENTS = 256


# In a loop nest this deep (or deeper), every program that runs a loop stays a function of its
# own, called by its loop; in shallower nests everything inlines into the outermost loop.  Why:
# inlined, a deep nest became one function and LLVM's memory passes (GVN, DSE, LICM) grew faster
# than its size (npbench's scattering_self_energies, eight nested loops: 1.1-1.3 s of optimizer
# as one function, 0.5-0.6 s apart; its first call 1.5-1.6 s with the calls, 1.8-2.3 s with the
# innermost loops' bodies inlined); but in shallow nests the calls cost more than LLVM's time
# (the body running the innermost loop called per outer step: seidel_2d, three deep, 154 -> 220
# us; spmv, two deep, 24 -> 50 us, npbench S).
DEEP_NEST = 4


def loop_depth(program: Program) -> int:
    """How deep the loops ``program`` runs are nested (0: it runs none)."""
    return max((1 + max(loop_depth(op[1].cond), loop_depth(op[1].body))
                for op in program.ops or () if op[0] == "while"), default=0)


def llvm_loops_enabled() -> bool:
    """``NBXLA_LLVM_LOOPS=0`` leaves every loop to the driver's C (to compare, or to debug)."""
    return os.environ.get("NBXLA_LLVM_LOOPS", "1") != "0"


def _i64(n: int) -> ir.Constant:
    return ir.Constant(_I64, n)


class LoopFunctions:
    """Emits loop functions (and the programs they run) into ``module``, where the kernels
    named by the programs' ops are defined (and the constants' globals)."""

    def __init__(self, module: ir.Module, prefix: str):
        self.module, self.prefix = module, prefix
        self.programs: dict[str, ir.Function] = {}
        self.pending: list[tuple[str, WhileStep]] = []
        self.deep_nest = False          # (the nest being emitted is DEEP_NEST deep: see there)
        self.names: list[str] = []          # the loops emitted

    def loop(self, step: WhileStep) -> str:
        """The symbol of the function that will run ``step`` (emitted by ``finish`` if some C
        calls it: a loop inside a loop compiled here is part of the outer function)."""
        name = f"{self.prefix}_loop{len(self.pending) + 1}"
        self.pending.append((name, step))
        return name

    def finish(self, c_source: str) -> None:
        """Emit the loops ``c_source`` calls."""
        for name, step in self.pending:
            if f"{name}(in, out, scratch);" in c_source:
                self.deep_nest = 1 + max(loop_depth(step.cond), loop_depth(step.body)) >= DEEP_NEST
                frame = _Frame(self, ir.Function(self.module, _PROGRAM, name))
                frame.run_while(step)
                frame.b.ret_void()
                self.names.append(name)

    def entry_point(self, name: str, program: Program, n_args: int, n_results: int) -> None:
        """``int NAME(args..., results...)`` running ``program`` (as the driver's C entry point
        does): the scratch from aligned_alloc, 1 when that fails, else 0."""
        fn = ir.Function(self.module, ir.FunctionType(ir.IntType(32), [_PTR] * (n_args + n_results)), name)
        frame = _Frame(self, fn, params=False)
        b = frame.b
        ins = frame.pointer_array(list(fn.args[:n_args]), "in")
        outs = frame.pointer_array(list(fn.args[n_args:]), "out")
        scratch = ir.Constant(_PTR, None)
        if program.scratch_bytes:
            alloc = self._libc("aligned_alloc", _PTR, [_I64, _I64])
            scratch = b.call(alloc, [_i64(64), _i64(-(-program.scratch_bytes // 64) * 64)])
            with b.if_then(b.icmp_unsigned("==", scratch, ir.Constant(_PTR, None))):
                b.ret(ir.Constant(ir.IntType(32), 1))
        self.deep_nest = loop_depth(program) >= DEEP_NEST
        b.call(self.program(program), [ins, outs, scratch])
        if program.scratch_bytes:
            b.call(self._libc("free", ir.VoidType(), [_PTR]), [scratch])
        b.ret(ir.Constant(ir.IntType(32), 0))

    def _libc(self, name: str, ret, args) -> ir.Function:
        found = self.module.globals.get(name)
        return found if found is not None else ir.Function(self.module, ir.FunctionType(ret, args), name)

    def program(self, program: Program) -> ir.Function:
        fn = self.programs.get(program.symbol)
        if fn is None:
            fn = ir.Function(self.module, _PROGRAM, f"{program.symbol}_native")
            fn.linkage = "internal"
            if self.deep_nest and loop_depth(program) > 0:
                fn.attributes.add("noinline")
            self.programs[program.symbol] = fn
            frame = _Frame(self, fn)
            for op in program.ops:
                frame.run(op)
            frame.b.ret_void()
        return fn


class _Frame:
    """One function being emitted: its ``in``, ``out`` and ``scratch`` and a builder."""

    def __init__(self, owner: LoopFunctions, fn: ir.Function, params: bool = True):
        self.owner, self.fn = owner, fn
        if params:
            self.ins, self.outs, self.scratch = fn.args
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)

    def _alloca(self, ty, name: str):
        # (in the entry block, before its first instruction: promotable to registers)
        with self.b.goto_entry_block():
            if self.entry.instructions:
                self.b.position_before(self.entry.instructions[0])
            return self.b.alloca(ty, name=name)

    def pointer(self, buf) -> ir.Value:
        b = self.b
        if buf.kind == "in":
            return b.load(b.gep(self.ins, [_i64(buf.index)]))
        if buf.kind == "out":
            return b.load(b.gep(self.outs, [_i64(buf.index)]))
        if buf.kind == "const":
            buf.c                                       # (names the global, as the C does)
            return b.bitcast(self.owner.module.get_global(buf.index), _PTR)
        return b.gep(self.scratch, [_i64(buf.index)])

    def pointer_array(self, values: list, name: str):
        array = self._alloca(ir.ArrayType(_PTR, max(1, len(values))), name)
        for k, v in enumerate(values):
            self.b.store(v, self.b.gep(array, [_i64(0), ir.Constant(ir.IntType(32), k)]))
        return self.b.bitcast(array, _PTRS)

    def _copy(self, dst, src, nbytes: int) -> None:
        memcpy = self.owner.module.declare_intrinsic("llvm.memcpy", [_PTR, _PTR, _I64])
        self.b.call(memcpy, [dst, src, _i64(nbytes), ir.Constant(ir.IntType(1), 0)])

    def _copy_if_different(self, dst, src, nbytes: int) -> None:
        with self.b.if_then(self.b.icmp_unsigned("!=", dst, src)):
            self._copy(dst, src, nbytes)

    def run(self, op) -> None:
        kind = op[0]
        if kind == "kernel":
            _, symbol, buffers, extent, elements = op
            kernel = self.owner.module.get_global(symbol)
            if elements >= CALLED_KERNEL_ELEMENTS:
                kernel.attributes.add("noinline")
            array = self.pointer_array([self.pointer(buf) for buf in buffers], "b")
            self.b.call(kernel, [array, _i64(0), _i64(extent)])
        elif kind == "full-reduce":     # (one chunk, as the C writes it: partial, then finish)
            _, partial, finish, ins, outs, extent, offset = op
            local = self.b.gep(self.scratch, [_i64(offset)])
            ins = [self.pointer(buf) for buf in ins]
            p = self.pointer_array(ins + [local], "p")
            self.b.call(self.owner.module.get_global(partial), [p, _i64(0), _i64(extent)])
            b = self.pointer_array(ins + [self.pointer(buf) for buf in outs] + [local], "b")
            self.b.call(self.owner.module.get_global(finish), [b, _i64(1), _i64(0)])
        elif kind == "copy":
            _, k, buf, nbytes = op
            self._copy_if_different(self.b.load(self.b.gep(self.outs, [_i64(k)])), self.pointer(buf), nbytes)
        elif kind == "while":
            self.run_while(op[1])
        else:
            raise AssertionError(f"unknown native loop op {kind!r}")

    def _local(self, nbytes: int, name: str):
        slot = self._alloca(ir.ArrayType(_I8, max(1, nbytes)), name)
        slot.align = 64
        return self.b.bitcast(slot, _PTR)

    def run_while(self, step: WhileStep) -> None:
        """As ``_ProgramEmitter._while`` writes it in C: the body reads one set of state
        buffers and writes the other (leaves it returns in place stay in one buffer).  Large
        leaves swap their two buffers after each iteration; small ones (a counter, a running
        value: at most ``SMALL_STATE`` bytes) live in two slots of this function, the new value
        copied over the old: LLVM then keeps them in registers instead of memory.  The
        condition's result too."""
        b = self.b
        cond, body = self.owner.program(step.cond), self.owner.program(step.body)
        state = [self.pointer(buf) for buf in step.state]
        small = [off is not None and leaf.nbytes <= SMALL_STATE for leaf, off in zip(step.state, step.second)]
        current = [self._local(leaf.nbytes, f"state{k}") if local else p
                   for k, (leaf, p, local) in enumerate(zip(step.state, state, small))]
        second = [self._local(leaf.nbytes, f"next{k}") if local else
                  s if off is None else b.gep(self.scratch, [_i64(off)])
                  for k, (leaf, s, off, local) in enumerate(zip(step.state, state, step.second, small))]
        cur = self.pointer_array(current, "cur")
        nxt = self.pointer_array(second, "nxt")
        pred = self._local(1, "pred")
        pd = self.pointer_array([pred], "pd")
        region = b.gep(self.scratch, [_i64(step.region)])
        for buf, dst, leaf in zip(step.init, current, step.state):
            self._copy_if_different(dst, self.pointer(buf), leaf.nbytes)
        head = self.fn.append_basic_block("loop.head")
        loop = self.fn.append_basic_block("loop.body")
        done = self.fn.append_basic_block("loop.end")
        b.branch(head)
        b.position_at_end(head)
        b.call(cond, [cur, pd, region])
        b.cbranch(b.icmp_unsigned("!=", b.load(pred), ir.Constant(_I8, 0)), loop, done)
        b.position_at_end(loop)
        b.call(body, [cur, nxt, region])
        for k, (off, local) in enumerate(zip(step.second, small)):
            if local:
                self._copy(current[k], second[k], step.state[k].nbytes)
            elif off is not None:
                at_cur, at_nxt = (b.gep(a, [_i64(k)]) for a in (cur, nxt))
                was = b.load(at_cur)
                b.store(b.load(at_nxt), at_cur)
                b.store(was, at_nxt)
        b.branch(head)
        b.position_at_end(done)
        for k, (leaf, dst) in enumerate(zip(step.state, state)):
            self._copy_if_different(dst, b.load(b.gep(cur, [_i64(k)])), leaf.nbytes)
