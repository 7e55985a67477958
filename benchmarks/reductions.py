"""Reductions beyond the row and full ones: middle axes, wide columns, argmax of a whole array.

    python benchmarks/reductions.py            # float32, medians of 15 interleaved samples
    python benchmarks/reductions.py --quick    # small sizes (seconds)

NumPy, ``jax.jit`` (when installed; inputs on the device, compile excluded) and ``nbxla.jit``
on the same inputs, sampled round-robin; each result is checked against NumPy's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import nbxla

CASES = [  # (name, shape, function of (x, xp))
    ("sum axis=1", (8, 64, 1000), lambda x, xp: x.sum(axis=1)),
    ("sum axis=1", (64, 256, 1024), lambda x, xp: x.sum(axis=1)),
    ("mean axis=(2,3)", (16, 3, 224, 224), lambda x, xp: x.mean(axis=(2, 3))),
    ("sum axis=2", (16, 3, 224, 224), lambda x, xp: x.sum(axis=2)),
    ("sum axis=0", (2048, 3000), lambda x, xp: x.sum(axis=0)),
    ("sum axis=0", (256, 100000), lambda x, xp: x.sum(axis=0)),
    ("argmax", (4096, 4096), lambda x, xp: xp.argmax(x)),
    ("argmax axis=1", (4096, 4096), lambda x, xp: xp.argmax(x, axis=1)),
    ("argmax axis=0", (4096, 4096), lambda x, xp: xp.argmax(x, axis=0)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_platforms", "cpu")
    except ImportError:
        jax = None
    print(f"nbxla {nbxla.__version__}, NumPy {np.__version__}, JAX {jax.__version__ if jax else 'not installed'}")
    print(f"{'reduction':<16} {'shape':<20} {'NumPy':>10} {'JAX':>10} {'nbxla':>10} {'xNumPy':>7} {'xJAX':>6}  check")
    rng = np.random.default_rng(0)
    for name, shape, fn in CASES:
        if args.quick:
            shape = tuple(max(2, n // 16) for n in shape)
        x = rng.standard_normal(shape).astype(np.float32)
        contenders = {"NumPy": lambda x=x, fn=fn: fn(x, np)}
        f = nbxla.jit(lambda a, fn=fn: fn(a, np))
        contenders["nbxla"] = lambda x=x, f=f: f(x)
        if jax is not None:
            jf, xd = jax.jit(lambda a, fn=fn: fn(a, jnp)), jax.device_put(x)
            contenders["JAX"] = lambda xd=xd, jf=jf: jf(xd).block_until_ready()
        want = fn(x, np)
        check = "ok" if np.allclose(f(x), want, rtol=1e-4, atol=1e-4) else "DIFF"
        samples = {k: [] for k in contenders}
        for c in contenders.values():
            c()                                             # warm up (and compile)
        for _ in range(args.repeats):
            for k, c in contenders.items():
                start = time.perf_counter()
                c()
                samples[k].append(time.perf_counter() - start)
        t = {k: float(np.median(v)) for k, v in samples.items()}
        jax_t = f"{t['JAX'] * 1e3:8.3f}ms" if "JAX" in t else f"{'-':>10}"
        x_jax = f"{t['JAX'] / t['nbxla']:6.2f}" if "JAX" in t else f"{'-':>6}"
        print(f"{name:<16} {str(shape):<20} {t['NumPy'] * 1e3:8.3f}ms {jax_t} {t['nbxla'] * 1e3:8.3f}ms "
              f"{t['NumPy'] / t['nbxla']:7.2f} {x_jax}  {check}")


if __name__ == "__main__":
    main()
