"""Model-shaped bf16 modules (tests/hlo/models/), in the forms TensorFlow's automatic mixed
precision emits them: a GraphSAGE-like gather / mean / segment-sum (bf16 scatter) + dense
block with an argmax, an SSD-like strided conv + depthwise + pointwise block with relu6 and a
box-decode tail, a Stable-Diffusion-like groupnorm + SiLU + conv + two-head attention + GELU
block.  Beside them, dot-centred modules as JAX prints them (``jax.jit(f).lower(..)
.as_text(dialect="hlo")``, reprinted by nbxla's printer without metadata): pre-layernorm
transformer blocks (layernorm, QKV projection, multi-head attention with an f32 softmax,
output projection and residual, layernorm, GELU MLP and residual) in bf16 at two sizes and in
f32, a bf16 GELU MLP and bf16 attention over 8 heads -- sizes where XLA:CPU takes from about
0.3 to 3 ms (``benchmarks/hlo_modules.py`` times them against XLA on the same text).

Each must run on the CPU backend with no instruction on the reference evaluator (not as a
fallback of a fusion, not as a standalone op, not as a step of any program) and give the
evaluator's results within bf16's tolerance; where JAX is reachable, XLA:CPU's too
(tests/hlo/xla_cpu.py).  The module text is run as written and without its ``HloModule``
header line (as XLA's test files are written)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.elided import model_values
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from tests.hlo.xla_cpu import run_on_xla_cpu, xla_python

MODELS = Path(__file__).parent / "models"
NAMES = sorted(p.stem for p in MODELS.glob("*.hlo"))


def model_inputs(text: str, seed: int) -> list[np.ndarray]:
    """Indices in [0, 8) (in range for every table and segment count of these modules);
    weights scaled by 1/sqrt(fan-in), as trained layers keep activations of order one."""
    rng = np.random.default_rng(seed)
    return [model_values(p.shape, rng) for p in parse_hlo(text).entry.parameters]


def evaluator_steps(executable) -> list[str]:
    """Every instruction that runs an evaluator rule: fusions the code generator refused,
    standalone ops without a kernel or library call, and steps of any program saying so."""
    native = executable.native
    steps = [line for line in native.describe().splitlines() if line.startswith("  %") and "evaluator" in line]
    return sorted({**native.interpreted, **native.interpreted_ops}) + steps


def check(got, want, what: str) -> None:
    """bf16's tolerance for every float output (the f32 outputs are computed from bf16
    values: they carry bf16's rounding), relative to the output's largest magnitude."""
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        tol = {}
        if w.dtype.kind not in "iub":
            scale = float(np.nanmax(np.abs(w.astype(np.float32)))) if w.size else 1.0
            tol = {"rtol": 1e-2, "atol": 1e-2 * max(scale, 1.0)}
        ok, detail = compare_arrays(g, w, **tol)
        assert ok, f"{what}, output {k}: {detail}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("header", [True, False], ids=["with-header", "header-less"])
def test_model_module_runs_natively_and_matches_the_evaluator(name, header):
    text = (MODELS / f"{name}.hlo").read_text()
    if not header:
        text = text.split("\n", 1)[1]
        assert "HloModule" not in text
    compilation = compile_module(parse_hlo(text, name), "cpu")
    assert evaluator_steps(compilation.executable) == []
    for seed in (0, 1):
        inputs = model_inputs(text, seed)
        got = compilation.executable.run(inputs)
        with np.errstate(all="ignore"):
            want = flatten(evaluate(parse_hlo(text, name), inputs))
        check(got, want, f"{name} (seed {seed}) against the evaluator")


@pytest.mark.skipif(xla_python() is None, reason="JAX (XLA:CPU) is not reachable: no jax here, no "
                                                  "NBXLA_XLA_PYTHON, no /work/benchvenv")
@pytest.mark.parametrize("name", NAMES)
def test_model_module_matches_xla_cpu(name):
    text = (MODELS / f"{name}.hlo").read_text()
    inputs = model_inputs(text, 2)
    got = compile_module(parse_hlo(text, name), "cpu").executable.run(inputs)
    check(got, run_on_xla_cpu(text, inputs), f"{name} against XLA:CPU")


def test_the_evaluator_step_check_can_fail(monkeypatch):
    """``evaluator_steps`` sees an op that runs on the evaluator (a custom call whose only
    implementation is a NumPy function registered for the evaluator)."""
    from nbxla.hlo.evaluator import CUSTOM_CALL_TARGETS
    monkeypatch.setitem(CUSTOM_CALL_TARGETS, "test_twice", lambda instr, args, interp: args[0] * 2)
    text = ("HloModule f\nENTRY %e (a: bf16[8]) -> bf16[8] {\n  %a = bf16[8] parameter(0)\n"
            "  ROOT %f = bf16[8] custom-call(%a), custom_call_target=\"test_twice\"\n}\n")
    with pytest.warns(Warning):
        compilation = compile_module(parse_hlo(text), "cpu")
    assert evaluator_steps(compilation.executable)
