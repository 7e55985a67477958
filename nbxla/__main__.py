"""``python -m nbxla``: run an HLO file (``run-hlo``) or show the running example (``demo``).

``run-hlo`` is modelled on XLA's ``run_hlo_module``: a bug report is one HLO file, one ``.npz``
and one command.  Exit codes: 0 all good, 1 results differ from the expected outputs,
2 the input could not be used (parse error, unsupported op, bad inputs file).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import NbxlaError
from .testing import compare_arrays


def _run_evaluator(module, args: list) -> list[np.ndarray]:
    from .hlo.evaluator import evaluate, flatten
    return flatten(evaluate(module, args))


def _run_cpu(module, args: list) -> list[np.ndarray]:
    """Optimize and compile ``module`` for the CPU backend (LLVM), then run it.

    Prints the compile time and, for each fusion, whether it runs as a native kernel or is
    interpreted by the evaluator's rule (with the code generator's reason).
    """
    from .compiler import compile_module

    t0 = time.perf_counter()
    compilation = compile_module(module, "cpu")
    t_compile = time.perf_counter() - t0
    fusions = [i.name for i in compilation.optimized.entry.instructions if i.opcode == "fusion"]
    interpreted = dict(compilation.executable.native.interpreted)
    timings = compilation.timings_ms
    print(f"compiled for {compilation.backend} in {t_compile * 1e3:.1f} ms (optimize "
          f"{timings['optimize']:.1f} ms, codegen {timings['codegen']:.1f} ms): {len(fusions)} "
          f"fusion(s), {len(fusions) - len(interpreted)} native, {len(interpreted)} interpreted")
    for name, why in interpreted.items():
        print(f"  interpreted %{name}: {why}")
    t0 = time.perf_counter()
    results = compilation.executable.run(args)
    print(f"executed in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    return results


# Backend name -> run(module, args) -> flattened results.  The CUDA backend plugs in here.
BACKENDS: dict[str, Callable] = {"evaluator": _run_evaluator, "cpu": _run_cpu}

class _UsageError(NbxlaError):
    """A bad command line or inputs file (exit code 2, like a parse error)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nbxla", description="nbxla command line: run HLO files, show the running example.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run-hlo", help="parse and run an HLO text file, optionally checking outputs",
                         description="Parse FILE.hlo, run its entry computation and print each "
                         "result; with out0, out1, ... in the inputs file, compare against them.")
    run.add_argument("file", metavar="FILE.hlo")
    run.add_argument("--inputs", metavar="FILE.npz",
                     help="entry parameters as in0, in1, ... (and optionally expected outputs "
                     "out0, out1, ...); without it, deterministic random inputs are used")
    run.add_argument("--backend", choices=sorted(BACKENDS), default="evaluator")
    run.add_argument("--rtol", type=float, help="relative tolerance for every float output")
    run.add_argument("--atol", type=float, help="absolute tolerance for every float output")
    run.set_defaults(func=run_hlo)

    demo = sub.add_parser("demo", help="build and run the running example mean(3*x**2 + y)")
    demo.add_argument("--size", type=int, default=2048, help="x and y are f32[SIZE,SIZE] (default 2048)")
    demo.add_argument("--repeats", type=int, default=5, help="timed runs per contender (default 5)")
    demo.set_defaults(func=run_demo)

    opts = parser.parse_args(argv)
    try:
        return opts.func(opts)
    except NbxlaError as e:
        # Errors for people: the message already says where (file:line:column) and what to do.
        print(f"error: {e}", file=sys.stderr)
        return 2


# --- run-hlo --------------------------------------------------------------------------------

def run_hlo(opts) -> int:
    from .hlo.parser import parse_hlo

    path = Path(opts.file)
    try:
        text = path.read_text()
    except OSError as e:
        raise _UsageError(f"cannot read {path}: {e.strerror}") from None
    t0 = time.perf_counter()
    module = parse_hlo(text, str(path))
    t_parse = time.perf_counter() - t0

    params = module.entry.parameters
    data = _load_npz(opts.inputs) if opts.inputs else {}
    args = _inputs(params, data, opts.inputs)

    t0 = time.perf_counter()
    results = BACKENDS[opts.backend](module, args)
    t_run = time.perf_counter() - t0
    print(f"{path}: module {module.name}, {len(params)} parameter(s); parsed in {t_parse * 1e3:.1f} ms, "
          f"ran on {opts.backend} in {t_run * 1e3:.1f} ms"
          + (" (compilation included)" if opts.backend == "cpu" else ""))
    for i, r in enumerate(results):
        print(f"  result {i}: {_shape_text(r)}  {_summary(r)}")

    expected = _numbered(data, "out")
    if not expected:
        return 0
    return _compare(results, expected, opts.rtol, opts.atol)


def _load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("it is a single array, not an .npz archive of in0, in1, ...")
        with npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise _UsageError(f"cannot read inputs file {path}: {e}") from None


def _numbered(data: dict, prefix: str) -> list[np.ndarray]:
    out = []
    while f"{prefix}{len(out)}" in data:
        out.append(data[f"{prefix}{len(out)}"])
    return out


