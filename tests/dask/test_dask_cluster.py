"""``nbxla.jit`` on dask arrays, computed on a real 2-process LocalCluster.

Every result is checked against NumPy on the computed arrays, and is a dask array before it is
computed.  Blocks are small: what is tested is the split, not the speed.
"""

import os
import signal
import time

import numpy as np
import pytest

import nbxla
import nbxla.dask as nd

dask = pytest.importorskip("dask", reason="dask is not installed (pip install nbxla[dask])")

da = pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install nbxla[dask])")

RNG = np.random.default_rng(23)


def rand(shape, dtype=np.float32):
    return RNG.random(shape).astype(dtype)


def run(client, fn, *args, rtol=1e-5, atol=1e-6):
    """``jit(fn)(*args)`` computed on the cluster, compared with ``fn`` on NumPy inputs."""
    f = nbxla.jit(fn)
    out = f(*args)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(isinstance(o, da.Array) for o in outs), [type(o) for o in outs]
    got = client.compute(list(outs), sync=True)
    ref = fn(*[a.compute() if isinstance(a, da.Array) else a for a in args])
    refs = ref if isinstance(ref, tuple) else (ref,)
    for g, r in zip(got, refs):
        assert g.shape == np.shape(r) and g.dtype == np.asarray(r).dtype
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return f, outs


def test_running_example_is_one_kernel_per_chunk_and_a_compiled_combine(client):
    xn, yn = rand(10_000), rand(10_000)
    x, y = da.from_array(xn, chunks=1250), da.from_array(yn, chunks=1250)
    f, (out,) = run(client, lambda x, y: np.mean(3 * x**2 + y), x, y)
    report = nd.explain(f)
    assert "stage 0: nbxla-fused-" in report and "8 task(s)" in report
    assert "dask.array.reduction" in report
    assert any(str(k[0] if isinstance(k, tuple) else k).startswith("nbxla-fused-")
               for k in out.__dask_graph__().keys())
    assert any(str(k[0] if isinstance(k, tuple) else k).startswith("nbxla-fused-")
               and "-combine" in str(k[0] if isinstance(k, tuple) else k)
               for k in out.__dask_graph__().keys())
    optimized = dask.optimize(out)[0].__dask_graph__()         # dask fuses our blockwise layer
    assert len(optimized) < len(out.__dask_graph__())
    fused = [k for k in optimized if str(k[0] if isinstance(k, tuple) else k).startswith("nbxla-fused-")]
    # 8 tasks (kernel fused with the tree's per-chunk step) + 1 (the combine fused with stage 1)
    assert len(fused) == 8 + 1
    assert nd.last_plan(f).task_count == len(out.__dask_graph__())


def test_sum_of_three_arrays(client):
    x, y, z = (da.from_array(rand(9_000), chunks=1000) for _ in range(3))
    f, _ = run(client, lambda x, y, z: np.sum(x + y * z), x, y, z)
    plan = nd.last_plan(f)
    assert [len(sp.calls) for sp in plan.stages] == [9]     # one kernel per chunk, nothing after
    assert len(plan.stages[0].kernels) == 1


