"""A BLAS dot whose only user scales it and adds a scaled array of its shape runs as ONE
``?gemm`` with alpha and beta (``runtime/gemm_epilogue.py``), into the caller's ``C`` when jit
donates it: results against eager NumPy for npbench's gemm / k2mm / k3mm / mlp forms, transposed
operands, f32 / f64 / complex, a bias row (not folded), both sides of where a dot stops being a
BLAS GEMM, and the caller's arrays aliasing (C passed twice, a view, also an output, read after)."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime import cpu_executable, gemm_epilogue
from nbxla.runtime.cpu_kernels import worker_count

FOLDED = "?gemm"


def gemm(alpha, beta, C, A, B):
    C[:] = alpha * A @ B + beta * C
    return C


def k2mm(alpha, beta, A, B, C, D):
    D[:] = alpha * A @ B @ C + beta * D
    return D


def k3mm(A, B, C, D):
    return A @ B @ (C @ D)


def relu(x):
    return np.maximum(x, 0)


def mlp(input, w1, b1, w2, b2, w3, b3, output):
    x = relu(input @ w1 + b1)
    x = relu(x @ w2 + b2)
    x = x @ w3 + b3
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    output[:, :] = e / np.sum(e, axis=-1, keepdims=True)


@pytest.fixture(autouse=True)
def busy_cores(monkeypatch):
    """Thin products split over the pool while the cores are busy (on idle ones OpenBLAS's
    threads run them): pinned busy here, so the split is what runs whatever the machine's load."""
    from nbxla.runtime import blas_threads
    monkeypatch.setattr(blas_threads.machine_load, "free_cores", lambda: 0.3)


@pytest.fixture(autouse=True)
def fold_small_products(monkeypatch, request):
    """The fold's shapes here are small (fast tests): its size threshold is lowered to 0,
    except for the test of the threshold itself."""
    if request.node.name.startswith("test_small_products_are_not_folded"):
        return
    monkeypatch.setattr(gemm_epilogue, "FOLD_MIN_PRODUCT", 0)


def test_small_products_are_not_folded():
    """Below FOLD_MIN_PRODUCT multiply-adds: the GEMM and a fused pass, as without the fold."""
    args = [1.5, 1.2, _rand((100, 110), np.float64, 0), _rand((100, 120), np.float64, 1),
            _rand((120, 110), np.float64, 2)]
    assert 100 * 120 * 110 < gemm_epilogue.FOLD_MIN_PRODUCT
    f = nbxla.jit(gemm)
    want, got = args[2].copy(), args[2].copy()
    gemm(args[0], args[1], want, args[3], args[4])
    f(args[0], args[1], got, args[3], args[4])
    _close(got, want, np.float64)
    assert "?gemm" not in _execution(f, *args)


