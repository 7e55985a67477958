"""Ahead-of-time objects run from C (no Python at run time) and match NumPy.

Each function is compiled to NAME.o + NAME.h, linked into a C program with
``cc main.c NAME.o -lm -lpthread``, run as a subprocess (also through NAME_arena and from four
threads at once, see aot_util), and its results compared with eager NumPy's (the HLO modules
with the reference evaluator's).
"""

from __future__ import annotations

import numpy as np
import pytest

from nbxla import examples
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from .aot_util import build, needs_cc, run, system_library_symbols, undefined_symbols

pytestmark = needs_cc


def _check(got, want, rtol=None):
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        ok, detail = compare_arrays(g, w, rtol=rtol)
        assert ok, detail


def _roundtrip(fn, args, tmp_path, name, rtol=None):
    specs = [np.asarray(a) for a in args]
    obj, exe = build(fn, specs, tmp_path, name)
    got = run(obj, exe, list(args), tmp_path)
    _check(got, fn(*args), rtol)
    return obj


def softmax_layer(x, w, b):
    z = x @ w + b
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def running_example(x, y):
    return np.mean(3 * x**2 + y)


def cumsum_two_outputs(x):
    c = np.cumsum(x, axis=1)
    return c.astype(np.int32), (c * 0.5).max(axis=0)


def matmul_chain(x, a, b, c):
    h = np.maximum(x @ a, 0.0)
    return (h @ b) @ c.T


def integer_code(a, b, m):
    s = (a * 3 + b) % 7 - (a >> 2) + (b & 5)
    return np.where(s > 2, s, -s) @ m, np.sum(a * b, axis=0)


def reduction_to_scalar(x):
    return np.sqrt(np.sum(x * x)) / np.max(np.abs(x))


def broadcast_formula(a, b, c):
    return (a[:, None, :] * b[None, :, :] + c[:, :, None]) / (1.0 + np.abs(b)[None]) - a.mean()


def sort_and_rank(x):
    return np.sort(x, axis=1), np.argsort(-x, axis=0)


def test_softmax_layer(tmp_path):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((16, 64), (64, 10), (10,)))
    obj = _roundtrip(softmax_layer, (x, w, b), tmp_path, "softmax_layer", rtol=1e-4)
    assert [s.to_text(False) for s in obj.result_shapes] == ["f32[16,10]"]


def test_running_example(tmp_path):
    rng = np.random.default_rng(1)
    x, y = rng.random(1000, np.float32), rng.random(1000, np.float32)
    _roundtrip(running_example, (x, y), tmp_path, "running")


def test_running_example_large_splits_across_threads(tmp_path):
    rng = np.random.default_rng(2)
    x, y = rng.random(3_000_000, np.float32), rng.random(3_000_000, np.float32)
    obj, exe = build(running_example, [x, y], tmp_path, "running_large")
    with open(obj.object_path, "rb") as f:
        assert b"pthread_create" in f.read()
    _check(run(obj, exe, [x, y], tmp_path), running_example(x, y), rtol=1e-5)


def test_two_outputs_with_cumsum_and_a_dtype_change(tmp_path):
    x = np.random.default_rng(3).standard_normal((6, 40)) * 10
    obj = _roundtrip(cumsum_two_outputs, (x,), tmp_path, "cumsum2")
    assert [s.element_type for s in obj.result_shapes] == ["s32", "f64"]


def test_matmul_chain(tmp_path):
    rng = np.random.default_rng(4)
    args = tuple(rng.standard_normal(s) for s in ((33, 70), (70, 50), (50, 20), (7, 20)))
    _roundtrip(matmul_chain, args, tmp_path, "matmul_chain", rtol=1e-10)


def test_integer_code(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.integers(-1000, 1000, (20, 9), dtype=np.int32)
    b = rng.integers(-1000, 1000, (20, 9), dtype=np.int32)
    m = rng.integers(-5, 5, (9, 4), dtype=np.int32)
    _roundtrip(integer_code, (a, b, m), tmp_path, "integer_code")


def test_reduction_to_scalar(tmp_path):
    x = np.random.default_rng(6).standard_normal((123, 77))
    obj = _roundtrip(reduction_to_scalar, (x,), tmp_path, "norm_ratio")
    assert obj.result_shapes[0].dims == ()


def test_broadcast_heavy_formula(tmp_path):
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (6, 8), (5, 6)))
    _roundtrip(broadcast_formula, (a, b, c), tmp_path, "broadcast_formula")


