"""Ahead-of-time objects with unknown dimensions: one function for every size (``f32[?,784]``).

The program is the one a jit compile with unknown dimensions makes (``symbolic_compile``: traced
and optimized at two sizes of every symbol, the same program up to the symbols).  Its kernels
take their sizes from their ``[begin, end)`` range, or read them from a size array
(``toolkit.RunSizes``), so the object holds one copy of each, emitted from the program bound to
a probe size; the kernels emitted at a second probe must be the same LLVM IR, and their ranges
and sizes scale with the symbols (``k*b``, ``k*m*n``).  The driver is C generated here from the
*symbolic* program: every buffer size, range, dot shape and size argument is a C expression of
the sizes, read from the size vector ``sz`` every program takes::

    static int P(const int64_t *sz, void *const *in, void *const *out, char *scratch);
    static int64_t P_bytes(const int64_t *sz);      /* the scratch P needs at these sizes */

**Planning.**  As the static driver (``aot_driver``) does, but with sizes as expressions:
temporaries are placed once, at compile time, in *slots* of the scratch area by their
lifetimes (a slot is reused by a value born after the last reader of the one before, when
one's size is at most the other's at every size: ``SizeProduct.fits_in``); the slots' offsets
are sums of their sizes, computed when the program runs.  After the slots comes one region
each step may use while it runs (a dot's transposed operands and packed panels, a loop's second
state buffers and its condition's and body's scratch).  The object's function keeps one arena
per thread, grown only when a call needs more than the last (``NAME_arena`` takes the caller's
own, ``NAME_scratch_bytes`` says its size).

**Loops and calls.**  ``while``, ``call`` and ``conditional`` run their computations as C
functions of the same kind (the sizes passed on): a loop keeps its state in two sets of
buffers and swaps them after each iteration (leaves the body passes on unchanged stay in one).

What the driver covers: kernels (fusions and standalone kernel ops: elementwise, row, column
and full reductions), dots on f32/f64 (the runtime's GEMM, operands transposed first where the
dot is not of matmul form: ``x.T @ g``), views (tuple, get-tuple-element, row-major reshape and
bitcast), constants, the sizes a program reads as values and control flow.  Anything else is
refused with an ``AotError`` naming the instruction (compile a fixed size instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import AotError
from ..hlo.aliasing import is_byte_view
from ..hlo.evaluator_common import label
from ..hlo.evaluator_linalg import SOLVE_TARGET
from ..hlo.ir import Computation, Instruction, Module
from ..hlo.shapes import Shape, SymDim
from ..hlo.symbolic import SizeProduct, size_from_probes
from .aot_driver import branch_computations, branch_pick, leaf_shapes, moved_leaves
from .aot_library import solve_kind
from .toolkit import KernelSpec

GEMM_TYPES = ("f32", "f64")
PREFIX = "S_"           # C variables of the sizes inside the driver (``S_b``): no clash with its names
# (C helpers of the generated code: a slot's bytes, 64-aligned and never 0, and a maximum)
MACROS = ("#define NBXLA_A(n) (((((int64_t)(n)) > 0 ? ((int64_t)(n)) : 1) + 63) / 64 * 64)\n"
          "#define NBXLA_SMAX(a, b) ((a) > (b) ? (a) : (b))\n")


def c_size(value, prefix: str = PREFIX) -> str:
    """An int, ``k*b`` or ``k*m*n`` as a C expression of the size variables."""
    p = SizeProduct.of(value)
    if not p.names or not p.coeff:
        return str(p.coeff)
    factors = " * ".join(prefix + n for n in p.names)
    if p.coeff == 1:
        return factors if len(p.names) == 1 else f"({factors})"
    return f"((int64_t){p.coeff} * {factors})"


def shape_size(shape: Shape, itemsize: int = 1) -> SizeProduct:
    """Elements (times ``itemsize``) of a shape with unknown dimensions."""
    size = SizeProduct(itemsize)
    for d in shape.dims:
        size = size * d
    return size


def byte_size(shape: Shape) -> SizeProduct:
    return shape_size(shape, shape.dtype.itemsize)


@dataclass
class _Temp:
    """A temporary of a program: lives from its step to its last reader's, in one slot."""
    size: SizeProduct
    born: int
    last: int = -1
    slot: int = -1

    @property
    def c(self) -> str:
        return f"@T{id(self)}@"         # (a placeholder until the slots are planned)


