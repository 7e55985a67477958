"""HLO text files run by nbxla's CPU backend and by XLA:CPU itself (the same text compiled by
jaxlib), and by the reference evaluator (what the fallbacks cost).

    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/hlo_text_vs_xla.py              # tests/hlo/models + lapack
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/hlo_text_vs_xla.py a.hlo b.hlo --repeats 9

Method: one process, the same inputs for every contender (indices in [0, 8), floats standard
normal scaled by 1/sqrt(fan-in), as tests/hlo/test_model_modules.py makes them).  nbxla: the
text parsed, optimized and compiled (``compile_module(.., "cpu")``, the ``run-hlo --backend cpu``
path), called through ``executable.run``; XLA: jaxlib's HLO parser, StableHLO, the CPU client's
``compile_and_load`` and ``execute`` on inputs already on the device; evaluator: one call of
``nbxla.hlo.evaluator.evaluate`` (the cost of running everything on the evaluator).  Constants
elided as ``{...}`` get nbxla's deterministic stand-in values (``nbxla.hlo.elided``), given to
XLA printed in full.  nbxla and
XLA are warmed up, then sampled round-robin with the order rotated every repeat; a sample is
enough back-to-back calls to last ~10 ms (``--sample-ms``); the table shows the best sample
(the machine is shared: the minimum is the least disturbed).  On a loaded machine shorter
samples and more repeats (``--sample-ms 2 --repeats 40``) give each contender more chances
at a quiet stretch.  ``xXLA`` = XLA's time / nbxla's (> 1: nbxla faster); ``xEval``
likewise for the evaluator.  ``evaluator steps`` counts the instructions of nbxla's
executable that run an evaluator rule (0 expected).  Nothing is asserted.

Threads: XLA:CPU runs its own thread pool in this process, and
nbxla its own pool (``nbxla.runtime.cpu_kernels``: as many threads as ``sched_getaffinity``
gives cores, used only for kernels past ``PARALLEL_THRESHOLD`` / products past
``SPLIT_PRODUCT``).  Neither keeps a core busy into the other's sample: measured from
``/proc/self/task/*/schedstat``, XLA's threads ran at most ~0.1 ms after a 10 ms sample of the
attention module ended, nbxla's ~0.16 ms (under 2% of the next sample).  ``taskset -c 0``
with ``--cpu-time`` gives both one core.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.elided import accept_filled_constants, model_values
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import print_module

ROOT = Path(__file__).resolve().parents[1]


def inputs_for(text: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [model_values(p.shape, rng) for p in parse_hlo(text).entry.parameters]


def xla_runner(text: str, inputs):
    """A zero-argument call of XLA:CPU's executable for ``text`` on ``inputs``, or None."""
    try:
        import jax
        import jax.extend.backend
        from jax._src.lib import _jax, xla_client
        from jaxlib import _hlo, lapack
    except ImportError:
        return None
    lapack._lapack.initialize()
    jax.config.update("jax_enable_x64", True)
    module = _hlo.hlo_module_from_text(text)
    stablehlo = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    backend = jax.extend.backend.get_backend("cpu")
    device = backend.devices()[0]
    executable = backend.compile_and_load(stablehlo, xla_client.DeviceList((device,)), xla_client.CompileOptions())
    args = [jax.device_put(x, device) for x in inputs]

    def run():
        outs = executable.execute(args)
        for o in outs:
            o.block_until_ready()
        return outs
    return run


# The timer: wall time, or with --cpu-time the process's CPU time (all its threads; use with
# ``taskset -c 0``: steadier on shared cores, see benchmarks/conv.py).
CLOCK = [time.perf_counter]


def sample(fn, target=0.01) -> float:
    n, start = 0, CLOCK[0]()
    while True:
        fn()
        n += 1
        elapsed = CLOCK[0]() - start
        if elapsed >= target:
            return elapsed / n


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time (with taskset -c 0)")
    parser.add_argument("--sample-ms", type=float, default=10.0, help="the least time one sample lasts")
    args = parser.parse_args(argv)
    if args.cpu_time:
        CLOCK[0] = time.process_time
    files = [Path(f) for f in args.files] or sorted((ROOT / "tests/hlo/models").glob("*.hlo")) + \
        sorted((ROOT / "tests/hlo/lapack").glob("*.hlo"))
    warnings.simplefilter("ignore")
    print(f"{'module':34} {'nbxla':>10} {'XLA':>10} {'xXLA':>6} {'evaluator':>10} {'xEval':>7}  evaluator steps")
    for path in files:
        text = path.read_text()
        if "{...}" in text:
            # (elided constants: both run nbxla's stand-in values, XLA's side printed in full)
            filled = parse_hlo(text, path.name)
            accept_filled_constants(filled)
            text = print_module(filled)
        inputs = inputs_for(text)
        executable = compile_module(parse_hlo(text, path.name), "cpu").executable
        native = executable.native
        steps = len({**native.interpreted, **native.interpreted_ops})
        contenders = {"nbxla": lambda: executable.run(inputs)}
        xla = xla_runner(text, inputs)
        if xla is not None:
            contenders["XLA"] = xla
        for fn in contenders.values():
            fn()
        best = {name: float("inf") for name in contenders}
        names = list(contenders)
        for r in range(args.repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                best[name] = min(best[name], sample(contenders[name], args.sample_ms / 1000))
        module = parse_hlo(text, path.name)
        start = time.perf_counter()
        with np.errstate(all="ignore"):
            evaluate(module, inputs)
        ev = time.perf_counter() - start
        ours, x = best["nbxla"], best.get("XLA")
        xla_time = f"{x * 1e6:8.1f}us" if x else "         -"
        ratio = f"{x / ours:6.2f}" if x else "     -"
        print(f"{path.stem:34} {ours * 1e6:8.1f}us {xla_time} {ratio} {ev * 1e6:8.0f}us {ev / ours:7.1f}  {steps}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
