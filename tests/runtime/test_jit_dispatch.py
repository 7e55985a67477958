"""``nbxla.jit`` on a cache hit: the fast path must give exactly what the general path gives."""

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import CompilationCache


def _jit(fn):
    return nbxla.jit(fn, cache=CompilationCache())


def test_repeated_calls_compile_once_and_count_hits():
    f = _jit(lambda x, y: x * 2 + y)
    x, y = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    for _ in range(5):
        np.testing.assert_array_equal(f(x, y), x * 2 + y)
    assert f.cache.misses == 1 and f.cache.hits == 4
    assert f.cache.entries()[0].hits == 4


def test_new_shape_dtype_or_type_takes_the_general_path():
    f = _jit(lambda x: x + 1)
    f(np.zeros(3, np.float32))
    np.testing.assert_array_equal(f(np.zeros(4, np.float32)), np.ones(4, np.float32))
    assert f(np.zeros(4, np.int32)).dtype == np.int32
    assert f(np.float64(2.0)) == 3.0                       # a NumPy scalar, not an array
    assert f.cache.misses == 4


def test_aliased_arguments_after_distinct_ones():
    f = _jit(lambda x, y: x + 2 * y)
    a, b = np.arange(4.0), np.full(4, 10.0)
    np.testing.assert_array_equal(f(a, b), a + 2 * b)
    np.testing.assert_array_equal(f(a, a), 3 * a)
    np.testing.assert_array_equal(f(a, b), a + 2 * b)


def test_distinct_arguments_after_aliased_ones():
    f = _jit(lambda x, y: x + 2 * y)
    a, b = np.arange(4.0), np.full(4, 10.0)
    for _ in range(2):
        np.testing.assert_array_equal(f(a, a), 3 * a)
        np.testing.assert_array_equal(f(a, b), a + 2 * b)


def test_writes_into_arguments_on_every_call():
    def bump(x, y):
        x += y
        return x.sum()
    f = _jit(bump)
    a, b = np.zeros(3), np.ones(3)
    for k in range(1, 4):
        assert f(a, b) == 3 * k
        np.testing.assert_array_equal(a, np.full(3, float(k)))
    f(a, a)                                                  # aliased: a += a
    np.testing.assert_array_equal(a, np.full(3, 6.0))


def test_zero_d_results_are_numpy_scalars_like_numpy():
    f = _jit(lambda x: np.sum(x))
    x = np.arange(5, dtype=np.float32)
    for _ in range(2):
        r = f(x)
        assert type(r) is np.float32 and r == 10


def test_tuple_results_and_unused_arguments():
    f = _jit(lambda x, unused, y: (x + y, x - y))
    x, u, y = np.ones(3), np.zeros(7), np.arange(3.0)
    for _ in range(2):
        s, d = f(x, u, y)
        np.testing.assert_array_equal(s, x + y)
        np.testing.assert_array_equal(d, x - y)


def test_non_contiguous_input_on_a_hit():
    f = _jit(lambda x: x * 3)
    base = np.arange(24.0).reshape(4, 6)
    f(np.ascontiguousarray(base[:, ::2]))
    np.testing.assert_array_equal(f(base[:, ::2]), base[:, ::2] * 3)
    np.testing.assert_array_equal(f(np.asfortranarray(base[:, :3])), base[:, :3] * 3)


def test_single_kernel_shortcut_falls_back_for_other_layouts_and_types():
    f = _jit(lambda x, y: np.sqrt(x * 2 + y))
    x, y = np.arange(12.0).reshape(3, 4), np.ones((3, 4))
    np.testing.assert_array_equal(f(x, y), np.sqrt(x * 2 + y))
    assert f.last_compilation.executable.run_single is not None      # the shortcut is in use

    class Sub(np.ndarray):
        pass
    for a, b in [(np.asfortranarray(x), y), (x, y.view(Sub)), (x[:, ::-1], y), (x, y)]:
        np.testing.assert_array_equal(f(a, b), np.sqrt(np.asarray(a) * 2 + np.asarray(b)))
    out = f(x, y)
    assert type(out) is np.ndarray and out.flags.c_contiguous and not np.shares_memory(out, x)


@pytest.mark.parametrize("fn", [
    lambda x: np.max(x),                        # a full reduction: both phases in one call
    lambda x: x.sum(),
    lambda x: np.argmax(x),                     # (value, index) reduction, index picked
    lambda x: np.argmin(x, axis=1),
    lambda x: np.mean(x * x),
], ids=["max", "sum", "argmax", "argmin_rows", "mean_sq"])
def test_reductions_take_the_shortcut_and_give_what_numpy_gives(fn):
    f = _jit(fn)
    x = np.random.default_rng(0).standard_normal((7, 9)).astype(np.float32)
    x[3, 4] = 5.0
    expected = fn(x)
    for _ in range(2):                           # (the first call compiles, the second hits)
        out = f(x)
        assert type(out) is type(expected) and np.shape(out) == np.shape(expected)
        np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert f.last_compilation.executable.run_single is not None

    class Sub(np.ndarray):
        pass
    for a in (x.view(Sub), np.asfortranarray(x), x[:, ::-1].copy()[:, ::-1]):
        out = f(a)
        assert type(out) is type(expected)
        np.testing.assert_allclose(out, fn(np.asarray(a)), rtol=1e-6)