def _inputs(params, data: dict, source: str | None) -> list:
    given = _numbered(data, "in")
    if not given:
        if params:
            why = f"{source} has no in0, in1, ..." if source else "no --inputs given"
            print(f"note: {why}; using deterministic random inputs (seed 0)")
        rng = np.random.default_rng(0)
        return [_random_value(p.shape, rng) for p in params]
    if len(given) != len(params):
        raise _UsageError(f"{source} holds {len(given)} inputs (in0..in{len(given) - 1}) but the "
                          f"entry computation takes {len(params)} parameters")
    for i, (p, arr) in enumerate(zip(params, given)):
        if p.shape.is_tuple:
            raise _UsageError(f"parameter {i} is a tuple {p.shape}: the inputs file can only "
                              "hold arrays; run without --inputs to use random values")
        if arr.dtype != p.shape.dtype or arr.shape != p.shape.dims:
            raise _UsageError(f"in{i} is {_shape_text(arr)} but parameter {i} (%{p.name}) is "
                              f"{p.shape.to_text(with_layout=False)}")
    return given


def _random_value(shape, rng):
    """Small values of the right type: wide enough to exercise the op, not to overflow it."""
    if shape.is_tuple:
        return tuple(_random_value(s, rng) for s in shape.elements)
    dt, dims = shape.dtype, shape.dims
    if dt == np.bool_:
        return rng.random(dims) < 0.5
    if dt.kind in "iu":
        low = 0 if dt.kind == "u" else -10
        return rng.integers(low, 11, size=dims).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dt)
    return rng.standard_normal(dims).astype(dt)


def _shape_text(arr: np.ndarray) -> str:
    from .hlo.shapes import shape_of
    return shape_of(arr).to_text(with_layout=False)


def _summary(arr: np.ndarray) -> str:
    arr = np.asarray(arr)
    if arr.size == 0:
        return "(empty)"
    if arr.size <= 4:
        return "values " + np.array2string(arr.ravel(), separator=", ", precision=6)
    if arr.dtype == np.bool_:
        return f"{int(arr.sum())} of {arr.size} true"
    if arr.dtype.kind == "c":
        return f"mean={arr.mean():.6g}"
    with np.errstate(all="ignore"):  # NaN/Inf in results are reported, not warned about
        return f"min={arr.min():.6g} max={arr.max():.6g} mean={arr.mean(dtype=np.float64):.6g}"


def _compare(results, expected, rtol, atol) -> int:
    failures = 0
    if len(results) != len(expected):
        print(f"FAIL: {len(results)} result(s) but {len(expected)} expected output(s)")
        failures += 1
    for i, (got, want) in enumerate(zip(results, expected)):
        ok, detail = compare_arrays(got, want, rtol, atol)
        failures += not ok
        print(f"  out{i} {_shape_text(want)}: {'PASS' if ok else 'FAIL'}  {detail}")
    n = min(len(results), len(expected))
    print("all outputs match" if not failures else f"MISMATCH: {failures} problem(s) over {n} compared output(s)")
    return 1 if failures else 0


# --- demo ------------------------------------------------------------------------------------

def running_example(n: int):
    """The seeds' running example ``mean(3 * x**2 + y)`` on f32[n, n], built by hand.

    Until the frontend can trace NumPy code this is written with the Builder, in the shape
    JAX lowers it to (x**2 becomes multiply(x, x)).
    """
    from .hlo import Builder, Module, Shape, scalar_computation

    b = Builder("running_example")
    shape = Shape("f32", (n, n))
    x, y = b.parameter(shape, "x"), b.parameter(shape, "y")
    x2 = b.op("multiply", x, x)
    three = b.broadcast(b.constant(3.0, "f32"), (n, n))
    total = b.reduce(b.op("add", b.op("multiply", x2, three), y), b.constant(0.0, "f32"),
                     dimensions=(0, 1), reducer=scalar_computation("add", "f32"))
    mean = b.op("divide", total, b.constant(float(n * n), "f32"))
    return Module("running_example", b.build(mean))


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def run_demo(opts) -> int:
    from .hlo.evaluator import evaluate
    from .hlo.graphviz import to_dot

    n = opts.size
    if n < 1:
        raise _UsageError("--size must be at least 1")
    print(f"Running example: mean(3 * x**2 + y) with x, y: f32[{n},{n}]\n")
    module = running_example(n)
    print("== stage hlo ==")
    print(str(module))
    dot = to_dot(module).splitlines()
    print(f"== stage hlo_dot == ({len(dot)} lines of Graphviz DOT, one node per instruction; "
          "`dot -Tsvg` renders it)")
    body = [line for line in dot if "[label=" in line]  # skip the graph's header lines
    print("\n".join(body[:4] + ["  ..."]))
    print()

    rng = np.random.default_rng(0)
    x = rng.random((n, n), dtype=np.float32)
    y = rng.random((n, n), dtype=np.float32)
    t_ref, got = _median_time(lambda: evaluate(module, [x, y]), opts.repeats)
    t_np, want = _median_time(lambda: np.mean(3 * x**2 + y), opts.repeats)
    got, want = np.asarray(got), np.asarray(want)
    ok, detail = compare_arrays(got, want)
    print(f"== run (median of {opts.repeats}) ==")
    print(f"  nbxla evaluator : {got.item():.7g}  {t_ref * 1e3:9.2f} ms")
    print(f"  eager NumPy     : {want.item():.7g}  {t_np * 1e3:9.2f} ms")
    print(f"  {'match' if ok else 'MISMATCH'}: {detail}")
    print("\nThe evaluator is nbxla's reference interpreter (the oracle every backend is checked\n"
          "against), not the compiled path: fused native code comes with the CPU backend.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
