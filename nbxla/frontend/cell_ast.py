"""What a notebook cell reads and binds, found from its syntax tree before it runs.

A name the cell *reads before binding* is an input (taken from the namespace); a name it
*binds* at top level is a candidate output.  The analysis is deliberately conservative:
a binding inside ``if``/``for``/``while``/``try``/``with`` does not count as certain, so a later
read of that name is an input too (an unused input costs nothing but a cache-key entry).

The cell's last expression, if any, is rewritten into an assignment to ``DISPLAY`` so that
its value can be traced, compiled and returned like any other output.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import io
import linecache
import sys
import textwrap
import tokenize
import types
from dataclasses import dataclass
from types import CodeType, ModuleType, SimpleNamespace

import numpy as np

from ..errors import NotCompilableError
from ..hlo import SourceLocation

DISPLAY = "__nbxla_display__"

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_CERTAIN = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom,
            ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Expr, ast.Delete)


def _scope_names(nodes) -> tuple[set[str], list[str]]:
    """(names read, names bound) by code in one scope; nested scopes contribute their free reads."""
    loads: set[str] = set()
    stores: dict[str, None] = {}        # ordered set: outputs keep the cell's order

    def visit(node):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads.add(node.id)
            else:                        # Store and Del both change the binding
                stores[node.id] = None
            return
        if isinstance(node, _SCOPES):
            outer, inner = _split_scope(node)
            for child in outer:
                visit(child)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stores[node.name] = None
            params = _params(node)
            inner_loads, inner_stores = _scope_names(inner)
            loads.update(inner_loads - params - set(inner_stores))
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                stores[alias.asname or alias.name.split(".")[0]] = None
        elif isinstance(node, ast.ExceptHandler) and node.name:
            stores[node.name] = None
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            loads.add(node.target.id)    # ``a += b`` reads ``a`` first
        for child in ast.iter_child_nodes(node):
            visit(child)

    for n in nodes:
        visit(n)
    return loads, list(stores)


def _split_scope(node) -> tuple[list, list]:
    """Parts of a scope-making node evaluated outside it, and parts evaluated inside."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        outer = a.defaults + [d for d in a.kw_defaults if d] + getattr(node, "decorator_list", [])
        return outer, node.body if isinstance(node.body, list) else [node.body]
    if isinstance(node, ast.ClassDef):
        return node.bases + [k.value for k in node.keywords] + node.decorator_list, node.body
    # comprehension: the first iterable is evaluated outside
    first = node.generators[0]
    rest = [first.target, *first.ifs, *node.generators[1:]]
    inner = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
    return [first.iter], rest + inner


def _params(node) -> set[str]:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x]
    return set(names)


@dataclass(frozen=True)
class CellAnalysis:
    tree: ast.Module              # with the last expression assigned to DISPLAY
    reads: tuple[str, ...]        # read before (certainly) bound, in first-read order
    binds: tuple[str, ...]        # bound (or deleted) at top level
    displays: bool                # the last statement is an expression, not silenced by ';'

    def code(self, filename: str) -> CodeType:
        return compile(self.tree, filename, "exec")

    def traced_code(self, filename: str) -> CodeType:
        """The cell compiled with its loops and branches converted (see ``autograph``)."""
        from .autograph import convert_tree
        with deep_trees():
            return compile(convert_tree(self.tree), filename, "exec")


