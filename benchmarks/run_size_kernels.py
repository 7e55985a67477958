"""Kernels reading their sizes when they run (``codegen/run_sizes.py``) against the same kernels
compiled for one shape: transposes, reverse / pad / concatenate, row reductions and arg
reductions, each as ``nbxla.jit(dynamic=False)`` and with the named dimension unknown.

    PYTHONPATH=. python benchmarks/run_size_kernels.py [--repeats 7] [--calls 20]

Contenders interleaved (the order alternated per round), the minimum per contender over
``--repeats`` rounds of ``--calls`` calls; printed: both times, static/symbolic of the minima
(1.0: as fast; the goal is >= 0.95) and the median of the per-round ratios (a round's two
contenders see the same load: on a busy machine the steadier of the two).  The symbolic program is compiled at another size first, so that
the timed call runs an instance of the one compilation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NBXLA_CACHE_DIR", "off")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import nbxla  # noqa: E402
from nbxla.hlo.symbolic import module_is_symbolic  # noqa: E402

CASES = {
    # name: (function, shape, unknown dims of x)
    "transpose [b,512]->[512,b]": (lambda x: x.T.copy(), (4096, 512), (0,)),
    "transpose [512,b]->[b,512]": (lambda x: x.T.copy(), (512, 4096), (1,)),
    "transpose 3d {2,0,1}": (lambda x: np.transpose(x, (2, 0, 1)).copy(), (4096, 8, 64), (0,)),
    "flip rows": (lambda x: np.flip(x, axis=0) + 1, (4096, 512), (0,)),
    "pad columns": (lambda x: np.pad(x, ((0, 0), (1, 2))) * 2, (4096, 512), (0,)),
    "concatenate": (lambda x: np.concatenate([x, -x], axis=1), (4096, 512), (0,)),
    "row max, rows known": (lambda x: np.max(x, axis=1), (4096, 512), (0,)),
    "row sum over unknown axis": (lambda x: np.sum(x, axis=1), (64, 32768), (1,)),
    "argmax over unknown rows": (lambda x: np.argmax(x, axis=1), (64, 32768), (1,)),
    "argmax of all": (lambda x: np.argmax(x), (4096, 512), (0,)),
}


def _time(f, x, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        f(x)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'kernel':32s} {'static us':>10s} {'symbolic us':>12s} {'static/symbolic':>16s} {'median ratio':>13s}")
    for name, (fn, shape, unknown) in CASES.items():
        if args.only and args.only not in name:
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        other = tuple(n + 3 if d in unknown else n for d, n in enumerate(shape))
        static = nbxla.jit(fn, dynamic=False)
        symbolic = nbxla.jit(fn, dynamic={"x": unknown})
        symbolic(rng.standard_normal(other).astype(np.float32))
        assert np.array_equal(np.asarray(symbolic(x)), np.asarray(static(x)))
        if not module_is_symbolic(symbolic.last_compilation.hlo):
            print(f"{name:32s} specialised: {symbolic.last_compilation.dimensions}")
            continue
        best = {"static": float("inf"), "symbolic": float("inf")}
        ratios = []
        for r in range(args.repeats):
            order = [("static", static), ("symbolic", symbolic)]
            this = {}
            for label, f in (order if r % 2 == 0 else order[::-1]):
                this[label] = _time(f, x, args.calls)
                best[label] = min(best[label], this[label])
            ratios.append(this["static"] / this["symbolic"])
        print(f"{name:32s} {best['static'] * 1e6:10.1f} {best['symbolic'] * 1e6:12.1f} "
              f"{best['static'] / best['symbolic']:16.2f} {float(np.median(ratios)):13.2f}")


if __name__ == "__main__":
    main()
