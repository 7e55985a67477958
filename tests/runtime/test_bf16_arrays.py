"""f32 -> bf16 rounding of library-call results (runtime/bf16_arrays.py): bit for bit
ml_dtypes' answer (nearest even, NaN to the quiet NaN of its sign, overflow to inf), on both
sides of the size from which the native loop runs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbxla.runtime.bf16_arrays import NATIVE_MIN_ELEMENTS, round_to_bf16


def _special_values() -> np.ndarray:
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF,       # ties (even / odd) and near ties
                     0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000,                    # overflow to +-inf
                     0x7F800000, 0xFF800000, 0x7FC00001, 0xFFA00000,        # inf, quiet and signalling NaNs
                     0x00000001, 0x80008000, 0x00000000, 0x80000000], np.uint32)
    return bits.view(np.float32)


@pytest.mark.parametrize("size", [17, NATIVE_MIN_ELEMENTS - 1, NATIVE_MIN_ELEMENTS, 3 * NATIVE_MIN_ELEMENTS + 5])
def test_rounding_matches_ml_dtypes_bit_for_bit(size):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * np.exp(rng.uniform(-80, 80, size))).astype(np.float32)
    x[:15] = _special_values()
    x = x.reshape(1, size)
    with np.errstate(all="ignore"):
        got, want = round_to_bf16(x), x.astype(ml_dtypes.bfloat16)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_strided_input_is_rounded_in_logical_order():
    x = np.arange(2 * NATIVE_MIN_ELEMENTS, dtype=np.float32).reshape(64, -1).T * np.float32(1.001)
    np.testing.assert_array_equal(round_to_bf16(x).view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
