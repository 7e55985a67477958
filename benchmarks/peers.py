"""nbxla against its peers on the same programs: NumPy, nbxla.jit, JAX, numba and torch.compile.

    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/peers.py            # small sizes
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/peers.py --size medium --only hdiff,gemver

The programs are those of ``benchmarks/programs.py`` (straight-line array programs) and
``benchmarks/loop_programs.py`` (Python loops), unchanged NumPy source.  The contenders:

* ``nbxla``: ``nbxla.jit`` of the NumPy function.
* ``jax``: ``jax.jit`` of the program's JAX version (``Program.make_jax``: the same source over
  ``jax.numpy`` where it traces; a small port where NumPy writes in place); loop programs have
  none (their in-place loops do not trace), shown as ``-``.
* ``numba``: ``numba.njit`` of the unchanged NumPy function, where numba compiles it (``-``
  otherwise: numba supports a subset of NumPy).
* ``torch``: ``torch.compile`` of the unchanged NumPy function (TorchDynamo traces NumPy calls
  itself), loop programs included, when torch is installed (``-`` otherwise; the run says so).

Columns: speedup over NumPy (NumPy's time / the contender's; > 1 is faster) and the first call
in seconds (trace + compile + one run, fresh caches).  A first call longer than
``--first-call-limit`` (default 120 s) is interrupted and that contender left out of the program,
as a user would give up (torch.compile unrolls some Python loops for minutes).  Contenders run interleaved in each
repeat, in an order that rotates, and the best repeat is kept (the minimum is what this noisy
shared machine lets through).  Geometric means over the programs each contender ran, and over
the programs that every contender ran.

``OMP_WAIT_POLICY=PASSIVE`` is set before any import (spinning OpenMP threads of one contender
slow all the others on a small machine), and ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE`` are
removed so that OpenBLAS picks its kernel for this CPU; which one ran is printed.
"""

from __future__ import annotations

import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):      # (as benchmarks/blas_info.py's
    os.environ.pop(_var, None)                              # unpin_openblas, before any import)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["NBXLA_CACHE_DIR"] = "off"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from benchmarks.blas_info import openblas_kernel  # noqa: E402

CONTENDERS = ("nbxla", "jax", "numba", "torch")


# ---- programs ---------------------------------------------------------------------------------

class Case:
    """One program: its NumPy function and inputs, and the makers of each contender's version."""

    def __init__(self, name, fn, make_args, jax_fn=None, mutates=False):
        self.name, self.fn, self.make_args, self.jax_fn, self.mutates = name, fn, make_args, jax_fn, mutates


def _straight_cases(size):
    from benchmarks.programs import PROGRAMS
    cases = []
    for name, build in PROGRAMS.items():
        p = build(size)
        cases.append(Case(name, p.fn, (lambda p=p: p.inputs), p.make_jax))
    return cases


def _loop_cases(size):
    from benchmarks.loop_programs import programs
    return [Case(name, fn, make, None, mutates=True) for name, (fn, make) in programs(size == "small").items()]


def _leaves(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _leaves(v)]
    return [] if value is None else [np.asarray(value)]


def _agree(want, got) -> bool:
    for w, g in zip(_leaves(want), _leaves(got)):
        if w.shape != g.shape or not np.allclose(g, w, rtol=1e-6, atol=1e-9 * max(1.0, float(np.max(np.abs(w), initial=0))),
                                                 equal_nan=True):
            return False
    return True


# ---- contenders ---------------------------------------------------------------------------------

def _make_nbxla(case):
    import nbxla
    return nbxla.jit(case.fn), (lambda args: args)


def _make_jax(case):
    if case.jax_fn is None:
        return None
    import jax
    import jax.numpy as jnp
    f = jax.jit(case.jax_fn(jnp))

    def run(*a):
        return jax.block_until_ready(f(*a))
    return run, (lambda args: [jax.device_put(a) if isinstance(a, np.ndarray) else a for a in args])


def _make_numba(case):
    import numba
    return numba.njit(case.fn), (lambda args: args)


def _make_torch(case):
    """``torch.compile`` of the unchanged NumPy function: TorchDynamo traces NumPy calls itself
    (``torch._numpy``), takes NumPy arrays in and gives NumPy arrays back; where it cannot trace
    a part it runs that part eagerly (a graph break), as a user of torch.compile would see."""
    import torch
    return torch.compile(case.fn), (lambda args: args)


MAKERS = {"nbxla": _make_nbxla, "jax": _make_jax, "numba": _make_numba, "torch": _make_torch}


def _available():
    found = {"nbxla": True}
    for name, module in (("jax", "jax"), ("numba", "numba"), ("torch", "torch")):
        try:
            __import__(module)
            found[name] = True
        except ImportError:
            found[name] = False
    return found


def _call(fn, args, mutates):
    """(seconds, what the call produced: its result, and the arguments it wrote into)."""
    a = copy.deepcopy(args) if mutates else args
    t0 = time.perf_counter()
    out = fn(*a)
    t = time.perf_counter() - t0
    return t, ((out, [x for x in a if hasattr(x, "shape")]) if mutates else out)