def test_softmax_along_the_unchunked_axis_stays_in_its_block(client):
    x = da.from_array(rand((64, 33)), chunks=(16, 33))

    def softmax(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    f, _ = run(client, softmax, x)
    plan = nd.last_plan(f)
    assert len(plan.stages) == 1 and len(plan.stages[0].calls) == 4
    assert "dask op" not in nd.explain(f)


def test_column_mean_and_std_over_a_chunked_axis(client):
    x = da.from_array(rand((70, 30)), chunks=(16, 12))
    f, outs = run(client, lambda x: (x.mean(axis=0), x.std(axis=0)), x)
    assert [o.chunks for o in outs] == [((12, 12, 6),)] * 2
    assert nd.explain(f).count("dask.array.reduction") >= 2


def test_matmul_contracting_a_chunked_axis(client):
    a = da.from_array(rand((40, 30)), chunks=(20, 12))
    b = da.from_array(rand((30, 20)), chunks=(12, 10))
    f, _ = run(client, lambda a, b: a @ b, a, b, rtol=1e-4)
    assert "dot over" in nd.explain(f)


def test_stencil_reads_a_halo_through_dask_overlap(client):
    u = da.from_array(rand((40, 31)), chunks=(10, 31))

    def laplace(u):
        return u[1:-1, 2:] + u[1:-1, :-2] + u[2:, 1:-1] + u[:-2, 1:-1] - 4 * u[1:-1, 1:-1]
    f, (out,) = run(client, laplace, u)
    assert "halo: u dim 0 reads 0 before / 2 after" in nd.explain(f)
    assert any("overlap" in str(k[0] if isinstance(k, tuple) else k) for k in out.__dask_graph__())


def test_mixed_numpy_scalar_and_dask_arguments(client):
    x = da.from_array(rand((50, 20)), chunks=(10, 20))
    w = rand(20)
    f, _ = run(client, lambda x, w, s, alpha: np.sum(x * w + s, axis=1) * alpha,
               x, w, np.float32(2.0), 0.5)


def test_elementwise_between_differently_chunked_arguments_rechunks_one(client):
    x = da.from_array(rand(1000), chunks=100)
    y = da.from_array(rand(1000), chunks=250)
    f, _ = run(client, lambda x, y: np.sin(x) * y, x, y)
    assert "rechunked y" in nd.explain(f)


def test_sort_along_a_chunked_axis_makes_it_whole_and_says_so(client):
    x = da.from_array(rand((40, 30)), chunks=(10, 15))
    f, _ = run(client, lambda x: np.sort(x, axis=0) * 2, x)
    report = nd.explain(f)
    assert "rechunked x to one block along axis 0" in report and "sort" in report


def test_an_axis_too_big_to_make_whole_is_an_error_naming_the_line(monkeypatch):
    import nbxla.dask.plan as plan
    monkeypatch.setattr(plan, "MAX_WHOLE_BLOCK_BYTES", 1000)
    x = da.from_array(rand((400, 30)), chunks=(10, 15))
    with pytest.raises(nbxla.NbxlaError) as info:
        nbxla.jit(lambda x: np.cumsum(x, axis=0))(x)
    message = str(info.value)
    assert "test_dask_cluster.py:" in message and "reduce-window" in message
    assert "rechunk" in message


def test_writing_into_a_dask_argument_is_refused():
    def f(x):
        x += 1
        return x
    with pytest.raises(nbxla.NbxlaError, match="dask arrays cannot change in place"):
        nbxla.jit(f)(da.ones(10, chunks=5))


def test_a_second_call_compiles_nothing_on_any_worker(client):
    # 40 chunks: dask's tree reduction combines partials in two levels
    x = da.from_array(rand((4_000, 6)), chunks=(100, 6))
    y = da.from_array(rand((4_000, 6)), chunks=(100, 6))
    f = nbxla.jit(lambda x, y: (np.tanh(x) * np.log1p(y) + np.sum(x, axis=0), np.max(x * y, axis=0)))
    lazy = f(x, y)                # plans, and compiles every kernel once on every worker
    after_call = nd.worker_compile_counts(client)
    assert len(after_call) == 2 and all(n > 0 for n in after_call.values())
    first = client.compute(list(lazy), sync=True)
    assert nd.worker_compile_counts(client) == after_call       # every combine shape foreseen
    x2, y2 = x + 1, y * 2         # new arrays, same shapes/chunks: the same kernels
    second = client.compute(list(f(x2, y2)), sync=True)
    assert nd.worker_compile_counts(client) == after_call
    xn, yn = x2.compute(), y2.compute()
    np.testing.assert_allclose(second[0], np.tanh(xn) * np.log1p(yn) + np.sum(xn, axis=0), rtol=1e-5)
    np.testing.assert_allclose(second[1], np.max(xn * yn, axis=0), rtol=1e-6)
    assert not np.allclose(first[0], second[0])
    assert "kernels compiled ahead on each worker" in nd.explain(f)


def test_a_worker_killed_mid_computation_is_recovered(client):
    f = nbxla.jit(lambda x: np.sum(np.exp(np.sin(x)) * np.cos(x) + np.tanh(x) * np.log1p(x)))
    killed = False
    for attempt in range(3):        # (a fast machine may finish before the kill: try again)
        # 64 blocks, made on the workers (a 16 MiB array would travel inside the graph)
        x = client.persist(da.random.default_rng(attempt).random(2**22, chunks=2**16, dtype=np.float32))
        xn = x.compute()
        future = client.compute(f(x))
        victim = sorted(client.scheduler_info()["workers"])[0]
        pid = client.run(os.getpid, workers=[victim])[victim]
        deadline = time.time() + 30
        while time.time() < deadline and not future.done():
            # wait until the victim holds a result of one of our kernels
            held = client.run_on_scheduler(
                lambda dask_scheduler, w=victim: sum(
                    1 for ts in dask_scheduler.workers[w].has_what if "nbxla-fused" in str(ts.key)))
            if held:
                break
            time.sleep(0.005)
        if not future.done():
            os.kill(pid, signal.SIGKILL)      # the worker process dies; its nanny starts a new one
            killed = True
        want = np.sum(np.exp(np.sin(xn)) * np.cos(xn) + np.tanh(xn) * np.log1p(xn))
        np.testing.assert_allclose(future.result(timeout=120), want, rtol=1e-4)
        client.wait_for_workers(2, timeout=60)
        if killed:
            break
    assert killed, "the computation always finished before the worker could be killed"


def test_benchmark_script_runs_quick():
    """benchmarks/dask_cluster.py --quick completes and prints its table (no timing asserted)."""
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("distributed")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "dask_cluster.py"), "--quick",
                           "--repeats", "1"], capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.endswith(("ok", "DIFFERS"))]
    assert len(rows) == 3 and all(row[-1] == "ok" for row in rows), proc.stdout
    assert "nbxla-fused-transcendental" in proc.stdout
