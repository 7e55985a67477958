"""Which dimensions of a jit function's arguments are unknown (symbolic), and the guards that say
when a compiled symbolic program serves a call.

``jit(fn, dynamic=...)``:

* ``None`` (automatic, the default): every dimension starts specialised; the second distinct
  size seen in a dimension (same function, same argument structure and dtypes) makes that
  dimension symbolic, and the function is compiled once more for every size of it.
* ``True``: every dimension of every array argument is symbolic from the first call, where the
  program allows.
* ``False``: every size compiles its own program (the behaviour before unknown dimensions).
* a mapping ``{"x": (0,), "y": (0, 1)}``: those dimensions of those arguments (by name).

Size 0 is always specialised (empty arrays take other paths); size 1 is served where the
program traced at 1 is the symbolic program (guards ``1 <= b``), else specialised (broadcasting
treats a 1 differently: guards ``2 <= b``).  Dimensions of equal size in the
call that made a program share one symbol (so ``x @ w`` keeps ``x.shape[1] == w.shape[0]``),
and the guard checks they are still equal.  Where a symbol cannot go (``symbolic_compile.py``
says why), the call is compiled for its concrete sizes and the reason is kept: the cache table
and the compilation's explanation show it, and the function does not try that pattern again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .hlo.shapes import SymbolicDimensionError
from .hlo.symbolic import upper_probes

SYMBOL_NAMES = ("b", "n", "m", "k", "p", "q", "r", "s", "t", "u")


@dataclass
class SymbolicEntry:
    entry: object                  # the cache entry holding the SymbolicProgram
    program: object                # the SymbolicProgram
    family: tuple
    pattern: tuple                 # the signature with symbol names in the symbolic dims
    names: list[str]               # leaf names (for guard messages)

    def guard_failure(self, signature: tuple) -> str | None:
        """None when the call's signature is an instance of the pattern; else the failed guard
        in words (``x.shape[0] == 1, compiled for b >= 2``); "" when it is not even the same
        structure (static dims or dtypes differ: no guard speaks for that)."""
        values: dict[str, tuple[int, str]] = {}
        for name, pat, sig in zip(self.names, self.pattern, signature):
            if pat[0] != "array":
                continue
            for d, (p, n) in enumerate(zip(pat[1], sig[1])):
                if isinstance(p, int):
                    if p != n:
                        return ""
                    continue
                where = f"{name}.shape[{d}]"
                upper = self.program.bounds.get(p)
                lower = self.program.lower.get(p, 2)
                if n < lower:
                    return f"{where} == {n}, compiled for {p} >= {lower}"
                if upper is not None and n > upper:
                    return f"{where} == {n}, compiled for {p} <= {upper}"
                if p in values and values[p][0] != n:
                    other, at = values[p]
                    return f"{where} == {n} but {at} == {other}, compiled for both equal ({p})"
                values.setdefault(p, (n, where))
        return None


def family_of(signature: tuple) -> tuple:
    """What must match for two calls to share a symbolic program: static values, array ranks
    and dtypes (not sizes)."""
    return tuple(("array", len(s[1]), s[2]) if s[0] == "array" else s for s in signature)


class DimensionPolicy:
    """Per jit function: sizes seen, symbolic programs made, patterns refused (and why)."""

    def __init__(self, dynamic):
        if not (dynamic is None or isinstance(dynamic, bool) or isinstance(dynamic, dict)):
            raise TypeError(f"nbxla.jit: dynamic must be None, True, False or a dict of argument "
                            f"name -> dimensions, not {type(dynamic).__name__}")
        self.dynamic = dynamic
        self.seen: dict[tuple, list[tuple]] = {}       # family -> signatures seen
        self.entries: list[SymbolicEntry] = []
        self.refused: dict[tuple, str] = {}            # (family, marked dims) -> why not symbolic
        # family -> (argument shapes, Compilation) of its static compiles, newest last: a
        # symbolic compile takes one as its second probe (``compile_symbolic``'s ``earlier``)
        self.static: dict[tuple, list] = {}

    def remember_static(self, extra: tuple, signature: tuple, compilation) -> None:
        """A static compile of this function (the automatic mode's first size)."""
        shapes = [s[1] if s[0] == "array" else None for s in signature]
        found = self.static.setdefault((extra, family_of(signature)), [])
        found.append((shapes, compilation))
        del found[:-4]

    def earlier(self, extra: tuple, signature: tuple) -> list:
        return list(reversed(self.static.get((extra, family_of(signature)), [])))

    @property
    def enabled(self) -> bool:
        return self.dynamic is not False

    def match(self, cache, extra: tuple, signature: tuple) -> tuple[SymbolicEntry | None, str]:
        """The symbolic entry serving this call (still in the cache), or None and the guard that
        failed for the nearest one ("" when none was near)."""
        failed = ""
        family = family_of(signature)
        for sym in reversed(list(self.entries)):       # (a copy: threads may remove entries)
            if sym.family != (extra, family):
                continue
            why = sym.guard_failure(signature)
            if why is None:
                if cache.lookup(sym.entry.key) is sym.entry:
                    return sym, ""
                # evicted or cleared: compile it again
                self.entries[:] = [e for e in self.entries if e is not sym]
                continue
            failed = failed or why
        return None, failed

    def marks(self, extra: tuple, signature: tuple, names: list[str], arguments: int
              ) -> dict[tuple[int, int], str]:
        """(leaf, dim) -> symbol for the dimensions this call should compile symbolically (empty:
        compile for the concrete sizes).  Records the call's sizes (automatic mode)."""
        family = (extra, family_of(signature))
        seen = self.seen.setdefault(family, [])
        if signature not in seen:
            seen.append(signature)
            del seen[:-16]
        chosen: list[tuple[int, int]] = []
        for leaf, (sig, name) in enumerate(zip(signature, names)):
            if sig[0] != "array":
                continue
            for d, n in enumerate(sig[1]):
                if n >= 1 and self._wanted(leaf, d, name, seen, leaf < arguments):
                    chosen.append((leaf, d))
        return _named(chosen, signature)

    def candidates(self, extra: tuple, signature: tuple, names: list[str], arguments: int) -> list[dict]:
        """The marks to try, best first: those ``marks`` chooses, then (with ``dynamic=True``,
        where a program rarely allows every dimension) the leading dimensions alone."""
        marks = self.marks(extra, signature, names, arguments)
        if self.dynamic is not True:
            return [marks] if marks else []
        # The first array argument's leading dimension, and every other leading dimension of
        # its size (a batch shared by several arguments); not a leading dimension that is a
        # matrix's (``w`` in ``x @ w`` must keep the size ``x.shape[1]`` has).  The first
        # argument's own leading dimension is the batch even where its other sides have its
        # size (a square batch of images, ``x`` of 64 x 64 rows and columns): if the program
        # needs it square, its trace at other sizes says so and the compile refuses.
        batch = [(leaf, d) for (leaf, d) in marks if d == 0]
        size = signature[batch[0][0]][1][0] if batch else None
        leading = _named([(leaf, d) for (leaf, d) in batch if signature[leaf][1][0] == size and
                          (leaf == batch[0][0] or size not in signature[leaf][1][1:])],
                         signature) if batch else {}
        return [m for m in (marks, leading) if m][:1 if leading == marks else 2]

    def _wanted(self, leaf: int, d: int, name: str, seen: list[tuple], argument: bool) -> bool:
        dynamic = self.dynamic
        if dynamic is True:
            return argument             # (arrays read from globals keep their sizes)
        if isinstance(dynamic, dict):
            dims = dynamic.get(name, ())
            return d in (dims if isinstance(dims, (tuple, list)) else (dims,))
        return len({sig[leaf][1][d] for sig in seen}) > 1     # (one family: same ranks)

    def pattern(self, signature: tuple, marks: dict) -> tuple:
        out = []
        for leaf, sig in enumerate(signature):
            if sig[0] != "array":
                out.append(sig)
                continue
            dims = tuple(marks.get((leaf, d), n) for d, n in enumerate(sig[1]))
            out.append(("array", dims, sig[2]))
        return tuple(out)


def _named(chosen: list[tuple[int, int]], signature: tuple) -> dict[tuple[int, int], str]:
    """A symbol per chosen (leaf, dim); dimensions of equal size share one (``x @ w`` needs
    ``x.shape[1] == w.shape[0]`` to stay true, and a guard checks it)."""
    symbol_of_size: dict[int, str] = {}
    marks = {}
    for leaf, d in chosen:
        n = signature[leaf][1][d]
        if n not in symbol_of_size:
            k = len(symbol_of_size)
            symbol_of_size[n] = SYMBOL_NAMES[k] if k < len(SYMBOL_NAMES) else f"s{k}"
        marks[(leaf, d)] = symbol_of_size[n]
    return marks


def describe_marks(marks: dict, names: list[str]) -> str:
    """``x.shape[0] -> b, y.shape[0] -> b``."""
    return ", ".join(f"{names[leaf]}.shape[{d}] -> {sym}" for (leaf, d), sym in sorted(marks.items()))


def symbol_values(marks: dict, leaves: list) -> dict[str, int]:
    return {sym: np.shape(leaves[leaf])[d] for (leaf, d), sym in marks.items()}


def find_or_compile(policy: DimensionPolicy, cache, extra: tuple, signature: tuple, names: Callable,
                    arguments: int, make_key: Callable, code_key, code_name: str, device: str,
                    compile_for: Callable) -> tuple[SymbolicEntry | None, str]:
    """The symbolic entry serving this call: found (its guards pass), or compiled now for the
    first marks ``policy.candidates`` offers that the program allows.  Else (None, a note for
    the cache table: the failed guard, or why the dimensions were specialised).

    ``make_key(pattern)`` is the cache key of a symbolic entry; ``compile_for(marks)`` compiles
    (a ``SymbolicProgram``) or raises ``SymbolicDimensionError``."""
    sym, failed = policy.match(cache, extra, signature)
    if sym is not None:
        return sym, ""
    refusals = []
    for marks in policy.candidates(extra, signature, names(), arguments):
        # (A refusal at size 1 may be size 1's own: it does not stand for larger sizes.)
        refusal = (extra, family_of(signature), tuple(sorted(marks.items())),
                   min(signature[leaf][1][d] for (leaf, d) in marks) < 2)
        if refusal in policy.refused:
            refusals.append(policy.refused[refusal])
            continue
        pattern = policy.pattern(signature, marks)
        described = describe_marks(marks, names())
        # (The key holds the sizes the program will serve up to: a size past them compiles anew.)
        bounds = upper_probes(sorted({signature[leaf][1][d] for (leaf, d) in marks}))
        key = make_key(pattern + (("serves up to", tuple(sorted(bounds.values()))),))
        try:
            entry, hit = cache.get_or_compile(key, code_key, code_name, pattern, names, device,
                                              lambda marks=marks: compile_for(marks))
        except SymbolicDimensionError as e:
            policy.refused[refusal] = f"{described} specialised: {e}"
            refusals.append(policy.refused[refusal])
            continue
        if not hit:
            lower = entry.value.lower
            least = min(lower.values(), default=2)
            entry.explanation = "; ".join(filter(None, [failed, f"{described}: one compilation for "
                                                        f"every size >= {least} (symbolic; {entry.explanation})"]))
            entry.value.compilation.explanation = entry.explanation
            bounds = entry.value.bounds
            entry.value.compilation.dimensions = (
                f"{described} (symbolic); guards: " +
                ", ".join(f"{lower.get(s, 2)} <= {s} <= {bounds[s]}" if s in bounds else f"{s} >= {lower.get(s, 2)}"
                          for s in sorted(set(marks.values())))
                + "".join(f", {a} == {b}" for a, b in _shared(marks, names())))
        sym = SymbolicEntry(entry, entry.value, (extra, family_of(signature)), pattern, names())
        if sym.guard_failure(signature) is not None:        # (a program that does not serve this call)
            refusals.append(f"{described} specialised: {sym.guard_failure(signature)}")
            continue
        policy.entries.append(sym)
        return sym, ""
    return None, "; ".join(filter(None, [failed] + refusals))


def _shared(marks: dict, names: list[str]) -> list[tuple[str, str]]:
    """Pairs of dimensions one symbol stands for (the guard checks they stay equal)."""
    first: dict[str, str] = {}
    pairs = []
    for (leaf, d), sym in sorted(marks.items()):
        where = f"{names[leaf]}.shape[{d}]"
        if sym in first:
            pairs.append((first[sym], where))
        else:
            first[sym] = where
    return pairs