@dataclass
class SymbolicProgram:
    """One computation as a C function over the size vector (see the module docstring)."""
    symbol: str
    text: str = ""
    identity: list = field(default_factory=list)     # result leaf k is parameter leaf k

    @property
    def bytes_fn(self) -> str:
        return f"{self.symbol}_bytes"


class _Room:
    """Places in the region for one step's temporaries (offsets as C expressions)."""

    def __init__(self):
        self.offset = "0"

    def take(self, nbytes: str) -> str:
        place = f"(void *)(region + {self.offset})"
        self.offset = f"{self.offset} + NBXLA_A({nbytes})" if self.offset != "0" else f"NBXLA_A({nbytes})"
        return place


class SymbolicDriver:
    """The C functions running a symbolic module, over kernels emitted at two probes."""

    def __init__(self, symbolic: Module, probes: tuple[Module, Module], sizes: tuple[dict, dict],
                 kernels, kernels2, parallel_threshold: int, user_params: int, lifted: list, prefix: str,
                 host_lapack: bool = False):
        """``probes``: ``symbolic`` bound to each of ``sizes`` (symbol -> size); ``lifted``: the
        sizes the entry reads as its trailing parameters (after ``user_params``); ``host_lapack``:
        the library gets NumPy's LAPACK when loaded (a jit's native loops, never an AOT object)."""
        self.symbolic, self.sizes = symbolic, sizes
        self.host_lapack = host_lapack
        self.kernels, self.kernels2 = kernels, kernels2
        self.threshold, self.user_params, self.lifted = parallel_threshold, user_params, lifted
        self.prefix = prefix
        self.symbols = sorted(sizes[0])
        self.pairs = {}
        for comp, c1, c2 in zip(symbolic.computations, probes[0].computations, probes[1].computations):
            self.pairs[id(comp)] = ({i.name: i for i in c1.instructions}, {i.name: i for i in c2.instructions})
        self.programs: dict[int, SymbolicProgram] = {}
        self.order: list[SymbolicProgram] = []

    def scaled(self, v1: int, v2: int, what: str):
        found = size_from_probes(v1, v2, self.sizes)
        if found is None:
            raise AotError(f"{what} ({v1} at one size, {v2} at another) is not a product of the unknown sizes")
        return found

    def program(self, comp: Computation, entry: bool = False) -> SymbolicProgram:
        found = self.programs.get(id(comp))
        if found is None:
            symbol = f"{self.prefix}_p{len(self.programs) + 1}"
            self.programs[id(comp)] = found = SymbolicProgram(symbol)   # (numbered before its callees)
            _Emitter(self, comp, found, entry).emit()
            self.order.append(found)
        return found

    def source(self) -> str:
        declarations = "".join(f"static int {p.symbol}(const int64_t *, void *const *, void *const *, char *);\n"
                               f"static int64_t {p.bytes_fn}(const int64_t *);\n" for p in self.order)
        return MACROS + declarations + "\n".join(p.text for p in self.order)

    def size_declarations(self) -> str:
        names = ", ".join(f"{PREFIX}{n} = sz[{k}]" for k, n in enumerate(self.symbols))
        unused = " ".join(f"(void){PREFIX}{n};" for n in self.symbols)
        return f"const int64_t {names}; {unused}" if self.symbols else "(void)sz;"


