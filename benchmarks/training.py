"""One SGD step of an MLP classifier: nbxla.jit against jax.jit and eager execution.

    python benchmarks/training.py                 # MLP 784-256-10, batch 128, float32
    python benchmarks/training.py --quick         # small sizes, few repeats (smoke test)
    python benchmarks/training.py --repeats 31 --explain
    python benchmarks/training.py --blas-threads 1  # NumPy's BLAS on one thread (busy machines)

The step (the same NumPy code for every nbxla contender): ReLU hidden layer, softmax
cross-entropy against integer labels, ``nbxla.value_and_grad``, parameters minus 0.1 times
their gradients; it returns the loss and the new parameters.  Contenders, in one process on
the same float32 inputs, sampled round-robin (order rotated each repeat), medians shown:

* ``nbxla.jit``: the whole step (forward, backward, update) as one compiled program;
* ``jax.jit``: the same step written with ``jax.numpy`` and ``jax.value_and_grad`` (when JAX
  is installed; inputs already on the device, ``block_until_ready``);
* ``grad compiled alone``: the step run as Python, its ``value_and_grad`` compiled on its
  own and the update done by NumPy (what calling the step without ``jit`` gives);
* ``eager (evaluator)``: forward and backward executed op by op by the reference evaluator
  (NumPy per HLO instruction) and the update by NumPy: per-op execution, no compilation;
* ``NumPy backprop``: a hand-written NumPy forward and backward pass, for scale.

Every contender's new parameters are checked against NumPy backprop's.  Printed: the table,
the ratio of JAX's time to nbxla's (> 1: nbxla faster; the target is >= 0.9), the kernel
count of nbxla's optimized step (and of XLA's, counted the same way, when JAX is there) and
nbxla's fusion report with ``--explain``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))          # kernel_counts

# --blas-threads N must reach the BLAS library before NumPy loads it (on an oversubscribed
# machine, OpenBLAS's spinning threads can make every matmul 20x slower).
for _i, _arg in enumerate(sys.argv[1:], 1):
    if _arg.startswith("--blas-threads"):
        _n = _arg.split("=", 1)[1] if "=" in _arg else (sys.argv[_i + 1] if _i + 1 < len(sys.argv) else "")
        for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[_var] = _n

import numpy as np  # noqa: E402

import nbxla  # noqa: E402

LR = 0.1


def loss_fn(params, x, labels):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0)
    z = h @ w2 + b2
    m = z.max(axis=1, keepdims=True)
    logp = z - (np.log(np.sum(np.exp(z - m), axis=1, keepdims=True)) + m)
    return -np.mean(np.take_along_axis(logp, labels[:, None], axis=1))


def make_step(value_and_grad):
    def step(params, x, labels):
        loss, grads = value_and_grad(params, x, labels)
        return loss, [p - LR * g for p, g in zip(params, grads)]
    return step


def numpy_backprop(params, x, labels):
    w1, b1, w2, b2 = params
    a = x @ w1 + b1
    h = np.maximum(a, 0)
    z = h @ w2 + b2
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -np.mean((z - m - np.log(s))[np.arange(n), labels])
    dz = e / s
    dz[np.arange(n), labels] -= 1
    dz /= n
    dw2, db2 = h.T @ dz, dz.sum(axis=0)
    da = (dz @ w2.T) * (a > 0)
    dw1, db1 = x.T @ da, da.sum(axis=0)
    return loss, [p - LR * g for p, g in zip(params, (dw1, db1, dw2, db2))]


def jax_step():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def jloss(params, x, labels):
        w1, b1, w2, b2 = params
        h = jnp.maximum(x @ w1 + b1, 0)
        z = h @ w2 + b2
        m = z.max(axis=1, keepdims=True)
        logp = z - (jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True)) + m)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    @jax.jit
    def step(params, x, labels):
        loss, grads = jax.value_and_grad(jloss)(params, x, labels)
        return loss, [p - LR * g for p, g in zip(params, grads)]

    def run(params, x, labels):
        return jax.block_until_ready(step(params, x, labels))
    run.compiled_text = lambda *args: step.lower(*args).compile().as_text()
    return run, jax


def xla_kernel_count(hlo_text: str) -> str:
    """Kernels in XLA's optimized step, counted as benchmarks/kernel_counts.py counts them."""
    from kernel_counts import describe, entry_kernels

    from nbxla.hlo.parser import parse_hlo
    ops = entry_kernels(parse_hlo(hlo_text, "<jax step>"))
    return f"{len(ops)} ({describe(ops)})"


