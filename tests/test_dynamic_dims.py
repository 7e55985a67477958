"""Unknown dimensions through ``nbxla.jit``: when a dimension becomes symbolic (both sides of the
automatic threshold), how many compilations 40 batch sizes take, the guards and the reasons for
specialising, all against NumPy at every size.  (Compile counts, not times: tests never time.)"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import nbxla
from nbxla.hlo.symbolic import module_is_symbolic
from nbxla.runtime.cache import CompilationCache

RNG = np.random.default_rng(31)
W = RNG.random((64, 48), dtype=np.float32)


def layer(x, w):
    return np.tanh(x @ w)


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm(x):
    m = x.mean(axis=1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


def elementwise(x, y):
    return 3 * x ** 2 + y


def rows(n):
    return RNG.random((n, 64), dtype=np.float32)


def ONE(n):
    return (rows(n),)


# (function, arguments at batch size n): elementwise, reduction and dot programs.
PROGRAMS = {
    "elementwise": (elementwise, lambda n: (rows(n), rows(n))),
    "softmax": (softmax, lambda n: (rows(n),)),
    "layernorm": (layernorm, lambda n: (rows(n),)),
    "dot": (layer, lambda n: (rows(n), W)),
    "running_example": (lambda x, y: np.mean(3 * x ** 2 + y), lambda n: (rows(n), rows(n))),
}


def _sweep(f, fn, make, sizes):
    for n in sizes:
        args = make(n)
        np.testing.assert_allclose(f(*args), fn(*args), rtol=2e-5, atol=1e-6, err_msg=f"size {n}")


@pytest.mark.parametrize("name", PROGRAMS)
def test_forty_sizes_compile_at_most_twice_automatically(name):
    fn, make = PROGRAMS[name]
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache)
    _sweep(f, fn, make, range(1, 41))
    assert cache.misses == 2                    # size 1 (the first size), then one symbolic program
    symbolic = [e for e in cache.entries() if "symbolic" in e.explanation]
    assert len(symbolic) == 1 and "x.shape[0] -> b" in symbolic[0].explanation
    assert "[b,64]" in symbolic[0].summary()
    assert symbolic[0].hits >= 37


@pytest.mark.parametrize("name", PROGRAMS)
def test_dynamic_true_compiles_once_for_sizes_two_and_up(name):
    fn, make = PROGRAMS[name]
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache, dynamic=True)
    _sweep(f, fn, make, range(2, 41))
    assert cache.misses == 1
    assert module_is_symbolic(f.last_compilation.hlo) and "f32[b,64]" in f.last_compilation.stage("hlo")


def test_dynamic_false_compiles_per_size():
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache, dynamic=False)
    _sweep(f, softmax, PROGRAMS["softmax"][1], range(2, 8))
    assert cache.misses == 6


def test_automatic_threshold_first_size_static_second_symbolic():
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache)
    _sweep(f, softmax, PROGRAMS["softmax"][1], [5])
    assert cache.misses == 1 and not module_is_symbolic(f.last_compilation.hlo)
    _sweep(f, softmax, PROGRAMS["softmax"][1], [5])          # the same size again: no new program
    assert cache.misses == 1
    _sweep(f, softmax, PROGRAMS["softmax"][1], [6])          # a second size: symbolic from now on
    assert cache.misses == 2 and module_is_symbolic(f.last_compilation.hlo)
    _sweep(f, softmax, PROGRAMS["softmax"][1], [7, 4096, 3])
    assert cache.misses == 2
    _sweep(f, softmax, PROGRAMS["softmax"][1], [5])          # the static entry still serves 5
    assert not module_is_symbolic(f.last_compilation.hlo)


def test_an_argument_returned_as_it_is_stays_symbolic_and_is_the_callers_array():
    cache = CompilationCache()
    f = nbxla.jit(lambda x, y: (x, x * 2 + y), cache=cache)
    for n in (5, 6, 7, 300):
        x, y = np.arange(float(n)), np.ones(n)
        same, got = f(x, y)
        assert same is x
        np.testing.assert_array_equal(got, x * 2 + y)
    assert cache.misses == 2 and module_is_symbolic(f.last_compilation.hlo)


def test_named_dimensions():
    cache = CompilationCache()
    f = nbxla.jit(layer, cache=cache, dynamic={"x": (0,)})
    _sweep(f, layer, PROGRAMS["dot"][1], [3, 9, 33])
    assert cache.misses == 1 and "x.shape[0] -> b" in cache.entries()[0].explanation


def test_size_one_is_served_where_the_program_is_the_same_there():
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache, dynamic=True)
    _sweep(f, softmax, PROGRAMS["softmax"][1], [4, 1, 2, 1, 33])
    assert cache.misses == 1
    assert "every size >= 1" in cache.entries()[0].explanation
    assert "1 <= b <= " in f.last_compilation.dimensions


def test_size_one_compiled_first_with_dynamic_true_serves_every_size():
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache, dynamic=True)
    _sweep(f, softmax, PROGRAMS["softmax"][1], [1, 2, 3, 40])
    assert cache.misses == 1 and module_is_symbolic(f.last_compilation.hlo)


def squeezed(x):
    return np.squeeze(x) * 2.0          # (at size 1 the result loses a dimension)


def test_size_one_fails_the_guard_where_the_program_differs_there_and_says_so():
    cache = CompilationCache()
    f = nbxla.jit(squeezed, cache=cache, dynamic=True)
    _sweep(f, squeezed, ONE, [4, 9, 1])
    assert cache.misses == 2
    static = cache.entries()[-1]
    assert "x.shape[0] == 1, compiled for b >= 2" in static.explanation
    assert "x.shape[0] == 1, compiled for b >= 2" in cache.table()
    assert "2 <= b <= " in cache.entries()[0].value.compilation.dimensions


def test_size_zero_fails_the_guard_and_says_so():
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache, dynamic=True)
    _sweep(f, softmax, ONE, [4, 0])
    assert cache.misses == 2
    assert "x.shape[0] == 0, compiled for b >= 1" in cache.entries()[-1].explanation


def test_shared_symbol_guard_recompiles_when_sizes_part():
    cache = CompilationCache()
    f = nbxla.jit(elementwise, cache=cache, dynamic={"x": (0,), "y": (0,)})
    _sweep(f, elementwise, PROGRAMS["elementwise"][1], [4, 9])
    assert cache.misses == 1
    x, y = rows(5), RNG.random((1, 64), dtype=np.float32)     # broadcasting a 1: another program
    np.testing.assert_allclose(f(x, y), elementwise(x, y), rtol=1e-6)
    assert cache.misses == 2
    assert "y.shape[0] == 1 but x.shape[0] == 5, compiled for both equal (b)" in cache.entries()[-1].explanation


def test_python_decision_on_a_size_specialises_with_the_line():
    def branchy(x):
        if x.shape[0] > 10:
            return x * 2
        return x * 3
    cache = CompilationCache()
    f = nbxla.jit(branchy, cache=cache, dynamic=True)
    _sweep(f, branchy, ONE, [12, 5, 30])
    assert cache.misses == 3
    assert "compares a size in Python" in cache.entries()[0].explanation


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("decide", [
    lambda n: n % 2,                    # parity: every probe (3, 7, 1, 65537) is odd
    lambda n: (n + 1) % 2 == 0,         # on a size derived from it
    lambda n: n // 4 * 4 != n,          # a multiple of 4, by division
    lambda n: n & 1,
], ids=["mod", "derived_mod", "floordiv", "bit_and"])
def test_a_divisibility_decision_on_a_size_is_never_a_wrong_answer(dynamic, decide):
    def parity(x):
        return x * 2 if decide(x.shape[0]) else x + 1
    cache = CompilationCache()
    f = nbxla.jit(parity, cache=cache, dynamic=dynamic)
    _sweep(f, parity, ONE, [3, 5, 7, 2, 4, 8, 33, 34])      # (automatic: odd sizes first)
    symbolic = [e for e in cache.entries() if "symbolic" in e.explanation and "specialised" not in e.explanation]
    assert not symbolic, [e.explanation for e in cache.entries()]


def test_scaling_arithmetic_on_a_size_stays_symbolic():
    def scaled(x):
        n = x.shape[0]
        return x.reshape(n * 2, -1) * (n - n + 2)
    cache = CompilationCache()
    f = nbxla.jit(scaled, cache=cache, dynamic=True)
    _sweep(f, scaled, ONE, [4, 9, 30])
    assert cache.misses == 1


def test_python_loop_over_a_size_specialises():
    def looped(x):
        total = x[0]
        for i in range(1, x.shape[0]):
            total = total + x[i]
        return total
    cache = CompilationCache()
    f = nbxla.jit(looped, cache=cache, dynamic=True)
    _sweep(f, looped, ONE, [3, 4])
    assert cache.misses == 2 and "specialised" in cache.entries()[0].explanation


W_OUT = RNG.random((64, 32), dtype=np.float32)

# Reductions over the unknown dimension: the kernel reads the row count when it runs.
REDUCTIONS_OVER_THE_BATCH = {
    "column_sum": lambda x: x.sum(axis=0) * 2,
    "column_max": lambda x: x.max(axis=0),
    "mean_and_variance": lambda x: ((x - x.mean(axis=0)) ** 2).mean(axis=0),
    "bias_gradient": lambda x: np.tanh(x @ W_OUT).sum(axis=0),
    # (x.T @ g: the transpose folds into the dot, which BLAS runs at any size)
    "weight_and_bias_gradients": lambda x: (x.T @ np.tanh(x @ W_OUT), np.tanh(x @ W_OUT).sum(axis=0)),
}


def _close(got, expected, n):
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=1e-4, err_msg=f"size {n}")


@pytest.mark.parametrize("name", REDUCTIONS_OVER_THE_BATCH)
def test_reductions_over_the_symbol_compile_once(name):
    fn = REDUCTIONS_OVER_THE_BATCH[name]
    cache = CompilationCache()
    f = nbxla.jit(fn, cache=cache)
    # (both sides of the column kernel's 8-row passes, and sizes a split or a block crosses)
    for n in list(range(1, 41)) + [63, 64, 65, 4097]:
        x = rows(n)
        _close(f(x), fn(x), n)
    assert cache.misses == 2
    symbolic = [e for e in cache.entries() if "symbolic" in e.explanation]
    assert len(symbolic) == 1 and symbolic[0].hits >= 40


def test_column_sum_kernel_reads_its_row_count_when_it_runs():
    cache = CompilationCache()
    f = nbxla.jit(REDUCTIONS_OVER_THE_BATCH["column_sum"], cache=cache, dynamic=True)
    f(rows(5))
    ir_text = f.last_compilation.stage("llvm_ir")
    assert 'load i64' in ir_text and "size" in ir_text          # (the RunSizes load)
    static = nbxla.jit(REDUCTIONS_OVER_THE_BATCH["column_sum"], cache=CompilationCache(), dynamic=False)
    static(rows(5))
    assert "%size" not in static.last_compilation.stage("llvm_ir")  # static kernels bake it in


def test_column_sums_whose_kept_axes_come_from_a_reshape_read_their_rows_at_run_time():
    """(Once specialised: the kernel baked its row count in.  Its sizes are read when it runs
    now: codegen/run_sizes.py.)"""
    def grid_sums(x):                   # kept axes (8, 8) of a reshape
        return x.reshape(x.shape[0], 8, 8).sum(axis=0) * 2
    cache = CompilationCache()
    f = nbxla.jit(grid_sums, cache=cache, dynamic=True)
    _sweep(f, grid_sums, ONE, [3, 4, 5, 1031])
    assert cache.misses == 1 and module_is_symbolic(f.last_compilation.hlo)


def test_a_python_branch_on_a_size_is_specialised_with_the_reason():
    def scaled(x):                      # (a Python branch on the size)
        return x * 2 if x.shape[0] > 4 else x + 1
    cache = CompilationCache()
    f = nbxla.jit(scaled, cache=cache, dynamic=True)
    _sweep(f, scaled, ONE, [3, 4, 5])
    assert cache.misses == 3
    assert "specialised: " in cache.entries()[0].explanation


def test_the_running_example_reads_its_count_as_a_size_argument():
    """``np.mean`` over the symbol divides by ``64*b``: a trailing size argument, given per call."""
    def running_example(x, y):
        return np.mean(3 * x ** 2 + y)
    cache = CompilationCache()
    f = nbxla.jit(running_example, cache=cache, dynamic={"x": (0,), "y": (0,)})
    _sweep(f, running_example, PROGRAMS["elementwise"][1], [3, 4, 5, 1000])
    assert cache.misses == 1
    assert "size." in f.last_compilation.stage("hlo")           # the lifted count parameter
    assert "full-reduce" in f.last_compilation.stage("execution") or \
        "partial chunk" in f.last_compilation.stage("execution")


def test_a_reshape_keeps_the_symbol_scaled():
    def flat(x):
        return np.tanh(x.reshape(-1, 8)).sum(axis=1)
    cache = CompilationCache()
    f = nbxla.jit(flat, cache=cache, dynamic=True)
    _sweep(f, flat, ONE, [2, 3, 50])
    assert cache.misses == 1 and "f32[8*b]" in f.last_compilation.stage("optimized_hlo")


def test_instances_agree_with_the_evaluator_on_the_symbolic_module():
    from nbxla.hlo.evaluator import evaluate
    f = nbxla.jit(layer, cache=CompilationCache(), dynamic=True)
    f(rows(3), W)
    symbolic = f.last_compilation.optimized
    for n in (2, 7, 40):
        x = rows(n)
        np.testing.assert_allclose(f(x, W), evaluate(symbolic, [x, W]), rtol=1e-5)


def test_concurrent_calls_at_many_sizes_share_one_symbolic_program():
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache, dynamic=True)
    f(rows(2))
    inputs = [rows(n) for n in list(range(2, 30)) * 2]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(f, inputs))
    for x, got in zip(inputs, results):
        np.testing.assert_allclose(got, softmax(x), rtol=2e-5, atol=1e-6)
    assert cache.misses == 1


def test_bad_dynamic_argument_is_a_clear_error():
    with pytest.raises(TypeError, match="dynamic must be"):
        nbxla.jit(softmax, dynamic="yes")


def test_fusion_report_says_which_dimensions_are_symbolic_and_why_others_are_not():
    f = nbxla.jit(elementwise, cache=CompilationCache(), dynamic=True)
    f(rows(3), rows(3))
    report = f.last_compilation.stage("fusion_report")
    assert "dimensions: x.shape[0] -> b, y.shape[0] -> b (symbolic); guards: 1 <= b <= 65537, x.shape[0] == y.shape[0]" \
        in report
    for stage in f.last_compilation.stages:             # every stage shows for a symbolic compile
        assert f.last_compilation.stage(stage)

    def scaled(x):                      # (a Python branch on the size)
        return x * 2 if x.shape[0] > 4 else x + 1
    g = nbxla.jit(scaled, cache=CompilationCache())
    g(rows(3))
    g(rows(4))
    assert "dimensions: x.shape[0] -> b specialised: " in g.last_compilation.stage("fusion_report")


def test_clamped_slices_are_checked_at_both_ends_of_the_guarded_range():
    """``x[:8]`` has 8 rows at the two probes (33 and 67) and 3 at size 3; ``x[:100]`` has b rows
    there and 100 at 200: the extreme probes (2 and 65537) see both, and the dimension is
    specialised -- never the wrong shape."""
    def head(x):
        return x[:8] * 2

    def first_hundred(x):
        return x[:100] * 2
    for fn in (head, first_hundred):
        cache = CompilationCache()
        f = nbxla.jit(fn, cache=cache, dynamic={"x": (0,)})
        _sweep(f, fn, ONE, [33, 3, 200])
        assert cache.misses == 3
        assert "specialised: at size" in cache.entries()[0].explanation


def test_sizes_above_the_largest_probe_fail_the_guard():
    from nbxla.hlo.symbolic import UPPER_PROBE
    cache = CompilationCache()
    f = nbxla.jit(lambda x: x * 2, cache=cache, dynamic={"x": (0,)})
    small, big = np.ones(3, np.float32), np.ones(UPPER_PROBE + 10, np.float32)
    np.testing.assert_array_equal(f(small), small * 2)
    np.testing.assert_array_equal(f(big), big * 2)
    assert cache.misses == 2
    assert f"x.shape[0] == {UPPER_PROBE + 10}, compiled for b <= {UPPER_PROBE}" in cache.entries()[-1].explanation
    assert "guards: 1 <= b <= 65537" in cache.entries()[0].value.compilation.stage("fusion_report")


def test_benchmark_script_runs_and_prints_both_parts():
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(repo / "benchmarks" / "dynamic_shapes.py"), "--only", "softmax",
                          "--sizes", "3", "--steady-sizes", "8", "--repeats", "1", "--calls", "1"],
                         capture_output=True, text=True, timeout=600, cwd=repo)
    assert out.returncode == 0, out.stderr
    assert "Part 1" in out.stdout and "Part 2" in out.stdout and "symbolic entry x: f32[b,256]" in out.stdout


def test_an_exact_size_test_in_python_specialises():
    def special(x):
        if x.shape[0] == 40 or x.size == 40 * 64:
            return x * 2
        return x * 3
    cache = CompilationCache()
    f = nbxla.jit(special, cache=cache, dynamic={"x": (0,)})
    _sweep(f, special, ONE, [33, 40, 41])
    assert cache.misses == 3 and "compares a size in Python" in cache.entries()[0].explanation


def _counting(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


def wide(x, y):
    return np.tanh(3 * x ** 2 + y) * 0.5 + np.exp(-x)


@pytest.mark.parametrize("first_size", [1, 6])
def test_automatic_symbolic_compile_reuses_the_static_compile(monkeypatch, first_size):
    """The first size's static compile is the second probe: the passes run once for the
    symbolic program and its kernels are the static compile's machine code (no LLVM)."""
    import nbxla.symbolic_compile as symbolic_compile
    import nbxla.runtime.cpu_executable as cpu_executable
    probes = _counting(monkeypatch, symbolic_compile, "_optimize_probe")
    llvm = _counting(monkeypatch, cpu_executable, "compile_kernels")
    cache = CompilationCache()
    f = nbxla.jit(wide, cache=cache)
    make = PROGRAMS["elementwise"][1]
    _sweep(f, wide, make, [first_size])
    assert len(llvm) == 1
    _sweep(f, wide, make, [first_size + 1, 2, 3, 40, 1, 17])       # (sizes 6 and 7: coprime)
    assert cache.misses == 2 and module_is_symbolic(f.last_compilation.hlo)
    assert probes == [] and len(llvm) == 1


