"""A compilation's cycle collections leave out the objects that existed before it
(runtime/collector.py), and the process's freeze state is as it was afterwards."""

import gc

import numpy as np
import pytest

import nbxla
from nbxla.runtime.cache import CompilationCache
from nbxla.runtime.collector import older_objects_frozen


@pytest.fixture(autouse=True)
def nothing_frozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def _compile_seeing_freeze(cache, seen, key="k"):
    def compile_fn():
        seen.append(gc.get_freeze_count())
        garbage = [[]]
        garbage[0].append(garbage)            # a cycle made during the compilation
        del garbage
        seen.append(gc.collect(0) >= 1)       # ... is still collected there
        return "value"
    return cache.get_or_compile(key, "code", "f", (), lambda: [], "cpu", compile_fn)


def test_compilation_freezes_older_objects_then_unfreezes():
    cache, seen = CompilationCache(), []
    _compile_seeing_freeze(cache, seen)
    assert seen[0] > 0, "the objects older than the compilation were not frozen"
    assert seen[1], "a cycle made during the compilation was not collected"
    assert gc.get_freeze_count() == 0


def test_objects_the_program_froze_stay_frozen():
    keep = [object() for _ in range(10)]
    gc.freeze()
    frozen = gc.get_freeze_count()
    cache, seen = CompilationCache(), []
    _compile_seeing_freeze(cache, seen)
    assert seen[0] == frozen and gc.get_freeze_count() == frozen
    del keep


def test_freeze_released_when_the_compilation_fails():
    def compile_fn():
        raise ValueError("boom")
    with pytest.raises(ValueError):
        CompilationCache().get_or_compile("k", "code", "f", (), lambda: [], "cpu", compile_fn)
    assert gc.get_freeze_count() == 0


def test_nested_and_collector_off_leave_state_alone():
    with older_objects_frozen():
        outer = gc.get_freeze_count()
        with older_objects_frozen():          # (a compilation inside one: already frozen)
            assert gc.get_freeze_count() == outer
        assert gc.get_freeze_count() == outer > 0
    assert gc.get_freeze_count() == 0
    gc.disable()
    try:
        with older_objects_frozen():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_jit_results_unchanged():
    f = nbxla.jit(lambda x: np.sin(x) * 2 + 1)
    x = np.linspace(0, 1, 50)
    np.testing.assert_allclose(f(x), np.sin(x) * 2 + 1)
    assert gc.get_freeze_count() == 0
