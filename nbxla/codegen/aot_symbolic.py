"""Ahead-of-time objects with an unknown dimension: one function for every size (``f32[?,784]``).

The program is the one a jit compile with unknown dimensions makes (``symbolic_compile``: traced
and optimized at two sizes, the same program up to the symbol).  Its kernels take their sizes
from their ``[begin, end)`` range, or read them from a size array (``toolkit.RunSizes``), so the
object holds one copy of each, emitted from the program bound to a probe size; the kernels
emitted at a second probe must be the same LLVM IR, and their ranges and sizes scale with the
symbol (``k*b``).  The driver is C generated here from the *symbolic* entry: every buffer size,
range, dot shape and size argument is a C expression of ``b``, the function's first parameter,
and temporaries are allocated per call (their sizes are known only then).

    int NAME(int64_t b, const float *arg0, ..., float *result0, ...);

returns 0, 1 when memory cannot be allocated, 2 when ``b`` is outside ``[NAME_MIN_B,
NAME_MAX_B]`` (sizes 0 and 1 are specialised, as under jit: compile a fixed size for those).

What the driver covers: kernels (fusions and standalone kernel ops: elementwise, row, column
and full reductions), plain-form dots (the runtime's GEMM), views (tuple, get-tuple-element,
row-major reshape and bitcast), constants and the sizes a program reads as values.  Anything
else is refused with an ``AotError`` naming the instruction (compile a fixed size instead).
"""

from __future__ import annotations

from ..errors import AotError
from ..hlo.aliasing import is_byte_view
from ..hlo.evaluator_common import label
from ..hlo.ir import Instruction, Module
from ..hlo.shapes import Shape, SymDim
from .aot_driver import leaf_shapes, moved_leaves
from .toolkit import KernelSpec

SYMBOL = "b"
GEMM_TYPES = ("f32", "f64")


def c_size(value, what: str = "a size") -> str:
    """An int or ``k*b`` as a C expression."""
    if isinstance(value, SymDim):
        if value.name != SYMBOL:
            raise AotError(f"{what} depends on the size symbol {value.name}: only one unknown size ({SYMBOL}) "
                           "is supported ahead of time")
        return f"((int64_t){value.coeff} * {SYMBOL})" if value.coeff != 1 else SYMBOL
    return str(int(value))


def c_product(values, factor: int = 1) -> str:
    """The product of ints and ``k*b`` terms (at most one symbolic) times ``factor``, in C."""
    constant, symbolic = factor, None
    for v in values:
        if isinstance(v, SymDim):
            if symbolic is not None:
                raise AotError(f"a size {symbolic} * {v}: a product of two unknown sizes")
            symbolic = v
        else:
            constant *= int(v)
    if symbolic is None:
        return str(constant)
    return c_size(SymDim(symbolic.name, symbolic.coeff * constant)) if constant else "0"


def byte_size(shape: Shape) -> str:
    return c_product(shape.dims, shape.dtype.itemsize)


