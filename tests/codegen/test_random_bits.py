"""rng-bit-generator as a native kernel (codegen/random_bits.py): XLA's ThreeFry and Philox bits,
bit for bit the evaluator's (which the JAX corpus checks against XLA:CPU's recorded bits), for
every result width, odd and even axes (ThreeFry's pairing), rank 0, two- and three-word states,
a counter that wraps (Philox's carry into the high half), and threads."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo

STATES = {
    "small": np.array([42, 7], np.uint64),
    "wrapping": np.array([0x123456789ABCDEF0, 2 ** 64 - 3], np.uint64),
    "three_words": np.array([5, 2 ** 64 - 2, 99], np.uint64),
}


def rng_module(algorithm: str, t: str, dims: tuple, words: int) -> str:
    shape = f"{t}[{','.join(map(str, dims))}]"
    return f"""HloModule bits
ENTRY e {{
  s = u64[{words}] parameter(0)
  r = (u64[{words}], {shape}) rng-bit-generator(s), algorithm={algorithm}
  ns = u64[{words}] get-tuple-element(r), index=0
  b = {shape} get-tuple-element(r), index=1
  ROOT t = (u64[{words}], {shape}) tuple(ns, b)
}}"""


def run_both(text: str, state: np.ndarray):
    executable = compile_module(parse_hlo(text), "cpu").executable
    native = executable.native
    assert not {**native.interpreted, **native.interpreted_ops}
    assert [i for i in native.kernel_symbols if i.startswith("r")], native.kernel_symbols
    got = executable.run([state])
    want = flatten(evaluate(parse_hlo(text), [state]))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    return got


@pytest.mark.parametrize("algorithm", ["rng_three_fry", "rng_philox", "rng_default"])
@pytest.mark.parametrize("t", ["u32", "s64", "u8", "s16"])
@pytest.mark.parametrize("dims", [(), (7,), (6, 5), (3, 5), (5, 3, 4), (1, 9)], ids=str)
@pytest.mark.parametrize("state", ["small", "wrapping", "three_words"])
def test_bits_match_the_evaluator(algorithm, t, dims, state):
    s = STATES[state]
    if algorithm == "rng_three_fry" and s.size != 2:
        pytest.skip("ThreeFry's state is two words")
    run_both(rng_module(algorithm, t, dims, s.size), s)


@pytest.mark.parametrize("algorithm", ["rng_three_fry", "rng_philox"])
def test_large_results_split_across_threads(algorithm):
    state, bits = run_both(rng_module(algorithm, "u32", (512, 1031), 2), STATES["small"])
    # (and the bits look random: each bit set about half the time)
    ones = np.unpackbits(bits.view(np.uint8)).mean()
    assert 0.49 < ones < 0.51
