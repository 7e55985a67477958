"""Sizes that user code reads while a program with unknown dimensions is traced.

A program is traced twice for such a compile, at two sizes (``hlo/symbolic.py``): what it builds
from a size -- a reshape, a constant -- shows up as a difference between the two traces.  A
Python decision on a size does not always: ``if x.shape[0] > 10`` takes the same branch at 32
and 65 and another one at 5.  So ``x.shape`` read by the user's code (not by nbxla's own rules)
hands out ``ObservedSize`` ints that log every comparison made on them; the compile compares
the two logs, and a comparison whose operands differ between the traces makes the dimension
specialised (its reason names the line).  Outside such a trace, ``shape`` is plain ints.
Divisions and remainders are logged too: ``x.shape[0] % 2`` is a decision no probe pair of the
same parity tells apart (3 and 7; 65537).  Sums, differences and products of an observed size
stay observed, so ``(n + 1) % 2`` and ``n * 2 > 10`` are seen as well.
"""

from __future__ import annotations

import sys


def _user_frame(depth: int):
    """The calling frame ``depth`` up, or None when it is nbxla's or NumPy's own code."""
    frame = sys._getframe(depth + 1)
    module = frame.f_globals.get("__name__", "")
    if module.startswith(("nbxla.", "numpy")) or module == "nbxla":
        return None
    return frame


class ObservedSize(int):
    """An int that logs comparisons made on it by user code: (file, line, op, self, other)."""

    def __new__(cls, value: int, log: list):
        self = super().__new__(cls, value)
        self._log = log
        return self

    def _compare(self, op: str, other, result):
        frame = _user_frame(2)
        if frame is not None:
            self._log.append((frame.f_code.co_filename, frame.f_lineno, op, int(self),
                              other if isinstance(other, (int, float)) else repr(other), result))
        return result

    def __bool__(self):
        return self._compare("bool", None, int(self) != 0)

    __hash__ = int.__hash__


def _logged(method: str, op: str):
    """``int.method``, its result logged like a comparison (a decision no probe pair need
    tell apart)."""
    plain = getattr(int, method)
    return lambda self, other: self._compare(op, other, plain(self, other))


def _scaling(method: str):
    """``int.method`` whose result scales with the size: it stays observed."""
    plain = getattr(int, method)

    def derived(self, *other):
        value = plain(self, *other)
        return ObservedSize(value, self._log) if type(value) is int else value
    return derived


for _method, _op in {"__eq__": "==", "__ne__": "!=", "__lt__": "<", "__le__": "<=", "__gt__": ">",
                     "__ge__": ">=", "__mod__": "%", "__rmod__": "% of", "__floordiv__": "//",
                     "__rfloordiv__": "// of", "__divmod__": "divmod", "__and__": "&", "__rand__": "&",
                     "__rshift__": ">>"}.items():
    setattr(ObservedSize, _method, _logged(_method, _op))
for _method in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__neg__"):
    setattr(ObservedSize, _method, _scaling(_method))


def observed_shape(dims: tuple, log: list | None) -> tuple:
    """``dims`` as the user's code should see them: plain unless sizes are being observed and
    the caller (two frames up: past ``Tracer.shape``) is the user's code."""
    if log is None or _user_frame(2) is None:
        return dims
    return tuple(ObservedSize(d, log) for d in dims)


def compare_observations(first: list, second: list) -> str | None:
    """Why the two traces' logs show a Python decision on a size, or None."""
    if len(first) != len(second):
        return "the code compares sizes a different number of times at different sizes"
    for a, b in zip(first, second):
        if a[:3] != b[:3] or a[3:5] != b[3:5]:
            return f"line {a[1]} compares a size in Python ({a[3]} {a[2]} {a[4]!s})"
    return None
