"""What the profiler's timing hook costs: nothing on the normal call path, a little in a profile.

    python benchmarks/profile_overhead.py [--repeats 7]

The hook swaps timed wrappers into the executable's step lists only while a profile runs
(``nbxla/runtime/profiling.py``); the run loops themselves are unchanged.  Measured here, in
one process, interleaved, best of repeated batches (others using the machine only slow runs
down):

* ``never`` / ``profiled``: a normal jit call of a function never profiled and of the same
  function after a profile (hooks installed and removed) -- the ratio should be 1.0 within noise;
* ``steps`` / ``timed``: the executable's general step loop without and with a clock around
  every step (what a profile runs): the cost of the timing itself.

Programs: a 20-op chain on 128 floats (dispatch is all there is), the running example on 2^20
floats (one kernel), and a rolled loop of 2000 steps (a native loop: one step) also forced
host-driven (every iteration's steps timed).
"""

from __future__ import annotations

import argparse
import os
import time
import types

import numpy as np

import nbxla
from nbxla.runtime.profiling import timing_hooks


def chain(x):
    for _ in range(20):
        x = x * 1.01 + 0.5
    return x


def running(x, y):
    return np.mean(3 * x**2 + y)


def loop(x, n):
    s = x
    for _ in range(n):
        s = s * 0.5 + x
    return s.sum()


def _batch_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _twin(fn):
    """The same function as a distinct object: its own compilation, never profiled."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_twin")


def measure(name, fn, args, repeats: int) -> None:
    profiled, plain = nbxla.jit(fn), nbxla.jit(_twin(fn))
    profiled(*args), plain(*args)
    nbxla.profile(profiled, budget_s=0.05)(*args)       # hooks installed and removed
    comp, inputs = profiled.compiled_inputs(*args)
    cpu = comp.executable.native
    general = type(cpu).run
    per = max(1, int(2e-2 / max(1e-7, _batch_us(lambda: plain(*args), 3) * 1e-6)))
    rows = {"plain": [], "profiled": [], "steps": [], "timed": []}
    for k in range(repeats):                            # interleaved, each first in turn
        order = [("plain", plain), ("profiled", profiled)]
        for label, f in order if k % 2 else order[::-1]:
            rows[label].append(_batch_us(lambda: f(*args), per))
        rows["steps"].append(_batch_us(lambda: general(cpu, inputs), per))
        with timing_hooks(cpu):
            rows["timed"].append(_batch_us(lambda: general(cpu, inputs), per))
    best = {k: min(v) for k, v in rows.items()}
    print(f"{name:<28}{best['plain']:10.2f}{best['profiled']:10.2f}{best['profiled'] / best['plain']:9.2f}"
          f"{best['steps']:10.2f}{best['timed']:10.2f}{best['timed'] / best['steps']:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    print(f"{'program':<28}{'never':>10}{'profiled':>10}{'ratio':>9}{'steps':>10}{'timed':>10}{'ratio':>9}"
          "   (us per call, best of interleaved batches)")
    x = np.ones(128, np.float32)
    measure("chain20 f32[128]", chain, (x,), repeats)
    big = np.ones(1 << 20, np.float32)
    measure("running f32[2^20]", running, (big, big), repeats)
    xs = np.ones(1000, np.float32)
    measure("loop 2000 steps (native)", loop, (xs, 2000), repeats)
    os.environ["NBXLA_NATIVE_LOOPS"] = "0"
    measure("loop 2000 steps (host)", loop, (xs, 2000), repeats)


if __name__ == "__main__":
    main()
