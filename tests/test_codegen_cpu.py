"""The CPU backend's code generator against the reference evaluator.

Small fused modules are built directly (a ``fusion`` instruction calling a fused computation)
and compiled with ``build_executable(module, "cpu")`` (no optimizer, so the fusion is exactly
the one written here), or NumPy functions are traced with ``nbxla.jit`` on ``cpu`` and on
``evaluator``.  Integer, boolean and exactly-rounded float results must be *bitwise* equal to
the evaluator's (NaN payloads aside); transcendental ones within ``compare_arrays``'s tolerance.

Compiling costs ~20 ms per kernel (mostly per function, not per instruction), so related ops
share one multi-output fusion and each module is compiled once per test session
(``functools.cache``) and shared by the parametrized tests that check it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import nbxla
from nbxla.errors import NbxlaError
from nbxla.hlo import Builder, Module, Shape, scalar_computation
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.opcodes import OPCODES
from nbxla.hlo.shape_inference import infer_shape
from nbxla.hlo.shapes import to_numpy_dtype
from nbxla.runtime import cpu_executable
from nbxla.runtime.executable import build_executable
from nbxla.testing import compare_arrays

REAL_TYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "f32", "f64"]
COMPLEX_TYPES = ["c64", "c128"]
FLOAT_TYPES = ["f16", "f32", "f64"]


# ---- helpers ----------------------------------------------------------------------------------

def kernel_name(instr_name: str) -> str:
    """The CPU executable keys kernels (and ``interpreted``) by this form of the name."""
    return instr_name.replace(".", "_").replace("-", "_")


def fusion(b: Builder, name: str, operands, build, kind="kLoop"):
    """Add ``name = fusion(operands)`` to ``b``; ``build(fb, *params)`` returns the fused root
    (a tuple for multi-output fusions)."""
    fb = Builder(name + "_computation")
    params = [fb.parameter(o.shape, f"{name}_p{k}") for k, o in enumerate(operands)]
    root = build(fb, *params)
    if isinstance(root, (list, tuple)):
        root = fb.op("tuple", *root)
    comp = fb.build(root)
    return b.op("fusion", *operands, kind=kind, calls=comp, shape=root.shape, name=name)


def compile_and_run(module: Module, inputs: list):
    """(cpu results, evaluator results, the cpu executable's ``interpreted`` dict)."""
    executable = build_executable(module, "cpu")
    got = executable.run(inputs)
    with np.errstate(all="ignore"):
        want = flatten(evaluate(module, inputs))
    return got, want, dict(executable.native.interpreted)


def bitwise_mismatches(got, want, zero_sign_free=False) -> str | None:
    """None when equal bit for bit (NaN payloads aside; with ``zero_sign_free``, +0 == -0)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{got.shape} vs expected {want.dtype}{want.shape}"
    if got.dtype.kind == "c":
        return (bitwise_mismatches(got.real.copy(), want.real.copy(), zero_sign_free)
                or bitwise_mismatches(got.imag.copy(), want.imag.copy(), zero_sign_free))
    if got.dtype.kind == "f":
        u = f"u{got.dtype.itemsize}"
        bad = (got.view(u) != want.view(u)) & ~(np.isnan(got) & np.isnan(want))
        if zero_sign_free:
            bad &= ~((got == 0) & (want == 0))
    else:
        bad = got != want
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)[:4]
    return (f"{int(bad.sum())} of {bad.size} differ, e.g. at flat {idx.tolist()}: "
            f"got {got.ravel()[idx].tolist()}, expected {want.ravel()[idx].tolist()}")


def assert_bitwise(got, want, what="", zero_sign_free=False):
    problem = bitwise_mismatches(got, want, zero_sign_free)
    assert problem is None, f"{what}: {problem}"


def assert_close(got, want, what="", rtol=None):
    ok, detail = compare_arrays(got, want, rtol=rtol)
    assert ok, f"{what}: {detail}"


def jit_pair(fn):
    return nbxla.jit(fn, device="cpu"), nbxla.jit(fn, device="evaluator")


def fusion_names(compilation) -> list[str]:
    return [i.name for i in compilation.optimized.entry.instructions if i.opcode == "fusion"]


def assert_all_native(compilation):
    fusions = fusion_names(compilation)
    interpreted = compilation.executable.native.interpreted
    assert fusions, "expected at least one fusion"
    assert not [f for f in fusions if kernel_name(f) in interpreted], interpreted


# ---- elementwise: every opcode, every dtype ---------------------------------------------------

UNARY = [op for op, info in OPCODES.items()
         if info.elementwise and info.arity == 1 and op not in ("convert", "bitcast-convert", "reduce-precision")]
BINARY = [op for op, info in OPCODES.items() if info.elementwise and info.arity == 2 and op != "compare"]
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")

# Float results that are exactly rounded (or exact): bitwise equal to the evaluator's.
EXACT_FLOAT_OPS = {"add", "subtract", "multiply", "divide", "remainder", "sqrt", "negate", "abs",
                   "sign", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "maximum",
                   "minimum", "select", "clamp", "is-finite", "copy", "not", "and", "or", "xor"}
# The rest (exp, log, tanh, erf, pow, atan2, ...): within compare_arrays' tolerance.
TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "rsqrt", "cbrt",
                  "tanh", "logistic", "sine", "cosine", "tan", "erf", "atan2", "power"}
# Not expected to have native code (yet): checked through the evaluator fallback only.
MAY_BE_INTERPRETED = {"real", "imag", "complex", "compare_TOTALORDER_LT", "compare_TOTALORDER_EQ",
                      "bitcast-convert", "reduce-precision", "convert_c64", "convert_c128"}

# Known codegen bugs, by (dtype, op): xfail(strict) so a fix is noticed.
KNOWN_BUGS = {
    ("pred", "add"): "codegen: pred add is emitted as i1 add (wraps): true+true gives false; "
                     "the evaluator (and XLA/JAX, where bool add is logical or) gives true",
}
# Ops whose native code crashes the process: left out of the shared modules, checked in a
# subprocess (test_known_crashes_in_a_subprocess).
KNOWN_CRASHES = {
    ("f64", "convert_f16"): "codegen: convert f64->f16 is an LLVM fptrunc double->half, lowered to "
                            "a call to compiler-rt's __truncdfhf2, which is not in the process: "
                            "MCJIT leaves the address 0 and the kernel segfaults",
}
# max/min/clamp of (+0, -0): native code follows IEEE 754-2019 maximum/minimum (-0 < +0)
# while the evaluator returns whatever NumPy's np.maximum returns for equal operands, which
# depends on the dtype and on NumPy's inner loop (f16: the first operand, f32/f64 on short
# arrays: the second).  The sign of such a zero is compared loosely.
ZERO_SIGN_FREE = {"maximum", "minimum", "clamp"}


def _valid(opcode, shapes, **attrs) -> bool:
    try:
        infer_shape(opcode, shapes, attrs)
        return True
    except NbxlaError:
        return False


@functools.cache
def elementwise_ops(t: str, checked=True) -> list[tuple[str, str, tuple, dict]]:
    """(label, opcode, operand roles, attrs) valid for element type ``t`` (and, when
    ``checked``, defined by the evaluator).  Roles: x, y, z are arrays of type t, p a pred array."""
    if checked:
        return [op for op in elementwise_ops(t, False) if _evaluator_supports(t, op[0])]
    s, p = Shape(t, (4,)), Shape("pred", (4,))
    ops = []
    for op in UNARY:
        if _valid(op, [s]):
            ops.append((op, op, ("x",), {}))
    for op in BINARY:
        if _valid(op, [s, s]):
            ops.append((op, op, ("x", "y"), {}))
    for d in DIRECTIONS:
        ops.append((f"compare_{d}", "compare", ("x", "y"), {"direction": d}))
    if t[0] in "fc" and t != "c64" and t != "c128":
        for d in ("LT", "EQ"):
            ops.append((f"compare_TOTALORDER_{d}", "compare", ("x", "y"), {"direction": d, "type": "TOTALORDER"}))
    ops.append(("select", "select", ("p", "x", "y"), {}))
    if _valid("clamp", [s, s, s]):
        ops.append(("clamp", "clamp", ("y", "x", "z"), {}))
    for dst in REAL_TYPES + COMPLEX_TYPES:
        if dst != t:
            ops.append((f"convert_{dst}", "convert", ("x",), {"dst": dst}))
    if t not in ("pred",) and t[0] != "c":
        same_width = {"s8": "u8", "u8": "s8", "s16": "f16", "u16": "s16", "f16": "s16", "s32": "f32",
                      "u32": "s32", "f32": "s32", "s64": "f64", "u64": "s64", "f64": "u64"}[t]
        ops.append(("bitcast-convert", "bitcast-convert", ("x",), {"dst": same_width}))
    if t[0] == "f":
        ops.append(("reduce-precision", "reduce-precision", ("x",),
                    {"exponent_bits": 5, "mantissa_bits": 7}))
    return ops


@functools.cache
def _evaluator_supports(t: str, label: str) -> bool:
    """Does the reference evaluator define ``label`` on ``t`` (cbrt of complex, say, it does not)?"""
    (_, opcode, roles, attrs), = [op for op in elementwise_ops(t, checked=False) if op[0] == label]
    b = Builder("probe")
    params = {r: b.parameter(Shape("pred" if r == "p" else t, (2,)), r) for r in "xyzp"}
    module = Module("probe", b.build(_build_op(b, opcode, [params[r] for r in roles], attrs)))
    ins = [np.ones(2, to_numpy_dtype(t))] * 3 + [np.ones(2, bool)]
    try:
        with np.errstate(all="ignore"):
            evaluate(module, ins)
        return True
    except NbxlaError:
        return False


def _group(t: str, label: str) -> str:
    if t[0] == "c" or label in MAY_BE_INTERPRETED or (t, label.split("_")[0]) in KNOWN_BUGS:
        return "single"          # a fusion of its own: its support does not affect the others
    if label in TRANSCENDENTAL:
        return "transcendental"
    return "core"


def _edge_values(t: str) -> np.ndarray:
    dt = to_numpy_dtype(t)
    if t == "pred":
        return np.array([False, True])
    if dt.kind in "iu":
        info = np.iinfo(dt)
        vals = [0, 1, -1, 2, -2, 3, -7, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 100, -100, 127, -128,
                255, info.min, info.max, info.min + 1, info.max - 1, info.max // 3]
        return np.array([v % (1 << (8 * dt.itemsize)) for v in vals], np.uint64).astype(dt)
    real = dt if dt.kind == "f" else np.dtype(np.float32 if dt == np.complex64 else np.float64)
    fi = np.finfo(real)
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
            3 * fi.smallest_subnormal, fi.tiny, -fi.tiny, fi.max, -fi.max, 1, -1, 0.5, -0.5, 1.5, 2.5,
            -2.5, 3.7, -3.7, 127.5, -128.5, 255.9, 65504.0, 70000.0, 2.0**31, -2.0**31, 2.0**32,
            2.0**63, -2.0**63, 2.0**64, 1e30, 1e-30, 0.1, 100.0]
    with np.errstate(all="ignore"):
        a = np.array(vals, np.float64).astype(real)
    if dt.kind == "c":
        a = (a + 1j * a[::-1]).astype(dt)
    return a


def elementwise_inputs(t: str) -> list[np.ndarray]:
    """x, y: every pair of edge values, then random values; z: x reversed; p: random pred."""
    rng = np.random.default_rng(sum(map(ord, t)))
    e = _edge_values(t)
    x, y = np.repeat(e, len(e)), np.tile(e, len(e))
    dt = to_numpy_dtype(t)
    n = 77
    if t == "pred":
        r = [rng.random(n) < 0.5 for _ in range(2)]
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        r = [rng.integers(info.min, info.max, n, dtype=dt, endpoint=True) for _ in range(2)]
    else:
        r = [(rng.standard_normal(n) * 10).astype(dt) for _ in range(2)]
        if dt.kind == "c":
            r = [(a + 1j * rng.standard_normal(n)).astype(dt) for a in r]
    x, y = np.concatenate([x, r[0]]), np.concatenate([y, r[1]])
    return [x, y, x[::-1].copy(), rng.random(len(x)) < 0.5]


def _build_op(fb, opcode, params, attrs):
    attrs = dict(attrs)
    if opcode in ("convert", "bitcast-convert"):
        dst = attrs.pop("dst")
        return fb.op(opcode, params[0], shape=params[0].shape.with_type(dst))
    return fb.op(opcode, *params, **attrs)


@functools.cache
def elementwise_case(t: str):
    """Compile and run every elementwise op on ``t`` once: {label: (got, want, group, kernel)}."""
    inputs = elementwise_inputs(t)
    n = len(inputs[0])
    b = Builder(f"elementwise_{t}")
    roles = {"x": b.parameter(Shape(t, (n,)), "x"), "y": b.parameter(Shape(t, (n,)), "y"),
             "z": b.parameter(Shape(t, (n,)), "z"), "p": b.parameter(Shape("pred", (n,)), "p")}
    groups: dict[str, list] = {"core": [], "transcendental": []}
    outputs, labels = [], []
    for label, opcode, role_names, attrs in elementwise_ops(t):
        if (t, label) in KNOWN_CRASHES:
            continue
        group = _group(t, label)
        if group == "single":
            operands = [roles[r] for r in role_names]
            f = fusion(b, "single_" + label.replace("-", "_"), operands,
                       lambda fb, *ps, opcode=opcode, attrs=attrs: _build_op(fb, opcode, ps, attrs))
            outputs.append(f)
            labels.append((label, group, kernel_name(f.name), None))
        else:
            groups[group].append((label, opcode, role_names, attrs))
    for group, members in groups.items():
        if not members:
            continue
        order = ["x", "y", "z", "p"]

        def build(fb, *ps, members=members):
            by_role = dict(zip(order, ps))
            return [_build_op(fb, opcode, [by_role[r] for r in rn], attrs) for _, opcode, rn, attrs in members]
        f = fusion(b, f"{group}_{t}", [roles[r] for r in order], build)
        for k, (label, *_rest) in enumerate(members):
            outputs.append(b.op("get-tuple-element", f, index=k))
            labels.append((label, group, kernel_name(f.name), k))
    module = Module(f"elementwise_{t}", b.build(b.op("tuple", *outputs)))
    got, want, interpreted = compile_and_run(module, inputs)
    return {label: (g, w, group, kernel, interpreted.get(kernel))
            for (label, group, kernel, _), g, w in zip(labels, got, want)}


def _elementwise_params():
    out = []
    for t in REAL_TYPES + COMPLEX_TYPES:
        for label, *_ in elementwise_ops(t):
            marks = []
            if (t, label) in KNOWN_CRASHES:
                continue
            if (t, label) in KNOWN_BUGS:
                marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[(t, label)])]
            out.append(pytest.param(t, label, marks=marks, id=f"{t}-{label}"))
    return out


@pytest.mark.parametrize("t, label", _elementwise_params())
def test_elementwise_op_matches_evaluator(t, label):
    got, want, group, kernel, why_interpreted = elementwise_case(t)[label]
    opcode = label.split("_")[0]
    if t[0] == "f" and opcode in TRANSCENDENTAL:
        assert_close(got, want, f"{t} {label}")
    elif t[0] == "c" and opcode in TRANSCENDENTAL | {"divide", "sqrt", "abs", "sign"}:
        assert_close(got, want, f"{t} {label}")
    else:
        assert_bitwise(got, want, f"{t} {label}", zero_sign_free=opcode in ZERO_SIGN_FREE)


@pytest.mark.parametrize("t", REAL_TYPES)
def test_elementwise_core_ops_are_native(t):
    """Arithmetic, compare, select, convert, bitwise, min/max, rounding: one native kernel."""
    case = elementwise_case(t)
    reasons = {v[4] for v in case.values() if v[2] == "core"}
    assert reasons == {None}, f"{t} core elementwise fusion interpreted: {reasons}"


@pytest.mark.parametrize("t", ["f32", "f64"])
def test_transcendentals_are_native(t):
    case = elementwise_case(t)
    reasons = {v[4] for v in case.values() if v[2] == "transcendental"}
    assert reasons == {None}, f"{t} transcendental fusion interpreted: {reasons}"


@pytest.mark.parametrize("t", COMPLEX_TYPES)
def test_complex_fusions_fall_back_to_the_evaluator(t):
    case = elementwise_case(t)
    interpreted = {label: v[4] for label, v in case.items()}
    assert all(why for why in interpreted.values()), "complex is expected to be interpreted (for now)"


_CRASH_SCRIPT = """
import numpy as np
from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.runtime.executable import build_executable
import tests.test_codegen_cpu as T
t, label = {t!r}, {label!r}
(_, opcode, roles, attrs), = [op for op in T.elementwise_ops(t) if op[0] == label]
ins = T.elementwise_inputs(t)
n = len(ins[0])
b = Builder("crash")
r = {{k: b.parameter(Shape("pred" if k == "p" else t, (n,)), k) for k in "xyzp"}}
f = T.fusion(b, "crash_fusion", [r[k] for k in roles], lambda fb, *ps: T._build_op(fb, opcode, ps, attrs))
m = Module("crash", b.build(f))
got = build_executable(m, "cpu").run(ins)
want = flatten(evaluate(m, ins))
T.assert_bitwise(got[0], want[0], label)
print("OK")
"""


@pytest.mark.parametrize("t, label", [
    pytest.param(t, label, marks=pytest.mark.xfail(strict=True, reason=why), id=f"{t}-{label}")
    for (t, label), why in KNOWN_CRASHES.items()])
def test_known_crashes_in_a_subprocess(t, label):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _CRASH_SCRIPT.format(t=t, label=label)], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, \
        f"exit code {proc.returncode}: {proc.stderr[-500:]}"


def test_pred_add_is_logical_or_minimal():
    """Minimal reproducer of the pred-add bug, kept out of the sweep's shared module."""
    b = Builder("pred_add")
    x = b.parameter(Shape("pred", (4,)), "x")
    y = b.parameter(Shape("pred", (4,)), "y")
    f = fusion(b, "add_fusion", [x, y], lambda fb, p, q: fb.op("add", p, q))
    module = Module("pred_add", b.build(f))
    a = np.array([False, False, True, True])
    c = np.array([False, True, False, True])
    got, want, _ = compile_and_run(module, [a, c])
    assert want[0].tolist() == [False, True, True, True]
    if got[0].tolist() != want[0].tolist():
        pytest.xfail(KNOWN_BUGS[("pred", "add")] + f"; got {got[0].tolist()}")


# ---- data movement in fusions -----------------------------------------------------------------

def _movement_module(t: str):
    """One module, one fusion per data-movement pattern, all mixed with arithmetic."""
    b = Builder(f"movement_{t}")
    x = b.parameter(Shape(t, (6, 8)), "x")           # general 2-D input
    v = b.parameter(Shape(t, (8,)), "v")
    c = b.parameter(Shape(t, (6,)), "c")
    s = b.parameter(Shape(t, ()), "s")
    r1 = b.parameter(Shape(t, (1, 8)), "r1")
    cube = b.parameter(Shape(t, (3, 4, 5)), "cube")
    i0 = b.parameter(Shape("s32", ()), "i0")
    i1 = b.parameter(Shape("s32", ()), "i1")
    add = "or" if t == "pred" else "add"
    out = {}

    out["broadcast_scalar"] = fusion(b, "broadcast_scalar", [x, s], lambda fb, a, q: fb.op(
        add, a, fb.broadcast(q, (6, 8))))
    out["broadcast_dims"] = fusion(b, "broadcast_dims", [v, c], lambda fb, p, q: fb.op(
        add, fb.broadcast(p, (6, 8), (1,)), fb.broadcast(q, (6, 8), (0,))))
    out["broadcast_degenerate"] = fusion(b, "broadcast_degenerate", [x, r1], lambda fb, a, q: fb.op(
        add, a, fb.broadcast(fb.reshape(q, (8,)), (6, 8), (1,))))
    out["broadcast_3d"] = fusion(b, "broadcast_3d", [cube, v, c], lambda fb, a, p, q: fb.op(
        add, fb.op(add, a, fb.broadcast(fb.op("slice", p, slice=_slices((0, 5, 1))), (3, 4, 5), (2,))),
        fb.broadcast(fb.op("slice", q, slice=_slices((1, 5, 1))), (3, 4, 5), (1,))))
    out["reshape_split"] = fusion(b, "reshape_split", [x, cube], lambda fb, a, q: fb.op(
        add, fb.reshape(a, (2, 3, 8)),
        fb.reshape(fb.op("slice", fb.reshape(q, (60,)), slice=_slices((5, 53, 1))), (2, 3, 8))))
    out["reshape_merge"] = fusion(b, "reshape_merge", [cube], lambda fb, q: fb.reshape(q, (12, 5)))
    out["transpose"] = fusion(b, "transpose", [cube], lambda fb, q: fb.op(
        add, fb.op("transpose", q, dimensions=(2, 0, 1)), fb.op("transpose", q, dimensions=(2, 0, 1))))
    out["transpose_2d"] = fusion(b, "transpose_2d", [x], lambda fb, a: fb.op(
        "transpose", a, dimensions=(1, 0)))
    out["slice_stepped"] = fusion(b, "slice_stepped", [x], lambda fb, a: fb.op(
        "slice", a, slice=_slices((1, 6, 2), (0, 8, 3))))
    out["concatenate"] = fusion(b, "concatenate", [x, c, v], lambda fb, a, q, p: fb.op(
        "concatenate", a, fb.reshape(q, (6, 1)), fb.op("transpose", fb.reshape(
            fb.op("slice", p, slice=_slices((0, 6, 1))), (1, 6)), dimensions=(1, 0)), dimensions=(1,)))
    # (Not the same operand element in two pieces: see test_concatenate_branches_reading_the_same_element.)
    out["concatenate_rows"] = fusion(b, "concatenate_rows", [x, v, r1], lambda fb, a, p, q: fb.op(
        "concatenate", fb.reshape(p, (1, 8)), a, q, dimensions=(0,)))
    out["pad"] = fusion(b, "pad", [x, s], lambda fb, a, q: fb.op(
        "pad", a, q, padding=_pads((-1, 2, 1), (2, -3, 0))))
    out["reverse"] = fusion(b, "reverse", [x], lambda fb, a: (
        fb.op("reverse", a, dimensions=(0, 1)), fb.op("reverse", a, dimensions=(1,))))
    out["reverse_3d"] = fusion(b, "reverse_3d", [cube], lambda fb, q: fb.op("reverse", q, dimensions=(1,)))
    out["iota"] = fusion(b, "iota", [x], lambda fb, a: fb.op(
        add, a, fb.convert(fb.iota(Shape("s32", (6, 8)), 1), t)))
    out["dynamic_slice"] = fusion(b, "dynamic_slice", [x, i0, i1], lambda fb, a, p, q: fb.op(
        "dynamic-slice", a, p, q, dynamic_slice_sizes=(3, 5)))
    out["slice_of_transpose"] = fusion(b, "slice_of_transpose", [cube, s], lambda fb, q, z: fb.op(
        add, fb.op("slice", fb.op("transpose", q, dimensions=(1, 2, 0)), slice=_slices((1, 4, 2), (0, 5, 2), (0, 3, 1))),
        fb.broadcast(z, (2, 3, 3))))
    names = list(out)
    module = Module(f"movement_{t}", b.build(b.op("tuple", *out.values())))
    return module, names


def _slices(*triples):
    from nbxla.hlo.attributes import SliceDim
    return tuple(SliceDim(*tr) for tr in triples)


def _pads(*triples):
    from nbxla.hlo.attributes import PadDim
    return tuple(PadDim(*tr) for tr in triples)


def _random(t, dims, rng):
    dt = to_numpy_dtype(t)
    if t == "pred":
        return rng.random(dims) < 0.5
    if dt.kind in "iu":
        return rng.integers(-100 if dt.kind == "i" else 0, 100, dims).astype(dt)
    return rng.standard_normal(dims).astype(dt)


MOVEMENT_TYPES = ["f32", "s8", "pred"]


@functools.cache
def movement_case(t: str, starts: tuple[int, int]):
    module, names = _movement_module(t)
    rng = np.random.default_rng(1)
    ins = [_random(t, d, rng) for d in [(6, 8), (8,), (6,), (), (1, 8), (3, 4, 5)]]
    ins += [np.int32(starts[0]), np.int32(starts[1])]
    executable = _movement_executable(t)
    got = executable.run(ins)
    want = flatten(evaluate(module, ins))
    groups, k = {}, 0
    for f in module.entry.root.operands:
        n = len(f.shape.elements) if f.shape.is_tuple else 1
        groups[names[len(groups)]] = (got[k:k + n], want[k:k + n])
        k += n
    return groups, dict(executable.native.interpreted)


@functools.cache
def _movement_executable(t):
    return build_executable(_movement_module(t)[0], "cpu")


MOVEMENT_NAMES = ["broadcast_scalar", "broadcast_dims", "broadcast_degenerate", "broadcast_3d",
                  "reshape_split", "reshape_merge", "transpose", "transpose_2d", "slice_stepped",
                  "concatenate", "concatenate_rows", "pad", "reverse", "reverse_3d", "iota", "dynamic_slice",
                  "slice_of_transpose"]


@pytest.mark.parametrize("name", MOVEMENT_NAMES)
@pytest.mark.parametrize("t", MOVEMENT_TYPES)
def test_data_movement_fusion_native_and_bitwise(t, name):
    groups, interpreted = movement_case(t, (1, 2))
    assert kernel_name(name) not in interpreted, interpreted[kernel_name(name)]
    got, want = groups[name]
    for g, w in zip(got, want):
        assert_bitwise(g, w, f"{t} {name}")


@pytest.mark.parametrize("starts", [(0, 0), (3, 3), (-5, 1), (100, -1), (2, 100), (-2**31, 2**31 - 1)])
def test_dynamic_slice_clamps_starts(starts):
    groups, _ = movement_case("f32", starts)
    got, want = groups["dynamic_slice"]
    assert_bitwise(got[0], want[0], f"dynamic-slice at {starts}")


def _concat_same_index_module():
    """concatenate along a size-1 dim of reshape(p) and reshape(2p): both branches read p at the
    same index (corpus case concatenate_stack)."""
    b = Builder("concat_same_index")
    p = b.parameter(Shape("f32", (3, 4)), "p")
    f = fusion(b, "stack", [p], lambda fb, q: fb.op(
        "concatenate", fb.reshape(q, (1, 3, 4)),
        fb.reshape(fb.op("multiply", q, fb.broadcast(fb.constant(2.0, "f32"), (3, 4))), (1, 3, 4)),
        dimensions=(0,)))
    return Module("concat_same_index", b.build(f))


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="codegen: values memoized in one concatenate branch are reused in the next "
                          "(same operand index in both, e.g. concat along a size-1 dim) -> LLVM "
                          "verifier 'Instruction does not dominate all uses'; the whole module fails "
                          "to compile (RuntimeError, not an UnsupportedError fallback)")