class _Emitter:
    def __init__(self, driver: SymbolicDriver, comp: Computation, program: SymbolicProgram, entry: bool):
        self.driver, self.comp, self.program, self.entry = driver, comp, program, entry
        self.by_name = driver.pairs[id(comp)]
        self.lines: list[str] = []
        self.values: dict[int, list] = {}
        self.temps: list[_Temp] = []
        self.needs: list[str] = []          # region bytes of the steps (C expressions)
        self.step = 0

    # ---- the program ----------------------------------------------------------------------

    def emit(self) -> None:
        comp = self.comp
        places = self._root_places()
        base, n = {}, 0
        for p in comp.parameters:
            base[p.parameter_number] = n
            n += len(leaf_shapes(p.shape))
        self.base = base
        for index, instr in enumerate(comp.instructions):
            self.step = index
            for o in instr.operands:                # (views pass the same temporaries on)
                for leaf in self.values[id(o)]:
                    if isinstance(leaf, _Temp):
                        leaf.last = max(leaf.last, index)
            self.lines.append(f"/* %{instr.name} = {instr.opcode} */")
            self.values[id(instr)] = self._step(instr, places.get(id(instr)))
        root = self.values[id(comp.root)]
        end = len(comp.instructions)
        for k, (leaf, shape) in enumerate(zip(root, leaf_shapes(comp.root.shape))):
            if isinstance(leaf, _Temp):
                leaf.last = end
            text = self._c(leaf)
            if text != f"out[{k}]":
                self.lines.append(f"if (out[{k}] != {text}) memcpy(out[{k}], {text}, {c_size(byte_size(shape))});")
        self.program.identity = [self._c(leaf) == f"in[{k}]" for k, leaf in enumerate(root)]
        slots = self._plan()
        decl = self.driver.size_declarations()
        pointers, previous = [], "scratch"
        for k, size in enumerate(slots):
            pointers.append(f"char *s{k} = {previous};")
            previous = f"s{k} + NBXLA_A({c_size(size)})"
        pointers.append(f"char *region = {previous}; (void)region;")
        body = "\n".join("    " + line for line in self.lines)
        body = re.sub(r"@T(\d+)@", lambda m: f"(void *)s{self._slot_of[int(m.group(1))]}", body)
        total = " + ".join(f"NBXLA_A({c_size(s)})" for s in slots) or "0"
        needs = "".join(f"    r = NBXLA_SMAX(r, (int64_t)({need}));\n" for need in self.needs)
        p = self.program
        p.text = (f"/* {self.comp.name} */\n"
                  f"static int64_t {p.bytes_fn}(const int64_t *sz) {{\n    {decl}\n    int64_t r = 0;\n{needs}"
                  f"    return {total} + r;\n}}\n"
                  f"static int {p.symbol}(const int64_t *sz, void *const *in, void *const *out, char *scratch) {{\n"
                  f"    {decl}\n    int rc = 0;\n    (void)in; (void)out; (void)scratch;\n"
                  + "".join(f"    {line}\n" for line in pointers) + f"{body}\n    return rc;\n}}\n")

    def _plan(self) -> list[SizeProduct]:
        """Slots for the temporaries by lifetime (see the module docstring); their sizes."""
        slots: list[SizeProduct] = []
        holder: list[_Temp | None] = []
        self._slot_of = {}
        for temp in sorted(self.temps, key=lambda t: t.born):
            temp.last = max(temp.last, temp.born)
            best = None
            for k, held in enumerate(holder):
                if held is not None and held.last >= temp.born:
                    continue
                if temp.size.fits_in(slots[k]) or slots[k].fits_in(temp.size):
                    if best is None or slots[k] == temp.size:
                        best = k
            if best is None:
                slots.append(temp.size)
                holder.append(temp)
                best = len(slots) - 1
            else:
                if not temp.size.fits_in(slots[best]):
                    slots[best] = temp.size
                holder[best] = temp
            temp.slot = best
            self._slot_of[id(temp)] = best
        return slots

    def _root_places(self) -> dict[int, list]:
        """Steps whose result leaves are written straight into the caller's results (through
        get-tuple-elements: a loop's state): id -> [place or None per leaf]."""
        root = self.comp.root
        leaves = root.operands if root.opcode == "tuple" else [root]
        places: dict[int, list] = {}
        for k, leaf in enumerate(leaves):
            index = 0
            while leaf.opcode == "get-tuple-element" and not leaf.shape.is_tuple:
                elements = leaf.operands[0].shape.elements
                index += sum(len(leaf_shapes(e)) for e in elements[:leaf.attrs["index"]])
                leaf = leaf.operands[0]
            if leaf.shape.is_tuple and leaf.opcode not in ("while", "call", "conditional") or \
                    leaf.opcode in ("parameter", "constant", "tuple", "get-tuple-element") or is_byte_view(leaf):
                continue
            found = places.setdefault(id(leaf), [None] * len(leaf_shapes(leaf.shape)))
            if found[index] is None:
                found[index] = f"out[{k}]"
        return places

    # ---- buffers --------------------------------------------------------------------------

    def _c(self, leaf) -> str:
        return leaf.c if isinstance(leaf, _Temp) else leaf

    def _leaves(self, instr: Instruction) -> list[str]:
        return [self._c(leaf) for leaf in self.values[id(instr)]]

    def _array(self, instr: Instruction) -> str:
        (c,) = self._leaves(instr)
        return c

    def _outputs(self, instr: Instruction, place, skip=()) -> list:
        """The buffers of the instruction's result leaves (None for those in ``skip``)."""
        out = []
        for k, shape in enumerate(leaf_shapes(instr.shape)):
            if k in skip:
                out.append(None)
            elif place is not None and place[k] is not None:
                out.append(place[k])
            else:
                temp = _Temp(byte_size(shape), self.step)
                self.temps.append(temp)
                out.append(temp)
        return out

    # ---- steps ----------------------------------------------------------------------------

    def _step(self, instr: Instruction, place) -> list:
        op = instr.opcode
        if op == "parameter":
            number = instr.parameter_number
            if not self.entry or number < self.driver.user_params:
                return [f"in[{self.base[number] + k}]" for k in range(len(leaf_shapes(instr.shape)))]
            size, dtype = self.driver.lifted[number - self.driver.user_params]
            c_type = {"f": {4: "float", 8: "double"}, "i": {4: "int32_t", 8: "int64_t"}}[dtype.kind][dtype.itemsize]
            self.lines.append(f"{c_type} size{number} = ({c_type}){c_size(size)};")
            return [f"&size{number}"]
        moved = moved_leaves(instr, self.values, self._constant)
        if moved is not None:
            return moved
        if op == "dot":
            return self._dot(instr, place)
        if op == "while":
            return self._while(instr, place)
        if op == "call":
            outs = self._outputs(instr, place)
            callee = self.driver.program(instr.attrs["to_apply"])
            self._call(callee, [c for o in instr.operands for c in self._leaves(o)], [self._c(x) for x in outs])
            self.needs.append(f"{callee.bytes_fn}(sz)")
            return outs
        if op == "conditional":
            return self._conditional(instr, place)
        if op == "custom-call" and instr.attrs.get("custom_call_target") == SOLVE_TARGET:
            return self._solve(instr, place)
        try:
            spec = self.driver.kernels.kernel(self.by_name[0][instr.name])
            spec2 = self.driver.kernels2.kernel(self.by_name[1][instr.name])
        except (AotError, KeyError) as e:
            raise AotError(f"{label(instr)} ({op}) has no code path with unknown dimensions ahead of time "
                           f"({e}); compile a fixed size instead") from None
        return self._kernel(instr, spec, spec2, place)

    def _constant(self, data: bytes) -> str:
        self.driver.kernels2.constant(data)     # (the two probes' modules stay comparable as text)
        return f"(void *){self.driver.kernels.constant(data)}"

    def _scaled(self, spec: KernelSpec, spec2: KernelSpec, field_name: str):
        return self.driver.scaled(getattr(spec, field_name), getattr(spec2, field_name),
                                  f"the {field_name} of kernel {spec.name}")

    def _kernel(self, instr: Instruction, spec: KernelSpec, spec2: KernelSpec, place) -> list:
        ins = [c for o in instr.operands for c in self._leaves(o)]
        leaves = self._outputs(instr, place)
        outs = [self._c(x) for x in leaves]
        extent, work = c_size(self._scaled(spec, spec2, "parallel_extent")), c_size(self._scaled(spec, spec2, "work_per_unit"))
        sizes = [c_size(self.driver.scaled(a, b, f"a size kernel {spec.name} reads"))
                 for a, b in zip(spec.sizes, spec2.sizes)]
        lines = ["{"]
        if sizes:
            lines.append(f"    int64_t sizes[{len(sizes)}] = {{{', '.join(sizes)}}};")
        if spec.style == "full-reduce":
            slots = max(1, spec.scratch_slots)
            lines += [f"    int64_t slots[{slots}];",
                      f"    void *p[] = {{{', '.join(ins + ['slots'])}}};",
                      f"    {spec.name}(p, 0, {extent});",
                      f"    void *q[] = {{{', '.join(ins + outs + ['slots'])}}};",
                      f"    {spec.finish_name}(q, 1, 0);", "}"]
        else:
            pointers = ins + outs + (["sizes"] if sizes else [])
            lines += [f"    void *p[] = {{{', '.join(pointers)}}};",
                      f"    if ({extent} >= 2 && {extent} * {work} >= {self.driver.threshold}) "
                      f"nbxla_parallel({spec.name}, p, {extent});",
                      f"    else {spec.name}(p, 0, {extent});", "}"]
        self.lines += lines
        return leaves

    def _dot(self, instr: Instruction, place) -> list:
        """A GEMM per batch over operands put in [batch, m, k] and [batch, k, n] order (an
        operand in another order -- ``x.T @ g`` contracts x's leading, unknown, dimension --
        is transposed into the region first, its dimensions given when the call runs)."""
        lhs, rhs = instr.operands
        a = instr.attrs
        lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
        lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
        lfree = [d for d in range(lhs.shape.rank) if d not in lb + lc]
        rfree = [d for d in range(rhs.shape.rank) if d not in rb + rc]
        t = instr.shape.element_type
        if t not in GEMM_TYPES or lhs.shape.element_type != t or rhs.shape.element_type != t:
            raise AotError(f"{label(instr)}: with unknown dimensions, only dots on {'/'.join(GEMM_TYPES)} "
                           "operands of the result's type compile ahead of time; compile a fixed size instead")
        ld, rd = lhs.shape.dims, rhs.shape.dims

        def product(dims):
            size = SizeProduct(1)
            for d in dims:
                size = size * d
            return c_size(size)
        batch, m = product(ld[d] for d in lb), product(ld[d] for d in lfree)
        k, n = product(ld[d] for d in lc), product(rd[d] for d in rfree)
        (out_leaf,) = self._outputs(instr, place)
        room = _Room()
        pointers = []
        self.lines.append("{")
        for name, operand, perm in (("a", lhs, lb + lfree + lc), ("b", rhs, rb + rc + rfree)):
            source = self._array(operand)
            if perm != sorted(perm):
                if len(perm) > 16:
                    raise AotError(f"{label(instr)}: a dot operand of rank {len(perm)} (> 16) cannot be "
                                   "compiled ahead of time")
                place_c = room.take(c_size(byte_size(operand.shape)))
                self.lines += [f"    const int64_t {name}_dims[] = {{{', '.join(c_size(d) for d in operand.shape.dims)}}};",
                               f"    static const int64_t {name}_perm[] = {{{', '.join(map(str, perm))}}};",
                               f"    nbxla_transpose({source}, {place_c}, {len(perm)}, {name}_dims, {name}_perm, "
                               f"{operand.shape.dtype.itemsize});"]
                source = place_c
            pointers.append(source)
        # (the GEMM packs B into panels of NBXLA_NR = 16 columns)
        packed = room.take(f"(({n}) + 15) / 16 * 16 * ({k}) * {instr.shape.dtype.itemsize}")
        self.lines += [f"    nbxla_gemm_{t}({batch}, {m}, {n}, {k}, {pointers[0]}, {pointers[1]}, "
                       f"{self._c(out_leaf)}, {packed});", "}"]
        self.needs.append(room.offset)
        return [out_leaf]

    def _solve(self, instr: Instruction, place) -> list:
        """``nbxla_linalg_solve`` (a[..., n, n], b[..., n, k]) through the runtime's
        ``nbxla_solve`` (LAPACK's ?gesv), its batch, n and k read from the size vector when it
        runs; its work (a's copy, the pivots) in the region."""
        kind = solve_kind(self.driver, instr)
        a, b = instr.operands
        esize = instr.shape.dtype.itemsize
        batch = SizeProduct(1)
        for d in a.shape.dims[:-2]:
            batch = batch * d
        n, nrhs = c_size(a.shape.dims[-1]), c_size(b.shape.dims[-1])
        (out_leaf,) = self._outputs(instr, place)
        self.lines.append(f"if ((rc = nbxla_solve({kind}, {self._array(a)}, {self._array(b)}, "
                          f"{self._c(out_leaf)}, {c_size(batch)}, {n}, {nrhs}, {esize}, region))) return rc;")
        self.needs.append(f"({n}) * ({n}) * {esize} + 8 * ({n})")
        return [out_leaf]

    def _pointer_list(self, name: str, items: list[str]) -> str:
        return f"void *{name}[{max(1, len(items))}] = {{{', '.join(items) or '0'}}};"

    def _call(self, callee: SymbolicProgram, ins: list[str], outs: list[str], indent: str = "") -> None:
        self.lines += [indent + "{", indent + "    " + self._pointer_list("pi", ins),
                       indent + "    " + self._pointer_list("po", outs),
                       indent + f"    if ((rc = {callee.symbol}(sz, pi, po, region))) return rc;", indent + "}"]

    def _while(self, instr: Instruction, place) -> list:
        """As the static driver's loop (``aot_driver``): the body reads one set of state buffers
        and writes the other, the two swapped after each iteration."""
        cond = self.driver.program(instr.attrs["condition"])
        body = self.driver.program(instr.attrs["body"])
        # (a leaf the body passes on unchanged is only read: the loop reads it where it is)
        init_leaves = self.values[id(instr.operands[0])]
        fixed = {k for k, same in enumerate(body.identity) if same}
        state_leaves = [src if leaf is None else leaf
                        for src, leaf in zip(init_leaves, self._outputs(instr, place, fixed))]
        state = [self._c(x) for x in state_leaves]
        init = self._leaves(instr.operands[0])
        sizes = [c_size(byte_size(s)) for s in leaf_shapes(instr.shape)]
        room = _Room()
        second = [None if same else room.take(size) for same, size in zip(body.identity, sizes)]
        pred = room.take("1")
        nested = f"(region + {room.offset})"
        self.needs.append(f"{room.offset} + NBXLA_SMAX({cond.bytes_fn}(sz), {body.bytes_fn}(sz))")
        count = max(1, len(state))
        self.lines += ["{", f"    void *cur[{count}] = {{{', '.join(state) or '0'}}};",
                       f"    void *nxt[{count}] = {{{', '.join(s if o is None else o for s, o in zip(state, second)) or '0'}}};",
                       f"    unsigned char *pred = (unsigned char *){pred};", "    void *pd[1] = {pred};"]
        self.lines += [f"    if (cur[{k}] != {src}) memcpy(cur[{k}], {src}, {size});"
                       for k, (src, size) in enumerate(zip(init, sizes))]
        swaps = [f"t = cur[{k}]; cur[{k}] = nxt[{k}]; nxt[{k}] = t;" for k, o in enumerate(second) if o is not None]
        self.lines += ["    for (;;) {",
                       f"        if ((rc = {cond.symbol}(sz, cur, pd, {nested}))) return rc;",
                       "        if (!*pred) break;",
                       f"        if ((rc = {body.symbol}(sz, cur, nxt, {nested}))) return rc;",
                       "        void *t; (void)t;"] + ["        " + s for s in swaps] + ["    }"]
        self.lines += [f"    if (cur[{k}] != {s}) memcpy({s}, cur[{k}], {size});"
                       for k, (s, size) in enumerate(zip(state, sizes))] + ["}"]
        return state_leaves

    def _conditional(self, instr: Instruction, place) -> list:
        branches = [self.driver.program(c) for c in branch_computations(instr)]
        outs = self._outputs(instr, place)
        self.lines += ["{", "    " + branch_pick(instr, self._array(instr.operands[0])), "    switch (k) {"]
        for k, branch in enumerate(branches):
            self.lines.append(f"    case {k}:")
            self._call(branch, self._leaves(instr.operands[1 + k]), [self._c(x) for x in outs], "        ")
            self.lines.append("        break;")
        self.lines += ["    }", "}"]
        self.needs += [f"{b.bytes_fn}(sz)" for b in branches]
        return outs


