"""The one tolerance rule shared by the corpus tests, run-hlo and the demo."""

import numpy as np
import pytest

from nbxla.testing import compare_arrays


@pytest.mark.parametrize("got, want, ok", [
    (np.float32([1, 2]), np.float32([1, 2 + 1e-6]), True),
    (np.float32([1, 2]), np.float32([1, 2.01]), False),
    (np.float64([1.0]), np.float64([1.0 + 1e-9]), False),
    (np.float16([1.0]), np.float16([1.0009765]), True),
    (np.float16([1.0]), np.float16([1.00195]), True),       # 2 ulps: f16 accumulation order
    (np.float16([1.0]), np.float16([1.0059]), False),
    (np.float32([np.nan, 1]), np.float32([np.nan, 1]), True),
    (np.float32([np.nan, 1]), np.float32([1, np.nan]), False),
    (np.float32([np.inf]), np.float32([np.inf]), True),
    (np.float32([np.inf]), np.float32([-np.inf]), False),
    (np.float32([np.inf]), np.float32([1e30]), False),
    (np.complex64([1 + 1j]), np.complex64([1 + 1.000001j]), True),
    (np.int32([1, 2]), np.int32([1, 2]), True),
    (np.int32([1, 2]), np.int32([1, 3]), False),
    (np.bool_([True]), np.bool_([False]), False),
    (np.int32([1]), np.int64([1]), False),          # dtype must match
    (np.float32([1, 2]), np.float32([[1, 2]]), False),  # shape must match
    (np.float32([]), np.float32([]), True),
])
def test_compare_arrays(got, want, ok):
    assert compare_arrays(got, want)[0] is ok
