"""The automatic mode's symbolic compile takes, kernel by kernel, the machine code of the static
compile before it (``nbxla/symbolic_machine_code.py``): kernels whose LLVM IR is the same are
not compiled again; those whose code differs are compiled alone.  The three sides: every kernel
the same (``test_dynamic_dims``' ``wide``, softmax after batch 1: no LLVM at all), none the
same (a column softmax after a static compile at one column: the whole module), and some the
same (an MLP step's column sum reads its row count at run time).  Results against NumPy."""

import numpy as np
import pytest

import nbxla
import nbxla.codegen.cpu as cpu
from nbxla.hlo.symbolic import module_is_symbolic
from nbxla.runtime.cache import CompilationCache
from nbxla.symbolic_machine_code import split_functions
# (mlp_step: elementwise kernels, and a column sum -- the bias gradient -- whose code at size 1 differs)
from tests.test_dynamic_forty_sizes import mlp_step

RNG = np.random.default_rng(34)
W1 = RNG.random((32, 16), dtype=np.float32) / 32
W2 = RNG.random((16, 4), dtype=np.float32) / 16


def _args(n):
    return RNG.random((n, 32), dtype=np.float32), RNG.random((n, 4), dtype=np.float32), W1, W2


def _compiled_kernels(monkeypatch) -> list[list[str]]:
    """The kernels LLVM compiles, one list per module."""
    modules = []
    original = cpu._compile_kernels

    def counted(name, fusions, store, key, offset=None, emitted=None, *rest, **kw):
        modules.append(sorted(emitted.specs) if emitted is not None else sorted(s for s, _ in fusions))
        return original(name, fusions, store, key, offset, emitted, *rest, **kw)
    monkeypatch.setattr(cpu, "_compile_kernels", counted)
    return modules


def test_only_the_kernels_whose_code_differs_are_compiled_again(monkeypatch):
    modules = _compiled_kernels(monkeypatch)
    cache = CompilationCache()
    f = nbxla.jit(mlp_step, cache=cache)
    for n in [1, 2, 3, 40, 1, 17, 300]:
        args = _args(n)
        for got, expected in zip(f(*args), mlp_step(*args)):
            np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6, err_msg=f"size {n}")
    assert cache.misses == 2 and module_is_symbolic(f.last_compilation.hlo)
    static, symbolic = modules
    assert len(static) >= 3 and 1 <= len(symbolic) < len(static)
    assert set(symbolic) <= set(static)
    assert any("reduce" in name for name in symbolic)           # (the column sum)


def test_split_functions_keeps_globals_apart_from_functions():
    text = ('; ModuleID = "m"\ntarget triple = "x86_64-unknown-linux-gnu"\ntarget datalayout = "e"\n\n'
            '@"table" = internal constant [2 x i64] [i64 1, i64 2]\n'
            'define void @"k"(i8** %"buffers", i64 %"begin", i64 %"end")\n{\nentry:\n  ret void\n}\n\n'
            'define void @"k_objects"(i8* %".1")\n{\nentry:\n  call void @"k"(i8** null, i64 0, i64 0)\n'
            '  ret void\n}\n\ndeclare double @"exp"(double %".1")\n')
    outside, functions = split_functions(text)
    assert sorted(functions) == ["k", "k_objects"]
    assert functions["k"].startswith('define void @"k"(') and functions["k"].endswith("}")
    assert '@"table" = internal constant [2 x i64] [i64 1, i64 2]' in outside
    assert 'declare double @"exp"(double %".1")' in outside
    assert not any("datalayout" in line for line in outside)    # (the layout is the target's)


def test_an_unterminated_function_is_refused():
    with pytest.raises(ValueError):
        split_functions('define void @"k"()\n{\nentry:\n')


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _emissions(monkeypatch) -> list[int]:
    """How many times the kernels' LLVM IR is emitted (``kernel_llvm_ir``) per call."""
    import nbxla.runtime.cpu_executable as cpu_executable
    import nbxla.symbolic_compile as symbolic_compile
    import nbxla.symbolic_machine_code as symbolic_machine_code
    counts = [0]
    original = cpu_executable.kernel_llvm_ir

    def counted(*args, **kwargs):
        counts[0] += 1
        return original(*args, **kwargs)
    for module in (cpu_executable, symbolic_compile, symbolic_machine_code):
        monkeypatch.setattr(module, "kernel_llvm_ir", counted, raising=False)
    return counts


