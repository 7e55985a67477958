"""The on-disk object-code cache: reused by a fresh process, private, and never trusted blindly."""

import os
import stat
import subprocess
import sys
import textwrap

from nbxla.runtime.persistent_cache import PersistentCache

PROGRAM = textwrap.dedent("""
    import numpy as np, nbxla
    f = nbxla.jit(lambda x, y: np.mean(3 * x**2 + y))
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    print(float(f(x, x)), f.last_compilation.executable.native.kernels.from_cache)
""")


def run_fresh(cache_dir):
    env = dict(os.environ, NBXLA_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    value, from_cache = out.stdout.split()
    return float(value), from_cache == "True"


def test_a_fresh_process_loads_compiled_code(tmp_path):
    cache = tmp_path / "cache"
    first, hit1 = run_fresh(cache)
    second, hit2 = run_fresh(cache)
    assert (hit1, hit2) == (False, True)
    assert first == second
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in cache.iterdir())


def test_corrupt_or_mismatched_entries_are_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    expected, _ = run_fresh(cache)
    for obj in cache.glob("*.o"):
        data = obj.read_bytes()
        obj.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # checksum no longer matches
    value, hit = run_fresh(cache)
    assert (value, hit) == (expected, False)
    value, hit = run_fresh(cache)                              # rebuilt entry is good again
    assert hit


def test_entry_under_another_key_is_not_loaded(tmp_path):
    store = PersistentCache(str(tmp_path))
    store.save("a" * 64, {"specs": {}}, b"object")
    assert store.load("a" * 64) is not None
    os.rename(tmp_path / ("a" * 64 + ".json"), tmp_path / ("b" * 64 + ".json"))
    os.rename(tmp_path / ("a" * 64 + ".o"), tmp_path / ("b" * 64 + ".o"))
    assert store.load("b" * 64) is None and store.rejected == 1


def test_a_directory_others_can_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    store = PersistentCache(str(shared))
    store.save("c" * 64, {"specs": {}}, b"object")
    assert list(shared.iterdir()) == []
