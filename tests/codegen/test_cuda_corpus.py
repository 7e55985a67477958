"""The JAX corpus on the CUDA backend: PTX assembled by ptxas and kernels emulated on the host
(any machine), and on a real GPU (tests marked ``gpu``, skipped when CuPy sees none).

The ``gpu`` tests also rerun the frontend program tests with ``device='cuda'``
(``NBXLA_FRONTEND_TEST_DEVICE=cuda``, outputs fetched to the host with
``NBXLA_CUDA_OUTPUTS=host``).
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from nbxla.codegen import gpu
from nbxla.compiler import compile_module
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cuda_executable import cuda_status
from nbxla.testing import compare_arrays

from tests.conftest import REPO, corpus_files
from tests.hlo.test_corpus import CASE_RTOL, UNSUPPORTED, case_inputs_and_outputs
from tests.codegen.test_corpus_cpu import ALLOWED_INTERPRETED as _CPU_ALLOWED

# The CPU backend's allowed reasons, plus scatter (native on the CPU, not yet on the GPU).
ALLOWED_INTERPRETED = re.compile(_CPU_ALLOWED.pattern + r"|no native code for scatter yet")

_GPU_OK, _GPU_WHY, _ = cuda_status()
needs_gpu = pytest.mark.skipif(not _GPU_OK, reason=f"no GPU: {_GPU_WHY}")


def _check(path, device):
    case, ins, outs = case_inputs_and_outputs(path)
    if case in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[case])
    compilation = compile_module(parse_hlo(path.read_text(), str(path)), device)
    cuda = compilation.executable.native
    for name, why in cuda.kernels.unsupported.items():
        assert ALLOWED_INTERPRETED.fullmatch(why), f"fusion {name} not emitted: {why}"
    got = cuda.run(ins, host=True)
    assert len(got) == len(outs)
    for i, (g, want) in enumerate(zip(got, outs)):
        assert g.dtype == want.dtype and g.shape == want.shape, f"out{i}: {g.dtype}{g.shape}"
        ok, detail = compare_arrays(g, want, rtol=CASE_RTOL.get(case))
        assert ok, f"out{i}: {detail}"
    return compilation


@pytest.mark.skipif(gpu.find_ptxas() is None, reason="ptxas not found on PATH (install the CUDA toolkit)")
@pytest.mark.parametrize("path", corpus_files("*.hlo"))
def test_corpus_ptx_assembles(path, record_property):
    compilation = compile_module(parse_hlo(path.read_text(), str(path)), "cuda")
    ptx = compilation.stage("ptx")
    for arch in ("sm_80", "sm_90"):
        result = gpu.run_ptxas(ptx, arch)
        assert result.ok, result.log
        record_property(f"ptxas_{arch}", {k: (r, result.spills.get(k)) for k, r in result.registers.items()})


@pytest.mark.parametrize("path", corpus_files("*.hlo"))
def test_corpus_emulated_matches_jax(path):
    _check(path, "cuda-emulator")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("path", corpus_files("*.hlo"))
def test_corpus_on_gpu_matches_jax(path):
    compilation = _check(path, "cuda")
    assert compilation.executable.native.usable


@pytest.mark.gpu
@needs_gpu
def test_outputs_stay_on_the_device():
    import cupy
    import nbxla
    x = np.random.rand(64, 300).astype(np.float32)
    f = nbxla.jit(lambda x: np.exp(x - x.max(axis=1, keepdims=True)), device="cuda")
    out = f(x)
    assert isinstance(out, cupy.ndarray)
    want = np.exp(x - x.max(axis=1, keepdims=True))
    assert np.allclose(cupy.asnumpy(out), want, rtol=1e-5)
    again = f(cupy.asarray(x))                     # CuPy inputs are used in place
    assert isinstance(again, cupy.ndarray)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("tests", ["tests/frontend/test_programs.py", "tests/frontend/test_reductions.py"])
def test_frontend_tests_on_gpu(tests):
    env = dict(os.environ, NBXLA_FRONTEND_TEST_DEVICE="cuda", NBXLA_CUDA_OUTPUTS="host")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", tests],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