def test_sort_and_argsort(tmp_path):
    x = np.random.default_rng(8).standard_normal((9, 31)).astype(np.float32)
    x[2, 3] = x[2, 7] = np.nan
    x[:, 5] = x[:, 6]                     # ties: argsort must be stable
    _roundtrip(sort_and_rank, (x,), tmp_path, "sort_rank")


WHILE_HLO = """
HloModule power_loop

cond {
  state = (s32[], f64[8], f64[8,8]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  limit = s32[] constant(25)
  ROOT less = pred[] compare(i, limit), direction=LT
}

body {
  state = (s32[], f64[8], f64[8,8]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  v = f64[8] get-tuple-element(state), index=1
  m = f64[8,8] get-tuple-element(state), index=2
  one = s32[] constant(1)
  next = s32[] add(i, one)
  mv = f64[8] dot(m, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  sq = f64[8] multiply(mv, mv)
  zero = f64[] constant(0)
  ss = f64[] reduce(sq, zero), dimensions={0}, to_apply=add
  norm = f64[] sqrt(ss)
  normb = f64[8] broadcast(norm), dimensions={}
  unit = f64[8] divide(mv, normb)
  ROOT out = (s32[], f64[8], f64[8,8]) tuple(next, unit, m)
}

add {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT s = f64[] add(a, b)
}

positive {
  p = (f64[8]) parameter(0)
  v = f64[8] get-tuple-element(p), index=0
  ROOT r = f64[8] abs(v)
}

negative {
  p = (f64[8]) parameter(0)
  v = f64[8] get-tuple-element(p), index=0
  ROOT r = f64[8] negate(v)
}

ENTRY main {
  m = f64[8,8] parameter(0)
  v0 = f64[8] parameter(1)
  start = s32[] constant(0)
  init = (s32[], f64[8], f64[8,8]) tuple(start, v0, m)
  loop = (s32[], f64[8], f64[8,8]) while(init), condition=cond, body=body
  iterations = s32[] get-tuple-element(loop), index=0
  v = f64[8] get-tuple-element(loop), index=1
  first = f64[1] slice(v), slice={[0:1]}
  first1 = f64[] reshape(first)
  zero = f64[] constant(0)
  flag = pred[] compare(first1, zero), direction=GE
  arg = (f64[8]) tuple(v)
  picked = f64[8] conditional(flag, arg, arg), true_computation=positive, false_computation=negative
  ROOT result = (s32[], f64[8], f64[8]) tuple(iterations, v, picked)
}
"""


def test_while_loop_and_conditional_from_hlo(tmp_path):
    module = parse_hlo(WHILE_HLO)
    rng = np.random.default_rng(9)
    m = rng.standard_normal((8, 8))
    m = m @ m.T
    v0 = rng.standard_normal(8)
    obj, exe = build(module, None, tmp_path, "power_loop")
    got = run(obj, exe, [m, v0], tmp_path)
    want = flatten(evaluate(parse_hlo(WHILE_HLO), [m, v0]))
    assert got[0] == 25
    _check(got, want, rtol=1e-9)


def test_object_needs_only_libc_libm_pthread(tmp_path):
    rng = np.random.default_rng(10)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((16, 64), (64, 10), (10,)))
    obj, _ = build(softmax_layer, [x, w, b], tmp_path, "softmax_nm")
    x2 = rng.standard_normal((9, 31)).astype(np.float32)
    obj2, _ = build(sort_and_rank, [x2], tmp_path, "sort_nm")
    system = system_library_symbols()
    assert system, "no libc symbol table found"
    for o in (obj, obj2):
        missing = undefined_symbols(o.object_path) - system
        assert not missing, f"{o.name}.o needs symbols outside libc/libm/pthread: {sorted(missing)}"


