"""``nbxla.profile``: per-step timing, time per source line, verdicts, loop decisions, views, CLI.

Tests never assert timings: they check what the timing must satisfy whatever the machine's
speed (the per-line rows add up to the measured total; a kernel's split follows its ops'
flops exactly), and classifications whose side of a threshold does not depend on the load
(a 128 MiB reduction sits below the roofline's ridge; a 128-element chain moves 1 KiB a call).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import nbxla
from nbxla.compiler import UnknownStageError, compile_module
from nbxla.profiler import Profile, ProfileError, machine_limits, profile_compilation
from nbxla.profiler.build import DISPATCH, NO_LINE
from nbxla.profiler.report import OVERHEAD_US

from tests.ipython_util import run

FAST = {"budget_s": 0.05}


def running_example(x, y):
    z = 3 * x**2 + y
    return np.mean(z)


def small_chain(x):
    for _ in range(12):
        x = np.tanh(x * 1.01 + 0.5)
    return x


def gemm(a, b):
    return a @ b


def gemv(a, v):
    return a @ v


def two_lines(x):
    a = x + 1.0
    b = a * 2.0 - a * 3.0 + x
    return b


def loops(x, n):
    s = x
    for _ in range(3):
        s = s + 1.0
    for i in range(n):
        s = s * 0.5 + x
    return s.sum()


@pytest.fixture(scope="module")
def big_profile() -> Profile:
    n = 1 << 24
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.ones(n, np.float32)
    return nbxla.profile(running_example)(x, y)


def _line_of(fn, text: str) -> int:
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_per_line_times_add_up_to_the_measured_total(big_profile):
    p = big_profile
    # The source lines alone hold the measured total within 10 % (a bandwidth-bound program:
    # dispatch is negligible), and with the rows without a line they hold it exactly.
    assert abs(p.lines_s - p.total_s) <= 0.1 * p.total_s, p.to_text()
    assert p.attributed_s == pytest.approx(p.total_s, rel=1e-9)
    per_line = p.line_seconds()
    assert set(per_line) == {_line_of(running_example, "z = 3"), _line_of(running_example, "np.mean")}


def test_running_example_at_2_24_is_memory_bound(big_profile):
    (kernel,) = [k for k in big_profile.kernels if k.kind == "kernel"]
    assert kernel.bound == "memory", kernel.verdict
    assert kernel.verdict.startswith("memory bound")
    assert kernel.bytes == pytest.approx(2 * 4 * (1 << 24) + 4)
    assert kernel.intensity < big_profile.limits.ridge


def test_a_128_element_chain_is_overhead_bound():
    p = nbxla.profile(small_chain, **FAST)(np.ones(128, np.float32))
    (kernel,) = [k for k in p.kernels if k.kind == "kernel"]
    assert kernel.bound == "overhead", kernel.verdict
    assert kernel.us_per_call < OVERHEAD_US
    assert kernel.verdict.startswith("overhead bound:") and "of work per call" in kernel.verdict
    assert p.verdict.startswith("overhead bound")


def test_gemm_and_gemv_are_library_calls():
    a = np.ones((128, 96), np.float32)
    p = nbxla.profile(gemm, **FAST)(a, np.ones((96, 64), np.float32))
    (dot,) = [k for k in p.kernels if k.kind != "view"]
    assert dot.bound == "library" and "library call: BLAS GEMM" in dot.verdict
    assert dot.flops == 2 * 128 * 96 * 64
    assert any(d.kind == "library" and "BLAS GEMM" in d.text and d.line == _line_of(gemm, "a @ b")
               for d in p.decisions)
    p = nbxla.profile(gemv, **FAST)(a, np.ones(96, np.float32))
    assert any("BLAS GEMV" in k.verdict for k in p.kernels)


def test_a_fused_kernel_is_split_by_flops():
    p = nbxla.profile(two_lines, **FAST)(np.ones(4096, np.float32))
    per_line = p.line_seconds()
    # one add per element on the first line; two multiplies, a subtract and an add on the second
    one, four = per_line[_line_of(two_lines, "x + 1.0")], per_line[_line_of(two_lines, "a * 2.0")]
    assert four == pytest.approx(4 * one, rel=1e-9)


@pytest.mark.parametrize("native", ["1", "0"], ids=["native-loops", "host-loops"])
def test_loop_decisions_match_the_compilations_record(native, monkeypatch):
    monkeypatch.setenv("NBXLA_NATIVE_LOOPS", native)
    f = nbxla.jit(loops)
    f.cache.clear()
    x = np.ones(1000, np.float32)
    p = nbxla.profile(f, **FAST)(x, 300)
    comp = f.last_compilation
    recorded = list(dict.fromkeys((line, how) for line, how, _ in comp.loop_decisions))
    assert [(info.line, info.how) for info in p.loops] == recorded
    assert {how for _, how in recorded} == {"rolled", "unrolled"}
    rolled = next(info for info in p.loops if info.how == "rolled")
    assert rolled.trips == pytest.approx(300)
    assert rolled.line == _line_of(loops, "range(n)")
    texts = {d.line: d.text for d in p.decisions if d.kind == "loop"}
    assert texts[rolled.line].startswith("`for` rolled into a while (trip count 300), body = ")
    assert texts[_line_of(loops, "range(3)")].startswith("`for` unrolled (3 steps")
    assert ("one native C function" in texts[rolled.line]) == (native == "1")
    body_rows = [k for k in p.kernels if k.program != comp.optimized.entry.name and k.kind == "kernel"]
    assert body_rows and all(k.calls == pytest.approx(300) for k in body_rows if "add" in k.name)
    assert all(k.in_native_loop == (native == "1") for k in body_rows)
    assert p.attributed_s == pytest.approx(p.total_s, rel=1e-9)


def test_the_timing_hook_leaves_the_executable_as_it_was():
    f = nbxla.jit(two_lines)
    x = np.ones(64, np.float32)
    comp, inputs = f.compiled_inputs(x)
    cpu = comp.executable.native
    before = {name: list(p.steps) for name, p in cpu.programs.items()}
    run_fn = cpu.run
    profile_compilation(comp, inputs, **FAST)
    assert {name: list(p.steps) for name, p in cpu.programs.items()} == before
    assert cpu.run is run_fn and all("run" not in vars(p) for p in cpu.programs.values())
    np.testing.assert_allclose(f(x), two_lines(x))


def test_profile_stage_and_errors():
    f = nbxla.jit(two_lines)
    x = np.ones(64, np.float32)
    comp, inputs = f.compiled_inputs(x)
    comp.profile = None
    assert "profile" not in comp.stages
    with pytest.raises(UnknownStageError, match="nbxla.profile"):
        comp.stage("profile")
    nbxla.profile(f, **FAST)(x)
    assert "profile" in comp.stages and "time per source line" in comp.stage("profile")
    from nbxla.jupyter.stage_view import StageView
    bundle = StageView(comp)._repr_mimebundle_()
    assert "profile: time per kernel" in bundle["text/html"] and "time per source line" in bundle["text/html"]
    evaluated = compile_module(comp.hlo, "evaluator")
    with pytest.raises(ProfileError, match="CPU backend"):
        profile_compilation(evaluated, inputs)


def test_machine_limits_are_kept_in_the_cache_directory(monkeypatch):
    from nbxla.profiler import machine
    monkeypatch.setattr(machine, "_measured", None)     # (not what an earlier test kept in memory,
    limits = machine_limits()                           # from another directory)
    assert limits.read_gbs > 0 and limits.copy_gbs > 0 and limits.peak_gflops > 0
    path = os.path.join(os.environ["NBXLA_CACHE_DIR"], "machine_limits.json")
    with open(path) as f:
        kept = json.load(f)
    assert kept["read_gbs"] == pytest.approx(limits.read_gbs)


def test_view_has_line_bars_roofline_and_json():
    from nbxla.jupyter.profile_view import MIME, ProfileView, roofline_figure
    p = nbxla.profile(two_lines, **FAST)(np.ones(4096, np.float32))
    bundle = p._repr_mimebundle_()
    html = bundle["text/html"]
    assert html.count('class="nbxla-line-bar"') >= 2 and 'class="nbxla-roofline"' in html
    data = bundle[MIME]
    assert data["name"] == "two_lines" and data["kernels"] and data["source"]
    assert sum(r["seconds"] for r in data["source"]) + sum(data["unattributed"].values()) == \
        pytest.approx(data["total_s"], rel=1e-9)
    fig = roofline_figure(p)
    assert len(fig.axes[0].collections) >= 1       # a point per kernel
    assert ProfileView(p).to_text() == p.to_text()
    assert NO_LINE in p.unattributed and DISPATCH in p.unattributed


def test_cli_profile(tmp_path, capsys):
    from nbxla.__main__ import main
    src = tmp_path / "prog.py"
    src.write_text("import numpy as np\n\ndef f(x, y):\n    z = 3 * x**2 + y\n    return np.mean(z)\n")
    assert main(["profile", f"{src}:f", "--arg", "f32[4096]", "--arg", "f32[4096]", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "nbxla profile: f" in out and "time per source line" in out
    assert "    z = 3 * x**2 + y" in out and "verdict:" in out
    assert main(["profile", f"{src}:f", "--arg", "f32[16]", "--arg", "f32[16]", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "f"
    assert main(["profile", f"{src}:f"]) == 2
    assert "give the argument types" in capsys.readouterr().err
    assert main(["profile", f"{src}:f", "--arg", "q7[3]"]) == 2


def test_xla_magic_profile(shell):
    shell.user_ns.update(x=np.ones(1 << 12, np.float32), y=np.ones(1 << 12, np.float32))
    result, out = run(shell, "%%xla --profile\nz = 3 * x**2 + y\nm = z.mean()")
    assert result.success, out
    assert "nbxla profile: Cell In[" in out and "time per source line" in out
    assert "z = 3 * x**2 + y" in out
    assert shell.user_ns["m"] == pytest.approx(4.0)
    result, out = run(shell, "%xla_ir profile")
    assert result.success and "time per source line" in out


# ---- the verdict's thresholds, both sides of each (synthetic rows: no timing involved) -------

def _row(seconds, calls=1, flops=0.0, read=0.0, written=0.0, kind="kernel"):
    from nbxla.profiler.report import KernelRow
    return KernelRow("k", "p", kind, "native kernel (kLoop)", calls, seconds, flops, read, written)


def _limits():
    from nbxla.profiler.machine import MachineLimits
    return MachineLimits(read_gbs=10.0, copy_gbs=8.0, peak_gflops=100.0, threads=2)   # ridge: 10 flops/byte


@pytest.mark.parametrize("intensity, bound", [(9.0, "memory"), (11.0, "compute")])
def test_the_ridge_separates_memory_from_compute_bound(intensity, bound):
    from nbxla.profiler.report import classify
    nbytes = 64 << 20
    row = _row(seconds=0.5, read=nbytes, flops=intensity * nbytes)
    classify(row, _limits())
    assert row.bound == bound and row.verdict.startswith(f"{bound} bound")


@pytest.mark.parametrize("fraction, at_roof", [(0.7, True), (0.5, False), (1.5, None)])
def test_at_the_memory_roof_or_below_it(fraction, at_roof):
    from nbxla.profiler.report import AT_ROOF, classify
    nbytes = 64 << 20
    row = _row(seconds=nbytes / (fraction * 10e9), read=nbytes, flops=nbytes)
    classify(row, _limits())
    assert row.bandwidth_fraction == pytest.approx(fraction)
    if at_roof is None:
        assert "above the memory roof" in row.verdict
    elif at_roof:
        assert fraction >= AT_ROOF and "only less traffic helps" in row.verdict
    else:
        assert "below the roof" in row.verdict


@pytest.mark.parametrize("us, overhead", [(OVERHEAD_US * 0.5, True), (OVERHEAD_US * 2, False)])
def test_overhead_bound_below_the_per_call_threshold(us, overhead):
    from nbxla.profiler.report import classify
    row = _row(seconds=us * 1e-6, read=1024, flops=256)            # far below both roofs
    classify(row, _limits())
    assert (row.bound == "overhead") == overhead, row.verdict


def test_library_and_loop_rows_keep_their_kind():
    from nbxla.profiler.report import classify
    row = _row(seconds=1e-3, flops=2e9, kind="library")
    row.how = "BLAS GEMM f32[1000,1000] x f32[1000,1000]"
    classify(row, _limits())
    assert row.bound == "library" and row.verdict.startswith("library call: BLAS GEMM")
    assert row.flops_fraction == pytest.approx(20.0)


def test_large_kernels_raise_a_low_calibration(monkeypatch, tmp_path):
    from nbxla.profiler import machine
    monkeypatch.setenv("NBXLA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(machine, "_measured", None)
    low = _limits()
    raised = machine.raise_limits(low, read_gbs=12.0, copy_gbs=5.0)
    assert (raised.read_gbs, raised.copy_gbs, raised.peak_gflops) == (12.0, 8.0, 100.0)
    with open(tmp_path / machine.FILE) as f:
        assert json.load(f)["read_gbs"] == 12.0
    assert machine.raise_limits(raised, read_gbs=11.0) == raised       # never lowered
