"""Random small NumPy programs in the shapes real loop code has, as Python source.

Each program is a module with a few helpers that write into their first parameter and a
function ``prog(n, s, x, y)``: ``x`` and ``y`` are float64 arrays of one 2-D shape that the
program may write into, ``s`` a scalar (a Python float or a NumPy float64), ``n`` a Python
int used as a trip count.  The statements drawn:

* new locals: copies, ``np.zeros``/``np.ones`` (NumPy arrays made inside the compiled code,
  filled later), formulas of the arrays in scope;
* interior stencil writes ``a[1:-1, 1:-1] = f(a[2:, 1:-1], b[:-2, 1:-1], ...)``, boundary
  row/column copies and fills, in-place ``+=``/``*=`` on whole arrays and on interiors;
* views of local and argument arrays bound to a name and written through (``v[:] =``,
  ``v +=``, ``v[0] =``);
* helper calls that write into an argument (``h0(b, x, s)``), helpers with loops inside;
* ``for`` loops with drawn trip counts (0, 1, the unroll threshold and one past it, longer
  ones, ``n``), nested, with ``break``/``continue`` on the index or on array values;
* ``if`` on array values (both branches traced).

Values stay bounded (stores go through ``np.tanh`` or a factor of 1/4) so that comparing with
NumPy needs no loose tolerance.  ``draw`` is hypothesis's ``data.draw``: shrinking works on
the drawn choices, and a failing program is printed as source.
"""

from __future__ import annotations

from hypothesis import strategies as st

INTERIOR_ROWS = ("0:-2", "1:-1", "2:")
TRIPS = (0, 1, 2, 4, 5, 7, 12)
BOUNDARY = ("{a}[0, :] = {a}[1, :]", "{a}[:, -1] = {a}[:, -2]", "{a}[-1, :] = 0",
            "{a}[:, 0] = {s}", "{a}[0, 0] = {b}[1, 1]")


