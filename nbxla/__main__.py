"""``python -m nbxla``: run an HLO file (``run-hlo``), show the running example (``demo``), or
compile a function ahead of time into an object file and a C header (``aot``).

``run-hlo`` is modelled on XLA's ``run_hlo_module``: a bug report is one HLO file, one ``.npz``
and one command.  Exit codes: 0 all good, 1 results differ from the expected outputs,
2 the input could not be used (parse error, unsupported op, bad inputs file).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import NbxlaError
from .hlo.shapes import LOW_PRECISION_DTYPES
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
    native = compilation.executable.native
    # Fusions of every program: the entry, loop bodies and conditions, branches.
    fusions = [i.name for p in native.programs.values() for i in p.computation.instructions
               if i.opcode == "fusion"]
    interpreted = dict(native.interpreted)
    timings = compilation.timings_ms
    print(f"compiled for {compilation.backend} in {t_compile * 1e3:.1f} ms (optimize "
          f"{timings['optimize']:.1f} ms, codegen {timings['codegen']:.1f} ms): {len(fusions)} "
          f"fusion(s), {len(fusions) - len(interpreted)} native, {len(interpreted)} interpreted")
    for name, why in interpreted.items():
        print(f"  interpreted %{name}: {why}")
    for name, why in native.interpreted_ops.items():
        print(f"  interpreted %{name} (not a fusion): {why}")
    if native.library_calls:
        print("  library calls: " + ", ".join(f"%{n} ({op})" for n, op in native.library_calls.items()))
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
        prog="python -m nbxla", description="nbxla command line: run HLO files, show the running example, "
        "compile ahead of time, profile a function.")
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
    run.add_argument("--no-fill-elided", dest="fill_elided", action="store_false",
                     help="refuse constants printed without their values ({...}) instead of filling "
                     "them with deterministic stand-in values (the default, said on stderr)")
    run.set_defaults(func=run_hlo)

    demo = sub.add_parser("demo", help="build and run the running example mean(3*x**2 + y)")
    demo.add_argument("--size", type=int, default=2048, help="x and y are f32[SIZE,SIZE] (default 2048)")
    demo.add_argument("--repeats", type=int, default=5, help="timed runs per contender (default 5)")
    demo.set_defaults(func=run_demo)

    aot = sub.add_parser("aot", help="compile a function ahead of time into NAME.o + NAME.h (no Python at run time)",
                         description="Trace FILE.py:FUNC for the given argument specs (or take the entry "
                         "computation of FILE.hlo), optimize it and write DIR/NAME.o and DIR/NAME.h; "
                         "link with: cc main.c DIR/NAME.o -lm -lpthread")
    aot.add_argument("target", metavar="FILE.py:FUNC|FILE.hlo")
    aot.add_argument("--arg", action="append", default=[], metavar="SPEC",
                     help="an argument's type in HLO's spelling, in order: f32[16,784], s64[], pred[3]; "
                          "? for the unknown size b the C function takes first: f32[?,784]; ?NAME for "
                          "another unknown size: f32[?m,?n]")
    aot.add_argument("-o", "--out-dir", default=".", metavar="DIR", help="where to write NAME.o and NAME.h")
    aot.add_argument("--name", help="the C function's name (default: FUNC, or the HLO module's name)")
    aot.add_argument("--cpu", default="host",
                     help="target CPU: host (default: this machine's) or a name such as x86-64, x86-64-v3")
    aot.add_argument("--emit-llvm", action="store_true", help="also write the optimized kernels' IR (NAME.ll)")
    aot.add_argument("--emit-asm", action="store_true", help="also write the kernels' assembly (NAME.s)")
    aot.add_argument("--emit-c", action="store_true", help="also write the generated driver (NAME.driver.c)")
    aot.set_defaults(func=run_aot)

    prof = sub.add_parser("profile", help="run a function compiled, with per-kernel timing: why is it (not) faster",
                          description="Compile FILE.py:FUNC for the given argument specs, run it on "
                          "deterministic random inputs with per-kernel timing, and print the profile: "
                          "time per kernel and per source line, each kernel against this machine's "
                          "bandwidth and peak flops with a verdict, loop and fusion decisions per line.")
    prof.add_argument("target", metavar="FILE.py:FUNC")
    prof.add_argument("--arg", action="append", default=[], metavar="SPEC",
                      help="an argument's type in HLO's spelling, in order: f32[1024,1024], s64[]")
    prof.add_argument("--runs", type=int, default=3, help="timed runs at least (default 3; more while under 0.3 s)")
    prof.add_argument("--json", action="store_true", help="print the profile as JSON instead of text")
    prof.set_defaults(func=run_profile)

    opts = parser.parse_args(argv)
    try:
        return opts.func(opts)
    except NbxlaError as e:
        # Errors for people: the message already says where (file:line:column) and what to do.
        print(f"error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: the module's arrays do not fit in this machine's memory",
              file=sys.stderr)
        return 2
    except Exception as e:           # a bug in nbxla: still exit 2 with a message, not a trace
        print(f"error: internal error ({type(e).__name__}: {e}); please report it with the HLO "
              "file and the command", file=sys.stderr)
        return 2


# --- run-hlo --------------------------------------------------------------------------------

def run_hlo(opts) -> int:
    from .hlo.parser import parse_hlo

    path = Path(opts.file)
    try:
        text = path.read_bytes()            # (parse_hlo reports bytes that are not UTF-8)
    except OSError as e:
        raise _UsageError(f"cannot read {path}: {e.strerror}") from None
    t0 = time.perf_counter()
    module = parse_hlo(text, str(path))
    t_parse = time.perf_counter() - t0
    _check_custom_calls(module, text, str(path))
    _fill_elided(module, opts.fill_elided)

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

    expected = [_typed(e, np.asarray(r).dtype) for e, r in zip(_numbered(data, "out"), results)]
    if not expected:
        return 0
    return _compare(results, expected, opts.rtol, opts.atol)


def _fill_elided(module, fill: bool) -> None:
    """Constants printed as ``{...}``: run on deterministic stand-in values, said on stderr
    (the results are not the original model's), or refuse (``--no-fill-elided``)."""
    from .hlo.elided import accept_filled_constants, check_no_elided_constants
    if not fill:
        check_no_elided_constants(module, "run")
        return
    names = accept_filled_constants(module)
    if names:
        shown = ", ".join("%" + n for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        print(f"WARNING: {len(names)} constant(s) of {module.name} were elided ({{...}}) in the file: "
              f"{shown} run on deterministic stand-in values (see nbxla/hlo/elided.py), so the results "
              "are not the original program's; --no-fill-elided refuses such files", file=sys.stderr)


def _check_custom_calls(module, text: bytes, filename: str) -> None:
    """Refuse a custom-call nbxla has no implementation for before running anything, at its
    line of the file (the evaluator, which runs custom-calls for every backend, would only
    name the instruction, after the compilation)."""
    from .errors import HloParseError
    from .hlo.evaluator import CUSTOM_CALL_TARGETS
    lines = text.decode("utf-8").splitlines()
    for instr in module.instructions():
        target = instr.attrs.get("custom_call_target", "")
        if instr.opcode != "custom-call" or target in CUSTOM_CALL_TARGETS:
            continue
        line = next((k for k, source in enumerate(lines, 1)
                     if re.match(rf"\s*(ROOT\s+)?%?{re.escape(instr.name)}\s*=", source)), 0)
        raise HloParseError(
            f"custom-call target {target!r} (%{instr.name}) has no implementation in nbxla "
            f"(supported: {', '.join(sorted(CUSTOM_CALL_TARGETS))}); rewrite the program without "
            "it, or register a NumPy implementation in nbxla.hlo.evaluator.CUSTOM_CALL_TARGETS",
            filename, line, 1 if line else 0, lines[line - 1] if line else None)


def _load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("it is a single array, not an .npz archive of in0, in1, ...")
        with npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise _UsageError(f"cannot read inputs file {path}: {e}") from None


def _typed(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``arr`` as ``dtype`` where the .npy file lost a bf16 / f8 type: NumPy saves ml_dtypes
    arrays as raw bytes (|V2, |V1), which hold exactly the bits."""
    if arr.dtype.kind == "V" and dtype in LOW_PRECISION_DTYPES and arr.dtype.itemsize == dtype.itemsize:
        return arr.view(dtype)
    return arr


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
        for i, p in enumerate(params):
            if _bytes(p.shape) > MAX_RANDOM_INPUT_BYTES:
                raise _UsageError(f"parameter {i} (%{p.name}) is {p.shape.to_text(with_layout=False)}"
                                  f", {_bytes(p.shape) / 2 ** 30:.3g} GiB: too large for random "
                                  "inputs; pass its values with --inputs")
        rng = np.random.default_rng(0)
        return [_random_value(p.shape, rng) for p in params]
    if len(given) != len(params):
        raise _UsageError(f"{source} holds {len(given)} inputs (in0..in{len(given) - 1}) but the "
                          f"entry computation takes {len(params)} parameters")
    for i, (p, arr) in enumerate(zip(params, given)):
        if p.shape.is_tuple:
            raise _UsageError(f"parameter {i} is a tuple {p.shape}: the inputs file can only "
                              "hold arrays; run without --inputs to use random values")
        arr = given[i] = _typed(arr, p.shape.dtype)
        if arr.dtype != p.shape.dtype or arr.shape != p.shape.dims:
            raise _UsageError(f"in{i} is {_shape_text(arr)} but parameter {i} (%{p.name}) is "
                              f"{p.shape.to_text(with_layout=False)}")
    return given


MAX_RANDOM_INPUT_BYTES = 1 << 30


def _bytes(shape) -> int:
    if shape.is_tuple:
        return sum(_bytes(s) for s in shape.elements)
    return shape.byte_size


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


# --- aot -------------------------------------------------------------------------------------

def run_aot(opts) -> int:
    from . import aot

    if opts.target.endswith(".hlo"):
        if opts.arg:
            raise _UsageError("--arg is for Python functions; an HLO module's parameters give the types")
        target = opts.target
    else:
        target = _load_function(opts.target)
        if not opts.arg:
            raise _UsageError(f"give the argument types of {opts.target}, e.g. --arg f32[16,784] --arg f32[784,10]")
    try:
        obj = aot.compile(target, opts.arg or None, opts.out_dir, opts.name, cpu=opts.cpu,
                          emit_llvm=opts.emit_llvm, emit_asm=opts.emit_asm, emit_c=opts.emit_c)
    except OSError as e:
        raise _UsageError(f"cannot read {opts.target}: {e.strerror}") from None
    sig = ", ".join(s.to_text(False) for s in obj.arg_shapes) + " -> " + \
        ", ".join(s.to_text(False) for s in obj.result_shapes)
    print(f"wrote {obj.object_path} and {obj.header_path}: int {obj.name}({sig}); "
          f"{len(obj.kernels)} kernel(s), {obj.arena_bytes} bytes of scratch per call")
    for path in obj.files.values():
        print(f"wrote {path}")
    print(f"link with: cc main.c {obj.object_path} -lm -lpthread")
    return 0


def run_profile(opts) -> int:
    from .aot import parse_spec
    from .profiler import profile

    if not opts.arg:
        raise _UsageError(f"give the argument types of {opts.target}, e.g. --arg f32[1024] --arg f32[1024]")
    fn = _load_function(opts.target)
    rng = np.random.default_rng(0)
    args = [_random_value(parse_spec(spec), rng) for spec in opts.arg]
    report = profile(fn, min_runs=max(1, opts.runs))(*args)
    if opts.json:
        import json
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.to_text())
    return 0


def _load_function(target: str):
    """``FILE.py:FUNC`` -> the function (the file is run as a module named after it)."""
    import importlib.util

    path, sep, func = target.rpartition(":")
    if not sep or not path or not func:
        raise _UsageError(f"{target!r}: write FILE.py:FUNC (or FILE.hlo)")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if spec is None or not Path(path).is_file():
        raise _UsageError(f"cannot read {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, func, None)
    if not callable(fn):
        raise _UsageError(f"{path} has no function {func}")
    return fn


# --- demo ------------------------------------------------------------------------------------

def running_example(x, y):
    """The seeds' running example, as a user writes it."""
    return np.mean(3 * x**2 + y)


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def run_demo(opts) -> int:
    from . import jit

    n = opts.size
    if n < 1:
        raise _UsageError("--size must be at least 1")
    print(f"Running example: np.mean(3 * x**2 + y) with x, y: f32[{n},{n}], through nbxla.jit\n")
    rng = np.random.default_rng(0)
    x = rng.random((n, n), dtype=np.float32)
    y = rng.random((n, n), dtype=np.float32)
    compiled = jit(running_example)
    start = time.perf_counter()
    got = compiled(x, y)
    first_ms = (time.perf_counter() - start) * 1e3
    comp = compiled.last_compilation
    for stage in ("hlo", "optimized_hlo", "fusion_report"):
        print(f"== stage {stage} ==")
        print(comp.stage(stage).rstrip() + "\n")
    asm = comp.stage("asm").splitlines()
    vector = [line.strip() for line in asm if "zmm" in line or "ymm" in line]
    print(f"== stage asm == ({len(asm)} lines; {len(vector)} use vector registers, e.g.)")
    print("\n".join("  " + line for line in vector[:4]) + "\n")
    timings = ", ".join(f"{k} {v:.1f} ms" for k, v in comp.timings_ms.items())
    print(f"first call {first_ms:.1f} ms (compile: {timings}); backend: {comp.backend}\n")
    t_jit, got = _median_time(lambda: compiled(x, y), opts.repeats)
    t_np, want = _median_time(lambda: running_example(x, y), opts.repeats)
    ok, detail = compare_arrays(np.asarray(got), np.asarray(want))
    gbs = 2 * x.nbytes / t_jit / 1e9
    print(f"== run (median of {opts.repeats}) ==")
    print(f"  nbxla (compiled): {float(got):.7g}  {t_jit * 1e3:9.2f} ms  ({gbs:.1f} GB/s read)")
    print(f"  eager NumPy     : {float(want):.7g}  {t_np * 1e3:9.2f} ms")
    print(f"  speedup {t_np / t_jit:.1f}x; {'match' if ok else 'MISMATCH'}: {detail}")
    print("\nOne fused kernel reads x and y once and writes one number; eager NumPy makes\n"
          "three temporaries the size of x. `python -m nbxla demo --size 8192` for a bigger run.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
