"""The %%xla, %xla_ir and %xla_cache magics through a real IPython shell."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nbxla
from nbxla.compiler import STAGES
from nbxla.runtime import executable
from nbxla.runtime.cache import DEFAULT_CACHE

from tests.ipython_util import run, user_names


def test_recompiles_with_an_explanation_on_shape_and_constant_change(shell):
    cell = "%%xla\ny = alpha * x + 1"
    shell.user_ns.update(x=np.ones((10, 10), np.float32), alpha=0.5)
    run(shell, cell)
    run(shell, cell)                                        # hit
    shell.user_ns["x"] = np.ones((100, 100), np.float32)
    run(shell, cell)
    shell.user_ns["alpha"] = 0.25
    run(shell, cell)
    _, table = run(shell, "%xla_cache")
    assert "x: f32[10,10] -> f32[100,100]" in table
    assert "alpha: 0.5 -> 0.25 (constant)" in table
    assert "3 entries, 1 hits, 3 misses" in table
    np.testing.assert_array_equal(shell.user_ns["y"], np.full((100, 100), 1.25, np.float32))


def test_cache_clear_and_no_cache(shell):
    shell.user_ns["x"] = np.arange(3.0)
    run(shell, "%%xla\ny = x + 1")
    _, out = run(shell, "%xla_cache clear")
    assert "cleared" in out and len(DEFAULT_CACHE.entries()) == 0
    result, _ = run(shell, "%%xla --no-cache\ny = x + 2")
    assert result.success and len(DEFAULT_CACHE.entries()) == 0
    np.testing.assert_array_equal(shell.user_ns["y"], np.arange(3.0) + 2)
    _, out = run(shell, "%xla_cache")
    assert "0 entries" in out


def test_verify_and_compare(shell):
    shell.user_ns["x"] = np.linspace(-2, 2, 12).reshape(3, 4)
    result, out = run(shell, "%%xla --verify --compare\n"
                             "x[:, 0] = 0\ne = np.exp(x)\np = e / e.sum(axis=1, keepdims=True)\np.max()")
    assert result.success, out
    assert "--verify: 4 output(s) match eager NumPy" in out          # x (in place), e, p, display
    assert re.search(r"NumPy: [\d.e+-]+ ms, speedup [\d.]+x \(median of \d+ runs\)", out)


def test_verify_fails_loudly_and_changes_nothing(shell, monkeypatch):
    def off_by_one(module):
        good = executable.BACKENDS["evaluator"](module)
        return executable.Executable(module, "broken", lambda inputs: [o + 1 for o in good.run(inputs)])
    monkeypatch.setitem(executable.BACKENDS, "cpu", off_by_one)
    shell.user_ns["x"] = np.arange(4.0)
    result, out = run(shell, "%%xla --verify --no-cache\nsquares = x * x")
    assert isinstance(result.error_in_exec, nbxla.NbxlaError)
    assert "VerificationError" in out and "squares: max abs err 1" in out
    assert "squares" not in shell.user_ns


@pytest.mark.parametrize("line, source, error", [
    ("if x.sum() > 0:", "if x.sum() > 0:\n    y = x", "NotCompilableError"),
    ("y = x[0].item()", "y = x[0].item()", "ConcretizationError"),
    ("u = np.unique(x)", "u = np.unique(x)", "NotCompilableError: np.unique cannot be compiled"),
    ("r = np.random.rand(3)", "r = np.random.rand(3)", "NotCompilableError: np.random has hidden state"),
    ("m = x[x > 0][0]", "m = x[x > 0][0]", "NotCompilableError: boolean-mask indexing"),
])
def test_errors_point_at_the_cell_line(shell, line, source, error):
    shell.user_ns["x"] = np.arange(-3.0, 3.0)
    before = dict(user_names(shell))
    result, out = run(shell, f"%%xla\nz = x + 1\n{source}\n")
    assert isinstance(result.error_in_exec, nbxla.NbxlaError)
    number = result.execution_count
    assert error in out
    assert f"Cell In[{number}], line 3\n    {line}" in out
    assert "nbxla/" not in out                                 # no traceback into nbxla
    assert user_names(shell) == before                          # z was not bound


def test_numpy_errors_show_a_traceback_trimmed_to_the_cell(shell):
    shell.user_ns["x"] = np.ones((2, 3))
    result, out = run(shell, "%%xla\ny = x * 2\nz = x + np.ones(4)\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert f"Cell In[{result.execution_count}], line 3" in out and "z = x + np.ones(4)" in out
    assert "nbxla/" not in out and "run_cell_magic" not in out
    assert "y" not in shell.user_ns


@pytest.mark.parametrize("magic", ["%%xla", "%%xla --auto"])
def test_syntax_errors_are_shown_at_the_cell_line(shell, magic):
    result, out = run(shell, f"{magic}\ny = 1\nz = (\n")
    assert not result.success
    assert "SyntaxError" in out and f"Cell In[{result.execution_count}], line 3" in out
    assert "nbxla/" not in out


def test_xla_ir_shows_stages_of_the_last_cell_and_of_jit_functions(shell):
    shell.user_ns["x"] = np.arange(4.0)
    run(shell, "%%xla\ny = np.sin(x) * 2")
    _, out = run(shell, "%xla_ir stage=hlo")
    assert out.startswith("HloModule cell_") and "sine(" in out
    _, out = run(shell, "%xla_ir optimized_hlo")
    assert "HloModule" in out
    result, out = run(shell, "%xla_ir bogus")
    assert not result.success
    assert f"unknown stage 'bogus'; available: {', '.join(STAGES)}" in out
    run(shell, "import nbxla\n@nbxla.jit\ndef f(a):\n    return a * 3\nf(x)")
    _, out = run(shell, "%xla_ir hlo f")
    assert "HloModule f" in out and "multiply(" in out


def test_stage_option_and_dump(shell, tmp_path):
    shell.user_ns["x"] = np.arange(4.0)
    result, out = run(shell, f"%%xla --stage hlo --dump {tmp_path}\ny = x - 1")
    assert result.success and "HloModule cell_" in out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert all(re.fullmatch(r"module_\d{4,}\.cell_\d+\.\w+\.txt", n) for n in names), names   # (4 digits or more: a worker past 9999 modules)
    assert {n.split(".")[-2] for n in names} >= set(STAGES) | {"llvm_ir", "asm"}
    assert any(n.endswith(".hlo.txt") for n in names)


def test_unknown_stage_option_changes_nothing(shell):
    shell.user_ns["x"] = np.arange(4.0)
    result, out = run(shell, "%%xla --stage llvm\ny = x - 1")
    assert not result.success and "UnknownStageError" in out
    assert "y" not in shell.user_ns


def test_cuda_device_gives_a_clear_message(shell):
    from nbxla.runtime.cuda_executable import cuda_available   # CUDA backend
    if cuda_available():
        pytest.skip("a GPU is present: device 'cuda' runs")
    shell.user_ns["x"] = np.arange(4.0)
    result, out = run(shell, "%%xla --device cuda\ny = x - 1")
    assert not result.success
    assert "DeviceUnavailableError: device 'cuda' cannot run here" in out
    assert "y" not in shell.user_ns


def test_flags_from_the_environment(shell, monkeypatch, tmp_path):
    shell.user_ns["x"] = np.arange(4.0)
    monkeypatch.setenv("NBXLA_FLAGS", f"--dump_to={tmp_path}")
    result, _ = run(shell, "%%xla\ny = x * 3")
    assert result.success
    assert {p.name.split(".")[-2] for p in tmp_path.iterdir()} >= set(STAGES)
    monkeypatch.setenv("NBXLA_FLAGS", "--device=cuda")
    result, out = run(shell, "%%xla\ny = x * 4")
    from nbxla.runtime.cuda_executable import cuda_available   # CUDA backend
    assert cuda_available() or "device 'cuda' cannot run here" in out


def test_bad_options_are_usage_errors(shell):
    result, out = run(shell, "%%xla --device tpu\ny = 1")
    assert not result.success and "UsageError" in out
    _, out = run(shell, "%xla_cache everything")
    assert "usage: %xla_cache [clear]" in out