class ProgramWriter:
    def __init__(self, draw, max_depth: int = 3, max_statements: int = 5):
        self.draw = draw
        self.max_depth, self.max_statements = max_depth, max_statements
        self.helpers: list[str] = []
        self.counter = 0

    # ---- choices ---------------------------------------------------------------------------

    def pick(self, options):
        return options[self.draw(st.integers(0, len(options) - 1))]

    def chance(self, p_percent: int) -> bool:
        return self.draw(st.integers(0, 99)) < p_percent

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # ---- expressions -----------------------------------------------------------------------

    def full(self, arrays: list[str], depth: int = 0) -> str:
        """A formula with the full 2-D shape."""
        kind = self.draw(st.integers(0, 6 if depth < 2 else 1))
        if kind <= 1:
            return self.pick(arrays)
        if kind == 2:
            return f"({self.full(arrays, depth + 1)} {self.pick(['+', '-', '*'])} {self.full(arrays, depth + 1)})"
        if kind == 3:
            return f"np.{self.pick(['tanh', 'sin', 'abs', 'cos'])}({self.full(arrays, depth + 1)})"
        if kind == 4:
            return f"({self.full(arrays, depth + 1)} * s)"
        if kind == 5:
            a, b = self.full(arrays, depth + 1), self.full(arrays, depth + 1)
            return f"np.where({a} > {b}, {a}, {b})"
        return f"np.{self.pick(['maximum', 'minimum'])}({self.full(arrays, depth + 1)}, {self.full(arrays, depth + 1)})"

    def interior(self, arrays: list[str], views: list[str], depth: int = 0) -> str:
        """A formula with the interior's shape (two fewer rows and columns)."""
        kind = self.draw(st.integers(0, 4 if depth < 2 else 1))
        if kind <= 1:
            if views and self.chance(25):
                return self.pick(views)
            return f"{self.pick(arrays)}[{self.pick(INTERIOR_ROWS)}, {self.pick(INTERIOR_ROWS)}]"
        if kind == 2:
            return (f"({self.interior(arrays, views, depth + 1)} {self.pick(['+', '-', '*'])} "
                    f"{self.interior(arrays, views, depth + 1)})")
        if kind == 3:
            return f"np.tanh({self.interior(arrays, views, depth + 1)})"
        return f"({self.interior(arrays, views, depth + 1)} * 0.5)"

    def bounded(self, formula: str) -> str:
        return f"np.tanh({formula})" if self.chance(50) else f"0.25 * ({formula})"

    # ---- statements ------------------------------------------------------------------------

    def block(self, arrays: list[str], views: list[str], depth: int, index: str | None,
              writable: list[str]) -> list[str]:
        """Statements; ``arrays`` grows with the locals they bind (the caller's list).
        ``writable``: arrays that may be written into (all but views of other NumPy arrays
        made inside, which nbxla refuses by design)."""
        lines = []
        for _ in range(self.draw(st.integers(1, self.max_statements))):
            lines += self.statement(arrays, views, depth, index, writable)
        return lines

    def statement(self, arrays, views, depth, index, writable) -> list[str]:
        roll = self.draw(st.integers(0, 99 if depth < self.max_depth else 79))
        kind = next(k for k, edge in enumerate(_KIND_EDGES) if roll < edge)
        # the newest array more often: made, then filled (by a helper, through a view...)
        target = writable[-1] if self.chance(40) else self.pick(writable)
        if kind == 0:                                   # a new local
            name = self.fresh("t")
            how = self.draw(st.integers(0, 4))
            value = (f"{self.pick(arrays)}.copy()", f"np.zeros({arrays[0]}.shape)",
                     f"np.ones_like({arrays[0]})", self.bounded(self.full(arrays)),
                     f"np.zeros({arrays[0]}.shape)")[how]
            arrays.append(name)
            writable.append(name)
            return [f"{name} = {value}"]
        if kind == 1:                                   # interior stencil write
            return [f"{target}[1:-1, 1:-1] = {self.bounded(self.interior(arrays, views))}"]
        if kind == 2:                                   # boundary rows and columns
            return [self.pick(BOUNDARY).format(a=target, b=self.pick(arrays), s="s")]
        if kind == 3:                                   # in place, whole or interior
            if self.chance(50):
                return [f"{target} += 0.25 * {self.bounded(self.full(arrays))}"]
            return [f"{target}[1:-1, 1:-1] *= 0.5"]
        if kind == 4:                                   # a helper writes into its parameter
            source = arrays[self.draw(st.integers(0, 1))] if self.chance(50) else self.pick(arrays)
            return [f"{self.helper()}({target}, {source}, s)"]
        if kind == 5:                                   # a view, written through
            view = self.fresh("v")
            views.append(view)
            write = self.pick([f"{view}[:] = {self.bounded(self.interior(arrays, views))}",
                               f"{view} += 0.25 * {self.interior(arrays, views)}",
                               f"{view}[0] = {view}[-1]"])
            return [f"{view} = {target}[1:-1, 1:-1]", write]
        if kind == 6:                                   # rebinding a name
            return [f"{target} = {self.bounded(self.full(arrays))}"]
        if kind == 7:                                   # a read of the index
            if index is None:
                return [f"{target}[1, 1] = s"]
            return [f"{target}[1, 1] = {target}[1, 1] + {index} * 0.125"]
        if kind in (8, 9):                              # a loop
            return self.loop(arrays, views, depth, writable)
        if kind == 10:                                  # an exit
            if index is None:
                return [f"{target} *= 0.5"]
            cond = self.pick([f"{index} == 2", f"{index} % 2 == 1", f"{self.pick(arrays)}[1, 1] > 0.2"])
            return [f"if {cond}:", f"    {self.pick(['break', 'continue'])}"]
        cond = f"{self.pick(arrays)}[1, 2] > {self.pick(arrays)}[2, 1]"     # an if on values
        then = self.block(list(arrays), list(views), depth + 1, index, list(writable))
        orelse = self.block(list(arrays), list(views), depth + 1, index, list(writable))
        return [f"if {cond}:"] + _indent(then) + ["else:"] + _indent(orelse)

    def loop(self, arrays, views, depth, writable) -> list[str]:
        index = self.fresh("i")
        trips = "n" if self.chance(25) else str(self.pick(TRIPS))
        # names first bound in the body are not visible after it (NumPy would raise there
        # when the loop runs no step): the body gets copies of the lists
        body = self.block(list(arrays), list(views), depth + 1, index, list(writable))
        return [f"for {index} in range({trips}):"] + _indent(body)

    def helper(self) -> str:
        done = [f"h{k}" for k, text in enumerate(self.helpers) if text]   # (never recursive)
        if done and (len(self.helpers) >= 2 or self.chance(60)):
            return self.pick(done)
        name = f"h{len(self.helpers)}"
        self.helpers.append("")                         # (its place: helpers it calls come after)
        arrays, writable = ["b", "u"], ["b"]
        body = []
        for _ in range(self.draw(st.integers(1, 3))):
            body += self.statement(arrays, [], self.max_depth, None, writable)
        if self.chance(40):                             # a loop inside the helper
            body = [f"for q in range({self.pick(TRIPS)}):"] + _indent(body)
        self.helpers[int(name[1:])] = "\n".join([f"def {name}(b, u, s):"] + _indent(body))
        return name

    def program(self) -> str:
        arrays, writable = ["x", "y"], ["x", "y"]
        body = self.block(arrays, [], 0, None, writable)
        # every array the body bound: a write lost on any of them shows
        result = ", ".join(arrays[2:]) if len(arrays) > 2 else self.pick(arrays)
        lines = ["import numpy as np", ""] + [h + "\n" for h in self.helpers]
        lines += ["def prog(n, s, x, y):"] + _indent(body + [f"return {result}"])
        return "\n".join(lines) + "\n"


# Statement kinds 0..11 (see ``statement``), drawn with these weights in percent; the last
# four (loops, exits, ifs) only below the deepest level, where the first eight share 80.
_KIND_WEIGHTS = (14, 14, 7, 7, 16, 8, 6, 8, 10, 4, 3, 3)
_KIND_EDGES = [sum(_KIND_WEIGHTS[:k + 1]) for k in range(len(_KIND_WEIGHTS))]


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


@st.composite
def programs(draw, max_depth: int = 3):
    return ProgramWriter(draw, max_depth).program()
