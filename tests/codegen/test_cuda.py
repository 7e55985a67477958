"""The CUDA backend without a GPU: PTX assembled by ptxas, kernels emulated on the host.

* Every program's PTX is assembled by ``ptxas`` for sm_80 and sm_90 (skipped with a reason
  when ptxas is not on PATH); register and spill counts are recorded (``record_property``,
  shown with ``-rA``/junit) and spills must be zero.
* The same kernels' IR runs under the host emulator (``device='cuda-emulator'``: real 32-lane
  warps and block barriers, two warps per block, at most three blocks) and must match NumPy;
  each program also asserts which kernel style it exercised, so every style is covered:
  elementwise (linear and index-mapped), row-warp, row-block, column, column-split,
  full-reduce, multi-output loop and reduction fusions, and the multi-phase row fusions
  (softmax, layer norm).
* 16-byte accesses: the PTX of contiguous kernels has vector loads and stores; sizes around
  the chunk width (tails), every dtype width, aligned arrays and offset (unaligned) views all
  match NumPy, and a single emulated thread shows which path the alignment check took.
* Column reductions over 1..100 columns and 1..100000 rows, split across blocks or not.
* Stages and errors without a GPU: ``get_compiler_ir(...)(stage='ptx')`` works, running raises
  ``DeviceUnavailableError``; importing nbxla and the CPU path work without CuPy.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nbxla
from nbxla.examples import softmax
from nbxla.codegen import gpu, gpu_emulator
from nbxla.errors import NbxlaError
from nbxla.runtime.cuda_executable import DeviceUnavailableError, cuda_available
from nbxla.testing import compare_arrays

from tests.ipython_util import run

rng = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 2).astype(dtype)


def layernorm(x):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


# name -> (function, arguments, kernel styles that must appear, relative tolerance)
PROGRAMS = {
    "elementwise": (lambda x, y: 3 * x * x + y, (_r(37, 53), _r(37, 53)), {"elementwise"}, None),
    "elementwise_f64_transcendental": (lambda x, y: np.exp(x) * np.sin(y) + np.log1p(np.abs(x)) + np.tanh(y),
                                       (_r(300, dtype=np.float64), _r(300, dtype=np.float64)),
                                       {"elementwise"}, 1e-10),
    "elementwise_libm": (lambda x, y: (np.cbrt(x), np.arctan2(x, y)), (_r(500), _r(500)), {"elementwise"}, None),
    "elementwise_f16": (lambda x: (x * x + 1).astype(np.float16), (_r(99).astype(np.float16),), {"elementwise"}, None),
    "index_mapped": (lambda x: x.T[::2] + x[::-1].T[1::2] + 1, (_r(20, 30),), {"elementwise"}, None),
    "broadcast_transpose": (lambda x, y: x.T * y[:, None] - x.T, (_r(33, 40), _r(40)), {"elementwise"}, None),
    "multi_output_loop": (lambda x, y: (x + y, x * y, x > y), (_r(1000), _r(1000)), {"elementwise"}, None),
    "int_and_pred": (lambda a, b: ((a * 3) // (b | 1), (a > b) & (a % 2 == 0)),
                     (rng.integers(-50, 50, 500).astype(np.int32), rng.integers(-50, 50, 500).astype(np.int32)),
                     {"elementwise"}, None),
    "row_warp_max": (lambda x: x.max(axis=1), (_r(70, 100),), {"row-warp"}, None),
    "row_warp_softmax": (softmax, (_r(45, 100),), {"row-warp"}, None),
    "row_warp_any_all": (lambda x: ((x > 3).any(axis=1), (x > -4).all(axis=1)), (_r(40, 33),), {"row-warp"}, None),
    "row_warp_int_sum": (lambda a: a.sum(axis=-1), (rng.integers(-9, 9, (20, 50)).astype(np.int32),),
                         {"row-warp"}, None),
    "row_block_sum": (lambda x: x.sum(axis=1), (_r(9, 1100),), {"row-block"}, None),
    "row_block_softmax": (softmax, (_r(7, 1000),), {"row-block"}, None),
    "row_block_layernorm": (layernorm, (_r(5, 777),), {"row-block"}, None),
    "row_multi_output": (lambda x: (x.sum(axis=1), x.max(axis=1), x.min(axis=1)), (_r(30, 600),),
                         {"row-block"}, None),
    "row_trailing_axes": (lambda x: x.sum(axis=(1, 2)), (_r(6, 20, 40),), {"row-block"}, None),
    "column_sum": (lambda x: x.sum(axis=0), (_r(300, 70),), {"column"}, None),
    "column_middle_axis": (lambda x: x.max(axis=1), (_r(5, 40, 50),), {"column"}, None),
    "column_centered": (lambda x: x - x.mean(axis=0), (_r(90, 45),), {"column"}, None),
    "column_f64_prod": (lambda x: np.prod(1 + x / 100, axis=0), (_r(50, 40, dtype=np.float64),), {"column"}, 1e-10),
    "column_split_sum": (lambda x: x.sum(axis=0), (_r(3000, 4),), {"column-split"}, 1e-4),
    "column_split_epilogue": (lambda x, b: (np.sqrt(np.abs(x).max(axis=0)) + b, x.mean(axis=0), (x > 3).any(axis=0)),
                              (_r(2000, 3), _r(3)), {"column-split"}, 1e-4),
    "column_split_centered": (lambda x: x - x.mean(axis=0), (_r(1500, 8),), {"column-split"}, None),
    "column_split_f64_middle_axis": (lambda x: np.prod(1 + x / 100, axis=1), (_r(2, 1100, 5, dtype=np.float64),),
                                     {"column-split"}, 1e-10),
    "full_mean": (lambda x, y: np.mean(3 * x ** 2 + y), (_r(300, 77), _r(300, 77)), {"full-reduce"}, None),
    "full_multi_output": (lambda x: (x.sum(), x.max(), x.min()), (_r(5000),), {"full-reduce"}, None),
    "full_int_and_pred": (lambda a: (a.sum(), (a > 40).any()), (rng.integers(-50, 50, 3000).astype(np.int64),),
                          {"full-reduce"}, None),
    "full_f16": (lambda x: x.sum(), (rng.random(2000).astype(np.float16),), {"full-reduce"}, 1e-2),
}


def _compile(name, device):
    fn, args, _, _ = PROGRAMS[name]
    f = nbxla.jit(fn, device=device)
    f.get_compiler_ir(*args)
    return f, f.last_compilation


@pytest.fixture(scope="module")
def ptxas_records():
    records = {}
    yield records
    lines = [f"{prog:32s} {arch}  {kernel:34s} {regs:4d} regs  spills {st}/{ld} B"
             for (prog, arch), (r, s) in sorted(records.items())
             for kernel, regs in sorted(r.items()) for st, ld in [s.get(kernel, (0, 0))]]
    print("\nptxas -v register and spill counts:\n" + "\n".join(lines))


@pytest.mark.skipif(gpu.find_ptxas() is None, reason="ptxas not found on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_ptx_assembles_with_ptxas(name, arch, ptxas_records, record_property):
    _, comp = _compile(name, "cuda")
    kernels = comp.executable.native.kernels
    assert not kernels.unsupported, kernels.unsupported
    result = gpu.run_ptxas(comp.stage("ptx"), arch)
    assert result.ok, result.log
    names = set(kernels.specs) | {s.finish_name for s in kernels.specs.values() if s.finish_name}
    assert set(result.registers) == names
    record_property("ptxas", {k: (result.registers[k], result.spills.get(k)) for k in names})
    ptxas_records[(name, arch)] = (result.registers, result.spills)
    assert all(s == (0, 0) for s in result.spills.values()), result.spills


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_emulated_kernels_match_numpy(name):
    fn, args, styles, rtol = PROGRAMS[name]
    f, comp = _compile(name, "cuda-emulator")
    cuda = comp.executable.native
    assert not cuda.kernels.unsupported
    assert {s.style for s in cuda.kernels.specs.values()} >= styles
    got = f(*[a.copy() for a in args])
    want = fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=rtol)
        assert ok, detail


def test_every_kernel_style_is_covered():
    assert {s for *_, styles, _ in PROGRAMS.values() for s in styles} == {
        "elementwise", "row-warp", "row-block", "column", "column-split", "full-reduce"}


@pytest.mark.parametrize("name", ["row_block_softmax", "column_centered", "full_multi_output", "row_warp_softmax",
                                  "column_split_epilogue", "column_split_centered"])
def test_emulated_with_full_size_blocks(name, monkeypatch):
    """The real launch shape: 256-thread blocks (8 warps), two blocks."""
    monkeypatch.setattr(gpu_emulator, "EMU_BLOCK", gpu.BLOCK)
    monkeypatch.setattr(gpu_emulator, "EMU_MAX_BLOCKS", 2)
    fn, args, _, rtol = PROGRAMS[name]
    got = nbxla.jit(fn, device="cuda-emulator")(*args)
    want = fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=rtol)
        assert ok, detail


def test_emulator_reports_a_divergent_barrier(monkeypatch):
    """A barrier only half the block reaches hangs a GPU; the emulator reports it."""
    monkeypatch.setattr(gpu_emulator, "BARRIER_TIMEOUT_S", 1.0)
    ir_text = textwrap.dedent("""
        target triple = "nvptx64-nvidia-cuda"
        declare i32 @"llvm.nvvm.read.ptx.sreg.tid.x"()
        declare void @"llvm.nvvm.barrier0"()
        define void @bad(ptr %out) {
        entry:
          %t = call i32 @"llvm.nvvm.read.ptx.sreg.tid.x"()
          %c = icmp ult i32 %t, 32
          br i1 %c, label %sync, label %done
        sync:
          call void @"llvm.nvvm.barrier0"()
          br label %done
        done:
          ret void
        }
    """)
    kernels = gpu.GpuKernels({}, ir_text, ir_text, "", "sm_80")
    host = gpu_emulator.HostKernels(kernels)
    with pytest.raises(gpu_emulator.EmulationError, match="bar.sync not reached"):
        host.launch("bad", 1, 64, [np.zeros(1, np.float32)])


# ---- 16-byte accesses in contiguous kernels ------------------------------------------------------

_VECTOR_LOAD = re.compile(r"ld\.global(?:\.nc)?\.v[24]\.(?:b32|b64|f32|f64)")
_VECTOR_STORE = re.compile(r"st\.global\.v[24]\.(?:b32|b64|f32|f64)")


def _ptx_of(fn, *args):
    f = nbxla.jit(fn, device="cuda")
    return f.get_compiler_ir(*args)(stage="ptx")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int8])
def test_contiguous_elementwise_ptx_has_16_byte_accesses(dtype):
    x = np.ones(4099, dtype)
    ptx = _ptx_of(lambda x, y: x * 3 + y, x, x.copy())
    want = "v4.b32" if dtype != np.float64 else "v2.b64"       # (f16, i8: packed into b32)
    assert f"ld.global.nc.{want}" in ptx and f"st.global.{want}" in ptx, _VECTOR_LOAD.findall(ptx)
    if gpu.find_ptxas() is not None:
        for arch in ("sm_80", "sm_90"):
            result = gpu.run_ptxas(ptx, arch)
            assert result.ok and all(s == (0, 0) for s in result.spills.values()), result.log


def test_plain_f32_kernel_reads_and_writes_v4():
    x = _r(1 << 12)
    ptx = _ptx_of(lambda x, y: x * 2 + y, x, _r(1 << 12))
    assert len(_VECTOR_LOAD.findall(ptx)) == 2 and len(_VECTOR_STORE.findall(ptx)) == 1
    assert "ld.global.nc.v4.b32" in ptx and "st.global.v4.b32" in ptx


def test_full_reduction_reads_16_bytes_at_a_time():
    x = _r(1 << 14)
    assert _VECTOR_LOAD.search(_ptx_of(lambda x, y: (3 * x * x + y).sum(), x, x + 1))


def _buffer(values: np.ndarray, offset: int) -> np.ndarray:
    """``values`` copied to an address ``offset`` elements past a 64-byte boundary."""
    size = values.dtype.itemsize
    raw = np.zeros((values.size + offset) * size + 64, np.uint8)
    start = -raw.ctypes.data % 64 + offset * size
    out = raw[start:start + values.nbytes].view(values.dtype)
    out[...] = values
    return out


_ELEMENTWISE_BY_DTYPE = {
    np.float32: lambda x, y: (x * 2 + y, x > y),                 # with a pred output
    np.float64: lambda x, y: np.exp(x) * 0.5 - y,
    np.float16: lambda x, y: x * y + np.float16(1),
    np.int32: lambda x, y: (x * 3 - y, (x ^ y) & 7),
    np.int8: lambda x, y: x * 3 + y,                             # width 16
    np.bool_: lambda x, y: (x ^ y, x & ~y),
}


def _random(n, dtype):
    if dtype == np.bool_:
        return rng.random(n) > 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-100, 100, n).astype(dtype)
    return _r(n, dtype=dtype)


@pytest.mark.parametrize("dtype", list(_ELEMENTWISE_BY_DTYPE), ids=lambda d: np.dtype(d).name)
def test_elementwise_tails_and_unaligned_views_match_numpy(dtype):
    fn = _ELEMENTWISE_BY_DTYPE[dtype]
    f = nbxla.jit(fn, device="cuda-emulator")
    for n in (0, 1, 3, 4, 5, 1023, 4099):
        x, y = _random(n, dtype), _random(n, dtype)
        want = fn(x, y)
        want = want if isinstance(want, tuple) else (want,)
        for x_offset, y_offset in ((0, 0), (1, 1), (0, 1), (1, 0)):
            got = f(_buffer(x, x_offset), _buffer(y, y_offset))
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, want):
                ok, detail = compare_arrays(np.asarray(g), w)
                assert ok, f"n={n}, offsets {x_offset},{y_offset}: {detail}"


def test_mixed_widths_and_scalars_in_one_kernel():
    """f32 in, f64 and pred out, and a broadcast scalar: chunks of 2 (16 bytes of f64)."""
    def fn(x, s):
        return (x.astype(np.float64) * s, x > 0)
    x, s = _r(1001), np.float64(1.5)
    f = nbxla.jit(fn, device="cuda-emulator")
    for offset in (0, 1):
        got = f(_buffer(x, offset), s)
        for g, w in zip(got, fn(x, s)):
            ok, detail = compare_arrays(np.asarray(g), w)
            assert ok, detail


def test_alignment_check_chooses_the_chunk_loop():
    """One emulated thread of a 4096-thread launch over 4099 f32 elements: with aligned
    buffers it owns chunk 0 (elements 0..3) and the tail element 4096; with one operand an
    element off a 16-byte boundary, the scalar loop gives it elements 0 and 4096 only."""
    n = 4099
    f = nbxla.jit(lambda x, y: x * 2 + y, device="cuda-emulator")
    f.get_compiler_ir(_r(n), _r(n))
    kernels = f.last_compilation.executable.native.kernels
    (spec,) = kernels.specs.values()
    assert spec.style == "elementwise" and spec.units == -(-n // 4)
    host = gpu_emulator.HostKernels(kernels)
    x, y = _r(n), _r(n)
    for x_offset, owned in ((0, [0, 1, 2, 3, 4096]), (1, [0, 4096])):
        out = _buffer(np.full(n, np.nan, np.float32), 0)
        host.run_thread(spec.name, [_buffer(x, x_offset), _buffer(y, 0), out], tid=0, ctaid=0, ntid=4096, nctaid=1)
        assert np.flatnonzero(~np.isnan(out)).tolist() == owned
        np.testing.assert_allclose(out[owned], (x * 2 + y)[owned], rtol=1e-6)


# ---- column reductions: split across blocks when the columns are few -----------------------------

def test_column_layout_splits_few_columns_with_many_rows():
    layout = gpu.column_layout(1 << 24, 4)
    assert (layout.width, layout.tiles, layout.chunks) == (4, 1, gpu.COLUMN_FILL_BLOCKS)
    assert gpu.column_layout(1_000_000, 8).chunks > 1
    assert gpu.column_layout(1_000, 100_000).chunks == 1               # enough columns already
    assert gpu.column_layout(gpu.COLUMN_CHUNK_MIN_ROWS * 2 - 1, 8).chunks == 1   # too few rows
    assert gpu.column_layout(1 << 20, 8, splittable=False).chunks == 1
    assert [gpu.column_layout(9, c).width for c in (0, 1, 2, 3, 8, 9, 32, 100)] == [1, 1, 2, 4, 8, 16, 32, 32]
    for rows, cols in ((1025, 3), (100_000, 100), (777_777, 8)):
        lay = gpu.column_layout(rows, cols)
        assert (lay.chunks - 1) * lay.chunk_rows < rows <= lay.chunks * lay.chunk_rows    # no empty chunk


def _column_program(x, b):
    return x.sum(axis=0), np.maximum(x.max(axis=0), b) * 2 + 1


_COLUMN_CASES = [(cols, rows) for cols in (1, 2, 3, 8, 100) for rows in (1, 7, 600, 1100, 5000)] + \
    [(2, 100_000), (8, 100_000), (3, 30_000)]


@pytest.mark.parametrize("cols,rows", _COLUMN_CASES)
def test_column_reductions_match_numpy(cols, rows):
    x, b = _r(rows, cols), _r(cols)
    f = nbxla.jit(_column_program, device="cuda-emulator")
    got = f(x, b)
    want = [w.astype(np.float32) for w in _column_program(x.astype(np.float64), b)]
    for g, w in zip(got, want):
        ok, detail = compare_arrays(np.asarray(g), w)
        assert ok, detail
    styles = {s.style for s in f.last_compilation.executable.native.kernels.specs.values()}
    if rows > 1 and cols > 1:
        assert styles == {"column-split" if gpu.column_layout(rows, cols).chunks > 1 else "column"}


def _in_f64(fn):
    """NumPy's result computed in float64 and rounded to the input's float type (a float32
    column sum by NumPy is itself off by more than our per-dtype tolerance)."""
    def reference(x):
        out = fn(x.astype(np.float64))
        out = out if isinstance(out, tuple) else (out,)
        return tuple(o.astype(x.dtype) if o.dtype.kind == "f" else o for o in out)
    return reference


_COLUMN_DTYPE_PROGRAMS = {
    "f16_sum": (lambda x: x.sum(axis=0), lambda: _r(3000, 5).astype(np.float16)),       # accumulated in f32
    "f64_min_epilogue": (lambda x: np.sqrt(np.abs(x.min(axis=0))), lambda: _r(2500, 6, dtype=np.float64)),
    "s32_sum_prod": (lambda x: (x.sum(axis=0), (x % 3 + 1).prod(axis=0)),
                     lambda: rng.integers(-9, 9, (1200, 7)).astype(np.int32)),
    "pred_any_all": (lambda x: ((x > 2).any(axis=0), (x > -3).all(axis=0)), lambda: _r(1500, 9)),
    "centered_rows_out": (lambda x: (x - x.mean(axis=0), x.sum(axis=0)), lambda: _r(1100, 3)),
}


@pytest.mark.parametrize("name", sorted(_COLUMN_DTYPE_PROGRAMS))
def test_split_column_reductions_by_dtype(name):
    fn, make = _COLUMN_DTYPE_PROGRAMS[name]
    x = make()
    f = nbxla.jit(fn, device="cuda-emulator")
    got, want = f(x), _in_f64(fn)(x) if x.dtype.kind == "f" else fn(x)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    styles = {s.style for s in f.last_compilation.executable.native.kernels.specs.values()}
    # A reduction over leading axes writes one array per kernel (fusion's rule: several outputs
    # would be written column by column), so centered rows are an elementwise kernel of their own.
    assert "column-split" in styles and styles <= {"column-split", "elementwise"}
    for g, w in zip(got, want):
        ok, detail = compare_arrays(np.asarray(g), w, rtol=2e-3 if w.dtype == np.float16 else None)
        assert ok, detail


def test_split_column_reductions_are_deterministic():
    """Partials are combined in chunk order, never by atomics: equal bits on every run, even
    though the emulated threads' timing differs from run to run."""
    x = _r(5000, 3)
    f = nbxla.jit(lambda x: (x.sum(axis=0), x - x.mean(axis=0)), device="cuda-emulator")
    first = f(x)
    for _ in range(3):
        assert all(np.array_equal(a, b) for a, b in zip(f(x), first))


