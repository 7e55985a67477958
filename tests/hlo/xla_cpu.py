"""XLA:CPU itself (through jaxlib) as an oracle for HLO text: the module compiled by XLA's CPU
backend and run on the same inputs.  JAX is no dependency of nbxla: it is used in this process
when importable, else through another interpreter that has it (``NBXLA_XLA_PYTHON``, or the
benchmark environment ``/work/benchvenv/bin/python``) by running this file as a script; the
callers skip when neither exists.

Arrays cross the process boundary as raw bytes with their ml_dtypes / NumPy type names (an
.npz cannot hold bf16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

BENCH_PYTHON = "/work/benchvenv/bin/python"


def _dtype(name: str) -> np.dtype:
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)


def _pack(arrays) -> dict:
    return {"arrays": [{"dtype": a.dtype.name, "shape": list(a.shape), "bytes": a.tobytes().hex()} for a in arrays]}


def _unpack(data: dict) -> list[np.ndarray]:
    return [np.frombuffer(bytes.fromhex(a["bytes"]), _dtype(a["dtype"])).reshape(a["shape"]).copy()
            for a in data["arrays"]]


def run_in_process(text: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Compile ``text`` with XLA:CPU (jaxlib's HLO parser, then StableHLO) and run it."""
    import jax
    import jax.extend.backend
    from jax._src.lib import _jax, xla_client
    from jaxlib import _hlo, lapack
    # (jaxlib fills LAPACK's function table when JAX lowers its first linalg op; HLO text
    # with LAPACK custom calls needs it done first)
    lapack._lapack.initialize()
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", True)       # (f64 / c128 / s64 inputs stay as they are)
    module = _hlo.hlo_module_from_text(text)
    stablehlo = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    backend = jax.extend.backend.get_backend("cpu")
    device = backend.devices()[0]
    executable = backend.compile_and_load(stablehlo, xla_client.DeviceList((device,)), xla_client.CompileOptions())
    outputs = executable.execute([jax.device_put(x, device) for x in inputs])
    return [np.asarray(o) for o in outputs]


def xla_python() -> str | None:
    """How to reach XLA:CPU: "" in this process, a Python interpreter's path, or None."""
    try:
        import jax  # noqa: F401
        import jaxlib  # noqa: F401
        return ""
    except ImportError:
        pass
    for candidate in (os.environ.get("NBXLA_XLA_PYTHON"), BENCH_PYTHON):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def run_on_xla_cpu(text: str, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
    """XLA:CPU's outputs (flattened), or None when no JAX is reachable."""
    python = xla_python()
    if python is None:
        return None
    if python == "":
        return run_in_process(text, inputs)
    with tempfile.TemporaryDirectory() as tmp:
        request, reply = Path(tmp, "request.json"), Path(tmp, "reply.json")
        request.write_text(json.dumps({"text": text, **_pack(inputs)}))
        done = subprocess.run([python, __file__, str(request), str(reply)], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        if done.returncode != 0:
            raise RuntimeError(f"XLA:CPU through {python} failed:\n{done.stderr[-3000:]}")
        return _unpack(json.loads(reply.read_text()))


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(_pack(run_in_process(data["text"], _unpack(data)))))
