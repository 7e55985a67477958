"""Ahead-of-time objects called from C against ``nbxla.jit`` called from Python.

    python benchmarks/aot.py              # small and large inputs, ~1 minute on 2 cores
    python benchmarks/aot.py --quick      # tiny sizes, one repeat: the smoke test
    python benchmarks/aot.py --repeats 9

Method
------
* Each workload is compiled twice from the same NumPy function: ``nbxla.aot.compile`` ->
  ``NAME.o``, linked by ``cc -O2 bench.c NAME.o -lm -lpthread`` into a timing program, and
  ``nbxla.jit`` (compiled before timing).  Both get the same float32 inputs (the C program
  reads them from files written here).
* A sample is ``inner`` back-to-back calls (doubled until a sample lasts >= 20 ms) divided
  by ``inner``: the C program times its calls with ``clock_gettime`` (its start-up and input
  loading are not timed; its inputs are in huge-page memory, as NumPy's large arrays are);
  the jit samples are timed in this process.  Samples alternate
  C, jit, NumPy, C, jit, NumPy ... so that machine noise hits all alike; the table shows
  medians.  Eager NumPy is the reference for the results (``check``) and a third column.
* ``xjit`` = jit's time / the C program's time (> 1: the AOT call is cheaper).  For small
  inputs the difference is the cost of a call from Python (argument checks, cache lookup,
  ctypes, result arrays); for large inputs both run the same kernels and it should be ~1.

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import nbxla  # noqa: E402
import nbxla.aot  # noqa: E402
from nbxla.codegen.aot import C_TYPES  # noqa: E402

SAMPLE_S = 0.02


def running_example(x, y):
    return np.mean(3 * x**2 + y)


def softmax_layer(x, w, b):
    z = x @ w + b
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def workloads(quick: bool):
    """(name, function, argument shapes) for a small and a large input of each function."""
    run_sizes = [(16, 16), (64, 64)] if quick else [(32, 32), (4096, 4096)]
    batches = [4, 64] if quick else [16, 8192]
    out = []
    for kind, shape in zip(("small", "large"), run_sizes):
        out.append((f"running_{kind}", running_example, [shape, shape]))
    for kind, batch in zip(("small", "large"), batches):
        out.append((f"softmax_{kind}", softmax_layer, [(batch, 784), (784, 10), (10,)]))
    return out


_TIMER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include "@NAME@.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Inputs in 2 MiB-aligned memory with transparent huge pages asked for, as NumPy does for
 * large arrays (fewer TLB misses: otherwise the C side reads large inputs slower). */
static void *load(const char *path, size_t n) {
    size_t size = (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    void *p = aligned_alloc(2u << 20, size);
    if (p) madvise(p, size, MADV_HUGEPAGE);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    double sample = atof(argv[1]), t0, elapsed;
@SETUP@
    for (int k = 0; k < 3; k++) if (@CALL@) return 1;       /* warm up */
    long inner = 1;
    for (;;) {          /* double the calls until a batch lasts a sample */
        t0 = now();
        for (long k = 0; k < inner; k++) @CALL@;
        elapsed = now() - t0;
        if (elapsed >= sample) break;
        inner *= 2;
    }
    printf("%.9f\n", elapsed / inner);
@SAVE@
    return 0;
}
"""


def build_timer(obj, directory: str) -> str:
    setup, args, results, save = [], [], [], []
    for k, s in enumerate(obj.arg_shapes):
        setup.append(f"    {C_TYPES[s.element_type]} *a{k} = load(argv[{2 + k}], {s.byte_size});")
        args.append(f"a{k}")
    for k, s in enumerate(obj.result_shapes):
        setup.append(f"    {C_TYPES[s.element_type]} *r{k} = malloc({max(1, s.byte_size)});")
        results.append(f"r{k}")
        save.append(f"    {{ FILE *f = fopen(argv[{2 + len(obj.arg_shapes) + k}], \"wb\"); "
                    f"fwrite(r{k}, 1, {s.byte_size}, f); fclose(f); }}")
    call = f"{obj.name}({', '.join(args + results)})"
    source = _TIMER.replace("@NAME@", obj.name).replace("@SETUP@", "\n".join(setup)) \
        .replace("@CALL@", call).replace("@SAVE@", "\n".join(save))
    main = os.path.join(directory, "bench.c")
    with open(main, "w") as f:
        f.write(source)
    exe = os.path.join(directory, "bench")
    subprocess.run(["cc", "-O2", f"-I{directory}", main, obj.object_path, "-o", exe, "-lm", "-lpthread"],
                   check=True)
    return exe