def _size_params(symbols: list[str]) -> list[str]:
    return [f"int64_t {n}" for n in symbols]


def entry_points(name: str, program: SymbolicProgram, symbols: list[str], arg_types: list[str],
                 result_types: list[str], lower: dict, upper: dict) -> str:
    """``NAME`` (a per-thread arena, grown when a call needs more), ``NAME_arena`` (the caller's
    arena), ``NAME_scratch_bytes`` and ``NAME_release`` (frees this thread's arena)."""
    sizes = _size_params(symbols)
    data = [f"const {c} *arg{k}" for k, c in enumerate(arg_types)] + [f"{c} *result{k}" for k, c in enumerate(result_types)]
    ins = ", ".join(f"(void *)arg{k}" for k in range(len(arg_types))) or "0"
    outs = ", ".join(f"(void *)result{k}" for k in range(len(result_types))) or "0"
    vector = f"int64_t sz[{max(1, len(symbols))}] = {{{', '.join(symbols) or '0'}}};"
    check = " || ".join(f"{n} < {lower[n]} || {n} > {upper[n]}" for n in symbols) or "0"
    setup = (f"    if ({check}) return 2;\n    {vector}\n"
             f"    void *in[{max(1, len(arg_types))}] = {{{ins}}};\n"
             f"    void *out[{max(1, len(result_types))}] = {{{outs}}};\n")
    return (vector_entry_point(f"{name}_vector", program, f"{name}_tls") + "\n"
            f"int64_t {name}_scratch_bytes({', '.join(sizes) or 'void'}) {{\n    {vector}\n"
            f"    return NBXLA_A({program.bytes_fn}(sz));\n}}\n\n"
            f"int {name}_arena({', '.join(sizes + data + ['void *arena'])}) {{\n{setup}"
            f"    return {program.symbol}(sz, in, out, (char *)arena);\n}}\n\n"
            f"int {name}({', '.join(sizes + data)}) {{\n{setup}"
            f"    return {name}_vector(sz, in, out);\n}}\n\n"
            f"void {name}_release(void) {{\n    if ({name}_tls_arena) pthread_setspecific({name}_tls_key, 0);\n"
            f"    free({name}_tls_arena);\n    {name}_tls_arena = 0;\n    {name}_tls_bytes = 0;\n}}\n")