def test_two_objects_link_into_one_program(tmp_path):
    """Internal symbols are local: two AOT objects (same kernels' names) link together."""
    import subprocess
    x = np.ones((4, 4), np.float32)
    a = build(reduction_to_scalar, [x], tmp_path, "first")[0]
    b = build(reduction_to_scalar, [x], tmp_path, "second")[0]
    main = tmp_path / "both.c"
    main.write_text('#include "first.h"\n#include "second.h"\n#include <stdio.h>\nint main(void) {\n'
                    '  float x[16], r1, r2;\n  for (int i = 0; i < 16; i++) x[i] = (float)i - 7.5f;\n'
                    '  if (first(x, &r1) || second(x, &r2)) return 1;\n  printf("%.6f %.6f\\n", r1, r2);\n'
                    '  return 0;\n}\n')
    exe = tmp_path / "both"
    subprocess.run(["cc", f"-I{tmp_path}", str(main), a.object_path, b.object_path, "-o", str(exe), "-lm",
                    "-lpthread"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    xs = np.arange(16, dtype=np.float32) - 7.5
    assert float(out[0]) == float(out[1]) == pytest.approx(float(reduction_to_scalar(xs.reshape(4, 4))), rel=1e-5)


CONV_HLO = """
HloModule conv

ENTRY main {
  x = f32[2,9,7,3] parameter(0)
  k = f32[3,2,3,4] parameter(1)
  ROOT y = f32[2,5,6,4] convolution(x, k), window={size=3x2 stride=2x1 pad=1_1x0_0 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f
}
"""

LU_HLO = """
HloModule factor

ENTRY main {
  a = f32[4,4] parameter(0)
  c = (f32[4,4], s32[4], s32[]) custom-call(a), custom_call_target="lapack_sgetrf_ffi", metadata={source_file="model.py" source_line=12}
  ROOT l = f32[4,4] get-tuple-element(c), index=0
}
"""

CHOLESKY_HLO = """
HloModule chol

ENTRY main {
  a = f64[2,5,5] parameter(0)
  lo = (f64[2,5,5], s32[2]) custom-call(a), custom_call_target="lapack_dpotrf_ffi", backend_config={uplo = 76 : ui8}
  up = (f64[2,5,5], s32[2]) custom-call(a), custom_call_target="lapack_dpotrf_ffi", backend_config={uplo = 85 : ui8}
  l = f64[2,5,5] get-tuple-element(lo), index=0
  li = s32[2] get-tuple-element(lo), index=1
  u = f64[2,5,5] get-tuple-element(up), index=0
  ui = s32[2] get-tuple-element(up), index=1
  ROOT t = (f64[2,5,5], s32[2], f64[2,5,5], s32[2]) tuple(l, li, u, ui)
}
"""


def test_cholesky_custom_call_lower_upper_and_failing(tmp_path):
    rng = np.random.default_rng(19)
    m = rng.standard_normal((5, 5))
    a = np.stack([m @ m.T + 5 * np.eye(5), m + m.T])        # positive definite, then (likely) not
    a[1, 0, 0] = 1.0
    a[1, 1, 1] = -3.0                                       # the 2x2 leading minor fails
    obj, exe = build(parse_hlo(CHOLESKY_HLO), None, tmp_path, "chol")
    got = run(obj, exe, [a], tmp_path)
    want = flatten(evaluate(parse_hlo(CHOLESKY_HLO), [a]))
    assert list(got[1]) == list(want[1]) and want[1][1] > 0
    _check(got, want, rtol=1e-10)


FFT_HLO = """
HloModule spectra

ENTRY main {
  x = f64[2,5,6] parameter(0)
  z = c128[2,5,4] parameter(1)
  r = c128[2,5,4] fft(x), fft_type=RFFT, fft_length={5,6}
  i = f64[2,5,7] fft(z), fft_type=IRFFT, fft_length={5,7}
  f = c128[2,5,4] fft(z), fft_type=IFFT, fft_length={4}
  ROOT t = (c128[2,5,4], f64[2,5,7], c128[2,5,4]) tuple(r, i, f)
}
"""


def test_fft_kinds_over_several_axes(tmp_path):
    rng = np.random.default_rng(18)
    x = rng.standard_normal((2, 5, 6))
    z = rng.standard_normal((2, 5, 4)) + 1j * rng.standard_normal((2, 5, 4))
    obj, exe = build(parse_hlo(FFT_HLO), None, tmp_path, "spectra")
    _check(run(obj, exe, [x, z], tmp_path), flatten(evaluate(parse_hlo(FFT_HLO), [x, z])), rtol=1e-10)


def test_convolution_runs_natively(tmp_path):
    rng = np.random.default_rng(12)
    x, k = rng.standard_normal((2, 9, 7, 3)).astype(np.float32), rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    obj, exe = build(parse_hlo(CONV_HLO), None, tmp_path, "conv")
    _check(run(obj, exe, [x, k], tmp_path), flatten(evaluate(parse_hlo(CONV_HLO), [x, k])), rtol=1e-5)


def test_what_cannot_be_compiled_ahead_of_time_is_named_with_its_line(tmp_path):
    import nbxla.aot
    from nbxla.errors import AotError, NbxlaError
    with pytest.raises(AotError, match=r"%c \(custom-call\) at model\.py:12 cannot be compiled ahead of time: "
                                       r".*custom-call target 'lapack_sgetrf_ffi'"):
        nbxla.aot.compile(parse_hlo(LU_HLO), None, str(tmp_path), "factor")

    def unique_values(x):
        return np.unique(x)
    with pytest.raises(NbxlaError, match=r"test_aot_programs\.py:\d+: np\.unique cannot be compiled"):
        nbxla.aot.compile(unique_values, ["f32[10]"], str(tmp_path), "unique_values")


def test_large_batched_matmul_splits_rows_across_threads(tmp_path):
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((2, 203, 300)).astype(np.float32), rng.standard_normal((2, 300, 131)).astype(np.float32)
    _roundtrip(np.matmul, (a, b), tmp_path, "big_matmul", rtol=1e-4)


def test_portable_target_cpu(tmp_path):
    """--cpu x86-64: baseline instructions only (for other machines), same results."""
    import platform
    import subprocess

    import nbxla.aot
    import shutil
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 target names only apply on x86-64 hosts")
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is needed to read the object's instructions")
    rng = np.random.default_rng(13)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((16, 64), (64, 10), (10,)))
    obj = nbxla.aot.compile(softmax_layer, [x, w, b], str(tmp_path), "portable", cpu="x86-64", emit_asm=True)
    assert "ymm" not in open(obj.files["s"]).read()          # no AVX in the kernels
    disassembly = subprocess.run(["objdump", "-d", obj.object_path], capture_output=True, text=True).stdout
    assert "ymm" not in disassembly and "zmm" not in disassembly
    from .aot_util import write_main
    write_main(obj, str(tmp_path / "main.c"))
    subprocess.run(["cc", f"-I{tmp_path}", str(tmp_path / "main.c"), obj.object_path, "-o", str(tmp_path / "prog"),
                    "-lm", "-lpthread"], check=True)
    _check(run(obj, str(tmp_path / "prog"), [x, w, b], tmp_path), softmax_layer(x, w, b), rtol=1e-4)


WEIGHTS = np.random.default_rng(14).standard_normal((64, 20)).astype(np.float32)


def dense_with_constant_weights(x):
    """WEIGHTS is read from the module's globals: a constant, packed for the GEMM at compile time."""
    return np.tanh(x @ WEIGHTS + 1), x.T[:20, :] @ WEIGHTS[:37, :]


def test_constant_weights(tmp_path):
    x = np.random.default_rng(15).standard_normal((37, 64)).astype(np.float32)
    obj = _roundtrip(dense_with_constant_weights, (x,), tmp_path, "dense_const", rtol=1e-4)
    assert obj.result_shapes[0].dims == (37, 20)


TOPK_HLO = """
HloModule best

ENTRY main {
  x = f16[5,7] parameter(0)
  n = s32[3,9] parameter(1)
  top = (f16[5,3], s32[5,3]) topk(x), k=3, largest=true
  low = (s32[3,4], s32[3,4]) topk(n), k=4, largest=false
  v = f16[5,3] get-tuple-element(top), index=0
  i = s32[5,3] get-tuple-element(top), index=1
  w = s32[3,4] get-tuple-element(low), index=0
  j = s32[3,4] get-tuple-element(low), index=1
  ROOT r = (f16[5,3], s32[5,3], s32[3,4], s32[3,4]) tuple(v, i, w, j)
}
"""


def test_topk_with_nans_ties_and_odd_sizes(tmp_path):
    rng = np.random.default_rng(16)
    x = rng.standard_normal((5, 7)).astype(np.float16)
    x[0, 2], x[1, 4], x[2, 1], x[2, 5] = np.nan, -np.nan, np.float16(-0.0), 0.0
    x[3] = 1.5                                   # all equal: positions in order
    n = rng.integers(-3, 3, (3, 9)).astype(np.int32)
    obj, exe = build(parse_hlo(TOPK_HLO), None, tmp_path, "best")
    got = run(obj, exe, [x, n], tmp_path)
    want = flatten(evaluate(parse_hlo(TOPK_HLO), [x, n]))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.view(np.uint16) if g.dtype == np.float16 else g,
                                      w.view(np.uint16) if w.dtype == np.float16 else w)


