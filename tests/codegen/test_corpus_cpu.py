"""The JAX corpus compiled for the CPU backend (optimizer + LLVM kernels) matches JAX's outputs,
and ``run-hlo --backend cpu`` reports which fusions run natively and which are interpreted."""

import re

import pytest

from nbxla.__main__ import main
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.testing import compare_arrays

from tests.conftest import CORPUS_HLO, corpus_files
from tests.hlo.test_corpus import CASE_RTOL, UNSUPPORTED, case_inputs_and_outputs

# Cases the CPU backend gets wrong (codegen bugs), by case name, with the reason.
CPU_XFAIL: dict[str, str] = {}

# Why a fusion may be interpreted: ops the code generator does not emit yet.  Any other reason
# (an elementwise op, a data-movement op, a plain reduction) is a regression.
ALLOWED_INTERPRETED = re.compile(
    r"no native code for (dot|gather|dynamic-update-slice|reduce-window|sort) yet"
    r"|variadic or custom reducers have no native code path yet")


def _params():
    out = []
    for p in corpus_files("*.hlo"):
        case = (p.id or "").split(".")[0]
        if case in CPU_XFAIL:
            p = pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.xfail(
                strict=True, reason=CPU_XFAIL[case])])
        out.append(p)
    return out


@pytest.mark.parametrize("path", _params())
def test_corpus_case_on_cpu_matches_jax(path):
    case, ins, outs = case_inputs_and_outputs(path)
    if case in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[case])
    compilation = compile_module(parse_hlo(path.read_text(), str(path)), "cpu")
    got = compilation.executable.run(ins)
    assert len(got) == len(outs)
    for i, (g, want) in enumerate(zip(got, outs)):
        assert g.dtype == want.dtype and g.shape == want.shape, f"out{i}: {g.dtype}{g.shape}"
        ok, detail = compare_arrays(g, want, rtol=CASE_RTOL.get(case))
        assert ok, f"out{i}: {detail}"
    interpreted = compilation.executable.native.interpreted
    # Fusions of every program: the entry, loop bodies and conditions, branches.
    kernels = {i.name for program in compilation.executable.native.programs.values()
               for i in program.computation.instructions if i.opcode == "fusion"}
    assert set(interpreted) <= kernels
    for name, why in interpreted.items():
        assert ALLOWED_INTERPRETED.fullmatch(why), f"fusion {name} interpreted: {why}"
    # Standalone scatters get kernels of their own (the corpus's combiners are recognized),
    # sorts and convolutions library calls (the corpus's comparators are recognized); only
    # custom calls (LAPACK's cholesky) still run on the evaluator.
    assert {name: why for name, why in compilation.executable.native.interpreted_ops.items()
            if "custom-call(" not in why} == {}


def _case(name):
    path = CORPUS_HLO / f"{name}.hlo"
    if not path.exists():
        pytest.skip(f"HLO corpus not found at {CORPUS_HLO}")
    return str(path), str(CORPUS_HLO / f"{name}.npz")


def compiled_corpus_case(name):
    """The corpus case ``name`` compiled for the CPU, after checking it gives JAX's outputs
    (skips without the corpus)."""
    hlo, _ = _case(name)
    compilation = compile_module(parse_hlo(open(hlo).read(), hlo), "cpu")
    _, ins, outs = case_inputs_and_outputs(CORPUS_HLO / f"{name}.hlo")
    for g, w in zip(compilation.executable.run(ins), outs):
        ok, detail = compare_arrays(g, w)
        assert ok, detail
    return compilation


def test_run_hlo_backend_cpu_native(capsys):
    hlo, npz = _case("softmax")
    assert main(["run-hlo", hlo, "--inputs", npz, "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"compiled for cpu \(LLVM\) in [\d.]+ ms .*: 1 fusion\(s\), 1 native, 0 interpreted", out)
    assert "ran on cpu" in out and "PASS" in out and "FAIL" not in out


def test_run_hlo_backend_cpu_lists_interpreted_fusions(capsys, monkeypatch):
    # Every corpus fusion has native code now: make the code generator refuse argmax-style
    # (variadic) reductions to see how interpreted fusions are reported.
    from nbxla.codegen import column_reductions, reductions
    from nbxla.errors import UnsupportedError

    def refuse(b, comp, args):
        raise UnsupportedError("variadic or custom reducers refused by this test")
    for kernels in (reductions, column_reductions):      # the kernels applying a reducer
        monkeypatch.setattr(kernels, "apply_scalar_computation", refuse)
    hlo, npz = _case("reduce_argmax_argmin")
    assert main(["run-hlo", hlo, "--inputs", npz, "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\d+ fusion\(s\), \d+ native, 2 interpreted", out)
    lines = [line for line in out.splitlines() if line.strip().startswith("interpreted %")]
    assert len(lines) == 2
    # Named as in the optimized HLO (%reduce_fusion.N), with the code generator's reason.
    assert all(re.match(r"\s+interpreted %[\w.\-]+\.\d+: variadic or custom reducers refused", line)
               for line in lines)
    assert "all outputs match" in out


def test_argmax_and_argmin_run_natively(capsys):
    hlo, npz = _case("reduce_argmax_argmin")
    assert main(["run-hlo", hlo, "--inputs", npz, "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"3 fusion\(s\), 3 native, 0 interpreted", out) and "all outputs match" in out


def test_run_hlo_backend_cpu_detects_mismatch(capsys, tmp_path):
    import numpy as np
    hlo, npz = _case("softmax")
    data = dict(np.load(npz))
    data["out0"] = data["out0"] + 1
    bad = tmp_path / "bad.npz"
    np.savez(bad, **data)
    assert main(["run-hlo", hlo, "--inputs", str(bad), "--backend", "cpu"]) == 1
    assert "FAIL" in capsys.readouterr().out
