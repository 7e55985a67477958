"""What a loop body does with its names, read from its source (``autograph``), told to the loop
call:

* ``written=(...)``: the names whose items the body writes.  ``loops._Loop`` makes the NumPy
  arrays those names hold traced before its first trace, not after a trace that found the
  write (which then traced the body again: a convolution's double loop over output positions
  was traced five times).
* ``dead=(...)``: the names whose value on entry the body never reads -- inner ``for`` loops'
  targets, read only inside those loops.  Code written loop by loop reuses ``i, j, k``
  (``for k in range(n): E[i, j] += A[i, k] * B[k, j]`` after an earlier loop left ``k`` an
  int); the body rebinds such a Python int, which would otherwise stop the outer loop rolling.
"""

from __future__ import annotations

import ast

# (nested scopes: their writes are their own names')
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def written_names(body: list[ast.stmt], names) -> list[str]:
    """Names of ``names`` the statements write items of (``x[key] = v``, ``x[k][j] = v``,
    ``x[key] += v``, ``a[i], b[i] = ...``), in first-seen order."""
    found: dict[str, None] = {}
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            for leaf in (t.elts if isinstance(t, ast.Tuple) else [t]):
                root = leaf
                while isinstance(root, ast.Subscript):
                    root = root.value
                if root is not leaf and isinstance(root, ast.Name) and root.id in names:
                    found.setdefault(root.id, None)
        stack.extend(ast.iter_child_nodes(node))
    return list(found)


def dead_on_entry(body: list[ast.stmt], names) -> list[str]:
    """Names of ``names`` that are targets of ``for`` loops in the statements and are read
    nowhere else in them (not in a loop's ``iter`` or ``else``, not by ``k += ...``, not by a
    nested scope outside such a loop): the body binds them before every read, so their value
    on entry is never used.  Run on the source before it is converted."""
    targets: set[str] = set()
    free_reads: set[str] = set()

    def visit(node, bound: frozenset):
        if isinstance(node, ast.For):
            inner = bound
            if isinstance(node.target, ast.Name):
                targets.add(node.target.id)
                inner = bound | {node.target.id}
            else:
                visit(node.target, bound)
            visit(node.iter, bound)
            for stmt in node.body:
                visit(stmt, inner)
            for stmt in node.orelse:        # (runs after the loop: the name may be unbound by it)
                visit(stmt, bound)
            return
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Store) and node.id not in bound:
                free_reads.add(node.id)
            return
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                and node.target.id not in bound:
            free_reads.add(node.target.id)
        for child in ast.iter_child_nodes(node):
            visit(child, bound)

    for stmt in body:
        visit(stmt, frozenset())
    return [n for n in names if n in targets and n not in free_reads]


def with_written(call: ast.Call, body: list[ast.stmt], names, dead=()) -> None:
    """The loop call ``call`` told the names whose items ``body`` writes, if any, and the
    names ``dead`` whose value on entry it never reads (``dead_on_entry``, found before the
    body was converted)."""
    written = written_names(body, names)
    if written:
        call.keywords.append(ast.keyword("written", ast.Tuple([ast.Constant(n) for n in written], ast.Load())))
    if dead:
        call.keywords.append(ast.keyword("dead", ast.Tuple([ast.Constant(n) for n in dead], ast.Load())))
