"""Which names a loop body writes items of, read from its source (``autograph``): the loop
call is told them (``written=(...)``), and ``loops._Loop`` makes the NumPy arrays those names
hold traced before its first trace, not after a trace that found the write (which then traced
the body again: a convolution's double loop over output positions was traced five times)."""

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


def with_written(call: ast.Call, body: list[ast.stmt], names) -> None:
    """The loop call ``call`` told the names whose items ``body`` writes, if any."""
    written = written_names(body, names)
    if written:
        call.keywords.append(ast.keyword("written", ast.Tuple([ast.Constant(n) for n in written], ast.Load())))