def _numpy(value):
    if isinstance(value, (tuple, list)):
        return [_numpy(v) for v in value]
    if value is None:
        return None
    return np.asarray(value.detach() if hasattr(value, "detach") else value)


def _timed(fn, args, mutates, budget: float) -> float:
    """Best per-call time of back-to-back calls for about ``budget`` seconds (at least 3)."""
    best, spent, calls = math.inf, 0.0, 0
    while calls < 3 or spent < budget:
        t, _ = _call(fn, args, mutates)
        best, spent, calls = min(best, t), spent + t, calls + 1
        if calls >= 200:
            break
    return best


class FirstCallTooLong(BaseException):
    """(not an Exception: a compiler's own ``except Exception`` must not swallow it)"""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Interrupt a first call (tracing and compiling are Python) after ``seconds``: a contender
    that compiles one program for minutes is left out of it, as a user would give up."""
    def stop(signum, frame):
        raise FirstCallTooLong(f"first call over {seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def measure(case, available, repeats: int, budget: float, first_call_limit: float = 120.0) -> dict:
    args = case.make_args()
    row = {"name": case.name, "first": {}, "best": {}, "note": {}}
    _, want = _call(case.fn, args, case.mutates)
    runners = {"numpy": (case.fn, args)}
    for name in CONTENDERS:
        if not available[name]:
            continue
        try:
            made = MAKERS[name](case)
            if made is None:
                continue
            fn, convert = made
            cargs = convert(args)
            with warnings.catch_warnings(), _time_limit(first_call_limit):
                warnings.simplefilter("ignore")
                first, got = _call(fn, cargs, case.mutates)
            if not _agree(want, _numpy(got)):
                row["note"][name] = "wrong result"
                continue
            row["first"][name] = first
            runners[name] = (fn, cargs)
        except (Exception, FirstCallTooLong) as e:   # a contender that cannot compile it is left out
            row["note"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:60] if str(e) else ''}"
    samples = {k: [] for k in runners}
    order = list(runners)
    for r in range(repeats):            # interleaved: machine noise hits every contender
        for k in order[r % len(order):] + order[:r % len(order)]:
            fn, a = runners[k]
            samples[k].append(_timed(fn, a, case.mutates, budget))
    row["best"] = {k: min(v) for k, v in samples.items()}
    return row


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=("small", "medium"), default="small")
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.05, help="seconds per contender per repeat")
    ap.add_argument("--no-loops", action="store_true", help="leave out loop_programs.py")
    ap.add_argument("--first-call-limit", type=float, default=120.0,
                    help="seconds a contender's first call may take before it is left out of that program")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated subset")
    args = ap.parse_args(argv)
    available = {k: v and k in args.contenders.split(",") + ["nbxla"] for k, v in _available().items()}
    if available["jax"]:
        import jax
        jax.config.update("jax_enable_x64", True)
    print(f"NumPy {np.__version__}; {openblas_kernel()}")
    print("contenders: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in available.items()))
    cases = _straight_cases(args.size) + ([] if args.no_loops else _loop_cases(args.size))
    chosen = [n for n in args.only.split(",") if n]
    cases = [c for c in cases if not chosen or c.name in chosen]
    shown = [k for k in CONTENDERS if available[k]]
    print(f"{'program':<16}" + "".join(f"{'x' + k:>9}" for k in shown) + f"{'numpy ms':>10}"
          + "".join(f"{k[:5] + ' 1st':>11}" for k in shown))
    rows = []
    for case in cases:
        row = measure(case, available, args.repeats, args.budget, args.first_call_limit)
        rows.append(row)
        t_np = row["best"]["numpy"]
        speed = "".join(f"{t_np / row['best'][k]:9.2f}" if k in row["best"] else f"{'-':>9}" for k in shown)
        first = "".join(f"{row['first'][k]:11.2f}" if k in row["first"] else f"{'-':>11}" for k in shown)
        print(f"{case.name:<16}{speed}{t_np * 1e3:10.3f}{first}", flush=True)
        for k, note in row["note"].items():
            print(f"    {k}: {note}")
    print("\ngeometric-mean speedup over NumPy (programs run):")
    for k in shown:
        xs = [r["best"]["numpy"] / r["best"][k] for r in rows if k in r["best"]]
        print(f"  {k:<6} {_geomean(xs):6.2f}x over {len(xs)} programs")
    for k in shown:
        if k == "nbxla":
            continue
        both = [r for r in rows if k in r["best"] and "nbxla" in r["best"]]
        if both:
            print(f"  on the {len(both)} programs {k} ran: nbxla {_geomean([r['best']['numpy'] / r['best']['nbxla'] for r in both]):.2f}x, "
                  f"{k} {_geomean([r['best']['numpy'] / r['best'][k] for r in both]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
