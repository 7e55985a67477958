"""bitcast-convert between element widths, natively (JAX's random bits and x64 code make
them): wide to narrow adds a minor dim of the width ratio, lowest bits first; narrow to wide
joins it.  Bit for bit against the evaluator (NumPy's little-endian view), fused with a
following op where the result type has arithmetic, for every pair of widths."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo

from tests.codegen.test_fused_dots import assert_no_evaluator_steps

TYPES = {"u8": np.uint8, "s16": np.int16, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "u32": np.uint32,
         "f32": np.float32, "s64": np.int64, "f64": np.float64}
PAIRS = [(a, b) for a, b in itertools.permutations(TYPES, 2)
         if np.dtype(TYPES[a]).itemsize != np.dtype(TYPES[b]).itemsize]


def _shape(t, dims):
    return f"{t}[{','.join(map(str, dims))}]"


@pytest.mark.parametrize("src, dst", PAIRS)
def test_bitcast_convert_between_widths(src, dst):
    wa, wb = np.dtype(TYPES[src]).itemsize, np.dtype(TYPES[dst]).itemsize
    dims = [3, 5] + ([wb // wa] if wb > wa else [])
    out = [3, 5] + ([wa // wb] if wa > wb else [])
    S, D = _shape(src, dims), _shape(dst, out)
    then = f"  ROOT %n = {D} negate(%b)\n" if dst[0] in "fs" else ""
    text = (f"HloModule m\nENTRY %e (x: {S}) -> {D} {{\n  %x = {S} parameter(0)\n"
            f"  {'' if then else 'ROOT '}%b = {D} bitcast-convert(%x)\n{then}}}\n")
    raw = np.random.default_rng(len(src) * 7 + len(dst)).integers(0, 256, int(np.prod(dims)) * wa, dtype=np.uint8)
    x = raw.view(TYPES[src]).reshape(dims)
    comp = compile_module(parse_hlo(text), "cpu")
    assert_no_evaluator_steps(comp.executable.native)
    got = comp.executable.run([x])[0]
    with np.errstate(all="ignore"):
        want = flatten(evaluate(parse_hlo(text), [x]))[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
