"""A second corpus of real JAX-exported HLO (``tests/jax_extra/``, written by its
``generate.py``): scatter/gather variants, sorts and top-k, windows and select-and-scatter,
convolution grads, control flow, bit operations, special functions, complex numbers, FFTs,
small integer and float types, empty arrays.  Both forms of every case (JAX's unoptimized
export and XLA:CPU's optimized module) must give JAX's recorded outputs on the evaluator and
on the CPU backend, and the unoptimized form must also after nbxla's optimizer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.errors import NbxlaError
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import print_module
from nbxla.passes import optimize
from nbxla.testing import compare_arrays

from tests.passes.test_buffer_assignment import check_plan
from tests.passes.test_property import assert_well_formed_fusions

HERE = Path(__file__).resolve().parent / "jax_extra"
CASES = sorted(json.loads((HERE / "cases.json").read_text()).keys() - {"jax", "x64"})
FORMS = ("hlo", "opt.hlo")

# Cases nbxla rejects on purpose, with a pattern the error message must match (it names what
# is unsupported, so that a user knows what to change).
EXPECTED_ERRORS: dict[str, str] = {}

# Relative tolerances for cases whose outputs are more sensitive than one rounding step.
CASE_RTOL: dict[str, float] = {
    # An f64 accumulator of f32 sums: each sum is rounded to f32 in whatever order the backend
    # adds (NumPy's pairwise order, XLA's, nbxla's vectorized one), so f32's tolerance applies.
    "fori_loop_tuple_carry": 1e-6,
    # x * 3 rounded to bf16: the exported module rounds the product (FloatNormalization's
    # f32 multiply, then a convert to bf16), but XLA:CPU allows excess precision and its
    # optimized module (and so JAX's recorded output) drops that rounding.  bf16's tolerance.
    "bfloat16_internal": 1e-2,
}

# Outputs where JAX's recorded value breaks HLO's own semantics, with the value HLO defines:
# (case, output index) -> (expected value, why).
JAX_DEVIATIONS: dict[tuple[str, int], tuple[object, str]] = {
    ("reductions_nan_medium", 4): (np.float32(np.nan), "x.max() of an array holding NaNs: HLO's maximum "
                                   "propagates NaN (the row and column maxima JAX gives are NaN), but "
                                   "XLA:CPU's vectorized full reduction drops it and returns 3.75"),
}

# (case, form, where) -> reason, for known bugs outside the files this corpus may fix;
# ``where`` is "evaluator", "cpu" or "optimized".
XFAIL: dict[tuple[str, str, str], str] = {}


def _load(case: str, form: str):
    path = HERE / f"{case}.{form}"
    data = np.load(HERE / f"{case}.npz")
    ins = [data[f"in{i}"] for i in range(sum(k.startswith("in") for k in data.files))]
    outs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    for i, out in enumerate(outs):
        if (case, i) in JAX_DEVIATIONS:
            outs[i] = np.full_like(out, JAX_DEVIATIONS[case, i][0])
    return path, ins, outs


def _check_outputs(case: str, got, outs) -> None:
    assert len(got) == len(outs), f"{len(got)} outputs, JAX has {len(outs)}"
    for i, (g, want) in enumerate(zip(got, outs)):
        g = np.asarray(g)
        assert g.dtype == want.dtype and g.shape == want.shape, \
            f"out{i}: {g.dtype}{g.shape}, JAX gave {want.dtype}{want.shape}"
        ok, detail = compare_arrays(g, want, rtol=CASE_RTOL.get(case))
        assert ok, f"out{i}: {detail}"


def _params(where: str, forms=FORMS):
    out = []
    for case in CASES:
        for form in forms:
            marks = []
            reason = XFAIL.get((case, form, where))
            if reason:
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            out.append(pytest.param(case, form, id=f"{case}.{form}", marks=marks))
    return out


def _run_or_expect_error(case: str, run) -> list | None:
    """``run()``'s outputs, or None after checking the expected error of an unsupported case."""
    if case not in EXPECTED_ERRORS:
        return run()
    with pytest.raises(NbxlaError, match=EXPECTED_ERRORS[case]):
        run()
    return None


@pytest.mark.parametrize("case, form", _params("evaluator"))
def test_evaluator_matches_jax(case, form):
    """Run on the module as nbxla prints it back (printing and parsing again changes nothing)."""
    path, ins, outs = _load(case, form)
    text = print_module(parse_hlo(path.read_text(), str(path)))
    printed = parse_hlo(text, f"printed {path.name}")
    assert print_module(printed) == text
    got = _run_or_expect_error(case, lambda: flatten(evaluate(printed, ins)))
    if got is not None:
        _check_outputs(case, got, outs)


# What the CPU backend still leaves to the evaluator's rules in this corpus (correct, not
# native); any other reason for interpreting a fusion or a library op is a regression.
KNOWN_GAPS = re.compile(
    r"bitcast-convert between widths \(or of pred\) has no native code path yet"
    r"|a reduction fusion output outside the reduced and input spaces"
    # Ops with no kernel or library call yet (hlo/placement.CPU_PLACEMENT says so).  (Dots in
    # fusions and dots BLAS has no element type for run as native dot kernels.)
    r"|no native kernel or library call for custom-call\(.*")


@pytest.mark.parametrize("case, form", _params("cpu"))
def test_cpu_backend_matches_jax(case, form):
    path, ins, outs = _load(case, form)
    compiled = []

    def run():
        compiled.append(compile_module(parse_hlo(path.read_text(), str(path)), "cpu").executable)
        return compiled[0].run(ins)
    got = _run_or_expect_error(case, run)
    if got is None:
        return
    _check_outputs(case, got, outs)
    # A second run gives the same results without overwriting the first run's (no state kept
    # between runs, no memory shared with earlier results), and inputs stay untouched.
    first, saved = [np.copy(g) for g in got], [np.copy(x) for x in ins]
    again = compiled[0].run(ins)
    for want, have in ((first, again), (first, got), (saved, ins)):
        assert all(np.array_equal(w, h, equal_nan=w.dtype.kind in "fc") for w, h in zip(want, have))
    native = compiled[0].native
    for name, why in {**native.interpreted, **native.interpreted_ops}.items():
        assert KNOWN_GAPS.fullmatch(why), f"%{name} runs through the evaluator: {why}"


@pytest.mark.parametrize("case, form", _params("optimized", forms=("hlo",)))
def test_optimizer_keeps_results(case, form):
    path, ins, outs = _load(case, form)

    def run():
        result = optimize(parse_hlo(path.read_text(), str(path)))
        assert_well_formed_fusions(result.module)
        check_plan(result.module, result.facts["buffer-assignment"], ins)
        return flatten(evaluate(result.module, ins))
    got = _run_or_expect_error(case, run)
    if got is not None:
        _check_outputs(case, got, outs)


def test_corpus_is_complete():
    """Every case listed has its three files, and nothing stale lies beside them."""
    assert len(CASES) >= 60
    files = {p.name for p in HERE.iterdir() if p.suffix in (".hlo", ".npz")}
    expected = {f"{c}.{ext}" for c in CASES for ext in ("hlo", "opt.hlo", "npz")}
    assert files == expected
    assert set(EXPECTED_ERRORS) <= set(CASES)
    assert {c for c, _, _ in XFAIL} <= set(CASES) and {c for c, _ in JAX_DEVIATIONS} <= set(CASES)
    for pattern in EXPECTED_ERRORS.values():
        re.compile(pattern)
