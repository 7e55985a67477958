"""Per-call times of one compiled program called many times in a row (issue 17, item 6).

    python benchmarks/steady_state.py                  # 80 calls, int64[2000, 2000]
    python benchmarks/steady_state.py --calls 200 --n 1000

Calls the compiled ``np.clip(a, 2, 10) * x + b * y + z`` back to back (results kept alive one
call at a time, as a user's loop does) and eager NumPy the same way, then prints every call's
time in order and, per contender, the median, the worst decile and the slowest call, so that a
slow regime inside a run of calls shows.  Also prints per call the page faults (minor, from
``getrusage``) and the voluntary / involuntary context switches, the usual suspects for a
run of slow calls (fresh memory, descheduling).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402


def program(a, b, x, y, z):
    return np.clip(a, 2, 10) * x + b * y + z


def calls(fn, args, count: int) -> list[tuple[float, int, int, int]]:
    """(seconds, minor faults, voluntary, involuntary context switches) per call."""
    out, keep = [], None
    for _ in range(count):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        keep = fn(*args)            # the previous result dies here, as in a loop
        t1 = time.perf_counter()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        out.append((t1 - t0, r1.ru_minflt - r0.ru_minflt, r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw))
    del keep
    return out


def summary(name: str, rows) -> str:
    t = np.array([r[0] for r in rows]) * 1e3
    return (f"{name:<6} median {np.median(t):7.2f} ms  p90 {np.percentile(t, 90):7.2f} ms  "
            f"max {t.max():7.2f} ms  calls over 2x median: {int((t > 2 * np.median(t)).sum())}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=80)
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args(argv)
    os.environ.setdefault("NBXLA_CACHE_DIR", "off")
    import nbxla
    g = np.random.default_rng(0)
    n = args.n
    arrays = [g.integers(-5, 15, size=(n, n)) for _ in range(5)]     # int64
    f = nbxla.jit(program)
    np.testing.assert_array_equal(f(*arrays), program(*arrays))
    print(f"int64[{n},{n}], {args.calls} calls in a row; kernels: "
          f"{f.last_compilation.fusion_report.kernels_after}; load average {os.getloadavg()[0]:.1f}")
    results = {"nbxla": calls(f, arrays, args.calls), "numpy": calls(program, arrays, args.calls)}
    print("call  nbxla ms faults vcsw ivcsw |  numpy ms faults vcsw ivcsw")
    for k, (a, b) in enumerate(zip(results["nbxla"], results["numpy"])):
        print(f"{k:4d} {a[0] * 1e3:9.2f} {a[1]:6d} {a[2]:4d} {a[3]:5d} | {b[0] * 1e3:9.2f} {b[1]:6d} {b[2]:4d} {b[3]:5d}")
    for name, rows in results.items():
        print(summary(name, rows))
    return 0


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main())