def _rand(shape, dtype, seed):
    g = np.random.default_rng(seed)
    x = g.uniform(-1, 1, size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * g.uniform(-1, 1, size=shape)
    return x.astype(dtype)


def _tol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _close(got, want, dtype):
    assert got.dtype == want.dtype
    scale = max(float(np.max(np.abs(want))), 1.0)
    assert float(np.max(np.abs(got - want))) <= _tol(dtype) * scale


def _execution(f, *args):
    return f.compiled_inputs(*args)[0].stage("execution")


def _run_both(fn, args, written):
    """(NumPy's args after fn, jit's args after f, jit's result, f) on fresh copies."""
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want_result = fn(*want)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    f = nbxla.jit(fn)
    result = f(*got)
    for k in written:
        _close(got[k], want[k], got[k].dtype)
    if want_result is not None:
        _close(result, want_result, want_result.dtype)
    return got, f


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("ni,nj,nk", [(1000, 1100, 1200), (257, 190, 311), (64, 80, 3)])
def test_gemm_is_one_gemm_into_c(dtype, ni, nj, nk):
    args = [1.5, 1.2, _rand((ni, nj), dtype, 0), _rand((ni, nk), dtype, 1), _rand((nk, nj), dtype, 2)]
    got, f = _run_both(gemm, args, [2])
    assert FOLDED in _execution(f, *got)


def test_gemm_large_is_written_into_the_callers_array():
    args = [1.5, 1.2, _rand((300, 310), np.float64, 0), _rand((300, 320), np.float64, 1),
            _rand((320, 310), np.float64, 2)]
    got, f = _run_both(gemm, args, [2])
    text = _execution(f, *got)
    assert FOLDED in text and "donated" in text


def test_k2mm_second_product_takes_the_scale_and_add():
    args = [1.5, 1.2] + [_rand(s, np.float64, k) for k, s in enumerate([(800, 900), (900, 850), (850, 950), (800, 950)])]
    got, f = _run_both(k2mm, args, [5])
    assert _execution(f, *got).count(FOLDED) == 1


def test_k3mm_has_nothing_to_fold_and_matches():
    args = [_rand(s, np.float64, k) for k, s in enumerate([(200, 220), (220, 210), (210, 240), (240, 230)])]
    got, f = _run_both(k3mm, args, [])
    assert FOLDED not in _execution(f, *got)


def test_mlp_bias_rows_are_not_folded():
    shapes = [(8, 300), (300, 200), (200,), (200, 200), (200,), (200, 200), (200,), (8, 200)]
    args = [_rand(s, np.float64, k) for k, s in enumerate(shapes)]
    got, f = _run_both(mlp, args, [7])
    assert FOLDED not in _execution(f, *got)


FORMS = {
    "sum": lambda A, B, C: A @ B + C,
    "difference": lambda A, B, C: C - A @ B,
    "scaled only": lambda A, B, C: 2.5 * (A @ B),
    "negated": lambda A, B, C: -(A @ B) + 3.0 * C,
    "c twice": lambda A, B, C: 0.5 * (A @ B) + C + 2.0 * C,
    "lhs transposed": lambda A, B, C: 1.5 * (A.T.T @ B) + C,
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_affine_forms_fold_and_match(form):
    fn = FORMS[form]
    A, B, C = _rand((150, 170), np.float64, 0), _rand((170, 160), np.float64, 1), _rand((150, 160), np.float64, 2)
    f = nbxla.jit(fn)
    _close(f(A, B, C), fn(A, B, C), np.float64)
    assert FOLDED in _execution(f, A, B, C)


@pytest.mark.parametrize("transposes", ["A.T @ B", "A @ B.T", "A.T @ B.T"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
def test_transposed_operands_and_types(transposes, dtype):
    m, k, n = 120, 130, 140
    a_shape = (k, m) if transposes.startswith("A.T") else (m, k)
    b_shape = (n, k) if transposes.endswith("B.T") else (k, n)
    fn = {"A.T @ B": lambda A, B, C: 1.5 * (A.T @ B) - 0.5 * C,
          "A @ B.T": lambda A, B, C: 1.5 * (A @ B.T) - 0.5 * C,
          "A.T @ B.T": lambda A, B, C: 1.5 * (A.T @ B.T) - 0.5 * C}[transposes]
    A, B, C = _rand(a_shape, dtype, 0), _rand(b_shape, dtype, 1), _rand((m, n), dtype, 2)
    f = nbxla.jit(fn)
    _close(f(A, B, C), fn(A, B, C), dtype)
    assert FOLDED in _execution(f, A, B, C)


def test_scalars_given_as_zero_d_arrays_are_read_at_run_time():
    fn = lambda a, b, A, B, C: a * (A @ B) + b * C           # noqa: E731
    A, B, C = _rand((90, 100), np.float64, 0), _rand((100, 110), np.float64, 1), _rand((90, 110), np.float64, 2)
    f = nbxla.jit(fn)
    for a, b in [(1.5, 1.2), (-2.0, 0.25)]:
        _close(f(np.array(a), np.array(b), A, B, C), fn(a, b, A, B, C), np.float64)
    assert FOLDED in _execution(f, np.array(1.0), np.array(1.0), A, B, C)


@pytest.mark.parametrize("alpha,beta", [(1.5, 0.0), (0.0, 1.2)])
def test_zero_coefficients_keep_numpys_nans(alpha, beta):
    fn = lambda a, b, A, B, C: a * (A @ B) + b * C           # noqa: E731
    A, B, C = _rand((40, 50), np.float64, 0), _rand((50, 60), np.float64, 1), _rand((40, 60), np.float64, 2)
    A[3, 4], C[5, 6] = np.inf, np.nan
    with np.errstate(all="ignore"):
        want = fn(alpha, beta, A, B, C)
        got = nbxla.jit(fn)(np.array(alpha), np.array(beta), A, B, C)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-12)


def test_bias_row_is_not_folded():
    fn = lambda A, B, b: 2.0 * (A @ B) + b                   # noqa: E731
    A, B, b = _rand((100, 110), np.float64, 0), _rand((110, 120), np.float64, 1), _rand((120,), np.float64, 2)
    f = nbxla.jit(fn)
    _close(f(A, B, b), fn(A, B, b), np.float64)
    assert FOLDED not in _execution(f, A, B, b)


@pytest.mark.parametrize("m,n", [(1, 64), (64, 1), (8, 8), (20, 24), (2, 40)])
def test_both_sides_of_a_blas_gemm(m, n):
    """GEMVs and products small enough to be fused into a kernel are left alone; the
    smallest BLAS GEMMs (two rows, or a product over the fused-dot limit) fold."""
    k = 70
    fn = lambda A, B, C: 1.5 * (A @ B) + 1.2 * C              # noqa: E731
    A, B, C = _rand((m, k), np.float64, 0), _rand((k, n), np.float64, 1), _rand((m, n), np.float64, 2)
    f = nbxla.jit(fn)
    _close(f(A, B, C), fn(A, B, C), np.float64)
    text = _execution(f, A, B, C)
    dot_is_blas_gemm = "library call: GEMM" in text or FOLDED in text
    if m == 1 or n == 1:
        assert FOLDED not in text
    assert (FOLDED in text) == dot_is_blas_gemm


def test_native_gemm_kernel_dots_are_left_to_it(monkeypatch):
    monkeypatch.setattr(gemm_epilogue, "native_dot_refusal", lambda dot: None)
    fn = lambda A, B, C: 1.5 * (A @ B) + 1.2 * C              # noqa: E731
    A, B, C = _rand((128, 96), np.float64, 0), _rand((96, 128), np.float64, 1), _rand((128, 128), np.float64, 2)
    f = nbxla.jit(fn)
    _close(f(A, B, C), fn(A, B, C), np.float64)
    assert FOLDED not in _execution(f, A, B, C)


# --- the caller's arrays aliasing ---------------------------------------------------------

def test_c_passed_as_an_operand_too():
    n = 300
    C, B = _rand((n, n), np.float64, 0), _rand((n, n), np.float64, 1)
    want = C.copy()
    gemm(1.5, 1.2, want, want, B)
    f = nbxla.jit(gemm)
    got = C.copy()
    f(1.5, 1.2, got, got, B)
    _close(got, want, np.float64)
    with pytest.raises(nbxla.errors.NotCompilableError, match="shares its memory"):
        f(1.5, 1.2, got, got[:, :], B)              # (a view of it: refused, as before)


def c_transposed_into_itself(C, B):
    C[:] = C.T @ B + 2.0 * C
    return C


def test_an_operand_is_a_view_of_the_donated_c():
    C, B = _rand((300, 300), np.float64, 0), _rand((300, 300), np.float64, 1)
    _run_both(c_transposed_into_itself, [C, B], [0])


def test_c_is_a_strided_view_of_a_larger_array():
    big = _rand((600, 310), np.float64, 0)
    A, B = _rand((300, 320), np.float64, 1), _rand((320, 310), np.float64, 2)
    want_big = big.copy()
    gemm(1.5, 1.2, want_big[::2], A, B)
    f = nbxla.jit(gemm)
    got_big = big.copy()
    f(1.5, 1.2, got_big[::2], A, B)
    _close(got_big, want_big, np.float64)


def c_updated_and_its_old_value_read(alpha, beta, C, A, B):
    old = C.copy()
    C[:] = alpha * A @ B + beta * C
    return C, old.sum(axis=0), C * 2.0


def test_c_also_read_after_and_also_an_output():
    args = [1.5, 1.2, _rand((300, 310), np.float64, 0), _rand((300, 320), np.float64, 1),
            _rand((320, 310), np.float64, 2)]
    want = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want_out = c_updated_and_its_old_value_read(*want)
    got = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    f = nbxla.jit(c_updated_and_its_old_value_read)
    got_out = f(*got)
    _close(got[2], want[2], np.float64)
    for g, w in zip(got_out, want_out):
        _close(g, w, np.float64)
    assert not np.shares_memory(got_out[2], got[2])


def product_added_to_an_intermediate(A, B, C):
    t = np.sin(C)
    return 2.0 * (A @ B) + t, t


def test_c_an_intermediate_also_returned():
    A, B, C = _rand((200, 210), np.float64, 0), _rand((210, 220), np.float64, 1), _rand((200, 220), np.float64, 2)
    f = nbxla.jit(product_added_to_an_intermediate)
    for g, w in zip(f(A, B, C), product_added_to_an_intermediate(A, B, C)):
        _close(g, w, np.float64)


# --- thin products (cpu_kernels.THIN_OUTPUT) split the accumulation over the pool ------------

def scaled_and_added(x, w, c):
    return 1.5 * (x @ w) - 0.5 * c


def scaled_and_added_t(x, w, c):
    return 1.5 * (x @ w.T) - 0.5 * c


@pytest.mark.skipif(worker_count() < 2, reason="the split needs two cores")
@pytest.mark.parametrize("fn", [scaled_and_added, scaled_and_added_t])
@pytest.mark.parametrize("m,n", [(8, 2000), (2000, 8)])
def test_folded_gemm_splits_its_accumulation(fn, m, n, monkeypatch):
    # (the thin-GEMM kernel, which takes 8 rows against a row-major w, off: the folded BLAS
    # call's split is what is tested)
    for module in (cpu_executable, gemm_epilogue):
        monkeypatch.setattr(module, "thin_gemm_refusal", lambda instr: "off in this test")
    k = 3000
    x, c = _rand((m, k), np.float64, 0), _rand((m, n), np.float64, 2)
    w = _rand((k, n) if fn is scaled_and_added else (n, k), np.float64, 1)
    f = nbxla.jit(fn)
    _close(f(x, w, c), fn(x, w, c), np.float64)
    text = _execution(f, x, w, c)
    assert "?gemm" in text and "split over the pool" in text


# --- C copied into a fresh output is scaled as it is copied (BLAS adds with beta = 1) --------

def product_and_new_sum(A, B, C):
    return 1.5 * (A @ B) + 1.2 * C


def _betas_given_to_blas(monkeypatch) -> list:
    calls = []
    inner = gemm_epilogue.AccumulatingGemm._call

    def recording(self, a, b, c, alpha, beta):
        calls.append(float(np.real(beta)))
        inner(self, a, b, c, alpha, beta)
    monkeypatch.setattr(gemm_epilogue.AccumulatingGemm, "_call", recording)
    return calls


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_c_copied_into_a_fresh_output_is_scaled_in_that_pass(dtype, monkeypatch):
    """A new result (C not donated): C is scaled by beta as it is copied into the output and
    the ?gemm adds with beta = 1 (it makes no pass over C of its own); C updated in place
    (donated: f64 here) keeps beta in the ?gemm.  Results are NumPy's either way."""
    betas = _betas_given_to_blas(monkeypatch)
    A, B, C = _rand((200, 210), dtype, 0), _rand((210, 190), dtype, 1), _rand((200, 190), dtype, 2)
    f = nbxla.jit(product_and_new_sum)
    for _ in range(2):
        _close(f(A, B, C), product_and_new_sum(A, B, C), np.dtype(dtype))
    assert FOLDED in _execution(f, A, B, C)
    assert betas and set(betas) == {1.0}
    del betas[:]
    A, B, C = (x.astype(np.float64) for x in (A.real, B.real, C.real))
    got, g = _run_both(gemm, [1.5, 1.2, C, A, B], [2])
    text = _execution(g, *got)
    assert FOLDED in text and "donated" in text and betas and set(betas) == {1.2}
