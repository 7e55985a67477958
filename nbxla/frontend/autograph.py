"""AutoGraph-style conversion: the syntax tree of a function or cell, rewritten so that its
loops, branches and writes go through ``runtime.py`` (``control.py``, ``loops.py``) when it runs on Tracers.

What is rewritten (and why):

* ``for i in range(...)`` and ``while cond`` become calls with the loop body as a function of
  its state (every name the body reads or binds): ``control`` traces the body once into an HLO
  ``while`` when that is valid, and otherwise runs the Python loop (the old unrolling).
* ``if``/conditional expressions/``and``/``or``/``not``/chained comparisons become calls that
  keep Python semantics on Python values and select between both branches on traced ones.
* ``X[key] = v`` and ``X[key] op= v`` rebind ``X`` (when it is a local name) through
  ``control.setitem``: a NumPy array made inside the compiled code (``np.zeros``...) becomes a
  traced array on the first traced write (create-then-fill).
* every call goes through ``control.call`` (``min``/``max`` on traced scalars, ``np.array`` of
  traced values, the user's own helper functions converted in turn).

* ``break``/``continue`` in a ``while`` or ``for ... in range()`` loop (directly or in ``if``s)
  become flags: the loop condition tests the break flag, and what follows an exit runs under
  ``if not flag`` (a ``for`` with ``break`` becomes a ``while`` over its own counter; its
  ``else`` runs under ``if not flag`` after it).  ``for x in X`` with exits does the same over
  ``range(len(X))`` when X is traced, and stays a Python loop otherwise.

A loop whose body holds ``return`` (or ``global``/``nonlocal``/``del``/``yield``, or an exit
inside ``try``/``with``) is left as Python; its condition, if traced, fails with an error
naming the line.
"""

from __future__ import annotations

import ast
import copy
import inspect
import itertools
import textwrap
import types
from typing import Callable

from . import runtime
from .loop_writes import dead_on_entry, with_written
from .registry import entry_point

AG = "__nbxla_ag__"
_PREFIX = "__nbxla_"
_EXIT = _PREFIX + "exit_"        # the flags and counter of a loop with break/continue: loop state
_counter = itertools.count(1)
_STOPPERS = (ast.Break, ast.Continue, ast.Return, ast.Global, ast.Nonlocal, ast.Delete,
             ast.Yield, ast.YieldFrom, ast.Await, ast.Try, ast.With)
# Names whose loads must stay plain: zero-argument super() finds its class through the name.
_NOT_LOADED = frozenset({AG, "super", "locals", "globals", "__class__"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _ag(attr: str) -> ast.expr:
    return ast.Attribute(ast.Name(AG, ast.Load()), attr, ast.Load())


def _call(attr: str, *args: ast.expr) -> ast.Call:
    return ast.Call(_ag(attr), list(args), [])


def _const(value) -> ast.Constant:
    return ast.Constant(value)


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), body)


def _walk_scope(nodes):
    """Nodes of these statements, not descending into nested functions/classes/comprehensions."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _stops(body, loop: bool) -> ast.AST | None:
    """A statement that stops the body from being a function of its state: returns, and (in a
    loop's own body) break/continue not inside a nested loop."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, (ast.Break, ast.Continue)):
            if loop:
                return node
            return node              # inside an if: leaves the enclosing loop
        if isinstance(node, _STOPPERS):
            return node
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            # break/continue there belong to that loop; returns still stop us
            stack.extend(n for n in ast.iter_child_nodes(node)
                         if not isinstance(n, (ast.Break, ast.Continue)))
            for inner in _walk_scope(node.body + node.orelse):
                if isinstance(inner, (ast.Return, ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom,
                                      ast.Await)):
                    return inner
            continue
        stack.extend(ast.iter_child_nodes(node))
    return None


def _state_names(nodes) -> list[str]:
    """Names the statements read or bind (their free names, in first-seen order)."""
    seen: dict[str, None] = {}
    for node in _walk_scope(nodes):
        if isinstance(node, ast.Name) and (not node.id.startswith(_PREFIX) or node.id.startswith(_EXIT)) \
                and node.id != AG:
            seen.setdefault(node.id, None)
        elif isinstance(node, _SCOPES):
            for inner in ast.walk(node):       # names a nested scope reads from ours
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load) \
                        and not inner.id.startswith(_PREFIX) and inner.id != AG:
                    seen.setdefault(inner.id, None)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                seen.setdefault(node.name, None)
    return list(seen)


