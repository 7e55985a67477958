"""The CUDA backend without a GPU: PTX assembled by ptxas, kernels emulated on the host.

* Every program's PTX is assembled by ``ptxas`` for sm_80 and sm_90 (skipped with a reason
  when ptxas is not on PATH); register and spill counts are recorded (``record_property``,
  shown with ``-rA``/junit) and spills must be zero.
* The same kernels' IR runs under the host emulator (``device='cuda-emulator'``: real 32-lane
  warps and block barriers, two warps per block, at most three blocks) and must match NumPy;
  each program also asserts which kernel style it exercised, so every style is covered:
  elementwise (linear and index-mapped), row-warp, row-block, column, full-reduce, multi-output
  loop and reduction fusions, and the multi-phase row fusions (softmax, layer norm).
* Stages and errors without a GPU: ``get_compiler_ir(...)(stage='ptx')`` works, running raises
  ``DeviceUnavailableError``; importing nbxla and the CPU path work without CuPy.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nbxla
from nbxla.codegen import gpu, gpu_emulator
from nbxla.errors import NbxlaError
from nbxla.runtime.cuda_executable import DeviceUnavailableError, cuda_available
from nbxla.testing import compare_arrays

from .ipython_util import run, shell  # noqa: F401  (fixture)

rng = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 2).astype(dtype)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


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
        "elementwise", "row-warp", "row-block", "column", "full-reduce"}


@pytest.mark.parametrize("name", ["row_block_softmax", "column_centered", "full_multi_output", "row_warp_softmax"])
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


# ---- transcendental device functions (gpu_math), measured through the emulated kernels -----------

def _ulps(got, ref, dtype):
    ref_rounded = ref.astype(dtype)
    spacing = np.spacing(np.abs(ref_rounded)).astype(np.longdouble)
    err = np.abs(got.astype(np.longdouble) - ref) / spacing
    finite = np.isfinite(ref_rounded)
    return float(err[finite].max())


@pytest.mark.parametrize("dtype,cbrt_max,atan2_max", [(np.float32, 0.5, 0.5), (np.float64, 1.0, 2.0)])
def test_cbrt_and_atan2_device_functions(dtype, cbrt_max, atan2_max):
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


# ---- stages and errors without a GPU ---------------------------------------------------------------

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
