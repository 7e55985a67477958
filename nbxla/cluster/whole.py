"""Whole-function compilation in auto mode: a function that compiles whole, with no Python
side effect, runs as one program compiled by ``nbxla.jit``.

Why: recording costs Python time per NumPy call (10-20 us an operation, more than NumPy
spends on an array of 40,000 elements), so clustering cannot win on functions of many small
operations that ``jit`` compiles into a kernel or two (a 600-operation formula on
(40, 40, 30) grids: 10x as one compiled program, 1x recorded).  TensorFlow's auto-clustering
ends the same way on a graph with nothing uncompilable: one cluster.

It is used only where it is the same as running the function: ``jit`` traces once and then
runs the compiled program, so a Python side effect in the function (a ``print``, appending
to a list it was given, writing a global, a call into code nbxla cannot see) would happen
once instead of on every call.  ``side_effect`` reads the function's source (and that of the
functions it calls) and names the first such thing; the function then is auto-clustered as
before.  Everything else the trace refuses (a SciPy call, a data-dependent shape) shows up
when ``jit`` first compiles it, and the function is auto-clustered from then on.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import textwrap
import types

import numpy as np

from .session import _LIBRARY_DIRS

# Builtins with no side effect (on what a traced function can hand them).
PURE_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "int", "isinstance", "len", "list", "map", "max", "min", "pow", "range", "reversed",
    "round", "set", "slice", "sorted", "sum", "tuple", "zip",
})
# NumPy functions that read or write files, change global state or draw random numbers.
NUMPY_EFFECTS = frozenset({
    "save", "savez", "savez_compressed", "savetxt", "load", "loadtxt", "genfromtxt",
    "fromfile", "set_printoptions", "printoptions", "seterr", "seterrcall", "errstate",
    "setbufsize", "set_string_function",
})
# Methods that change their object (or write files): fine on a list or array the function
# made itself, a side effect on anything else.
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
    "popitem", "add", "discard", "sort", "fill", "put", "itemset", "resize", "partition",
    "setflags", "tofile", "dump", "write", "writelines", "flush", "close", "send",
})
_NOT_ALLOWED = {ast.Global: "a 'global' statement", ast.Nonlocal: "a 'nonlocal' statement",
                ast.Yield: "'yield'", ast.YieldFrom: "'yield from'", ast.Await: "'await'",
                ast.With: "a 'with' block", ast.Try: "a 'try' block",
                ast.Import: "an import", ast.ImportFrom: "an import",
                ast.ClassDef: "a class definition"}
MAX_DEPTH = 4                     # how deep calls into other user functions are followed


def side_effect(fn, depth: int = 0, seen: set | None = None, written: set | None = None
                ) -> str | None:
    """The first Python side effect ``fn``'s source shows (as a phrase naming its line), or
    None when it has none that compiling it whole would change.  ``written`` collects the
    parameters it writes into (``x[i] = v``, ``x += v``): fine for arrays, which ``jit``
    writes back, a side effect on anything else (the caller checks the arguments)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "fn", fn)                       # an nbxla.jit function: what it wraps
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return f"it calls {getattr(fn, '__name__', fn)!r}, whose source nbxla cannot read"
    seen = set() if seen is None else seen
    if code in seen:
        return None
    seen.add(code)
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return f"the source of {fn.__name__!r} is not available"
    ast.increment_lineno(tree, first - 1)
    func = tree.body[0] if tree.body else None
    if not isinstance(func, (ast.FunctionDef, ast.Lambda, ast.Expr)):
        return f"the source of {fn.__name__!r} is not a plain function"
    checker = _Checker(fn, depth, seen)
    why = checker.check(func)
    if written is not None:
        written.update(checker.written)
    if depth and checker.written:
        return f"{fn.__name__} writes into its arguments"
    return why


