"""What the compiler tells a user about large programs: ``NBXLA_FLAGS=--pass_timing`` prints
where compile time goes, and whatever runs on the reference evaluator is warned about once
per compilation and marked in the fusion report (no silent interpretation)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.errors import InterpretedWarning
from nbxla.flags import FlagError, parse_flags
from nbxla.hlo import Builder, Module, Shape


def _module():
    b = Builder("small")
    x = b.parameter(Shape("f64", (8,)), "x")
    return Module("small", b.build(b.op("exponential", b.op("add", x, x))))


def test_pass_timing_flag_parses_alone_or_with_a_value():
    assert parse_flags("--pass_timing").pass_timing
    assert parse_flags("--pass_timing=true --device=cpu").pass_timing
    assert not parse_flags("--pass_timing=false").pass_timing
    assert not parse_flags("").pass_timing
    with pytest.raises(FlagError):
        parse_flags("--pass_timing=maybe")


def test_pass_timing_prints_every_pass_and_codegen(monkeypatch, capsys):
    monkeypatch.setenv("NBXLA_FLAGS", "--pass_timing")
    compile_module(_module(), "cpu")
    err = capsys.readouterr().err
    assert "nbxla pass timing: small" in err
    for name in ("trace", "fusion", "buffer-assignment", "codegen"):
        assert name in err, err


def test_no_warning_when_everything_is_native():
    with warnings.catch_warnings():
        warnings.simplefilter("error", InterpretedWarning)
        comp = compile_module(_module(), "cpu")
    assert "INTERPRETED" not in comp.stage("fusion_report")


def test_interpreted_kernels_are_warned_about_once_and_marked(monkeypatch):
    from nbxla.codegen import elemental
    from nbxla.errors import UnsupportedError

    def refuse(self, instr, index):
        raise UnsupportedError("exponential refused by this test")
    # (no on-disk object cache: a refusal cached under the module's key would outlive the test)
    monkeypatch.setenv("NBXLA_CACHE_DIR", "off")
    monkeypatch.setattr(elemental.ElementalEmitter, "_exponential", refuse, raising=False)
    with pytest.warns(InterpretedWarning) as caught:
        comp = compile_module(_module(), "cpu")
    assert len([w for w in caught if issubclass(w.category, InterpretedWarning)]) == 1
    message = str(caught[0].message)
    assert "exponential refused by this test" in message and "%" in message
    assert "INTERPRETED" in comp.stage("fusion_report")
    x = np.linspace(0, 1, 8)
    np.testing.assert_allclose(comp.executable.run([x])[0], np.exp(x + x))