SELECT_SCATTER_HLO = """
HloModule pool_grad

ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE
}

most {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}

ENTRY main {
  x = f32[7,6] parameter(0)
  g = f32[4,3] parameter(1)
  zero = f32[] constant(-1)
  ROOT y = f32[7,6] select-and-scatter(x, g, zero), window={size=3x3 stride=2x2 pad=1_1x1_1}, select=ge, scatter=most
}
"""


def test_select_and_scatter_with_padding_and_a_custom_combiner(tmp_path):
    rng = np.random.default_rng(17)
    x = rng.integers(0, 4, (7, 6)).astype(np.float32)          # ties: the first one is kept
    g = rng.standard_normal((4, 3)).astype(np.float32)
    obj, exe = build(parse_hlo(SELECT_SCATTER_HLO), None, tmp_path, "pool_grad")
    np.testing.assert_array_equal(run(obj, exe, [x, g], tmp_path)[0],
                                  flatten(evaluate(parse_hlo(SELECT_SCATTER_HLO), [x, g]))[0])


def test_the_header_works_from_cpp(tmp_path):
    import shutil
    import subprocess
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler (c++)")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    obj = build(reduction_to_scalar, [x], tmp_path, "norm")[0]
    main = tmp_path / "main.cpp"
    main.write_text('#include "norm.h"\n#include <cstdio>\nint main() {\n  float x[NORM_ARG0_SIZE], r;\n'
                    '  for (int i = 0; i < NORM_ARG0_SIZE; i++) x[i] = (float)i;\n'
                    '  if (norm(x, &r) || norm_arg0_dims[1] != 4) return 1;\n  std::printf("%.6f\\n", r);\n}\n')
    subprocess.run(["c++", f"-I{tmp_path}", str(main), obj.object_path, "-o", str(tmp_path / "cpp"), "-lm",
                    "-lpthread"], check=True)
    out = subprocess.run([str(tmp_path / "cpp")], capture_output=True, text=True, check=True).stdout
    assert float(out) == pytest.approx(float(reduction_to_scalar(x)), rel=1e-6)


