"""Every HLO module of the corpora (JAX exports with JAX's outputs) compiled ahead of time: the
object runs from C and matches JAX, needs nothing beyond libc/libm/pthread, or is refused with
an AotError naming the instruction that has no native implementation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nbxla.errors import AotError
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from ..conftest import CORPUS_HLO
from ..test_corpus import CASE_RTOL, case_inputs_and_outputs
from ..test_jax_extra_corpus import CASE_RTOL as EXTRA_RTOL, EXPECTED_ERRORS, JAX_DEVIATIONS
from .aot_util import build, needs_cc, run, system_library_symbols, undefined_symbols

pytestmark = needs_cc

JAX_EXTRA = Path(__file__).resolve().parents[1] / "jax_extra"

# Cases with an op that has no native implementation (under jit: the reference evaluator in
# Python), and the pattern the refusal must match.
REFUSED = {
    "cholesky_custom_call": r"%cholesky\.\d+ \(custom-call\)",
    "linalg_solve_lapack": r"%lu\.\d+ \(custom-call\)",
    # fusions the code generator cannot emit (jit interprets them)
    "rng_bit_generator_algorithms": r"\(fusion\).*bitcast-convert between widths",
    "bitcast_convert": r"\(fusion\).*bitcast-convert between widths",
    "cumulative_ops": r"%reduce_window\.\d+ \(reduce-window\).*reducer other than",
    "bfloat16_internal": r"\(fusion\).*element type bf16 has no native code path",
}


def _cases():
    files = sorted(CORPUS_HLO.glob("*.hlo")) + sorted(JAX_EXTRA.glob("*.hlo"))
    return [pytest.param(f, id=f"{f.parent.name}/{f.name}") for f in files if not f.name.endswith(".opt.hlo")]


@pytest.fixture(scope="module")
def system_symbols():
    return system_library_symbols()


@pytest.mark.parametrize("path", _cases())
def test_corpus_case_ahead_of_time(path, tmp_path, system_symbols):
    case, ins, outs = case_inputs_and_outputs(path)
    module = parse_hlo(path.read_text(), str(path))
    if case in REFUSED:
        with pytest.raises(AotError, match=REFUSED[case]):
            build(module, None, tmp_path, "m")
        return
    if case in EXPECTED_ERRORS and path.parent == JAX_EXTRA:
        pytest.skip(f"nbxla rejects {case} on purpose")
    obj, exe = build(module, None, tmp_path, "m")
    missing = undefined_symbols(obj.object_path) - system_symbols
    assert not missing, f"symbols outside libc/libm/pthread: {sorted(missing)}"
    got = run(obj, exe, ins, tmp_path)
    assert len(got) == len(outs)
    rtol = (EXTRA_RTOL if path.parent == JAX_EXTRA else CASE_RTOL).get(case)
    for i, (g, want) in enumerate(zip(got, outs)):
        if (case, i) in JAX_DEVIATIONS and path.parent == JAX_EXTRA:
            want = JAX_DEVIATIONS[(case, i)][0]
        ok, detail = compare_arrays(g, want.reshape(g.shape) if hasattr(want, "reshape") else want, rtol=rtol)
        assert ok, f"out{i}: {detail}"


def test_refusals_name_real_cases():
    names = {p.values[0].name.split(".")[0] for p in _cases()}
    assert set(REFUSED) <= names, set(REFUSED) - names
    assert all(re.compile(p) for p in REFUSED.values())
