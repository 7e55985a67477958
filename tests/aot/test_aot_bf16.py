"""A bf16 dense layer ahead of time: the header declares bf16 buffers as ``uint16_t`` (the
bits), and the object computes what the evaluator does, bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo

from tests.aot.aot_util import build, needs_cc, run
from tests.codegen.test_bf16 import DENSE
from tests.codegen.test_cpu import assert_bitwise


@needs_cc
def test_bf16_dense_layer_object_matches_the_evaluator(tmp_path):
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((8, 32), (32, 16), (16,))]
    obj, exe = build(parse_hlo(DENSE), None, tmp_path, "dense")
    header = open(obj.header_path).read()
    assert "uint16_t" in header and "bfloat16 bits" in header, header
    (got,) = run(obj, exe, args, tmp_path)
    assert got.dtype == ml_dtypes.bfloat16
    assert_bitwise(got, flatten(evaluate(parse_hlo(DENSE), args))[0])