def test_concatenate_branches_reading_the_same_element():
    module = _concat_same_index_module()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got, want, interpreted = compile_and_run(module, [x])
    assert_bitwise(got[0], want[0], "stack")
    assert not interpreted


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="codegen: pad's value branch and operand branch share memoized values (the "
                          "pad value is also used inside the padded operand) -> LLVM 'does not "
                          "dominate all uses'")
def test_pad_value_also_used_in_operand():
    b = Builder("pad_shared")
    x = b.parameter(Shape("f32", (4,)), "x")
    s = b.parameter(Shape("f32", ()), "s")
    f = fusion(b, "pad_shared", [x, s], lambda fb, a, q: fb.op(
        "pad", fb.op("add", a, fb.broadcast(q, (4,))), q, padding=_pads((1, 1, 1))))
    module = Module("pad_shared", b.build(f))
    got, want, interpreted = compile_and_run(module, [np.arange(4, dtype=np.float32), np.float32(9)])
    assert_bitwise(got[0], want[0], "pad")


@pytest.mark.xfail(strict=True, raises=TypeError,
                   reason="codegen: a kernel is an LLVM function named after the fusion instruction, "
                          "in the same namespace as the libm functions it calls: a fusion named "
                          "'tanh' (f64) makes the tanh call resolve to the kernel itself (TypeError "
                          "while emitting; with an llvm.* intrinsic lowered to a libm call, a silent "
                          "self-call)")
