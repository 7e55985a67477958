"""nbxla on a dask cluster: compiled kernels per chunk against the same NumPy code on dask arrays.

    python benchmarks/dask_cluster.py            # 3 x 2**25 float32 in 16 chunks, 5 repeats
    python benchmarks/dask_cluster.py --quick    # 3 x 2**20 (a smoke test, seconds)

Method
------
* A ``dask.distributed.LocalCluster`` of 2 worker processes with one thread each (loopback).
* Inputs: three float32 arrays of ``n`` values in 16 chunks, made on the workers and persisted
  there before timing (input creation is not timed).
* Contenders, same function, same dask inputs: ``dask``: the NumPy code applied to the dask
  arrays (dask's own graph: one task per chunk per operation layer, each running NumPy);
  ``nbxla``: ``nbxla.jit(fn)(x, y, z)`` (one compiled kernel per chunk, plus a compiled tree
  combine for reductions).  Both are warmed up first (nbxla: planning on the client, one
  compile per kernel per worker).  A sample is one call: build the graph (nbxla: from its cached plan), ``client.compute``
  and wait for the result (elementwise results stay on the workers: ``persist`` + ``wait``,
  then ``cancel`` so that the next sample computes them again).
  Contenders alternate within each repeat; the table shows medians.  ``check`` compares
  nbxla's result with dask's.
* ``kernel ms/chunk``: the time the workers spent inside nbxla kernels during nbxla's samples,
  per chunk; ``overhead ms/task``: (2 workers x wall time - kernel time) / tasks, i.e. what
  each task costs beyond its kernel (scheduling, transfers, Python).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import numpy as np


def transcendental(x, y, z):
    return np.sin(x) * np.exp(-y * y) + np.log1p(z * z) * np.tanh(x - z)


def running_example(x, y, z):
    return np.mean(3 * x**2 + y)


def sum_xyz(x, y, z):
    return np.sum(x + y * z)


WORKLOADS = [("transcendental", transcendental), ("running example", running_example),
             ("sum(x+y*z)", sum_xyz)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2**20 values per array")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import nbxla
    from nbxla.dask import explain
    from nbxla.dask.worker import stats

    n = 2**20 if args.quick else 2**25
    chunks = n // 16
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    client = Client(cluster)
    try:
        rng = da.random.default_rng(0)
        x, y, z = (rng.random(n, chunks=chunks, dtype=np.float32) for _ in range(3))
        x, y, z = client.persist([x, y, z])
        wait([x, y, z])
        print(f"2-process LocalCluster (1 thread each); 3 x {n} float32 ({3 * n * 4 / 2**20:.0f} MiB) "
              f"in 16 chunks of {chunks}; medians of {args.repeats} repeats\n")
        header = (f"{'workload':18} {'dask ms':>9} {'nbxla ms':>9} {'x dask':>7} {'tasks d/n':>10} "
                  f"{'kernel ms/chunk':>16} {'overhead ms/task':>17}  check")
        print(header)
        print("-" * len(header))
        explained = []
        for label, fn in WORKLOADS:
            f = nbxla.jit(fn)

            def sample(contender, keep=False):
                start = time.perf_counter()
                out = fn(x, y, z) if contender == "dask" else f(x, y, z)
                if out.ndim:        # the result stays on the workers
                    done = client.persist(out)
                    wait(done)
                    elapsed = time.perf_counter() - start
                    value = done.compute() if keep else None
                    client.cancel(done)     # forget it: the next sample computes it again
                    del done
                else:
                    value = client.compute(out, sync=True)
                    elapsed = time.perf_counter() - start
                return elapsed, value, out
            _, ref, dask_graph = sample("dask", keep=True)
            _, got, nbxla_graph = sample("nbxla", keep=True)        # warm-up: plan and compile
            ok = np.allclose(np.asarray(ref), np.asarray(got), rtol=1e-4, atol=1e-5)
            times = {"dask": [], "nbxla": []}
            kernel_s = 0.0
            for _ in range(args.repeats):
                times["dask"].append(sample("dask")[0])
                before = sum(s["run_s"] for s in client.run(stats).values())
                times["nbxla"].append(sample("nbxla")[0])
                kernel_s += sum(s["run_s"] for s in client.run(stats).values()) - before
            td, tn = statistics.median(times["dask"]), statistics.median(times["nbxla"])
            import dask
            tasks_d = len(dask.optimize(dask_graph)[0].__dask_graph__())     # what runs
            tasks_n = len(dask.optimize(nbxla_graph)[0].__dask_graph__())
            per_chunk = kernel_s / args.repeats / 16 * 1e3
            overhead = (2 * sum(times["nbxla"]) - kernel_s) / args.repeats / tasks_n * 1e3
            print(f"{label:18} {td * 1e3:9.1f} {tn * 1e3:9.1f} {td / tn:7.2f} {tasks_d:>4}/{tasks_n:<5} "
                  f"{per_chunk:16.2f} {overhead:17.2f}  {'ok' if ok else 'DIFFERS'}")
            explained.append((label, explain(f)))
        compiles = client.run(lambda: stats()["compiles"])
        print(f"\nkernels compiled per worker (whole run): {compiles}")
        print("(tasks d/n: tasks in dask's graph / in nbxla's after dask's optimization, inputs "
              "included; kernel time counts the reduction's combine kernels too)\n")
        label, text = explained[0]
        print(f"nbxla.dask.explain for {label}:\n{text}")
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    main()
