"""Returns inside ``if``s on traced values, and indices that only a branch's condition keeps
in bounds (npbench's nussinov: ``match`` returns 1 or 0 on array values; ``table[i + 1, j]``
under ``if i + 1 < N`` in loops that are traced once).

A function whose returns sit in ``if``s is rewritten with one return at the end, so that a
traced condition chooses the value.  An index that can be out of bounds inside a branch of an
``if`` on a traced value is checked where the branch would run (NumPy's IndexError when it
does) and clamped where it would not.  Each program runs on both sides of the unroll threshold
and with every loop rolled (``--unroll_max=0``), against eager NumPy.
"""

import numpy as np
import pytest

import nbxla
from nbxla.errors import IndexCheckError
from nbxla.frontend.control import CONDITIONAL_MIN_WORK
from nbxla.examples import nussinov

from ..frontend_util import quiet


def early_return(x):
    if x.sum() > 2.0:
        return x * 2
    y = x + 1
    if x[0] > 0.5:
        return y * 3
    return y


def nested_returns(x):
    if x[0] > 0.3:
        if x[1] > 0.5:
            return x - 1
        z = x * 4
    else:
        z = x * 5
    return z + x[2]


def returns_none_on_one_path(x, out):
    if x[0] > 0.5:
        out[0] = 1.0
        return
    out[1] = 2.0


def uses_returns(x):
    out = np.zeros_like(x)
    returns_none_on_one_path(x, out)
    return early_return(x) + nested_returns(x) + out


def shift_left(n, x):
    y = np.zeros_like(x)
    for i in range(n):
        if i + 1 < n:
            y[i] = x[i + 1] - x[i]
    return y


def relax_rows(t, w):
    """Each row the best of itself and the row below plus ``w``, bottom to top: the row
    below exists only under ``if i + 1 < n``."""
    n = t.shape[0]
    for i in range(n - 1, -1, -1):
        if i + 1 < n:
            t[i] = np.maximum(t[i], t[i + 1] + w)
    return t


def guarded_by_data(n, x, v):
    s = 0.0
    for i in range(n):
        if v[i] > 0.5:
            s = s + x[i + 1]           # in bounds only while v[n - 1] <= 0.5
    return s


@pytest.fixture(params=[None, "0"], ids=["default-unroll", "all-rolled"])
def unroll(request, monkeypatch):
    if request.param is not None:
        monkeypatch.setenv("NBXLA_FLAGS", f"--unroll_max={request.param}")


@pytest.mark.parametrize("n", [1, 4, 9])
def test_nussinov_matches_numpy(n, unroll):
    seq = np.random.default_rng(n).integers(0, 4, n, dtype=np.int32)
    with quiet():
        got = nbxla.jit(nussinov)(n, seq)
    np.testing.assert_array_equal(got, nussinov(n, seq))


@pytest.mark.parametrize("seed", range(6))
def test_returns_in_branches_on_traced_values(seed):
    x = np.random.default_rng(seed).random(3)
    with quiet():
        got = nbxla.jit(uses_returns)(x)
    np.testing.assert_allclose(got, uses_returns(x), rtol=1e-15)


@pytest.mark.parametrize("n", [1, 4, 9])
def test_an_index_kept_in_bounds_by_its_branch(n, unroll):
    x = np.random.default_rng(n).random(n)
    with quiet():
        got = nbxla.jit(shift_left)(n, x)
    np.testing.assert_array_equal(got, shift_left(n, x))


@pytest.mark.parametrize("n", [3, 9])
def test_a_branch_that_runs_with_an_index_out_of_bounds_raises_numpys_error(n, unroll):
    rng = np.random.default_rng(n)
    x, v = rng.random(n), rng.random(n)
    v[-1] = 0.1
    f = nbxla.jit(guarded_by_data)
    with quiet():
        assert f(n, x, v) == pytest.approx(guarded_by_data(n, x, v), rel=1e-15)
    v[-1] = 0.9
    with pytest.raises(IndexError):
        guarded_by_data(n, x, v)
    with quiet(), pytest.raises(IndexCheckError, match=f"index {n} is out of bounds for axis 0"):
        f(n, x, v)


@pytest.mark.parametrize("rows, cols", [(6, 5), (40, 1024)])
def test_an_index_kept_in_bounds_by_a_branch_large_enough_for_a_conditional(rows, cols):
    # (40 x 1024: the branch writes more than CONDITIONAL_MIN_WORK elements, so it is traced
    # again as an HLO conditional, where no condition guards ``t[i + 1]``: that trace fails and
    # the select form stays; the loop must stay rolled either way, as below the threshold)
    assert (rows * cols >= CONDITIONAL_MIN_WORK) == (rows == 40)     # (both sides of it)
    rng = np.random.default_rng(rows)
    t, w = rng.random((rows, cols)), rng.random(cols)
    f = nbxla.jit(relax_rows)
    with quiet():
        got = f(t.copy(), w)
    np.testing.assert_array_equal(got, relax_rows(t.copy(), w))
    assert [how for _, how, _ in f.last_compilation.loop_decisions] == ["rolled"]
