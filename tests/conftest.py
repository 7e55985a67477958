"""Shared test helpers: where the external corpus lives."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (a CI result does not depend on luck);
# NBXLA_HYPOTHESIS_RANDOM=1 draws new ones, to look for bugs (with NBXLA_HYPOTHESIS_EXAMPLES
# for more of them in the random-graph tests).
settings.register_profile("nbxla", derandomize=os.environ.get("NBXLA_HYPOTHESIS_RANDOM") != "1")
settings.load_profile("nbxla")

# Compiled-code cache: private to this test session, never the user's ~/.cache.
os.environ.setdefault("NBXLA_CACHE_DIR", tempfile.mkdtemp(prefix="nbxla-test-cache-"))

from tests.ipython_util import shell  # noqa: E402,F401  (fixture for every folder; after the cache dir is set)

REPO = Path(__file__).resolve().parents[1]
CORPUS_HLO = REPO.parent / "shared" / "corpus" / "hlo"


def corpus_files(pattern: str) -> list:
    """Corpus files matching ``pattern``, or one skipped parameter when the corpus is absent."""
    files = sorted(CORPUS_HLO.glob(pattern))
    if not files:
        return [pytest.param(None, id="corpus-missing",
                             marks=pytest.mark.skip(reason=f"HLO corpus not found at {CORPUS_HLO}"))]
    return [pytest.param(f, id=f.name) for f in files]


# ---- CUDA backend: tests that need a real GPU (skipped with a reason when CuPy sees none) ----
def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: runs on a real NVIDIA GPU through CuPy (skipped without one)")


# ---- the slowest files first ----------------------------------------------------------------------
# pytest-xdist (``-n 2``) hands tests out in collection order and the run ends when its last
# worker does: a test of tens of seconds near the end (the browser test, a demo notebook, a
# benchmark script in a subprocess, a property test) ran there alone while the other worker
# idled.  These files start the run instead; the others follow in pytest's order, and each file's
# tests stay together and in order (module-scoped fixtures are made once).  Order only: every
# test runs, as before.  (Measured under ``--durations``: each has a test of 10 s or more.)
SLOW_FIRST = (
    "jupyter/test_browser.py",
    "test_benchmarks_smoke.py",
    "jupyter/test_notebooks.py",
    "dask/test_dask_chunkings.py",
    "dask/test_dask_cluster.py",
    "dask/test_dask_cells.py",          # (the dask files together: one worker, one local cluster
    "dask/test_dask_last_chunk.py",     # -- a session fixture -- where a second worker started
    "dask/test_dask_split.py",          # its own two processes)
    "test_dynamic_dims.py",
    "aot/test_aot_property.py",
    "codegen/test_property.py",
    "passes/test_fusion_scaling.py",
    "passes/test_property.py",
    "test_loop_benchmarks_smoke.py",
    "test_conv_benchmark_smoke.py",
    "aot/test_aot_benchmark_smoke.py",
    "autodiff/test_benchmark_smoke.py",
    "frontend/test_loop_programs_benchmark.py",
)


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    rank = {name: k for k, name in enumerate(SLOW_FIRST)}

    def place(item) -> int:
        try:
            return rank.get(Path(str(item.path)).resolve().relative_to(tests).as_posix(), len(rank))
        except ValueError:                  # (a test outside tests/)
            return len(rank)
    items.sort(key=place)                   # (stable: the rest keep their order)
    if FORCED:
        _skip_threshold_pinning(items)


# ---- size thresholds forced one way ---------------------------------------------------------------
# A path taken only above (or below) a size must not hide behind the small arrays tests like:
# ``NBXLA_TEST_THRESHOLDS=low`` makes every such path apply from the smallest array, ``high``
# never.  The files that pin a threshold itself (sizes computed from it, the layout chosen at it)
# are skipped then, with the reason.  Values are read from the module at call time.
FORCED_THRESHOLDS = {   # module -> constant -> (low, high)
    "nbxla.api": {"DONATE_MIN_BYTES": (1, 1 << 62)},                      # donate into the caller's array
    "nbxla.runtime.update_gemv": {"MIN_MATRIX_BYTES": (1, 1 << 62)},      # blocked update + gemv pass
    "nbxla.passes.loop_layouts": {"CACHED_STATE_BYTES": (0, 1 << 62)},    # carry a loop state transposed
    "nbxla.runtime.lapack_calls": {"ROW_MAJOR_BELOW": (1 << 30, 0)},      # row-major potrf
    "nbxla.runtime.gemm_epilogue": {"FOLD_MIN_PRODUCT": (0, 1 << 62)},    # alpha*(A@B)+beta*C as one ?gemm
    "nbxla.runtime.cpu_kernels": {"THIN_SIDE": (1 << 30, 0),              # thin GEMMs split over the pool
                                  "THIN_OUTPUT": (1 << 62, 0)},
    "nbxla.runtime.host_memory": {"MIN_POOLED_BYTES": (0, 1 << 62)},      # outputs from the recycled pool
    "nbxla.runtime.bf16_arrays": {"NATIVE_MIN_ELEMENTS": (0, 1 << 62)},   # native f32 -> bf16 rounding
    "nbxla.codegen.column_groups": {"MIN_ELEMENTS": (0, 1 << 62)},        # column kernels in groups
    "nbxla.codegen.aot_loops": {"DEEP_NEST": (1, 1 << 30)},               # loop programs kept as calls
}
THRESHOLD_PINNING_FILES = ("runtime/test_potrf_call.py", "runtime/test_update_gemv.py",
                           "runtime/test_donation.py", "frontend/test_loop_layouts.py",
                           "runtime/test_gemm_epilogue.py", "runtime/test_thin_gemm.py",
                           "runtime/test_host_memory.py", "runtime/test_bf16_arrays.py",
                           "codegen/test_column_groups.py", "runtime/test_blas_policy.py",
                           "codegen/test_aot_loops.py")
FORCED = os.environ.get("NBXLA_TEST_THRESHOLDS", "")
if FORCED:
    import importlib
    if FORCED not in ("low", "high"):
        raise pytest.UsageError(f"NBXLA_TEST_THRESHOLDS={FORCED!r}: use low or high")
    for _module, _constants in FORCED_THRESHOLDS.items():
        _m = importlib.import_module(_module)
        for _name, (_low, _high) in _constants.items():
            assert hasattr(_m, _name), f"{_module}.{_name} is gone: update FORCED_THRESHOLDS"
            setattr(_m, _name, _low if FORCED == "low" else _high)


def _skip_threshold_pinning(items):
    tests = Path(__file__).resolve().parent
    skip = pytest.mark.skip(reason=f"NBXLA_TEST_THRESHOLDS={FORCED}: this file pins the threshold itself")
    stems = tuple("__" + Path(f).stem for f in THRESHOLD_PINNING_FILES)     # (their symbolic reruns)
    for item in items:
        try:
            pinned = Path(str(item.path)).resolve().relative_to(tests).as_posix() in THRESHOLD_PINNING_FILES
        except ValueError:
            pinned = False
        if pinned or item.name.split("[")[0].endswith(stems):
            item.add_marker(skip)
