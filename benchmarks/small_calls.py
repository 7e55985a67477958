"""Per-call cost of small programs (issue 30): a 20-operation chain on a 128-element vector
written as a Python loop (``@nbxla.jit`` unrolls it into one fused kernel), against eager NumPy
and ``jax.jit``; and the native loop driver's own overhead per call and per step, from a
rolled loop with a trivial body.

    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/small_calls.py
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/small_calls.py --rounds 9 --calls 20000
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/small_calls.py --clock cpu   # (a busy machine)

``ctypes``: the same programs compiled with kernels and native loops called through ctypes
instead of as built-in functions (runtime/fastcall.py), the before of that change.
Contenders run interleaved, round by round; each figure is the minimum over rounds of the
mean over ``--calls`` calls (the least disturbed estimate on a shared machine).
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import nbxla  # noqa: E402
from nbxla.runtime.fastcall import ctypes_only  # noqa: E402

try:
    import jax
    import jax.numpy as jnp
except ImportError:                     # (a contender, not a dependency)
    jax = None


def chain20(x, xp=np):
    """5 steps of 4 ops (the chain of benchmarks/cpu_workloads.py)."""
    for _ in range(5):
        x = xp.sqrt(xp.abs(x * 0.9 + 0.1))
    return x


def chain10x2(x, xp=np):
    """10 steps of 2 ops."""
    for _ in range(10):
        x = x * 0.9 + 0.05
    return x


def rolled_loop(x, n):
    """A loop over a traced trip count: always an HLO while, run by the native loop driver."""
    for _ in range(n):
        x = x + 1.0
    return x


def one_add(x):
    return x + 1.0


def _twin(fn):
    """The same function as a distinct object: a compilation of its own."""
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_ctypes", fn.__defaults__)


def _ctypes_jit(fn):
    """``nbxla.jit`` of ``fn``'s twin, compiled (on ``args``) with kernels and loops called
    through ctypes rather than as built-in functions (runtime/fastcall.py): the before of
    that change, in the same process."""
    jitted = nbxla.jit(_twin(fn))

    def first(*args):
        with ctypes_only():
            return jitted(*args)
    return jitted, first


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def _per_call_us(fn, args, calls: int) -> float:
    start = _clock()
    for _ in range(calls):
        fn(*args)
    return (_clock() - start) / calls * 1e6


def _measure(contenders: dict, calls: int, rounds: int) -> dict:
    best = {name: float("inf") for name in contenders}
    for r in range(rounds):
        order = list(contenders.items())
        for name, (fn, args) in (order if r % 2 == 0 else order[::-1]):
            best[name] = min(best[name], _per_call_us(fn, args, calls))
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="cpu: the process's CPU time (time.process_time), steadier than wall "
                             "time on a loaded machine (time spent waiting for a core is left out); "
                             "it counts every thread's time, so JAX's runtime threads inflate its column")
    opts = parser.parse_args()
    global _clock
    _clock = CLOCKS[opts.clock]
    x = np.random.default_rng(0).random(128).astype(np.float32)

    print("20-op chains on f32[128] (us per call)")
    for fn in (chain20, chain10x2):
        jitted = nbxla.jit(fn)
        old, compile_old = _ctypes_jit(fn)
        contenders = {"numpy": (fn, (x,)), "nbxla": (jitted, (x,)), "ctypes": (old, (x,))}
        np.testing.assert_allclose(jitted(x), fn(x), rtol=1e-5)
        np.testing.assert_allclose(compile_old(x), fn(x), rtol=1e-5)
        if jax is not None:
            jax_fn = jax.jit(lambda v, f=fn: f(v, jnp))
            xj = jnp.asarray(x)
            jax_fn(xj).block_until_ready()
            contenders["jax"] = (lambda v, f=jax_fn: f(v).block_until_ready(), (xj,))
        best = _measure(contenders, opts.calls, opts.rounds)
        kernels = jitted.last_compilation.stage("optimized_hlo").count(" fusion(")
        row = "  ".join(f"{k} {v:6.2f}" for k, v in best.items())
        print(f"  {fn.__name__:10s} {row}   nbxla/numpy {best['nbxla'] / best['numpy']:.2f}"
              f"   ({kernels} fused kernel{'s' if kernels != 1 else ''})")

    print("\nnative loop driver (f32[1], body x + 1; us per call)")
    one = np.ones(1, np.float32)
    looped, straight = nbxla.jit(rolled_loop), nbxla.jit(one_add)
    (old_looped, compile_looped), (old_straight, compile_straight) = _ctypes_jit(rolled_loop), _ctypes_jit(one_add)
    steps = {n: np.array(n) for n in (1, 1001)}
    for n, trips in steps.items():
        np.testing.assert_allclose(looped(one, trips), one + n)
        np.testing.assert_allclose(compile_looped(one, trips), one + n)
    compile_straight(one)
    assert " while(" in looped.last_compilation.stage("optimized_hlo")
    contenders = {}
    for tag, (s_fn, l_fn) in (("", (straight, looped)), ("ctypes ", (old_straight, old_looped))):
        contenders.update({tag + "straight": (s_fn, (one,)), tag + "loop1": (l_fn, (one, steps[1])),
                           tag + "loop1001": (l_fn, (one, steps[1001]))})
    best = _measure(contenders, opts.calls // 4, opts.rounds)
    for tag in ("", "ctypes "):
        label = "built-in calls" if not tag else "ctypes calls (before)"
        print(f"  {label}")
        print(f"    one add, no loop        {best[tag + 'straight']:6.2f}")
        print(f"    rolled loop, 1 step     {best[tag + 'loop1']:6.2f}   driver overhead per call "
              f"{best[tag + 'loop1'] - best[tag + 'straight']:5.2f}")
        print(f"    rolled loop, 1001 steps {best[tag + 'loop1001']:6.2f}   per step "
              f"{(best[tag + 'loop1001'] - best[tag + 'loop1']) / 1000 * 1e3:5.1f} ns (body kernel included)")


if __name__ == "__main__":
    main()