def test_python_loops_stay_loops_ahead_of_time(tmp_path):
    """Loops are converted as under jit (one HLO while each, the body traced once), so a
    96x96 Cholesky compiles in seconds rather than unrolling 4,600 updates."""
    rng = np.random.default_rng(3)
    a = rng.random((96, 96))
    spd = a @ a.T + 96 * np.eye(96)
    obj, exe = build(examples.cholesky, [spd], tmp_path, "chol")
    written = spd.copy()
    examples.cholesky(written)
    _check(run(obj, exe, [spd], tmp_path), [written], rtol=1e-10)     # the argument it writes
    _roundtrip(examples.iir_filter, (rng.random(500), np.float64(0.2), np.float64(0.3), np.float64(0.5)),
               tmp_path, "iir", rtol=1e-10)


DEPTHWISE_HLO = """
HloModule depthwise

ENTRY main {
  x = f32[2,9,8,12] parameter(0)
  k = f32[3,3,1,12] parameter(1)
  y = f32[2,12,9,8] parameter(2)
  j = f32[24,1,3,3] parameter(3)
  a = f32[2,5,4,12] convolution(x, k), window={size=3x3 stride=2x2 pad=1_1x1_0}, dim_labels=b01f_01io->b01f, feature_group_count=12
  b = f32[2,24,9,8] convolution(y, j), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=12
  ROOT t = (f32[2,5,4,12], f32[2,24,9,8]) tuple(a, b)
}
"""


def test_depthwise_convolutions_run_in_the_llvm_kernel(tmp_path):
    # (the C direct convolution takes the rest: test_convolution_runs_natively)
    rng = np.random.default_rng(13)
    module = parse_hlo(DEPTHWISE_HLO)
    inputs = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    obj, exe = build(parse_hlo(DEPTHWISE_HLO), None, tmp_path, "depthwise")
    _check(run(obj, exe, inputs, tmp_path), flatten(evaluate(parse_hlo(DEPTHWISE_HLO), inputs)), rtol=1e-5)
