"""The package's import structure: data flows one way (DESIGN.md), so no import cycles among
``nbxla`` modules, no underscore (module-private) name imported by another module, and each
layer imports only the layers below it.  Imports inside functions count too: a function-level
import that breaks a cycle at run time still ties the modules together."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nbxla"

# Layers, lowest first; a module may import from its own layer and the ones before it.  The
# top-level modules (api, compiler, flags, errors, ...) and the rooms above the api sit where
# listed.
LAYERS = [
    {"nbxla.errors", "nbxla.flags"},
    {"nbxla.hlo"},
    {"nbxla.frontend", "nbxla.passes"},
    {"nbxla.codegen"},
    {"nbxla.runtime"},
    {"nbxla.compiler"},
    {"nbxla.profiler"},
]

# Cross-module underscore imports still waiting for a public name, each with its reason.
# Entries are (importing module, imported module, name).  Keep it shrinking.
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str, str], str] = {}

# Cycles (strongly connected groups of modules) still waiting to be untied, with the reason.
CYCLES_ALLOWED: dict[frozenset, str] = {}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only, never imported)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(mods: dict[str, Path]):
    """(importer, imported module, imported name or None) for every nbxla import."""
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "nbxla":
                        yield name, alias.name, None
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "nbxla":
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in mods:
                        yield name, sub, None
                    else:
                        yield name, target, alias.name


def _cycles(edges: dict[str, set[str]]) -> list[frozenset]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(frozenset(group))
    return groups


def test_no_import_cycles():
    mods = _modules()
    edges = {m: set() for m in mods}
    for importer, imported, _ in _imports(mods):
        if imported in mods and imported != importer and not mods[importer].name == "__init__.py":
            edges[importer].add(imported)
    found = set(_cycles(edges))
    unexpected = [sorted(c) for c in found if c not in CYCLES_ALLOWED]
    assert not unexpected, f"import cycles: {unexpected}"
    stale = [sorted(c) for c in CYCLES_ALLOWED if c not in found]
    assert not stale, f"allowed cycles that no longer exist (remove them from the list): {stale}"


def test_no_private_names_imported_across_modules():
    found = {(importer, imported, name) for importer, imported, name in _imports(_modules())
             if name and name.startswith("_") and not name.startswith("__") and imported != importer}
    unexpected = sorted(found - PRIVATE_IMPORTS_ALLOWED.keys())
    assert not unexpected, f"module-private names imported by other modules: {unexpected}"
    stale = sorted(PRIVATE_IMPORTS_ALLOWED.keys() - found)
    assert not stale, f"allow-list entries no longer needed: {stale}"


def _layer(module: str) -> int | None:
    for k, group in enumerate(LAYERS):
        if any(module == g or module.startswith(g + ".") for g in group):
            return k
    return None


def test_layers_import_only_downwards():
    wrong = []
    for importer, imported, _ in _imports(_modules()):
        low, high = _layer(imported), _layer(importer)
        if low is not None and high is not None and low > high:
            wrong.append(f"{importer} imports {imported}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(set(wrong)))


def test_api_knows_no_room_above_it():
    """Modes (auto-clustering), adapters (Dask) and views plug into ``jit`` from above
    (``api.register_mode`` / ``register_array_adapter``): ``api`` imports none of them."""
    above = ("nbxla.cluster", "nbxla.dask", "nbxla.jupyter", "nbxla.autodiff")
    found = [(imported, name) for importer, imported, name in _imports(_modules())
             if importer == "nbxla.api" and imported.startswith(above)]
    assert not found, found