class _Checker:
    def __init__(self, fn, depth: int, seen: set):
        self.fn, self.depth, self.seen = fn, depth, seen
        self.written: set = set()
        self.namespace = dict(builtins.__dict__)
        self.namespace.update(getattr(fn, "__globals__", {}))
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                self.namespace[name] = cell.cell_contents
            except ValueError:
                pass
        self.params = set(fn.__code__.co_varnames[:fn.__code__.co_argcount +
                                                  fn.__code__.co_kwonlyargcount])
        self.locals: set = set()                 # names the function binds (made by it)

    def check(self, func) -> str | None:
        body = func.body if isinstance(func, ast.FunctionDef) else [func]
        nodes = [n for stmt in body for n in ast.walk(stmt)]
        for node in nodes:                  # (bound anywhere: made by the function)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.locals.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.Lambda, ast.arguments)):
                self.locals.update(a.arg for a in ast.walk(node) if isinstance(a, ast.arg))
                if isinstance(node, ast.FunctionDef):
                    self.locals.add(node.name)
        self.locals -= self.params
        for node in nodes:
            why = self._node(node)
            if why is not None:
                return f"{why} (line {getattr(node, 'lineno', '?')} of {self.fn.__name__})"
        return None

    def _node(self, node) -> str | None:
        for kind, what in _NOT_ALLOWED.items():
            if isinstance(node, kind):
                return f"it has {what}"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and isinstance(t.ctx, (ast.Store, ast.Del)):
                        return "it sets an attribute"
                    if isinstance(t, ast.Subscript) and isinstance(t.ctx, (ast.Store, ast.Del)):
                        root = _root_name(t)
                        if root is None or (root not in self.locals and root not in self.params):
                            return f"it writes into {root or 'an object'} it did not make " \
                                   "or receive"
                        if isinstance(node, ast.Delete):
                            return "it deletes items"
                        if root in self.params:
                            self.written.add(root)
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id in self.params:
                self.written.add(node.target.id)        # (in place on an array, a list)
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _call(self, node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in self.locals:
                return None                       # its own lambda or def: checked above
            if func.id in self.params:
                return f"it calls its argument {func.id!r}"
            if func.id not in self.namespace:
                return None                       # (a NameError: the trace says so)
            return self._callee(func.id, self.namespace[func.id])
        if isinstance(func, ast.Attribute):
            owner = _resolve(func.value, self.namespace, self.locals | self.params)
            if isinstance(owner, types.ModuleType):
                if owner.__name__.startswith("numpy.random"):
                    return f"it calls {owner.__name__}.{func.attr} (hidden random state)"
                return self._callee(f"{owner.__name__}.{func.attr}",
                                    getattr(owner, func.attr, None))
            if func.attr in MUTATING_METHODS:
                root = _root_name(func.value)
                if root is None or root not in self.locals:
                    return f"it calls .{func.attr}() on {root or 'an object'} it did not make"
            return None
        return "it calls the result of an expression"

    def _callee(self, name: str, value) -> str | None:
        if getattr(value, "__self__", None) is builtins or value is getattr(builtins, name, 0):
            pure = name in PURE_BUILTINS or (isinstance(value, type) and
                                             issubclass(value, BaseException))
            return None if pure else f"it calls {name}()"
        module = getattr(value, "__module__", None) or ""
        if isinstance(value, np.ufunc) or module == "math":
            return None
        if module.startswith("numpy"):
            if module.startswith("numpy.random") or name.rsplit(".", 1)[-1] in NUMPY_EFFECTS:
                return f"it calls {name}"
            return None
        if module.startswith("nbxla") and not hasattr(value, "fn"):
            return None                           # (nbxla.random and the like: traceable)
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None and code.co_filename.startswith(_LIBRARY_DIRS):
            return f"it calls {name}, library code it does not trace"
        if callable(value) and self.depth < MAX_DEPTH:
            return side_effect(value, self.depth + 1, self.seen)
        return f"it calls {name}, which nbxla cannot see into"


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _resolve(node, namespace: dict, local: set):
    """The module an attribute chain like ``np.linalg`` names (None for anything else)."""
    if isinstance(node, ast.Name):
        return None if node.id in local else namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, namespace, local)
        if isinstance(owner, types.ModuleType):
            return getattr(owner, node.attr, None)
    return None


def difference(got, want, path: str = "the result") -> str | None:
    """How the compiled program's result ``got`` differs from NumPy's ``want`` (structure,
    type, dtype, shape, or values beyond rounding), or None."""
    if isinstance(want, (tuple, list, dict)):
        if type(got) is not type(want) or len(got) != len(want):
            return f"{path} is a {type(got).__name__} where NumPy gives a {type(want).__name__}"
        items = want.items() if isinstance(want, dict) else enumerate(want)
        for k, w in items:
            if isinstance(want, dict) and k not in got:
                return f"{path} lacks the key {k!r}"
            why = difference(got[k], w, f"{path}[{k!r}]")
            if why is not None:
                return why
        return None
    if type(got) is not type(want):
        return (f"{path} is a {type(got).__module__}.{type(got).__name__} where NumPy gives a "
                f"{type(want).__module__}.{type(want).__name__}")
    if isinstance(want, (np.ndarray, np.generic)):
        if got.dtype != want.dtype or np.shape(got) != np.shape(want):
            return (f"{path} is {got.dtype}{list(np.shape(got))} where NumPy gives "
                    f"{want.dtype}{list(np.shape(want))}")
        if want.dtype.kind in "fc":       # (rounding: relative to the largest magnitude)
            rtol = 1e-4 if want.dtype.itemsize <= 4 * (2 if want.dtype.kind == "c" else 1) \
                else 1e-9
            with np.errstate(all="ignore"):
                finite = np.abs(np.asarray(want)[np.isfinite(want)])
                scale = max(float(finite.max()), 1.0) if finite.size else 1.0
                close = np.allclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
        else:
            close = np.array_equal(got, want)
        return None if close else f"{path} differs from NumPy's in its values"
    if isinstance(want, float) and isinstance(got, float):
        return None if np.isclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True) else \
            f"{path} differs from NumPy's ({got!r} vs {want!r})"
    try:
        return None if got == want else f"{path} differs from NumPy's ({got!r} vs {want!r})"
    except Exception:                   # (objects that do not compare: not the same)
        return f"{path} cannot be compared with NumPy's"


_PYTHON_SCALARS = (bool, int, float, complex)


def python_scalars(want):
    """Where NumPy's result holds Python scalars (an iteration count, a ``float()``): a tree
    like ``want`` with True there, for ``as_python``; None where it holds none.  (A compiled
    program gives NumPy scalars in their place.)"""
    if type(want) in (tuple, list):
        kinds = [python_scalars(w) for w in want]
        return type(want)(kinds) if any(k is not None for k in kinds) else None
    if type(want) is dict:
        kinds = {k: python_scalars(w) for k, w in want.items()}
        return kinds if any(k is not None for k in kinds.values()) else None
    return True if type(want) in _PYTHON_SCALARS else None


def as_python(result, kinds):
    """``result`` with the NumPy scalars at ``kinds``' places made Python scalars."""
    if kinds is None:
        return result
    if kinds is True:
        return result.item() if isinstance(result, np.generic) else result
    if type(result) is dict:
        return {k: as_python(v, kinds.get(k)) for k, v in result.items()}
    if type(result) in (tuple, list) and len(result) == len(kinds):
        return type(result)(as_python(r, k) for r, k in zip(result, kinds))
    return result
