"""Arrays that come back from calls become stand-ins: ``y = g(x)`` runs as ``y = hook(g(x))``.

Large NumPy arrays made outside the stand-ins' reach — returned by native code
(``scipy.linalg.solve_banded``), made by ``np.zeros``/``np.empty``, drawn by ``np.random`` —
would otherwise keep all later work on them eager (NumPy never hands them to us).  The
auto-clustered function's (or cell's) syntax tree is rewritten once so that every call's
result passes through ``hook``, which wraps large arrays as concrete stand-ins: work on them
is recorded, and writes into them (``out[1:] = y``) stay in the graph.

The function called goes through ``hook.callee`` first (``y = hook(hook.callee(g)(x))``):
NumPy's creators (``np.zeros``...) become pending constants (``create.py``), and the user's
own Python functions (helpers defined outside NumPy, SciPy and the standard library) are
rewritten the same way, once per code object, so that arrays made inside a helper
(``out = np.zeros(shape); out[:, :, 1:-1] = x``) stay in the graph too.

The same rewrite binds each local of the function's body to None after the last top-level
statement that mentions it (``release_dead_locals``), so that graph breaks do not compute
values no one will read.
"""

from __future__ import annotations

import ast
import inspect
import os
import sysconfig
import textwrap
import types
import weakref
from contextvars import ContextVar

import numpy as np

from .create import CREATED, creator

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


# id(NumPy's creator) -> (it, what rewritten code calls instead)
_CREATORS = {id(f): (f, creator(f, ACTIVE)) for f in CREATED}
_NOT_USER = tuple({os.path.abspath(p) + os.sep for p in
                   (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                    sysconfig.get_paths()["platlib"], os.path.dirname(np.__file__),
                    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))})
_NOT_REWRITTEN = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_REWRITTEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # function -> what to call
_AS_IT_IS = object()            # (in _REWRITTEN: the function is called as it is)


def callee(fn):
    """What a call of ``fn`` in rewritten code calls (see the module docstring)."""
    made = _CREATORS.get(id(fn))
    if made is not None and made[0] is fn:    # (np.ones and np.full are Python functions)
        return made[1]
    if type(fn) is types.FunctionType:
        session = ACTIVE.get()
        if session is None or session.closed:
            return fn
        new = _REWRITTEN.get(fn)
        if new is None:
            new = _rewritten_helper(fn)
            # (a function called as it is is remembered by a marker: the function itself as
            # the value of its own weak key would keep it, and what its closure holds,
            # alive for good; a stand-in's method, ``x.flatten``, is a new closure over
            # ``x`` on every call)
            _REWRITTEN[fn] = _AS_IT_IS if new is fn else new
        return fn if new is _AS_IT_IS else new
    return fn


hook.callee = callee


def _rewritten_helper(fn):
    """``fn`` rewritten (``instrument``) when it is the user's own plain function, else
    ``fn``."""
    code = fn.__code__
    if HOOK in code.co_freevars or code.co_flags & _NOT_REWRITTEN or \
            "__wrapped__" in fn.__dict__ or code.co_filename.startswith(_NOT_USER) or \
            code.co_filename.startswith("<frozen"):
        return fn                    # (already rewritten; a generator; a decorator's wrapper)
    return instrument(fn) or fn


class _WrapCalls(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        node.func = ast.copy_location(ast.Call(
            ast.Attribute(ast.Name(HOOK, ast.Load()), "callee", ast.Load()), [node.func], []),
            node.func)
        return ast.copy_location(
            ast.Call(ast.Name(HOOK, ast.Load()), [node], []), node)


def rewrite_tree(tree: ast.AST) -> ast.AST:
    return ast.fix_missing_locations(_WrapCalls().visit(tree))


_INTROSPECTION = {"locals", "vars", "eval", "exec", "globals", "dir"}


# Statements run once, whose only reads of a local can release it as they read it.
_SIMPLE = (ast.Assign, ast.Expr, ast.Return)
_SCOPES = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _read_once(stmt: ast.stmt, names) -> set:
    """The names among ``names`` that ``stmt`` mentions exactly once, as a read."""
    found: dict = {}
    for n in ast.walk(stmt):
        if isinstance(n, ast.Name) and n.id in names:
            found.setdefault(n.id, []).append(n)
    return {name for name, ns in found.items() if len(ns) == 1 and isinstance(ns[0].ctx, ast.Load)}


class _ReleaseAtLoad(ast.NodeTransformer):
    """``name`` read as ``(name, name := None)[0]``: the value goes on, the local is None
    before the rest of the statement runs (not inside nested scopes)."""

    def __init__(self, names: set):
        self.names = names

    def visit_Name(self, node: ast.Name):
        if node.id not in self.names or not isinstance(node.ctx, ast.Load):
            return node
        cleared = ast.NamedExpr(ast.Name(node.id, ast.Store()), ast.Constant(None))
        pair = ast.Tuple([ast.Name(node.id, ast.Load()), cleared], ast.Load())
        return ast.copy_location(ast.Subscript(pair, ast.Constant(0), ast.Load()), node)

    def generic_visit(self, node):
        if isinstance(node, _SCOPES):
            return node
        return super().generic_visit(node)


def release_dead_locals(defn: ast.FunctionDef, cellvars) -> None:
    """After the last top-level statement that mentions a local, bind it to None; where that
    statement is simple (an assignment, an expression, a return) and reads the local once,
    as it reads it: ``sol = solve(a_tri, ...)`` then hands ``a_tri`` to the callee alone,
    and a break inside the callee does not compute it once the callee is done with it.

    A pending value is computed at a graph break only if something still holds it; a local
    the function never reads again would otherwise make every break write it out (a hand
    split would not).  Only locals of this function's own body count (not ones a nested
    function or comprehension shares: ``cellvars``), and nothing is done in functions that
    look at their own locals (``locals()``, ``eval``...) or are generators."""
    walk = list(ast.walk(defn))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in walk) or \
            any(isinstance(n, ast.Name) and n.id in _INTROSPECTION for n in walk):
        return
    declared = {name for n in walk if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    args = defn.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    stored = {n.id for n in walk if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    candidates = (stored | params) - declared - set(cellvars)
    last: dict[str, int] = {}
    for i, stmt in enumerate(defn.body):
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and n.id in candidates:
                last[n.id] = i
    body = []
    for i, stmt in enumerate(defn.body):
        dead = sorted(name for name, k in last.items() if k == i)
        if dead and isinstance(stmt, _SIMPLE):
            stmt = _ReleaseAtLoad(_read_once(stmt, dead)).visit(stmt)
        body.append(stmt)
        if dead and i < len(defn.body) - 1 and not isinstance(stmt, (ast.Return, ast.Raise)):
            release = ast.Assign([ast.Name(name, ast.Store()) for name in dead],
                                 ast.Constant(None))
            body.append(ast.copy_location(release, stmt))
    defn.body = body


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
    release_dead_locals(defn, code.co_cellvars)
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