def test_dependent_column_reductions_are_two_kernels():
    """A variance over axis 0 needs the final mean in the second reduction: the fusion pass
    keeps the two column reductions apart (one kernel would read the input column by column
    once per phase), so each can be split across blocks on its own."""
    x = _r(5000, 4)
    f = nbxla.jit(lambda x: ((x - x.mean(axis=0)) ** 2).mean(axis=0), device="cuda-emulator")
    ok, detail = compare_arrays(f(x), x.astype(np.float64).var(axis=0).astype(np.float32))
    assert ok, detail
    styles = [s.style for s in f.last_compilation.executable.native.kernels.specs.values()]
    assert len(styles) == 2 and set(styles) <= {"column", "column-split"}, styles


# ---- on a real GPU (skipped without one) ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no usable GPU (CuPy sees none)")
def test_vector_and_split_kernels_on_a_gpu():
    import cupy
    x, y = _r(4099), _r(4099)
    f = nbxla.jit(lambda x, y: x * 2 + y, device="cuda")
    dx, dy = cupy.asarray(np.concatenate([[0], x])), cupy.asarray(y)
    for args in ((dx[1:], dy), (cupy.asarray(x), dy)):                  # unaligned, aligned
        np.testing.assert_allclose(cupy.asnumpy(f(*args)), x * 2 + y, rtol=1e-6)
    big = rng.random((1 << 20, 4), dtype=np.float32)
    g = nbxla.jit(lambda x: (x.sum(axis=0), x - x.mean(axis=0)), device="cuda")
    total, centered = g(cupy.asarray(big))
    assert "column-split" in {s.style for s in g.last_compilation.executable.native.kernels.specs.values()}
    np.testing.assert_allclose(cupy.asnumpy(total), big.astype(np.float64).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(cupy.asnumpy(centered), big - big.mean(axis=0), atol=1e-5)


# ---- transcendental device functions (gpu_math), measured through the emulated kernels -----------

def _ulps(got, ref, dtype):
    ref_rounded = ref.astype(dtype)
    spacing = np.spacing(np.abs(ref_rounded)).astype(np.longdouble)
    err = np.abs(got.astype(np.longdouble) - ref) / spacing
    finite = np.isfinite(ref_rounded)
    return float(err[finite].max())


@pytest.mark.parametrize("dtype,cbrt_max,atan2_max", [(np.float32, 0.5, 0.5), (np.float64, 1.0, 2.5)])
def test_cbrt_and_atan2_device_functions(dtype, cbrt_max, atan2_max):
    rng = np.random.default_rng(6)              # the same samples whichever tests ran before
    n = 20000
    mant = rng.random(n) + 0.5
    exps = rng.integers(-60, 60, n)
    x = (mant * 2.0 ** exps * rng.choice([-1, 1], n)).astype(dtype)
    y = np.roll(x, 7) * rng.random(n).astype(dtype)
    f = nbxla.jit(lambda x, y: (np.cbrt(x), np.arctan2(y, x)), device="cuda-emulator")
    c, a = f(x, y)
    ld = np.longdouble
    assert _ulps(c, np.cbrt(x.astype(ld)), dtype) <= cbrt_max
    assert _ulps(a, np.arctan2(y.astype(ld), x.astype(ld)), dtype) <= atan2_max
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype)
    xs, ys = np.meshgrid(special, special)
    c, a = f(xs.ravel(), ys.ravel())
    np.testing.assert_array_equal(c, np.cbrt(xs.ravel()))
    np.testing.assert_array_equal(np.signbit(c), np.signbit(np.cbrt(xs.ravel())))
    want = np.arctan2(ys.ravel(), xs.ravel())
    np.testing.assert_allclose(a, want, rtol=1e-6)
    np.testing.assert_array_equal(np.signbit(a), np.signbit(want))


