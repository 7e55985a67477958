"""Arrays that come back from calls become stand-ins: ``y = g(x)`` runs as ``y = hook(g(x))``.

Large NumPy arrays made outside the stand-ins' reach — returned by native code
(``scipy.linalg.solve_banded``), made by ``np.zeros``/``np.empty``, drawn by ``np.random`` —
would otherwise keep all later work on them eager (NumPy never hands them to us).  The
auto-clustered function's (or cell's) syntax tree is rewritten once so that every call's
result passes through ``hook``, which wraps large arrays as concrete stand-ins: work on them
is recorded, and writes into them (``out[1:] = y``) stay in the graph.  Only the function
itself is rewritten, not the functions it calls; results those return are wrapped here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from contextvars import ContextVar

import numpy as np

HOOK = "__nbxla_result__"
ACTIVE: ContextVar = ContextVar("nbxla_cluster_session", default=None)


def hook(value):
    """A call's result: a large NumPy array becomes a stand-in of the running session."""
    session = ACTIVE.get()
    if session is None or session.closed:
        return value
    if type(value) is np.ndarray:
        return session.adopt(value)
    if type(value) is tuple and any(type(v) is np.ndarray for v in value):
        return tuple(session.adopt(v) if type(v) is np.ndarray else v for v in value)
    return value


class _WrapCalls(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        return ast.copy_location(
            ast.Call(ast.Name(HOOK, ast.Load()), [node], []), node)


def rewrite_tree(tree: ast.AST) -> ast.AST:
    return ast.fix_missing_locations(_WrapCalls().visit(tree))


def instrument(fn):
    """``fn`` with its calls' results hooked, or None when its source is not available
    (builtins, lambdas in expressions, functions made by exec without a file)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        first = inspect.getsourcelines(fn)[1]
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError):
        return None
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    defn = tree.body[0] if tree.body else None
    if not isinstance(defn, (ast.FunctionDef, ast.AsyncFunctionDef)) or defn.name != fn.__name__:
        return None
    defn.decorator_list = []
    ast.increment_lineno(tree, first - 1)       # tracebacks and reports keep the real lines
    # def outer(hook, *free variables): def fn(...): ...; return fn  -- the inner function's
    # free variables are then the original's plus the hook, bound from the original closure.
    free = list(code.co_freevars)
    fields = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
    outer = ast.FunctionDef(
        name="__nbxla_outer__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in [HOOK] + free],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[rewrite_tree(defn), ast.Return(ast.Name(fn.__name__, ast.Load()))],
        decorator_list=[], returns=None, **fields)
    module = ast.fix_missing_locations(ast.Module([outer], []))
    ast.copy_location(outer, defn)
    try:
        compiled = compile(module, filename, "exec")
    except SyntaxError:
        return None
    outer_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in outer_code.co_consts if isinstance(c, types.CodeType)
                 and c.co_name == fn.__name__)
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    cells[HOOK] = types.CellType(hook)
    try:
        closure = tuple(cells[name] for name in inner.co_freevars)
    except KeyError:                  # a free variable the original did not have
        return None
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(getattr(fn, "__dict__", {}))
    return new
