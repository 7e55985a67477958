"""The Cholesky custom call (``lapack_?potrf_ffi``) runs as LAPACKE's potrf on the row-major
buffer read as column-major (the other triangle's factor), or, below ``ROW_MAJOR_BELOW``, as
LAPACKE's row-major potrf of its own triangle: checked against the evaluator's rule (NumPy's
cholesky) on both sides of that size, for both triangles, batches, float32, a matrix that is
not positive definite (the rule's NaN factor and failing minor), and the untouched other
triangle."""

import numpy as np
import pytest

from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.evaluator import evaluate
from nbxla.runtime.lapack_calls import _COLUMN_MAJOR, _ROW_MAJOR, _routine, PotrfThunk, ROW_MAJOR_BELOW


def _module(t, dims, uplo):
    shape = f"{t}[{','.join(map(str, dims))}]"
    info = f"s32[{','.join(map(str, dims[:-2]))}]"
    target = f"lapack_{'s' if t == 'f32' else 'd'}potrf_ffi"
    return parse_hlo(f"""HloModule m
ENTRY main {{
  a = {shape} parameter(0)
  ROOT c = ({shape}, {info}) custom-call(a), custom_call_target="{target}", backend_config={{uplo = {uplo} : ui8}}
}}""")


def _spd(dims, dtype, seed=0):
    m = np.random.default_rng(seed).standard_normal(dims)
    a = m @ np.swapaxes(m, -1, -2) + dims[-1] * np.eye(dims[-1])
    return a.astype(dtype)


def _flatten(v):
    if isinstance(v, (tuple, list)):
        return [x for item in v for x in _flatten(item)]
    return [np.asarray(v)]


@pytest.mark.skipif(_routine("LAPACKE_dpotrf") is None, reason="NumPy's BLAS has no 64-bit LAPACKE potrf")
@pytest.mark.parametrize("t, dtype, rtol", [("f64", np.float64, 1e-12), ("f32", np.float32, 1e-5)])
@pytest.mark.parametrize("uplo", [76, 85])
@pytest.mark.parametrize("dims", [(7, 7), (2, 3, 5, 5), (1, 1), (ROW_MAJOR_BELOW - 1,) * 2,
                                  (ROW_MAJOR_BELOW,) * 2, (2, ROW_MAJOR_BELOW + 3, ROW_MAJOR_BELOW + 3)])
def test_potrf_call_matches_the_evaluator(t, dtype, rtol, uplo, dims):
    module = _module(t, dims, uplo)
    a = _spd(dims, dtype)
    other = np.triu(np.ones(dims[-2:], bool), 1) if uplo == 76 else np.tril(np.ones(dims[-2:], bool), -1)
    a = np.where(other, 100.0, a).astype(dtype)          # (the triangle potrf does not read)
    executable = compile_module(module, "cpu").executable
    assert "LAPACKE_" in executable.native.describe()
    got = _flatten(executable.run([a]))
    want = _flatten(evaluate(module, [a]))
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=1e-12 if dtype == np.float64 else 1e-5)
    np.testing.assert_array_equal(got[0][..., other], a[..., other])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("uplo", [76, 85])
def test_a_matrix_that_is_not_positive_definite_gives_the_rules_answer(uplo):
    module = _module("f64", (2, 4, 4), uplo)
    a = _spd((2, 4, 4), np.float64)
    a[1, 2, 2] = -50.0
    got = _flatten(compile_module(module, "cpu").executable.run([a]))
    want = _flatten(evaluate(module, [a]))
    assert np.isnan(got[0][1]).all() and not np.isnan(got[0][0]).any()
    np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-12)
    np.testing.assert_array_equal(got[1], [0, 3])


@pytest.mark.skipif(_routine("LAPACKE_dpotrf") is None, reason="NumPy's BLAS has no 64-bit LAPACKE potrf")
@pytest.mark.parametrize("uplo, letter", [(76, b"L"), (85, b"U")])
def test_small_matrices_are_factored_row_major_with_their_own_triangle(uplo, letter):
    """(OpenBLAS's unblocked lower factorization is the faster: see ROW_MAJOR_BELOW.)"""
    instr = _module("f64", (4, 4), uplo).entry.root
    thunk = PotrfThunk(instr, _routine("LAPACKE_dpotrf"))
    assert thunk._layout(ROW_MAJOR_BELOW - 1) == (_ROW_MAJOR, letter)
    other = b"U" if letter == b"L" else b"L"
    assert thunk._layout(ROW_MAJOR_BELOW) == (_COLUMN_MAJOR, other)