def _subscript_root(target) -> ast.Name | None:
    node = target
    while isinstance(node, ast.Subscript):
        node = node.value
    return node if isinstance(node, ast.Name) and node is not target else None


def _stores_into_subscript(target) -> bool:
    """Whether an assignment target writes into an array element: ``x[i]``, or one inside a
    tuple/list target (``a[i], b[i] = ...``)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_stores_into_subscript(e) for e in target.elts)
    if isinstance(target, ast.Starred):
        return _stores_into_subscript(target.value)
    return _subscript_root(target) is not None


def _key_expr(sl: ast.expr) -> ast.expr:
    """A subscript's key as an ordinary expression (slices become slice(...) calls)."""
    if isinstance(sl, ast.Slice):
        parts = [p if p is not None else _const(None) for p in (sl.lower, sl.upper, sl.step)]
        return ast.Call(ast.Name("slice", ast.Load()), parts, [])
    if isinstance(sl, ast.Tuple):
        return ast.Tuple([_key_expr(e) for e in sl.elts], ast.Load())
    return sl


class _Converter(ast.NodeTransformer):
    def __init__(self, cell: bool):
        # Names the scope may rebind (None: a cell, where every name is the namespace's).
        self.local_names: set[str] | None = None
        # Functions and lambdas a cell defines are re-homed into the user's namespace, which
        # has no ``__nbxla_ag__``: their names are read plainly (``ld`` is for the trace).
        self.cell = cell
        self.plain_loads = 0

    # ---- helpers ---------------------------------------------------------------------------

    def _rebindable(self, name: str) -> bool:
        return self.local_names is None or name in self.local_names

    def _state_unpack(self, names, arg: str) -> list[ast.stmt]:
        if not names:
            return []
        target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        return [ast.Assign([target], ast.Name(arg, ast.Load()))]

    def _state_return(self, names) -> ast.Return:
        # (through locals(): an inner loop or branch may have left a name unbound, see _rebind)
        return ast.Return(_call("bound_state", ast.Call(ast.Name("locals", ast.Load()), [], []),
                                ast.Tuple([_const(n) for n in names], ast.Load())))

    def _function(self, name, params, names, body, returns=True) -> ast.FunctionDef:
        args = ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, [])
        stmts = self._state_unpack(names, params[-1]) + body
        if returns:
            stmts.append(self._state_return(names))
        return ast.FunctionDef(name, args, stmts or [ast.Pass()], [], None)

    def _state_call(self, names) -> ast.Call:
        # (a function's state names are its locals: none may read a global of the same name)
        glob = ast.Call(ast.Name("globals", ast.Load()), [], []) if self.local_names is None else _const(None)
        return _call("get_state", ast.Call(ast.Name("locals", ast.Load()), [], []), glob,
                     ast.Tuple([_const(n) for n in names], ast.Load()))

    def _rebind(self, names, value: ast.expr) -> list[ast.stmt]:
        """``names = value`` after a loop or branch; a name it left unbound (a loop that ran no
        times, a branch not taken) is deleted again, so that reading it raises
        UnboundLocalError (NameError in a cell) as in Python, instead of yielding UNDEFINED."""
        if not names:
            return [ast.Expr(value)]
        unbind = [ast.If(ast.Compare(ast.Name(n, ast.Load()), [ast.Is()], [_ag("UNDEFINED")]),
                         [ast.Delete([ast.Name(n, ast.Del())])], [])
                  for n in names if not n.startswith(_PREFIX)]
        return [ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())], value)] + unbind

    def _visit_body(self, stmts) -> list[ast.stmt]:
        """The statements converted, each with its own line on every new node in it."""
        out = []
        for stmt in stmts:
            for s in _as_list(self.visit(stmt)):
                out.append(ast.fix_missing_locations(s) if hasattr(s, "lineno") else s)
        return out

    # ---- statements ------------------------------------------------------------------------

    def visit_FunctionDef(self, node):
        outer = self.local_names
        lowered = _lower_returns(node)
        if lowered is not None:
            node.body = lowered
        self.local_names = _local_names(node)
        self.plain_loads += self.cell
        self.generic_visit(node)
        self.plain_loads -= self.cell
        self.local_names = outer
        return node

    def visit_Lambda(self, node):
        self.plain_loads += self.cell
        self.generic_visit(node)
        self.plain_loads -= self.cell
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_For(self, node):
        lowered = self._lower_exits(node)
        if lowered is not None:
            return [s for stmt in lowered for s in _as_list(self.visit(stmt))]
        it = node.iter
        is_range = (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                    and 1 <= len(it.args) <= 3 and not it.keywords
                    and not any(isinstance(a, ast.Starred) for a in it.args))
        convertible = (is_range and isinstance(node.target, ast.Name) and not node.orelse
                       and _stops(node.body, loop=True) is None)
        if not is_range and not node.orelse and _stops(node.body, loop=True) is None:
            return self._for_items(node)
        if not convertible:
            self.generic_visit(node)
            return node
        range_args = [self.visit(a) for a in it.args]
        names = [n for n in _state_names(node.body) if n != node.target.id and self._rebindable(n)]
        dead = dead_on_entry(node.body, names)
        body = self._visit_body(node.body)
        k = next(_counter)
        fname = f"{_PREFIX}for_{k}"
        fn = self._function(fname, [node.target.id, f"{_PREFIX}s"], names, body)
        target = node.target.id
        call = _call("for_range", ast.Name("range", ast.Load()),
                     ast.Tuple(range_args, ast.Load()), ast.Name(fname, ast.Load()),
                     self._state_call(names), ast.Tuple([_const(n) for n in names], ast.Load()),
                     _const(node.lineno), self._state_call([target]))
        with_written(call, node.body, names, dead)
        # the loop variable keeps its last value after the loop, as in Python
        outputs = names + [target] if self._rebindable(target) else names
        if outputs is names:
            call = ast.Subscript(call, ast.Slice(None, _const(-1), None), ast.Load())
        return _located([fn, *self._rebind(outputs, call)], node)

    def _lower_exits(self, node) -> list[ast.stmt] | None:
        """A ``while`` or ``for ... in range(...)`` loop whose ``break``/``continue`` sit in its
        body or in ``if``s there, rewritten without them (as TensorFlow's AutoGraph does):
        ``break`` sets a flag the loop condition tests, ``continue`` one that skips the rest of
        the iteration, and the statements after a possible exit run under ``if not flag``.
        A ``for`` with ``break`` becomes a ``while`` over its own counter, so that a traced
        exit ends the loop early.  The loop's ``else`` runs after it under ``if not flag``.
        None when the loop has no such exits and no ``else``, or other exits."""
        if not node.orelse and not _own_exits(node.body):
            return None
        is_range = isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and \
            isinstance(node.iter.func, ast.Name) and node.iter.func.id == "range" and \
            1 <= len(node.iter.args) <= 3 and not node.iter.keywords and \
            not any(isinstance(a, ast.Starred) for a in node.iter.args)
        if isinstance(node, ast.For) and not is_range and _own_exits(node.body):
            return self._items_with_exits(node)
        if not _own_exits(node.body):           # only an else: it always runs after the loop
            loop = ast.For(node.target, node.iter, node.body, []) if isinstance(node, ast.For) \
                else ast.While(node.test, node.body, [])
            return [ast.fix_missing_locations(s) for s in _located([loop] + node.orelse, node)]
        k = next(_counter)
        brk, cont = f"{_EXIT}break_{k}", f"{_EXIT}continue_{k}"
        has_break = any(isinstance(n, ast.Break) for n in _own_exits(node.body))
        has_cont = any(isinstance(n, ast.Continue) for n in _own_exits(node.body))
        flags = [f for f, used in ((brk, has_break), (cont, has_cont)) if used]
        body = _without_exits(node.body, brk, cont, flags)
        if _stops(body, loop=True) is not None:
            return None
        if self.local_names is not None:
            self.local_names.update(flags + [f"{_EXIT}counter_{k}", f"{_EXIT}stop_{k}", f"{_EXIT}step_{k}"])
        before = [_assign(brk, _const(False))] if has_break else []
        body = ([_assign(cont, _const(False))] if has_cont else []) + body
        not_broken = ast.UnaryOp(ast.Not(), ast.Name(brk, ast.Load()))
        if isinstance(node, ast.While):
            test = ast.BoolOp(ast.And(), [not_broken, node.test]) if has_break else node.test
            loop = ast.While(test, body, [])
        elif not has_break:
            loop = ast.For(node.target, node.iter, body, [])
        else:
            counter, stop, step = f"{_EXIT}counter_{k}", f"{_EXIT}stop_{k}", f"{_EXIT}step_{k}"
            bounds = ast.Tuple([ast.Name(n, ast.Store()) for n in (counter, stop, step)], ast.Store())
            before.append(ast.Assign([bounds], _call("range_bounds", *node.iter.args)))
            test = ast.BoolOp(ast.And(), [not_broken, _call("in_range", *(ast.Name(n, ast.Load())
                                                                            for n in (counter, stop, step)))])
            advance = _assign(counter, ast.BinOp(ast.Name(counter, ast.Load()), ast.Add(), ast.Name(step, ast.Load())))
            loop = ast.While(test, [ast.Assign([node.target], ast.Name(counter, ast.Load())), advance] + body, [])
        after = ([ast.If(not_broken, node.orelse, [])] if has_break else node.orelse) if node.orelse else []
        return [ast.fix_missing_locations(s) for s in _located(before + [loop] + after, node)]

    def _items_with_exits(self, node) -> list[ast.stmt] | None:
        """``for TARGET in X`` with exits: over a traced X, ``for i in range(len(X))`` with
        ``TARGET = X[i]`` (its exits then lowered as above); over anything else the Python
        loop as it is (a traced exit there names its line).  None for that Python loop."""
        if getattr(node, "_nbxla_python", False):
            return None
        k = next(_counter)
        items, index = f"{_EXIT}items_{k}", f"{_EXIT}index_{k}"
        if self.local_names is not None:
            self.local_names.update([items, index])
        length = ast.Call(ast.Name("len", ast.Load()), [ast.Name(items, ast.Load())], [])
        item = ast.Assign([copy.deepcopy(node.target)],
                          ast.Subscript(ast.Name(items, ast.Load()), ast.Name(index, ast.Load()), ast.Load()))
        indexed = ast.For(ast.Name(index, ast.Store()), ast.Call(ast.Name("range", ast.Load()), [length], []),
                          [item] + copy.deepcopy(node.body), copy.deepcopy(node.orelse))
        python = ast.For(node.target, ast.Name(items, ast.Load()), node.body, node.orelse)
        python._nbxla_python = True
        choose = ast.If(_call("traced_items", ast.Name(items, ast.Load())), [indexed], [python])
        source = ast.Assign([ast.Name(items, ast.Store())], node.iter)
        return [ast.fix_missing_locations(s) for s in _located([source, choose], node)]

    def _for_items(self, node):
        """``for TARGET in X`` / ``for TARGET in enumerate(X[, start])``: ``loops.for_items``
        rolls it over the first axis when X is traced (X joins the loop state, the item is
        ``X[i]``) and iterates in Python otherwise."""
        it, start = node.iter, _const(None)
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" \
                and 1 <= len(it.args) <= 2 and not it.keywords and not any(isinstance(a, ast.Starred) for a in it.args):
            start = self.visit(it.args[1]) if len(it.args) == 2 else _const(0)
            it = it.args[0]
        k = next(_counter)
        items, item, fname = f"{_PREFIX}items_{k}", f"{_PREFIX}item_{k}", f"{_PREFIX}for_{k}"
        bind = ast.Assign([node.target], ast.Name(item, ast.Load()))
        names = [n for n in _state_names([bind] + node.body) if self._rebindable(n)] + [items]
        body = [_located([bind], node)[0]] + self._visit_body(node.body)
        fn = self._function(fname, [item, f"{_PREFIX}s"], names, body)
        call = _call("for_items", ast.Name(items, ast.Load()), start, ast.Name(fname, ast.Load()),
                     self._state_call(names), ast.Tuple([_const(n) for n in names], ast.Load()),
                     _const(node.lineno))
        source = ast.Assign([ast.Name(items, ast.Store())], self.visit(it))
        return _located([source, fn, *self._rebind(names, call)], node)

    def visit_While(self, node):
        lowered = self._lower_exits(node)
        if lowered is not None:
            return [s for stmt in lowered for s in _as_list(self.visit(stmt))]
        if node.orelse or _stops(node.body, loop=True) is not None:
            self.generic_visit(node)
            node.test = ast.copy_location(_call("static_test", node.test, _const("while"),
                                                _const(node.lineno)), node.test)
            return node
        test = self.visit(node.test)
        names = [n for n in _state_names([node.test] + node.body) if self._rebindable(n)]
        # (the test reads before the body: a name it reads is live on entry)
        dead = [n for n in dead_on_entry(node.body, names) if n not in _state_names([node.test])]
        body = self._visit_body(node.body)
        k = next(_counter)
        cname, bname = f"{_PREFIX}while_cond_{k}", f"{_PREFIX}while_body_{k}"
        cond = self._function(cname, [f"{_PREFIX}s"], names, [ast.Return(test)], returns=False)
        fn = self._function(bname, [f"{_PREFIX}s"], names, body)
        call = _call("while_loop", ast.Name(cname, ast.Load()), ast.Name(bname, ast.Load()),
                     self._state_call(names), ast.Tuple([_const(n) for n in names], ast.Load()),
                     _const(node.lineno))
        with_written(call, node.body, names, dead)
        return _located([cond, fn, *self._rebind(names, call)], node)

    def visit_If(self, node):
        if _stops(node.body + node.orelse, loop=False) is not None:
            self.generic_visit(node)
            node.test = ast.copy_location(_call("static_test", node.test, _const("if"),
                                                _const(node.lineno)), node.test)
            return node
        test = self.visit(node.test)
        names = [n for n in _state_names(node.body + node.orelse) if self._rebindable(n)]
        then = self._visit_body(node.body)
        orelse = self._visit_body(node.orelse)
        k = next(_counter)
        tname, ename = f"{_PREFIX}then_{k}", f"{_PREFIX}else_{k}"
        fns = [self._function(tname, [f"{_PREFIX}s"], names, then),
               self._function(ename, [f"{_PREFIX}s"], names, orelse)]
        call = _call("if_stmt", test, ast.Name(tname, ast.Load()), ast.Name(ename, ast.Load()),
                     self._state_call(names), ast.Tuple([_const(n) for n in names], ast.Load()),
                     _const(node.lineno))
        return _located(fns + self._rebind(names, call), node)

    def visit_Assign(self, node):
        self.generic_visit(node)
        if not any(_stores_into_subscript(t) for t in node.targets):
            return node
        if len(node.targets) == 1:
            return self._store(node.targets[0], node.value, node)
        tmp = f"{_PREFIX}value_{next(_counter)}"
        out = [ast.copy_location(ast.Assign([ast.Name(tmp, ast.Store())], node.value), node)]
        for t in node.targets:
            out += _as_list(self._store(t, ast.Name(tmp, ast.Load()), node))
        return out

    def _store(self, target, value, node):
        if isinstance(target, (ast.Tuple, ast.List)) and _stores_into_subscript(target):
            # ``KE[0], PE[0] = energies(...)``: unpacked into fresh names first, as Python
            # unpacks the whole value before it assigns, then each element stored in order.
            parts = [f"{_PREFIX}part_{next(_counter)}" for _ in target.elts]
            names = [ast.Starred(ast.Name(n, ast.Store()), ast.Store()) if isinstance(e, ast.Starred)
                     else ast.Name(n, ast.Store()) for n, e in zip(parts, target.elts)]
            out = [ast.copy_location(ast.Assign([ast.Tuple(names, ast.Store())], value), node)]
            for n, e in zip(parts, target.elts):
                out += _as_list(self._store(e.value if isinstance(e, ast.Starred) else e,
                                            ast.Name(n, ast.Load()), node))
            return out
        root = _subscript_root(target)
        if root is None:
            return ast.copy_location(ast.Assign([target], value), node)
        if self._rebindable(root.id) and target.value is root:
            call = _call("setitem", target.value, _key_expr(target.slice), value)
            stmt = ast.Assign([ast.Name(root.id, ast.Store())], call)
        else:                # a global, or x[i][j]: written in place or not at all
            stmt = ast.Expr(_call("setitem_in_place", target.value, _key_expr(target.slice), value))
        return ast.copy_location(stmt, node)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        op = type(node.op).__name__
        t = node.target
        if isinstance(t, ast.Subscript) and _subscript_root(t) is not None:
            root = _subscript_root(t)
            if self._rebindable(root.id) and t.value is root:
                call = _call("setitem_aug", t.value, _key_expr(t.slice), _const(op), node.value)
                return ast.copy_location(ast.Assign([ast.Name(root.id, ast.Store())], call), node)
            call = _call("setitem_aug", t.value, _key_expr(t.slice), _const(op), node.value,
                         _const(False))
            return ast.copy_location(ast.Expr(call), node)
        if isinstance(t, ast.Name) and self._rebindable(t.id):
            call = _call("aug", ast.Name(t.id, ast.Load()), _const(op), node.value)
            return ast.copy_location(ast.Assign([ast.Name(t.id, ast.Store())], call), node)
        return node

    # ---- expressions -----------------------------------------------------------------------

    def visit_Name(self, node):
        # A local name is read through ``ld``: the array it holds may have become traced
        # through another reference (a helper wrote into its parameter).  Globals cannot be.
        if not isinstance(node.ctx, ast.Load) or not self._rebindable(node.id) or self.plain_loads \
                or node.id in _NOT_LOADED or node.id.startswith(_PREFIX):
            return node
        return ast.copy_location(_call("ld", node), node)

    def visit_Subscript(self, node):
        if not isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name):
            node.slice = self.visit(node.slice)     # ``x[key] = v`` rebinds the name x itself
            return node
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return ast.copy_location(_call("getitem", node.value, _key_expr(node.slice)), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and (node.func.id.startswith(_PREFIX) or
                                                node.func.id in ("locals", "globals", "super")):
            return node
        if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == AG:
            return node
        return ast.copy_location(ast.Call(_ag("call"), [node.func] + node.args, node.keywords), node)

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.copy_location(_call("if_exp", node.test, _lambda(node.body), _lambda(node.orelse)), node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        name = "and_" if isinstance(node.op, ast.And) else "or_"
        return ast.copy_location(_call(name, *[_lambda(v) for v in node.values]), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", node.operand), node)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(_lambda(ast.Compare(left, [op], [right])))
            left = right
        return ast.copy_location(_call("and_", *parts), node)


def _own_exits(body) -> list[ast.stmt]:
    """The ``break``/``continue`` statements of a loop body that belong to that loop."""
    found, stack = [], list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            found.append(node)
        elif not isinstance(node, _SCOPES + (ast.For, ast.While, ast.AsyncFor)):
            stack.extend(ast.iter_child_nodes(node))
    return found


def _lower_returns(node) -> list[ast.stmt] | None:
    """A function whose ``return``s sit in ``if``s (npbench nussinov's ``if b1 + b2 == 3:
    return 1 else: return 0``) with one return at the end, so that an ``if`` on a traced value
    chooses the value: ``return v`` becomes ``result = v``, and what follows an ``if`` that
    may return moves into its branches that do not always exit.  None when there is nothing
    to do, a return sits elsewhere (a loop, ``with``, ``try``), or it is a generator."""
    body, inner = node.body, list(_walk_scope(node.body))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in inner) or \
            not any(isinstance(n, ast.If) and _returns(n) for n in inner):
        return None
    result = f"{_EXIT}return_{next(_counter)}"
    lowered = _without_returns(body, result)
    if lowered is None:
        return None
    out = [_assign(result, _const(None))] + lowered + [ast.Return(ast.Name(result, ast.Load()))]
    return [s if hasattr(s, "lineno") else ast.fix_missing_locations(ast.copy_location(s, body[0])) for s in out]


def _without_returns(stmts, result: str) -> list[ast.stmt] | None:
    out = []
    for k, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Return):                # (what follows never runs)
            return out + [ast.copy_location(_assign(result, stmt.value or _const(None)), stmt)]
        if isinstance(stmt, ast.If) and _returns(stmt):
            branches = [_without_returns(b + ([] if _always_exits(b) else stmts[k + 1:]), result)
                        for b in (stmt.body, stmt.orelse)]
            if None in branches:
                return None
            return out + [ast.copy_location(ast.If(stmt.test, *[b or [ast.Pass()] for b in branches]), stmt)]
        if _returns(stmt):                      # a return in a loop, with or try: left as it is
            return None
        out.append(stmt)
    return out


def _returns(stmt) -> bool:
    return any(isinstance(n, ast.Return) for n in _walk_scope([stmt]))


def _always_exits(stmts) -> bool:
    """Does this block end in a return or raise on every path?"""
    last = stmts[-1] if stmts else None
    return isinstance(last, (ast.Return, ast.Raise)) or \
        isinstance(last, ast.If) and _always_exits(last.body) and _always_exits(last.orelse)


def _assign(name: str, value: ast.expr) -> ast.Assign:
    return ast.Assign([ast.Name(name, ast.Store())], value)


def _without_exits(stmts, brk: str, cont: str, flags: list[str]) -> list[ast.stmt]:
    """``stmts`` with ``break``/``continue`` turned into flag assignments; what follows a
    statement that may exit runs only when no flag is set.  (Exits inside statements other than
    ``if`` stay: the caller then leaves the loop as it was.)"""
    out = []
    for n, stmt in enumerate(stmts):
        if isinstance(stmt, (ast.Break, ast.Continue)):
            out.append(ast.copy_location(_assign(brk if isinstance(stmt, ast.Break) else cont,
                                                 _const(True)), stmt))
            return out                       # (the rest of the block never runs)
        if isinstance(stmt, ast.If) and _own_exits([stmt]):
            out.append(ast.copy_location(ast.If(stmt.test, _without_exits(stmt.body, brk, cont, flags) or [ast.Pass()],
                                                _without_exits(stmt.orelse, brk, cont, flags)), stmt))
            rest = _without_exits(stmts[n + 1:], brk, cont, flags)
            if rest:
                flag_set = ast.BoolOp(ast.Or(), [ast.Name(f, ast.Load()) for f in flags]) if len(flags) > 1 \
                    else ast.Name(flags[0], ast.Load())
                out.append(ast.copy_location(ast.If(ast.UnaryOp(ast.Not(), flag_set), rest, []), rest[0]))
            return out
        out.append(stmt)
    return out


def _located(stmts, node):
    """Generated statements take the line of the statement they replace (the user's
    statements inside keep their own lines, see ``_visit_body``), so tracebacks and HLO
    metadata point at user lines.  (One line only: Python 3.11 places a method call at the
    end line of its attribute.)"""
    for stmt in stmts:
        for child in ast.walk(stmt):
            if "lineno" in child._attributes and not hasattr(child, "lineno"):
                child.lineno = child.end_lineno = node.lineno
                child.col_offset = child.end_col_offset = node.col_offset
    return stmts


def _pin_helper_calls(tree):
    """Python 3.11 gives a method call the line where its attribute ends: pin the helpers'
    attributes to the line where the call starts (errors point at a statement's first line)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == AG:
            for n in (node.func, node.func.value):
                n.lineno = n.end_lineno = node.lineno
                n.col_offset = n.end_col_offset = node.col_offset
    return tree


def _as_list(x):
    return x if isinstance(x, list) else [x]


def _local_names(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x}
    declared = set()
    for node in _walk_scope(fn.body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(al.asname or al.name.split(".")[0] for al in node.names)
    return names - declared


def convert_tree(tree: ast.Module) -> ast.Module:
    """A cell's tree, converted (the input tree is left as it is)."""
    import copy
    tree = _Converter(cell=True).visit(copy.deepcopy(tree))
    return _pin_helper_calls(ast.fix_missing_locations(tree))


_converted: dict = {}


@entry_point("convert_function")
def convert_function(fn: Callable) -> Callable:
    """``fn`` converted (cached per code object and closure); ``fn`` itself when its source is
    not available or cannot be converted."""
    code = getattr(fn, "__code__", None)
    if code is None or not isinstance(fn, types.FunctionType):
        return fn
    key = (code, tuple(id(c) for c in (fn.__closure__ or ())))
    made = _converted.get(key)
    if made is None:
        made = _converted[key] = _make(fn)
    converted = made(fn)
    return converted if converted is not None else fn


def _make(fn) -> Callable:
    try:
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return lambda f: None
    func = tree.body[0] if tree.body else None
    if not isinstance(func, ast.FunctionDef) or func.name != fn.__name__:
        return lambda f: None                         # a lambda, or source we cannot place
    ast.increment_lineno(tree, start - 1)
    func.decorator_list = []
    func = _Converter(cell=False).visit_FunctionDef(func)
    # (A function defined inside a converted one already reads the helper namespace AG from
    # its closure: the factory's own AG argument provides it.)
    freevars = [v for v in fn.__code__.co_freevars if v != AG]
    factory = ast.FunctionDef(
        f"{_PREFIX}factory", ast.arguments([], [ast.arg(AG)] + [ast.arg(v) for v in freevars],
                                           None, [], [], None, []),
        [func, ast.Return(ast.Name(func.name, ast.Load()))], [], None)
    module = _pin_helper_calls(ast.fix_missing_locations(ast.Module([factory], [])))
    code = compile(module, fn.__code__.co_filename, "exec")

    def instantiate(f):
        ns: dict = {}
        exec(code, f.__globals__, ns)
        cells = []
        for name, c in zip(f.__code__.co_freevars, f.__closure__ or ()):
            if name == AG:
                continue
            try:
                cells.append(c.cell_contents)
            except ValueError:                        # a free variable not bound yet
                return None
        new = ns[f"{_PREFIX}factory"](runtime, *cells)
        new.__defaults__, new.__kwdefaults__ = f.__defaults__, f.__kwdefaults__
        new.__nbxla_converted__ = True
        return new
    return instantiate
