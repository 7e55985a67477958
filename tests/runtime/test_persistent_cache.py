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


# ---- the key: what the module computes, not what its instructions are called ---------------------

RENAMED = textwrap.dedent("""\
    HloModule m

    %fused (a.1: f32[64], b.2: f32[64]) -> f32[64] {
      %a.1 = f32[64]{0} parameter(0)
      %b.2 = f32[64]{0} parameter(1)
      %mul.3 = f32[64]{0} multiply(f32[64]{0} %a.1, f32[64]{0} %b.2)
      ROOT %exp.4 = f32[64]{0} exponential(f32[64]{0} %mul.3)
    }

    ENTRY %main (x.5: f32[64], y.6: f32[64]) -> f32[64] {
      %x.5 = f32[64]{0} parameter(0)
      %y.6 = f32[64]{0} parameter(1)
      ROOT %f = f32[64]{0} fusion(f32[64]{0} %x.5, f32[64]{0} %y.6), kind=kLoop, calls=%fused
    }
""")


def _renamed(text: str) -> str:
    """The same program with every name but the fusion's (its kernel's symbol) changed, as the
    builder's per-process counter changes them when a test builds its module again."""
    for old, new in (("a.1", "a.11"), ("b.2", "b.12"), ("mul.3", "mul.13"), ("exp.4", "exp.14"),
                     ("x.5", "x.15"), ("y.6", "y.16"), ("%fused", "%fused.9"), ("%main", "%main.8")):
        text = text.replace(old, new)
    return text


def test_modules_that_differ_only_in_names_print_the_same_key_text():
    from nbxla.hlo.parser import parse_hlo
    from nbxla.hlo.printer import print_module, renamed_by_appearance

    def key_text(text):
        return renamed_by_appearance(print_module(parse_hlo(text)))
    assert _renamed(RENAMED) != RENAMED
    assert key_text(_renamed(RENAMED)) == key_text(RENAMED)
    assert "a.1" not in key_text(RENAMED) and "x.5" not in key_text(RENAMED)   # (signatures too)
    for other in (RENAMED.replace("multiply", "add"),                   # another program
                  RENAMED.replace("%a.1, f32[64]{0} %b.2", "%b.2, f32[64]{0} %a.1"),
                  RENAMED.replace("x.5, f32[64]{0} %y.6", "y.6, f32[64]{0} %x.5")):
        assert key_text(other) != key_text(RENAMED)


def test_the_same_program_built_again_under_other_names_loads_its_compiled_code(tmp_path, monkeypatch):
    import numpy as np
    from nbxla.hlo.parser import parse_hlo
    from nbxla.runtime.executable import build_executable
    monkeypatch.setenv("NBXLA_CACHE_DIR", str(tmp_path / "cache"))
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = np.linspace(0, 2, 64, dtype=np.float32)
    first = build_executable(parse_hlo(RENAMED), "cpu")
    again = build_executable(parse_hlo(_renamed(RENAMED)), "cpu")
    other = build_executable(parse_hlo(RENAMED.replace("multiply", "add")), "cpu")
    assert [e.native.kernels.from_cache for e in (first, again, other)] == [False, True, False]
    want = np.exp(x * y)
    for e, expected in ((first, want), (again, want), (other, np.exp(x + y))):
        got = e.run([x, y])
        got = got[0] if isinstance(got, (list, tuple)) else got
        np.testing.assert_allclose(got, expected, rtol=1e-6)