def test_fusion_named_like_a_libm_function():
    b = Builder("libm_name")
    x = b.parameter(Shape("f64", (4,)), "x")
    f = fusion(b, "tanh", [x], lambda fb, a: fb.op("tanh", a))
    module = Module("libm_name", b.build(f))
    got, want, _ = compile_and_run(module, [np.linspace(-2, 2, 4)])
    assert_close(got[0], want[0], "tanh")


@pytest.mark.xfail(strict=True, reason="codegen: a multi-output loop fusion whose outputs have different "
                   "shapes is emitted over the first output's index space (no UnsupportedError): the "
                   "other outputs are partly unwritten and their operands read out of bounds.  The "
                   "optimizer never builds such fusions (fusion.py refuses them), hand-written HLO can")
def test_multi_output_loop_fusion_with_different_output_shapes():
    b = Builder("mixed_outputs")
    x = b.parameter(Shape("f32", (6, 8)), "x")
    cube = b.parameter(Shape("f32", (3, 4, 5)), "cube")
    f = fusion(b, "mixed", [x, cube], lambda fb, a, q: (
        fb.op("negate", a), fb.op("negate", q)))
    module = Module("mixed_outputs", b.build(f))
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal((6, 8)).astype(np.float32), rng.standard_normal((3, 4, 5)).astype(np.float32)]
    got, want, _ = compile_and_run(module, ins)
    for g, w in zip(got, want):
        assert_bitwise(g, w, "mixed")