@contextlib.contextmanager
def deep_trees():
    """Room on the Python stack for walking a syntax tree as deep as Python's parser accepts
    (``y + y + ... + y`` with 2 000 terms on one line is one nesting level per ``+``; copying
    and converting it recurses a few Python frames per level, past the default limit of
    1 000).  The parser has already bounded the depth, so the deeper recursion is bounded too
    (and Python-to-Python calls do not grow the C stack)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _too_deep(source: str) -> SyntaxError:
    """Python's own parser gives up on a line nested too deeply (thousands of chained
    operators or brackets); plain Python cannot run it either.  Said at the line with the
    most tokens, its text shortened (a 100 000-character line would fill the screen)."""
    counts = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            counts[tok.start[0]] = counts.get(tok.start[0], 0) + 1
    except (tokenize.TokenError, SyntaxError):
        pass
    line = max(counts, key=counts.get, default=1)
    text = (source.splitlines() or [""])[line - 1]
    shown = text if len(text) <= 200 else text[:200] + " ..."
    return SyntaxError(f"line {line} nests too deeply for Python's parser ({counts.get(line, 0)} "
                       "tokens, e.g. a very long chain of + or of brackets): split it into several "
                       "statements (partial sums, or build a list and np.array it)",
                       ("<cell>", line, 1, shown))


@functools.lru_cache(maxsize=256)
def analyze(source: str) -> CellAnalysis:
    """Parse a cell (already padded so that its line numbers are the notebook's)."""
    try:
        tree = ast.parse(source)
    except RecursionError:
        raise _too_deep(source) from None
    reads: dict[str, None] = {}
    binds: dict[str, None] = {}
    certain: set[str] = set()
    with deep_trees():
        for stmt in tree.body:
            loads, stores = _scope_names([stmt])
            reads.update(dict.fromkeys(sorted(loads - certain)))
            binds.update(dict.fromkeys(stores))
            if isinstance(stmt, _CERTAIN):
                certain.update(stores)
    displays = bool(tree.body) and isinstance(tree.body[-1], ast.Expr) \
        and not source.rstrip().endswith(";")
    if displays:
        last = tree.body[-1]
        target = ast.Name(DISPLAY, ast.Store())
        tree.body[-1] = ast.copy_location(ast.Assign([ast.copy_location(target, last)], last.value), last)
        ast.fix_missing_locations(tree)
    return CellAnalysis(tree, tuple(reads), tuple(binds), displays)


# ---- hidden state: np.random ----------------------------------------------------------------

def _is_numpy_random(value) -> bool:
    if isinstance(value, ModuleType):
        return value.__name__.startswith("numpy.random")
    module = getattr(value, "__module__", None) or type(value).__module__ or ""
    return isinstance(module, str) and module.startswith("numpy.random")


def check_no_random(analysis: CellAnalysis, namespace: dict, filename: str, label: str,
                    hint: str = "draw the random arrays in an ordinary cell before this one and "
                                "use them here, or draw them in the cell with nbxla.random and "
                                "a key made outside (key = nbxla.random.key(0))") -> None:
    """Refuse ``np.random.*`` (and generators from it) before the cell runs."""
    for node in ast.walk(analysis.tree):
        what = None
        if isinstance(node, ast.Attribute) and node.attr == "random" and isinstance(node.value, ast.Name):
            base = namespace.get(node.value.id, np if node.value.id in ("np", "numpy") else None)
            if base is np:
                what = f"{node.value.id}.random"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                and node.id in namespace and _is_numpy_random(namespace[node.id]):
            what = node.id
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            what = next((m for m in modules if m.startswith("numpy.random")), None)
        if what:
            source = linecache.getline(filename, node.lineno) or None
            raise NotCompilableError(
                f"{what} has hidden state (a random generator that advances on every call): "
                "a compiled cell would not draw new numbers when it runs again",
                SourceLocation(label, node.lineno, None, None, source), hint)


def check_function_no_random(fn) -> None:
    """``check_no_random`` for an ``@nbxla.jit`` function's own source (when Python has it):
    a generator call traced once would be frozen into the compiled program as a constant."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not isinstance(getattr(fn, "__code__", None), types.CodeType):
        return                    # a library function (np.sum) or another callable: not user code
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):     # no source (REPL, lambdas mid-expression)
        return
    ast.increment_lineno(tree, start - 1)
    func = tree.body[0] if tree.body else None
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # Only the body runs on each call: decorators and default values were evaluated once,
        # when the function was defined (``@register(lambda: rng.random(3))`` is no draw).
        tree = ast.Module(body=func.body, type_ignores=[])
    namespace = dict(getattr(fn, "__globals__", {}))
    closure = getattr(fn, "__closure__", None) or ()
    for name, cell in zip(getattr(getattr(fn, "__code__", None), "co_freevars", ()), closure):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:
            pass
    filename = fn.__code__.co_filename
    check_no_random(SimpleNamespace(tree=tree), namespace, filename, filename,
                    "draw the random arrays outside and pass them in as arguments, or pass in "
                    "a key and draw them with nbxla.random (key = nbxla.random.key(0))")