def symbolic_value(v1: int, v2: int, h1: int, h2: int, what: str):
    """``v`` at both probes as an int or ``k*b`` (h1, h2: the symbol's probe sizes)."""
    if v1 == v2:
        return v1
    if v1 % h1 == 0 and v1 // h1 * h2 == v2:
        return SymDim(SYMBOL, v1 // h1)
    raise AotError(f"{what} ({v1} at one size, {v2} at another) is not a multiple of the unknown size")


class SymbolicDriver:
    """The C function running a symbolic entry computation over kernels emitted at two probes."""

    def __init__(self, symbolic: Module, probes: tuple[Module, Module], sizes: tuple[int, int],
                 kernels, kernels2, parallel_threshold: int, user_params: int, lifted: list):
        self.symbolic, self.probes, self.sizes = symbolic, probes, sizes
        self.kernels, self.kernels2 = kernels, kernels2
        self.threshold, self.user_params, self.lifted = parallel_threshold, user_params, lifted
        self.by_name = [{i.name: i for i in p.entry.instructions} for p in probes]
        self.lines: list[str] = []
        self.temps = 0
        self.values: dict[int, list[str]] = {}

    def emit(self, symbol: str) -> str:
        entry = self.symbolic.entry
        root_leaves = self._root_places(entry)
        for instr in entry.instructions:
            self.lines.append(f"/* %{instr.name} = {instr.opcode} */")
            self.values[id(instr)] = self._step(instr, root_leaves.get(id(instr)))
        for k, (leaf, shape) in enumerate(zip(self.values[id(entry.root)], leaf_shapes(entry.root.shape))):
            if leaf != f"out[{k}]":
                self.lines.append(f"if (out[{k}] != {leaf}) memcpy(out[{k}], {leaf}, {byte_size(shape)});")
        body = "\n".join("    " + line for line in self.lines)
        return (f"static int {symbol}(int64_t {SYMBOL}, void *const *in, void *const *out) {{\n"
                f"    int rc = 0;\n    void *t[{max(1, self.temps)}] = {{0}};\n    (void)in; (void)out;\n"
                f"{body}\ndone:\n    for (int i = 0; i < {max(1, self.temps)}; i++) free(t[i]);\n"
                f"    return rc;\n}}\n")

    def _root_places(self, entry) -> dict[int, list]:
        """Instructions whose result leaves are written straight into the caller's results."""
        root = entry.root
        leaves = root.operands if root.opcode == "tuple" else [root]
        places, seen = {}, set()
        for k, leaf in enumerate(leaves):
            if leaf.shape.is_tuple or id(leaf) in seen or leaf.opcode in ("parameter", "constant") \
                    or is_byte_view(leaf) or leaf.opcode in ("tuple", "get-tuple-element"):
                continue
            seen.add(id(leaf))
            places[id(leaf)] = [f"out[{k}]"]
        return places

    def _temp(self, shape: Shape) -> str:
        return self._allocate(byte_size(shape))

    def _allocate(self, size: str) -> str:
        """A temporary of ``size`` bytes (a C expression), freed when the call returns."""
        n = self.temps
        self.temps += 1
        self.lines.append(f"if (!(t[{n}] = malloc(({size}) ? ({size}) : 1))) {{ rc = 1; goto done; }}")
        return f"t[{n}]"

    def _outputs(self, instr: Instruction, place) -> list[str]:
        return place if place is not None else [self._temp(s) for s in leaf_shapes(instr.shape)]

    def _step(self, instr: Instruction, place) -> list[str]:
        op = instr.opcode
        if op == "parameter":
            number = instr.parameter_number
            if number < self.user_params:
                return [f"in[{number}]"]
            size, dtype = self.lifted[number - self.user_params]
            c_type = {"f": {4: "float", 8: "double"}, "i": {4: "int32_t", 8: "int64_t"}}[dtype.kind][dtype.itemsize]
            self.lines.append(f"{c_type} size{number} = ({c_type}){c_size(size)};")
            return [f"&size{number}"]
        moved = moved_leaves(instr, self.values, lambda data: f"(void *){self.kernels.constant(data)}")
        if moved is not None:
            return moved
        if op == "dot":
            return self._dot(instr, place)
        try:
            spec = self.kernels.kernel(self.by_name[0][instr.name])
            spec2 = self.kernels2.kernel(self.by_name[1][instr.name])
        except (AotError, KeyError) as e:
            raise AotError(f"{label(instr)} ({op}) has no code path with an unknown dimension ahead of time "
                           f"({e}); compile a fixed size instead") from None
        return self._kernel(instr, spec, spec2, place)

    def _scaled(self, spec: KernelSpec, spec2: KernelSpec, field: str):
        return symbolic_value(getattr(spec, field), getattr(spec2, field), *self.sizes,
                              f"the {field} of kernel {spec.name}")

    def _kernel(self, instr: Instruction, spec: KernelSpec, spec2: KernelSpec, place) -> list[str]:
        ins = [leaf for o in instr.operands for leaf in self.values[id(o)]]
        outs = self._outputs(instr, place)
        extent, work = c_size(self._scaled(spec, spec2, "parallel_extent")), c_size(self._scaled(spec, spec2, "work_per_unit"))
        sizes = [c_size(symbolic_value(a, b, *self.sizes, f"a size kernel {spec.name} reads"))
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
                      f"    if ({extent} >= 2 && {extent} * {work} >= {self.threshold}) "
                      f"nbxla_parallel({spec.name}, p, {extent});",
                      f"    else {spec.name}(p, 0, {extent});", "}"]
        self.lines += lines
        return outs

    def _dot(self, instr: Instruction, place) -> list[str]:
        lhs, rhs = instr.operands
        a = instr.attrs
        lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
        lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
        lfree = [d for d in range(lhs.shape.rank) if d not in lb + lc]
        rfree = [d for d in range(rhs.shape.rank) if d not in rb + rc]
        t = instr.shape.element_type
        if lb + lfree + lc != list(range(lhs.shape.rank)) or rb + rc + rfree != list(range(rhs.shape.rank)) \
                or t not in GEMM_TYPES or lhs.shape.element_type != t or rhs.shape.element_type != t:
            raise AotError(f"{label(instr)}: with an unknown dimension, only dots of matmul form on "
                           f"{'/'.join(GEMM_TYPES)} operands compile ahead of time; compile a fixed size instead")
        ld, rd = lhs.shape.dims, rhs.shape.dims
        batch, m = c_product([ld[d] for d in lb]), c_product([ld[d] for d in lfree])
        k, n = c_product([ld[d] for d in lc]), c_product([rd[d] for d in rfree])
        (out,) = self._outputs(instr, place)
        # (the GEMM packs B into panels of NBXLA_NR = 16 columns)
        packed = self._allocate(f"({n} + 15) / 16 * 16 * ({k}) * {instr.shape.dtype.itemsize}")
        self.lines.append(f"nbxla_gemm_{t}({batch}, {m}, {n}, {k}, {self.values[id(lhs)][0]}, "
                          f"{self.values[id(rhs)][0]}, {out}, {packed});")
        return [out]


def entry_point(name: str, symbol: str, arg_types: list[str], result_types: list[str], upper: int) -> str:
    params = [f"int64_t {SYMBOL}"] + [f"const {c} *arg{k}" for k, c in enumerate(arg_types)] + \
        [f"{c} *result{k}" for k, c in enumerate(result_types)]
    ins = ", ".join(f"(void *)arg{k}" for k in range(len(arg_types))) or "0"
    outs = ", ".join(f"(void *)result{k}" for k in range(len(result_types))) or "0"
    return (f"int {name}({', '.join(params)}) {{\n"
            f"    if ({SYMBOL} < 2 || {SYMBOL} > {upper}) return 2;\n"
            f"    void *in[{max(1, len(arg_types))}] = {{{ins}}};\n"
            f"    void *out[{max(1, len(result_types))}] = {{{outs}}};\n"
            f"    return {symbol}({SYMBOL}, in, out);\n}}\n")


def header(name: str, arg_shapes, result_shapes, c_types: dict, upper: int, description: str) -> str:
    guard, upper_name = f"NBXLA_AOT_{name.upper()}_H", name.upper()
    sig = "(" + ", ".join(s.to_text(False) for s in arg_shapes) + ") -> (" + \
        ", ".join(s.to_text(False) for s in result_shapes) + ")"
    lines = [f"/* {name}.h: generated by nbxla (ahead-of-time compilation); link {name}.o with -lm -lpthread.", " *"]
    lines += [" * " + line if line else " *" for line in description.replace("*/", "* /").splitlines()]
    lines += [" *", f" * signature: {sig}",
              f" * {SYMBOL} is the unknown size: the function's first argument, any of {upper_name}_MIN_B..{upper_name}_MAX_B.",
              " * Arrays are row-major and contiguous; results must not overlap the arguments.",
              f" * {name}() returns 0 on success, 1 when its scratch memory cannot be allocated, 2 when {SYMBOL} is",
              " * outside the range (sizes 0 and 1 are specialised: compile a fixed size for them).  Reentrant.",
              " */", f"#ifndef {guard}", f"#define {guard}", "",
              "#include <stdbool.h>", "#include <stdint.h>", "", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
              f"#define {upper_name}_NUM_ARGS {len(arg_shapes)}", f"#define {upper_name}_NUM_RESULTS {len(result_shapes)}",
              f"#define {upper_name}_MIN_B 2", f"#define {upper_name}_MAX_B {upper}", ""]
    for kind, shapes in (("ARG", arg_shapes), ("RESULT", result_shapes)):
        for k, s in enumerate(shapes):
            lines.append(f"/* {kind.lower()}{k}: {s.to_text(False)} */")
            lines.append(f"#define {upper_name}_{kind}{k}_RANK {s.rank}")
            size = c_product(s.dims).replace(SYMBOL, f"({SYMBOL})")       # (a macro's argument)
            lines.append(f"#define {upper_name}_{kind}{k}_SIZE({SYMBOL}) ({size})")
    params = [f"int64_t {SYMBOL}"] + [f"const {c_types[s.element_type]} *arg{k}" for k, s in enumerate(arg_shapes)] + \
        [f"{c_types[s.element_type]} *result{k}" for k, s in enumerate(result_shapes)]
    lines += ["", f"int {name}({', '.join(params)});", "",
              "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)