def test_large_full_reductions_still_split_across_threads(monkeypatch):
    from nbxla.runtime import cpu_kernels
    monkeypatch.setattr(cpu_kernels, "worker_count", lambda: 3)
    f = _jit(lambda x: np.max(x))
    x = np.random.default_rng(1).standard_normal(3 << 20).astype(np.float32)
    x[12345] = 99.0
    assert f(x) == np.float32(99.0)
    assert "(3 partial chunk(s) in parallel)" in f.last_compilation.stage("execution")


def test_results_are_fresh_arrays():
    f = _jit(lambda x: x.reshape(-1))
    x = np.arange(6.0).reshape(2, 3)
    r1, r2 = f(x), f(x)
    assert not np.shares_memory(r1, x) and not np.shares_memory(r1, r2)


@pytest.mark.parametrize("device", ["cpu", "evaluator"])
def test_results_returning_an_argument_do_not_share_its_memory(device):
    # (An argument returned as itself next to other results used to come back uncopied:
    # writing into the result then changed the caller's array.)  The argument returned as
    # it is comes back as the caller's own object, as NumPy returns it (npbench's kernels
    # return the arrays they wrote into); every computed result is fresh memory.
    f = nbxla.jit(lambda x, y: (x, x.reshape(2, 2), y.T, x[1:] * 2), device=device, cache=CompilationCache())
    x, y = np.arange(4.0), np.ones((2, 3))
    for results in (f(x, y), f(x, y)):
        assert results[0] is x
        assert not any(np.shares_memory(r, a) for r in results[1:] for a in (x, y))
        np.testing.assert_array_equal(results[2], y.T)


def test_changing_flags_recompiles(monkeypatch, tmp_path):
    f = _jit(lambda x: x - 1)
    x = np.ones(2)
    f(x)
    monkeypatch.setenv("NBXLA_FLAGS", f"--dump_to={tmp_path}")
    f(x)
    assert f.cache.misses == 2 and any(tmp_path.iterdir())
    monkeypatch.delenv("NBXLA_FLAGS")
    f(x)
    assert f.cache.misses == 2


def test_evicted_entries_are_not_used_by_the_fast_path():
    cache = CompilationCache(max_entries=1)
    f = nbxla.jit(lambda x: x + 1, cache=cache)
    g = nbxla.jit(lambda x: x + 2, cache=cache)
    x = np.zeros(2)
    f(x)
    g(x)                                     # evicts f's entry
    np.testing.assert_array_equal(f(x), x + 1)
    assert cache.misses == 3


@pytest.mark.parametrize("device", ["cpu", "evaluator"])
def test_fast_path_on_every_device(device):
    f = nbxla.jit(lambda x: np.exp(x), device=device, cache=CompilationCache())
    x = np.linspace(-1, 1, 9)
    for _ in range(2):
        np.testing.assert_allclose(f(x), np.exp(x), rtol=1e-12)


