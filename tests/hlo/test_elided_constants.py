"""Constants printed without their values (``constant({...})``, as XLA's dumps print large
ones): parsed in any case with deterministic stand-in values, printed back as ``{...}``,
refused by the evaluator and the compiler until the stand-ins are accepted; ``run-hlo``
accepts them and says so on stderr, or refuses them with ``--no-fill-elided``."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.__main__ import main
from nbxla.compiler import compile_module
from nbxla.errors import HloParseError
from nbxla.hlo.elided import ElidedConstantError, accept_filled_constants, elided_constants
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import print_module

from tests.hlo.xla_cpu import run_on_xla_cpu, xla_python

TEXT = """HloModule elided
ENTRY main {
  x = f32[4,3] parameter(0)
  w = f32[3,5] constant({...})
  v = f32[3,5] constant({...})
  i = s32[2] constant({...})
  p = pred[5] constant({...})
  small = f32[2] constant({1, 2})
  d = f32[4,5] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[4,5] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[4,5] add(d, e)
  ROOT t = (f32[4,5], s32[2], pred[5], f32[2]) tuple(s, i, p, small)
}
"""


def test_elided_constants_parse_with_deterministic_distinct_values():
    a, b = parse_hlo(TEXT), parse_hlo(TEXT)
    marked = elided_constants(a)
    assert [i.name for i in marked] == ["w", "v", "i", "p"]
    for x, y in zip(marked, elided_constants(b)):
        np.testing.assert_array_equal(x.literal, y.literal)
        assert x.literal.shape == x.shape.dims and x.literal.dtype == x.shape.dtype
    w, v = marked[0].literal, marked[1].literal
    assert not np.array_equal(w, v)                     # (seeded by name: CSE keeps both)
    assert np.all((marked[2].literal >= 0) & (marked[2].literal < 8))


def test_elided_constants_print_back_as_elided_and_read_back_the_same():
    module = parse_hlo(TEXT)
    text = print_module(module)
    assert text.count("{...}") == 4 and "constant({1, 2})" in text
    again = parse_hlo(text)
    for x, y in zip(elided_constants(module), elided_constants(again)):
        np.testing.assert_array_equal(x.literal, y.literal)


def test_running_needs_the_stand_ins_accepted():
    module = parse_hlo(TEXT)
    x = np.ones((4, 3), np.float32)
    for run in (lambda: evaluate(module, [x]), lambda: compile_module(module, "cpu")):
        with pytest.raises(ElidedConstantError, match=r"4 constant\(s\).*%w \(f32\[3,5\].*accept_filled_constants"):
            run()
    assert accept_filled_constants(module) == ["w", "v", "i", "p"]
    assert elided_constants(module) == [] and "{...}" not in print_module(module)
    want = evaluate(module, [x])
    got = compile_module(module, "cpu").executable.run([x])
    w, v = (i.literal for i in module.entry.instructions if i.name in ("w", "v"))
    np.testing.assert_allclose(want[0], x @ w + x @ v, rtol=1e-5)
    for g, e in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5)


def test_run_hlo_fills_loudly_or_refuses(tmp_path, capsys):
    path = tmp_path / "elided.hlo"
    path.write_text(TEXT)
    assert main(["run-hlo", str(path), "--backend", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "WARNING: 4 constant(s) of elided were elided" in err and "stand-in values" in err
    assert main(["run-hlo", str(path), "--no-fill-elided"]) != 0
    err = capsys.readouterr().err
    assert "cannot run module elided" in err and "--no-fill-elided" in err


def test_an_elided_constant_of_unknown_size_is_a_parse_error():
    with pytest.raises(HloParseError, match="bad.hlo:3:.*%x .*cannot fill"):
        parse_hlo("HloModule m\nENTRY m {\n  ROOT x = f32[b] constant({...})\n}", "bad.hlo")


@pytest.mark.skipif(xla_python() is None, reason="JAX (XLA:CPU) is not reachable: no jax here, no "
                                                  "NBXLA_XLA_PYTHON, no /work/benchvenv")
def test_filled_module_printed_in_full_gives_xla_cpu_the_same_values():
    module = parse_hlo(TEXT)
    accept_filled_constants(module)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    got = compile_module(module, "cpu").executable.run([x])
    want = run_on_xla_cpu(print_module(module), [x])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)
