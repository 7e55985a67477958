"""Every HLO module of the corpora (JAX exports with JAX's outputs, as exported and as XLA
optimized them) compiled ahead of time: the object runs from C and matches JAX, needs nothing
beyond libc/libm/pthread, or is refused with an AotError naming the instruction that has no
native implementation."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from nbxla.errors import AotError
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from tests.conftest import CORPUS_HLO
from tests.hlo.test_corpus import CASE_RTOL, case_inputs_and_outputs
from tests.hlo.test_jax_extra_corpus import CASE_RTOL as EXTRA_RTOL, EXPECTED_ERRORS, JAX_DEVIATIONS
from .aot_util import build, needs_cc, run, system_library_symbols, undefined_symbols

pytestmark = needs_cc

JAX_EXTRA = Path(__file__).resolve().parents[1] / "hlo" / "jax_extra"
# Copies of the corpus cases REFUSED names (corpus_cases/README.md): the suite passes on a
# clone of the repository alone, where ``../shared/corpus`` is absent.
COPIES = Path(__file__).resolve().parent / "corpus_cases"

# Cases with an op that has no native implementation (under jit: the reference evaluator in
# Python), and the pattern the refusal must match; ``.opt`` names the XLA-optimized form.
REFUSED = {
    "linalg_solve_lapack": r"%lu\.\d+ \(custom-call\).*'lapack_sgetrf_ffi'",
    # (XLA's fusions are put back and fused again by nbxla: the op itself is named)
    "linalg_solve_lapack.opt": r"\(custom-call\).*'lapack_sgetrf_ffi'",
}


# The XLA-optimized forms repeat the exported ones with XLA's fusions: by default only those
# whose code differs in a way the object must handle (a comparator bitcasting floats to int
# keys, XLA's TopK custom call); NBXLA_AOT_FULL_CORPUS=1 runs them all (~2x the time).
OPTIMIZED_BY_DEFAULT = {"sort_argsort.opt", "sort_top_k.opt", "gather_take_along_axis.opt",
                        "dot_batched.opt", "attention_heads.opt"}   # (+ XLA's fused dots)
FULL = os.environ.get("NBXLA_AOT_FULL_CORPUS") == "1"


def _corpus() -> list[Path]:
    """The corpus's files, or where it is absent, the copies of some of them."""
    return sorted(CORPUS_HLO.glob("*.hlo")) or sorted(COPIES.glob("*.hlo"))


def _cases():
    files = _corpus() + sorted(JAX_EXTRA.glob("*.hlo"))
    return [pytest.param(f, id=f"{f.parent.name}/{f.name}") for f in files
            if FULL or not f.name.endswith(".opt.hlo") or _name(f) in OPTIMIZED_BY_DEFAULT]


def _name(path: Path) -> str:
    """The case name, with ``.opt`` for the XLA-optimized form."""
    return path.name[:-len(".hlo")]


@pytest.fixture(scope="module")
def system_symbols():
    return system_library_symbols()


@pytest.mark.parametrize("path", _cases())
def test_corpus_case_ahead_of_time(path, tmp_path, system_symbols):
    case, ins, outs = case_inputs_and_outputs(path)
    module = parse_hlo(path.read_text(), str(path))
    if _name(path) in REFUSED:
        with pytest.raises(AotError, match=REFUSED[_name(path)]):
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
    names = {_name(f) for f in [*_corpus(), *COPIES.glob("*.hlo"), *JAX_EXTRA.glob("*.hlo")]}
    assert set(REFUSED) <= names, set(REFUSED) - names
    assert all(re.compile(p) for p in REFUSED.values())
