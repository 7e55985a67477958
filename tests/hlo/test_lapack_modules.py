"""JAX's CPU linear algebra (det, inv, qr, eigh, solve_triangular; f32 and c128, batched) as
HLO text (tests/hlo/lapack/): the LAPACK custom calls run as library calls, nothing on the
evaluator; results as the evaluator's and, where JAX is reachable, as XLA:CPU's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from tests.hlo.xla_cpu import run_on_xla_cpu, xla_python

HERE = Path(__file__).parent / "lapack"
NAMES = sorted(p.stem for p in HERE.glob("*.hlo"))


def inputs_for(text: str) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    out = []
    for p in parse_hlo(text).entry.parameters:
        x = rng.standard_normal(p.shape.dims)
        if p.shape.dtype.kind == "c":
            x = x + 1j * rng.standard_normal(p.shape.dims)
        out.append(x.astype(p.shape.dtype))
    return out


def check(got, want, what):
    for k, (g, w) in enumerate(zip(got, want)):
        rtol = 1e-3 if w.dtype in (np.float32, np.complex64) else 1e-9
        ok, detail = compare_arrays(np.asarray(g), np.asarray(w), rtol=rtol, atol=rtol)
        assert ok, f"{what}, output {k}: {detail}"


def test_the_corpus_is_there():
    assert len(NAMES) == 10


@pytest.mark.parametrize("name", NAMES)
def test_runs_as_library_calls_and_matches_the_evaluator(name):
    text = (HERE / f"{name}.hlo").read_text()
    executable = compile_module(parse_hlo(text, name), "cpu").executable
    native = executable.native
    assert not {**native.interpreted, **native.interpreted_ops}
    assert "custom-call" in set(native.library_calls.values())
    inputs = inputs_for(text)
    check(executable.run(inputs), flatten(evaluate(parse_hlo(text, name), inputs)), f"{name} vs evaluator")


@pytest.mark.skipif(xla_python() is None, reason="JAX (XLA:CPU) is not reachable")
@pytest.mark.parametrize("name", NAMES)
def test_matches_xla_cpu(name):
    text = (HERE / f"{name}.hlo").read_text()
    inputs = inputs_for(text)
    got = compile_module(parse_hlo(text, name), "cpu").executable.run(inputs)
    check(got, run_on_xla_cpu(text, inputs), f"{name} vs XLA:CPU")
