"""Kernels per corpus case: nbxla's fusion against XLA's own optimized module.

    python benchmarks/kernel_counts.py [CORPUS_DIR]

For every unoptimized JAX export ``CASE.hlo`` in the corpus (default ``../shared/corpus/hlo``
next to the repository), runs nbxla's pass pipeline and counts the kernels left in the entry
computation; next to it, the kernels in XLA's ``CASE.opt.hlo`` (what ``jax.jit(...).lower()
.compile()`` produced on CPU).  A kernel is anything that computes data: a fusion, a dot or
convolution, a custom call, a sort, a loop, an unfused elementwise op...; parameters,
constants, tuples, get-tuple-element and bitcasts are not.  Loop bodies and branches are
counted as the one ``while`` / ``conditional`` that runs them.

Counts, not timings: nothing here is measured.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nbxla.hlo.parser import parse_hlo  # noqa: E402
from nbxla.passes import optimize  # noqa: E402

# Instructions that move no data of their own (XLA's async markers included).
NOT_KERNELS = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
               "copy-start", "copy-done", "partition-id", "replica-id", "opt-barrier",
               "add-dependency"}


def entry_kernels(module) -> list[str]:
    ops = []
    for instr in module.entry.instructions:
        if instr.opcode in NOT_KERNELS:
            continue
        if instr.opcode == "reshape" and instr.shape.layout is None and \
                instr.operands[0].shape.layout is None:
            continue          # a row-major reshape is a view (nbxla's buffer assignment aliases it)
        ops.append(instr.attrs["kind"] if instr.opcode == "fusion" else instr.opcode)
    return ops


def describe(ops: list[str]) -> str:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return " ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(counts.items()))


def main(argv: list[str]) -> int:
    corpus = Path(argv[1]) if len(argv) > 1 else REPO.parent / "shared" / "corpus" / "hlo"
    cases = sorted(p for p in corpus.glob("*.hlo") if p.name.count(".") == 1)
    if not cases:
        print(f"no corpus found at {corpus}", file=sys.stderr)
        return 1
    rows = []
    for path in cases:
        case = path.stem
        ours = entry_kernels(optimize(parse_hlo(path.read_text(), str(path))).module)
        opt = path.with_name(case + ".opt.hlo")
        theirs = entry_kernels(parse_hlo(opt.read_text(), str(opt))) if opt.exists() else None
        rows.append((case, ours, theirs))
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  nbxla  XLA  nbxla kernels / XLA kernels")
    print("-" * (width + 13) + "  " + "-" * 60)
    for case, ours, theirs in rows:
        xla = "-" if theirs is None else str(len(theirs))
        print(f"{case:<{width}}  {len(ours):>5}  {xla:>3}  {describe(ours)} / {describe(theirs or [])}")
    total_ours = sum(len(r[1]) for r in rows)
    total_xla = sum(len(r[2]) for r in rows if r[2] is not None)
    fewer = sum(1 for r in rows if r[2] is not None and len(r[1]) < len(r[2]))
    more = sum(1 for r in rows if r[2] is not None and len(r[1]) > len(r[2]))
    print(f"\ntotal: nbxla {total_ours}, XLA {total_xla}; "
          f"nbxla fewer in {fewer} cases, more in {more}, equal in {len(rows) - fewer - more}")
    return 0


if __name__ == "__main__":
    from nbxla.flags import switch_on
    switch_on("verify")     # (every jit signature's first call checked against NumPy;
                            # timings are of later calls, which it does not slow)
    sys.exit(main(sys.argv))