# ---- stages and errors without a GPU -------------------------------------------------------------

def test_ptx_stage_without_a_gpu():
    x = _r(8, 100)
    f = nbxla.jit(softmax, device="cuda")
    ptx = f.get_compiler_ir(x)(stage="ptx")
    assert ".target sm_" in ptx and ".entry" in ptx and "shfl.sync.bfly" in ptx
    llvm_ir = f.get_compiler_ir(x)(stage="llvm_ir")
    assert "nvptx64-nvidia-cuda" in llvm_ir and "nvvm.annotations" in llvm_ir
    assert "ptx" in f.last_compilation.stages


@pytest.mark.skipif(cuda_available(), reason="a GPU is present: device 'cuda' runs")
def test_running_without_a_gpu_is_a_clear_error():
    f = nbxla.jit(lambda x: x + 1, device="cuda")
    with pytest.raises(DeviceUnavailableError, match="cannot run here") as info:
        f(np.ones(3))
    assert isinstance(info.value, NbxlaError)
    assert "stage" in str(info.value)          # tells the user the PTX is still there


@pytest.mark.skipif(cuda_available(), reason="a GPU is present: auto picks cuda")
def test_auto_picks_cpu_without_a_gpu():
    from nbxla.runtime.executable import resolve_device
    assert resolve_device("auto") == "cpu"