def per_call(fn, args) -> float:
    """Seconds per call of fn(*args) over a ~SAMPLE_S sample."""
    inner, elapsed = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        elapsed = time.perf_counter() - t0
        if elapsed >= SAMPLE_S or inner >= 1 << 20:
            return elapsed / inner
        inner *= max(2, min(100, int(SAMPLE_S / max(elapsed, 1e-9))))


def run_workload(name, fn, shapes, repeats: int, directory: str):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    work = os.path.join(directory, name)
    os.makedirs(work)
    obj = nbxla.aot.compile(fn, args, work, name)
    exe = build_timer(obj, work)
    inputs = []
    for k, a in enumerate(args):
        inputs.append(os.path.join(work, f"in{k}.bin"))
        a.tofile(inputs[-1])
    outputs = [os.path.join(work, f"out{k}.bin") for k in range(len(obj.result_shapes))]
    jitted = nbxla.jit(fn)
    want = fn(*args)
    got_jit = jitted(*args)
    samples = {"C (AOT)": [], "jit": [], "NumPy": []}
    for _ in range(repeats):
        done = subprocess.run([exe, str(SAMPLE_S), *inputs, *outputs], capture_output=True, text=True, check=True)
        samples["C (AOT)"].append(float(done.stdout.split()[0]))
        samples["jit"].append(per_call(jitted, args))
        samples["NumPy"].append(per_call(fn, args))
    got_c = np.fromfile(outputs[0], obj.result_shapes[0].dtype).reshape(obj.result_shapes[0].dims)
    ok = all(np.allclose(g, want, rtol=1e-4, atol=1e-6) for g in (got_c, got_jit))
    return {k: statistics.median(v) for k, v in samples.items()}, ok, sum(a.nbytes for a in args)


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e6:10.2f} us" if seconds < 1e-3 else f"{seconds * 1e3:10.2f} ms"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (smoke test)")
    parser.add_argument("--repeats", type=int, default=None, help="samples per contender (default 7)")
    opts = parser.parse_args(argv)
    if shutil.which("cc") is None or shutil.which("ld") is None:
        print("skipped: the AOT benchmark needs a C compiler (cc) and ld")
        return 0
    repeats = opts.repeats or (1 if opts.quick else 7)
    print(f"AOT object called from C vs nbxla.jit from Python; medians of {repeats} interleaved samples "
          f"of >= {SAMPLE_S * 1e3:.0f} ms; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
          "(a busy machine inflates every column)\n")
    header = f"{'workload':16} {'input':>10} {'C (AOT)':>13} {'nbxla.jit':>13} {'NumPy':>13} {'xjit':>7} {'xNumPy':>7}  check"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="nbxla-aot-bench-") as directory:
        for name, fn, shapes in workloads(opts.quick):
            times, ok, nbytes = run_workload(name, fn, shapes, repeats, directory)
            size = f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} KB"
            c = times["C (AOT)"]
            print(f"{name:16} {size:>10} {_fmt(c):>13} {_fmt(times['jit']):>13} {_fmt(times['NumPy']):>13} "
                  f"{times['jit'] / c:7.2f} {times['NumPy'] / c:7.2f}  {'ok' if ok else 'MISMATCH'}")
    print("\nxjit, xNumPy: that contender's time / the C program's (> 1: the AOT call is faster).")
    return 0


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main())