@pytest.mark.parametrize("first_rows, light", [(1, True), (300, False)])
def test_after_a_static_compile_the_probes_are_emitted_once_each_as_it_emitted_them(monkeypatch, first_rows, light):
    """The symbolic compile at the second size emits its two probes' kernels once each (no third
    emission to compare with the static compile's light kernels), with the static compile's
    light kernels light: a row of 256 at 1 row is light (not unrolled), at 300 rows (76800
    elements, over ``LIGHT_KERNEL_ELEMENTS``) it is not -- both sides of the threshold.  The
    kernels serve every size against NumPy, 4096 rows included."""
    cache = CompilationCache()
    f = nbxla.jit(_softmax, cache=cache)
    rng = np.random.default_rng(35)
    x = rng.random((first_rows, 256), dtype=np.float32)
    np.testing.assert_allclose(f(x), _softmax(x), rtol=2e-5, atol=1e-7)
    static_ir = f.last_compilation.executable.native.kernels.llvm_ir
    assert ("llvm.loop.unroll.disable" in static_ir) == light
    counts = _emissions(monkeypatch)
    x = rng.random((first_rows + 1, 256), dtype=np.float32)
    np.testing.assert_allclose(f(x), _softmax(x), rtol=2e-5, atol=1e-7)
    assert cache.misses == 2 and module_is_symbolic(f.last_compilation.hlo)
    assert counts[0] == 2
    symbolic_ir = f.last_compilation.executable.native.kernels.llvm_ir
    assert ("llvm.loop.unroll.disable" in symbolic_ir) == light
    for n in [2, 3, 17, 1, 4096]:
        x = rng.random((n, 256), dtype=np.float32)
        np.testing.assert_allclose(f(x), _softmax(x), rtol=2e-5, atol=1e-7, err_msg=f"size {n}")
    assert cache.misses == 2


def _scaled_softmax(x, scale):
    return _softmax(x) * scale


def _column_softmax(x, scale):
    return _softmax(x.T).T * scale


_SCALE_ROW = np.random.default_rng(37).random((1, 256), dtype=np.float32)
_SCALE_COLUMN = _SCALE_ROW.T.copy()


@pytest.mark.parametrize("fn, scale, first, second, compiled_again", [
    # batch 1, then 2: the leading size-1 dimension indexed, the same code at both
    (lambda x, scale: _softmax(x), _SCALE_ROW, (1, 256), (2, 256), False),
    # a trailing size-1 dimension (a column, unknown along axis 1): dropped at size 1, other code
    (_column_softmax, _SCALE_COLUMN, (256, 1), (256, 2), True),
    # an operand of size 1 at every size: broadcast at batch 2 but not at 1 -- other code there
    (_scaled_softmax, _SCALE_ROW, (1, 256), (2, 256), None),
])
def test_a_static_compile_at_size_1_gives_the_symbolic_program_its_machine_code(monkeypatch, fn, scale, first,
                                                                                second, compiled_again):
    """The automatic mode's static compile at batch size 1 indexes the leading dimension like
    any other (``codegen.elemental.leading_unit_dims``), so its softmax row reduction is the very
    code the symbolic program at the next size emits: no LLVM then.  The other side: a size-1
    dimension that is not leading (a column, made unknown along axis 1) is still dropped from
    the static compile's index arithmetic, and the symbolic compile compiles its kernel.  Results
    against NumPy at every size, in all cases (a ``[1, 256]`` operand besides the batch too)."""
    modules = _compiled_kernels(monkeypatch)
    cache = CompilationCache()
    rng = np.random.default_rng(36)
    f = nbxla.jit(fn, cache=cache)

    def check(shape):
        x = rng.random(shape, dtype=np.float32)
        np.testing.assert_allclose(f(x, scale), fn(x, scale), rtol=2e-5, atol=1e-7, err_msg=f"shape {shape}")
    check(first)
    check(second)
    assert cache.misses == 2 and module_is_symbolic(f.last_compilation.hlo)
    if compiled_again is not None:
        assert len(modules) == (2 if compiled_again else 1)
    for n in [3, 17, 1, 300]:
        check((n, 256) if first[0] != second[0] else (256, n))
    assert cache.misses == 2


def test_light_kernels_are_compiled_unrolled_once_an_instance_is_large(monkeypatch):
    """After a static compile at batch 1 the symbolic program runs that compile's light kernels
    (loops not unrolled); at sizes where a light kernel's work exceeds ``LIGHT_KERNEL_ELEMENTS``
    (4096 rows of 256) its kernels are compiled unrolled, once, as a static compile of such a
    size would (light ones ran 0.91-0.95x there); small sizes keep the light code -- both sides
    of the threshold.  One compilation in the cache throughout; results against NumPy."""
    modules = _compiled_kernels(monkeypatch)
    cache = CompilationCache()
    f = nbxla.jit(_softmax, cache=cache)
    rng = np.random.default_rng(38)

    def run(n):
        x = rng.random((n, 256), dtype=np.float32)
        np.testing.assert_allclose(f(x), _softmax(x), rtol=2e-5, atol=1e-7, err_msg=f"size {n}")
        return f.last_compilation.executable.native.kernels.llvm_ir
    run(1)
    assert "llvm.loop.unroll.disable" in run(2) and "llvm.loop.unroll.disable" in run(40)
    assert len(modules) == 1
    assert "llvm.loop.unroll.disable" not in run(4096)
    assert len(modules) == 2
    assert "llvm.loop.unroll.disable" not in run(5000) and "llvm.loop.unroll.disable" in run(41)
    assert len(modules) == 2 and cache.misses == 2