def timed(call, min_seconds=0.02):
    """Seconds per call: enough back-to-back calls to last ``min_seconds``."""
    n, start = 0, time.perf_counter()
    while True:
        call()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--explain", action="store_true", help="print nbxla's fusion report")
    ap.add_argument("--blas-threads", type=int, help="threads of NumPy's BLAS (set before import)")
    args = ap.parse_args(argv)
    sizes = (64, 32, 10, 16) if args.quick else (784, 256, 10, 128)
    repeats = 3 if args.quick else args.repeats
    d_in, d_hidden, d_out, batch = sizes

    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)).astype(np.float32),
              np.zeros(d_hidden, np.float32),
              (rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)).astype(np.float32),
              np.zeros(d_out, np.float32)]
    x = rng.standard_normal((batch, d_in)).astype(np.float32)
    labels = rng.integers(0, d_out, batch)

    nb_step = nbxla.jit(make_step(nbxla.value_and_grad(loss_fn)))
    start = time.perf_counter()
    nb_step(params, x, labels)
    compile_s = time.perf_counter() - start
    contenders = {
        "nbxla.jit": lambda: nb_step(params, x, labels),
        "grad compiled alone": (lambda s=make_step(nbxla.value_and_grad(loss_fn)): s(params, x, labels)),
        "eager (evaluator)": (lambda s=make_step(nbxla.value_and_grad(loss_fn, device="evaluator")):
                              s(params, x, labels)),
        "NumPy backprop": lambda: numpy_backprop(params, x, labels),
    }
    jax_parts = jax_step()
    if jax_parts is not None:
        run_jax, jax = jax_parts
        jparams = [jax.device_put(p) for p in params]
        jx, jl = jax.device_put(x), jax.device_put(labels.astype(np.int32))
        contenders["jax.jit"] = lambda: run_jax(jparams, jx, jl)

    ref_loss, ref = numpy_backprop(params, x, labels)
    checks = {}
    for name, call in contenders.items():
        loss, new = call()
        ok = np.allclose(float(loss), ref_loss, rtol=1e-4) and all(
            np.allclose(np.asarray(a), b, rtol=1e-3, atol=1e-5) for a, b in zip(new, ref))
        checks[name] = "ok" if ok else "MISMATCH"

    samples = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(timed(contenders[name]))
    med = {name: statistics.median(v) for name, v in samples.items()}

    comp = nb_step.last_compilation
    report = comp.fusion_report
    kernels = len(report.kernels)
    print(f"MLP {d_in}-{d_hidden}-{d_out} SGD step, batch {batch}, float32; medians of {repeats} "
          f"interleaved samples; load average {os.getloadavg()[0]:.2f}; "
          f"BLAS threads: {os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
    print(f"{'contender':<22} {'time (us)':>11} {'x nbxla':>8}  check")
    for name in names:
        print(f"{name:<22} {med[name] * 1e6:>11.1f} {med[name] / med['nbxla.jit']:>8.2f}  {checks[name]}")
    if "jax.jit" in med:
        print(f"\nJAX step / nbxla step = {med['jax.jit'] / med['nbxla.jit']:.2f} "
              f"(target >= 0.9: nbxla at most 1/0.9 of JAX's time)")
    print(f"nbxla: {kernels} kernels in the optimized step "
          f"({sum(1 for k in report.kernels if 'library' in k.kind)} library calls); "
          f"first call (trace + optimize + codegen) {compile_s * 1e3:.0f} ms")
    if jax_parts is not None:
        print(f"XLA (jax.jit on this CPU): {xla_kernel_count(run_jax.compiled_text(jparams, jx, jl))} "
              "kernels in its optimized step")
    if args.explain:
        print(report.to_text())
    return 0 if all(v == "ok" for v in checks.values()) else 1


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main())