def vector_entry_point(name: str, program: SymbolicProgram, arena: str | None = None) -> str:
    """``int NAME(const int64_t *sz, void *const *in, void *const *out)``: ``program`` at the
    sizes ``sz`` in a per-thread arena (``arena``: the prefix of its variables; declared here
    when None), grown when a call needs more and freed when its thread exits (a pthread key's
    destructor: threads of a pool come and go)."""
    arena = arena or f"{name}_tls"
    return (f"static _Thread_local char *{arena}_arena;\nstatic _Thread_local int64_t {arena}_bytes;\n"
            f"static pthread_key_t {arena}_key;\nstatic pthread_once_t {arena}_once = PTHREAD_ONCE_INIT;\n"
            f"static void {arena}_make_key(void) {{ pthread_key_create(&{arena}_key, free); }}\n"
            f"int {name}(const int64_t *sz, void *const *in, void *const *out) {{\n"
            f"    int64_t need = NBXLA_A({program.bytes_fn}(sz));\n"
            f"    if (need > {arena}_bytes) {{\n"
            f"        pthread_once(&{arena}_once, {arena}_make_key);\n"
            f"        free({arena}_arena);\n"
            f"        {arena}_arena = aligned_alloc(64, need);\n"
            f"        {arena}_bytes = {arena}_arena ? need : 0;\n"
            f"        pthread_setspecific({arena}_key, {arena}_arena);\n"
            f"        if (!{arena}_arena) return 1;\n    }}\n"
            f"    return {program.symbol}(sz, in, out, {arena}_arena);\n}}\n")


