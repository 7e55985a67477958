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

    def __eq__(self, other):
        return self._compare("==", other, int.__eq__(self, other))

    def __ne__(self, other):
        return self._compare("!=", other, int.__ne__(self, other))

    def __lt__(self, other):
        return self._compare("<", other, int.__lt__(self, other))

    def __le__(self, other):
        return self._compare("<=", other, int.__le__(self, other))

    def __gt__(self, other):
        return self._compare(">", other, int.__gt__(self, other))

    def __ge__(self, other):
        return self._compare(">=", other, int.__ge__(self, other))

    def __bool__(self):
        return self._compare("bool", None, int(self) != 0)

    # (Arithmetic whose result no probe pair need tell apart: logged like a comparison.)
    def __mod__(self, other):
        return self._compare("%", other, int.__mod__(self, other))

    def __rmod__(self, other):
        return self._compare("% of", other, int.__rmod__(self, other))

    def __floordiv__(self, other):
        return self._compare("//", other, int.__floordiv__(self, other))

    def __rfloordiv__(self, other):
        return self._compare("// of", other, int.__rfloordiv__(self, other))

    def __divmod__(self, other):
        return self._compare("divmod", other, int.__divmod__(self, other))

    def __and__(self, other):
        return self._compare("&", other, int.__and__(self, other))

    __rand__ = __and__

    def __rshift__(self, other):
        return self._compare(">>", other, int.__rshift__(self, other))

    # (Arithmetic that scales with the size: the result stays observed.)
    def _derived(self, value):
        return ObservedSize(value, self._log) if type(value) is int else value

    def __add__(self, other):
        return self._derived(int.__add__(self, other))

    def __radd__(self, other):
        return self._derived(int.__radd__(self, other))

    def __sub__(self, other):
        return self._derived(int.__sub__(self, other))

    def __rsub__(self, other):
        return self._derived(int.__rsub__(self, other))

    def __mul__(self, other):
        return self._derived(int.__mul__(self, other))

    def __rmul__(self, other):
        return self._derived(int.__rmul__(self, other))

    def __neg__(self):
        return self._derived(-int(self))

    __hash__ = int.__hash__


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