def test_an_earlier_size_sharing_a_factor_is_no_probe(monkeypatch):
    """Sizes 4 then 8 (both even): the second probe is 2*8+1, optimized afresh."""
    import nbxla.symbolic_compile as symbolic_compile
    probes = _counting(monkeypatch, symbolic_compile, "_optimize_probe")
    cache = CompilationCache()
    f = nbxla.jit(wide, cache=cache)
    _sweep(f, wide, PROGRAMS["elementwise"][1], [4, 8, 3, 1, 33])
    assert cache.misses == 2 and len(probes) == 1


def test_an_earlier_probe_at_size_one_spares_the_passes_of_row_reductions(monkeypatch):
    """softmax's row reductions at size 1: the passes' result at 1 serves as the second probe,
    the kernels are compared at 2h+1, and -- the static compile indexing its leading size-1
    dimension like any other (``codegen.elemental.leading_unit_dims``) -- are the static
    compile's code, whose machine code serves: LLVM ran once, for the static compile."""
    import nbxla.symbolic_compile as symbolic_compile
    import nbxla.runtime.cpu_executable as cpu_executable
    probes = _counting(monkeypatch, symbolic_compile, "_optimize_probe")
    llvm = _counting(monkeypatch, cpu_executable, "compile_kernels")
    cache = CompilationCache()
    f = nbxla.jit(softmax, cache=cache)
    _sweep(f, softmax, ONE, [1, 2, 5, 64, 1, 3])
    assert cache.misses == 2 and probes == [] and len(llvm) == 1
    assert "every size >= 1" in cache.entries()[-1].explanation


def test_an_earlier_compile_whose_passes_gave_another_program_is_no_probe(monkeypatch):
    """Where the earlier static compile's optimized module is not the first probe's program
    (here: swapped for another function's), the second probe is traced and optimized at 2h+1."""
    import dataclasses
    import nbxla.symbolic_compile as symbolic_compile
    probes = _counting(monkeypatch, symbolic_compile, "_optimize_probe")
    cache = CompilationCache()
    f = nbxla.jit(wide, cache=cache)
    make = PROGRAMS["elementwise"][1]
    _sweep(f, wide, make, [1])
    other = nbxla.jit(lambda x, y: x - y, cache=CompilationCache())
    other(*make(1))
    (family, remembered), = f._dims.static.items()
    shapes, compilation = remembered[0]
    remembered[0] = (shapes, dataclasses.replace(compilation, optimized=other.last_compilation.optimized))
    _sweep(f, wide, make, [2, 3, 1, 40])
    assert cache.misses == 2 and len(probes) == 1 and module_is_symbolic(f.last_compilation.hlo)