def header(name: str, symbols: list[str], arg_shapes, result_shapes, c_types: dict, lower: dict, upper: dict,
           description: str) -> str:
    guard, upper_name = f"NBXLA_AOT_{name.upper()}_H", name.upper()
    sig = "(" + ", ".join(s.to_text(False) for s in arg_shapes) + ") -> (" + \
        ", ".join(s.to_text(False) for s in result_shapes) + ")"
    names = ", ".join(symbols)
    plural = len(symbols) > 1
    lines = [f"/* {name}.h: generated by nbxla (ahead-of-time compilation); link {name}.o with -lm -lpthread.", " *"]
    lines += [" * " + line if line else " *" for line in description.replace("*/", "* /").splitlines()]
    lines += [" *", f" * signature: {sig}",
              f" * {names} {'are the unknown sizes: the function' if plural else 'is the unknown size: the function'}'s "
              f"first argument{'s' if plural else ''}, each within {upper_name}_MIN_<NAME>..{upper_name}_MAX_<NAME>.",
              " * Arrays are row-major and contiguous; results must not overlap the arguments.",
              f" * {name}() returns 0 on success, 1 when its scratch memory cannot be allocated, 2 when a size is",
              " * outside its range (sizes 0 and 1 are specialised: compile a fixed size for them).  It keeps",
              f" * one scratch arena per thread, grown when a call needs more ({name}_release() frees this",
              f" * thread's); {name}_arena() runs in the caller's arena of {name}_scratch_bytes(sizes) bytes",
              " * (64-byte aligned) instead.  Reentrant.",
              " */", f"#ifndef {guard}", f"#define {guard}", "",
              "#include <stdbool.h>", "#include <stdint.h>", "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
              f"#define {upper_name}_NUM_ARGS {len(arg_shapes)}", f"#define {upper_name}_NUM_RESULTS {len(result_shapes)}"]
    for n in symbols:
        lines += [f"#define {upper_name}_MIN_{n.upper()} {lower[n]}", f"#define {upper_name}_MAX_{n.upper()} {upper[n]}"]
    lines.append("")
    for kind, shapes in (("ARG", arg_shapes), ("RESULT", result_shapes)):
        for k, s in enumerate(shapes):
            lines.append(f"/* {kind.lower()}{k}: {s.to_text(False)} */")
            lines.append(f"#define {upper_name}_{kind}{k}_RANK {s.rank}")
            size = c_size(shape_size(s), "")
            for n in symbols:                                   # (a macro's arguments)
                size = re.sub(rf"\b{n}\b", f"({n})", size)
            lines.append(f"#define {upper_name}_{kind}{k}_SIZE({names}) ({size})")
    sizes = _size_params(symbols)
    params = [f"const {c_types[s.element_type]} *arg{k}" for k, s in enumerate(arg_shapes)] + \
        [f"{c_types[s.element_type]} *result{k}" for k, s in enumerate(result_shapes)]
    lines += ["", f"int {name}({', '.join(sizes + params)});",
              f"int {name}_arena({', '.join(sizes + params + ['void *arena'])});",
              f"int64_t {name}_scratch_bytes({', '.join(sizes) or 'void'});",
              f"void {name}_release(void);", "",
              "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def symbols_in(shapes) -> list[str]:
    """The unknown sizes of argument shapes, in order of first appearance."""
    found: list[str] = []
    for s in shapes:
        for d in s.dims:
            if isinstance(d, SymDim) and d.name not in found:
                found.append(d.name)
    return found