def test_run_keeps_the_machine_code_alive():
    """``build_executable(...).run`` outlives its executable: the runner must keep the JIT
    engine (and so the kernels' code) alive.  In a subprocess: the failure mode is a crash."""
    import subprocess
    import sys
    script = """
import gc, numpy as np
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.executable import build_executable
m = parse_hlo('HloModule t\\nENTRY main {\\n  x = f32[16] parameter(0)\\n  ROOT y = f32[16] add(x, x)\\n}')
run = build_executable(m, "cpu").run
gc.collect()
assert (run([np.ones(16, np.float32)])[0] == 2).all()
print("OK")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "NBXLA_CACHE_DIR": "off"})
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-500:]


def test_keyword_calls_are_made_positional_and_take_the_fast_path():
    def kernel(alpha, C, A, B, beta=0.5):
        C[:] = alpha * A @ B + beta * C
        return C.sum()

    f = _jit(kernel)
    g = np.random.default_rng(0)
    C, A, B = g.random((4, 5)), g.random((4, 3)), g.random((3, 5))
    got, want = C.copy(), C.copy()
    for _ in range(3):                     # keywords in any order, the default filled in
        assert f(B=B, A=A, C=got, alpha=1.5) == pytest.approx(kernel(1.5, want, A, B))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert f(1.5, got, A=A, B=B, beta=0.5) == pytest.approx(kernel(1.5, want, A, B, 0.5))
    assert f.cache.misses == 1                       # one program for all those calls
    with pytest.raises(TypeError):                   # Python's own errors, unchanged
        f(alpha=1.5, C=got, A=A)
    with pytest.raises(TypeError):
        f(alpha=1.5, C=got, A=A, B=B, gamma=2)


# ---- captured tables of constants (a dict of coefficients read by a helper) ----------------------

def _horner(x, table):
    out = 0.0 * x
    for k in sorted(table["c"], reverse=True):
        out = out * x + table["c"][k]
    return out * table["scale"][0]


def test_captured_dict_of_constants_takes_the_fast_path_and_follows_changes():
    table = {"c": {0: 1.0, 1: -0.5, 2: 0.25}, "scale": [2.0]}

    def f(x):
        return _horner(x, table)
    g = _jit(f)
    x = np.linspace(-1.0, 1.0, 7)
    for _ in range(3):
        np.testing.assert_array_equal(g(x), f(x))
    assert g.cache.misses == 1 and g.cache.hits == 2 and len(g._fast) == 1
    table["c"][1] = 3.0                                    # an item rebound
    np.testing.assert_array_equal(g(x), f(x))
    table["scale"][0] = -1.0                               # a nested list changed in place
    np.testing.assert_array_equal(g(x), f(x))
    table["c"][3] = 0.125                                  # an item added
    np.testing.assert_array_equal(g(x), f(x))
    assert g.cache.misses == 4
    table["c"][1] = -0.5
    table["c"].pop(3)
    table["scale"][0] = 2.0                                # back to the first contents: a hit
    np.testing.assert_array_equal(g(x), f(x))
    assert g.cache.misses == 4


def test_captured_negative_zero_in_a_list_is_its_own_constant():
    signs = [0.0]

    def f(x):
        return 1.0 / (x * signs[0])
    g = _jit(f)
    x = np.ones(3)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(g(x), f(x))
        signs[0] = -0.0
        np.testing.assert_array_equal(g(x), f(x))
    assert np.all(np.signbit(g(x)))


def test_captured_dict_holding_an_array_reads_its_current_contents():
    params = {"w": np.ones(4), "k": 2.0}

    def f(x):
        return x * params["w"] + params["k"]
    g = _jit(f)
    x = np.arange(4.0)
    np.testing.assert_array_equal(g(x), f(x))
    params["w"][:] = 3.0                                   # in place
    np.testing.assert_array_equal(g(x), f(x))
    params["w"] = np.full(4, -1.0)                         # rebound
    np.testing.assert_array_equal(g(x), f(x))


def test_contents_snapshot_sees_rebinding_and_nested_changes():
    from nbxla.frontend.captures import contents_snapshot, same_contents
    inner = [1.0, 2.0]
    value = {"a": 1.5, "b": inner, "t": (3, [4])}
    snap = contents_snapshot(value)
    assert same_contents(value, snap)
    value["t"][1].append(5)
    assert not same_contents(value, snap)
    value["t"][1].pop()
    assert same_contents(value, snap)
    inner[0] = 7.0
    assert not same_contents(value, snap)
    value = {"a": 1.5}
    snap = contents_snapshot(value)
    del value["a"]
    value["b"] = 1.5                                       # same values, another key
    assert not same_contents(value, snap)


def test_queued_hits_are_counted_per_entry_and_keep_the_lru_order():
    """Fast-path hits are queued and counted in batches of thousands: every hit counted, the
    entry hit last stays the most recently used (evicted last)."""
    cache = CompilationCache(max_entries=3)
    f, g = nbxla.jit(lambda x: x + 1, cache=cache), nbxla.jit(lambda x: x * 2, cache=cache)
    x = np.ones(3)
    f(x), g(x)
    for _ in range(3000):
        g(x)
        f(x)
    for _ in range(1500):                    # (past the batch size of 4096 queued hits)
        g(x)
    entries = cache.entries()                # (oldest use first)
    assert [e.hits for e in entries] == [3000, 4500] and cache.hits == 7500
    h = nbxla.jit(lambda x: x - 1, cache=cache)
    k = nbxla.jit(lambda x: x / 2, cache=cache)
    h(x), k(x)                               # evicts the least recently used: f's entry
    assert [e.hits for e in cache.entries()] == [4500, 0, 0]


def test_single_kernel_runner_source_checks_every_operand():
    f = _jit(lambda x, y: x * 2 + y)
    x, y = np.arange(6.0), np.ones(6)
    f(x, y), f(x, y)
    run = f.last_compilation.executable.run_single
    assert "a1.strides != st1" in run.source and "a0.strides != st0" in run.source
    np.testing.assert_array_equal(f(x, np.ones(12)[::2]), x * 2 + 1)     # strided: the fallback