def test_nbxla_works_without_cupy():
    code = textwrap.dedent("""
        import sys
        sys.modules["cupy"] = None                  # import cupy -> ImportError
        import numpy as np, nbxla
        from nbxla.runtime.cuda_executable import DeviceUnavailableError
        from nbxla.runtime.executable import resolve_device
        assert resolve_device("auto") == "cpu"
        assert nbxla.jit(lambda x: x * 2)(np.ones(3)).tolist() == [2, 2, 2]
        f = nbxla.jit(lambda x: x.sum(), device="cuda")
        assert ".entry" in f.get_compiler_ir(np.ones(3))(stage="ptx")
        try:
            f(np.ones(3))
        except DeviceUnavailableError as e:
            assert "CuPy is not importable" in str(e), e
        else:
            raise AssertionError("ran without CuPy")
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def test_magic_compiles_and_shows_ptx_without_a_gpu(shell):
    if cuda_available():
        pytest.skip("a GPU is present: the cell runs")
    shell.user_ns["xin"] = np.ones((4, 64), np.float32)
    result, out = run(shell, "%%xla --device cuda --stage ptx\nyout = np.exp(xin).sum(axis=1)")
    assert ".entry" in out and "shfl.sync.bfly" in out
    assert "cannot run here" in out
    assert "yout" not in shell.user_ns
