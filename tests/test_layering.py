"""The package's import structure: data flows one way (DESIGN.md), so no import cycles among
``nbxla`` modules, no underscore (module-private) name imported by another module, and each
layer imports only the layers below it.  Imports inside functions count too: a function-level
import that breaks a cycle at run time still ties the modules together."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nbxla"

# Layers, lowest first; a module may import from its own layer and the ones before it.  Every
# module of the package sits in exactly one (``test_every_module_has_a_layer``): a package name
# covers its submodules, a top-level module is named on its own.  ``nbxla`` itself (the package
# ``__init__``, which gathers the public names) and ``python -m nbxla`` sit on top.
LAYERS = [
    {"nbxla.errors", "nbxla.flags", "nbxla.examples", "nbxla.compile_clock"},
    {"nbxla.hlo", "nbxla.testing"},
    {"nbxla.frontend", "nbxla.passes"},
    {"nbxla.codegen"},
    {"nbxla.runtime"},
    {"nbxla.compiler", "nbxla.aot", "nbxla.call_check", "nbxla.dynamic_dims", "nbxla.symbolic_compile",
     "nbxla.symbolic_machine_code", "nbxla.symbolic_program"},
    {"nbxla.api", "nbxla.cell", "nbxla.cell_check", "nbxla.random"},
    {"nbxla.cluster", "nbxla.autodiff", "nbxla.dask", "nbxla.profiler"},
    {"nbxla.jupyter"},
    {"nbxla", "nbxla.__main__"},
]

# Cross-module underscore imports still waiting for a public name, each with its reason.
# Entries are (importing module, imported module, name).  Keep it shrinking.
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str, str], str] = {}

# Cycles (strongly connected groups of modules) still waiting to be untied, with the reason.
CYCLES_ALLOWED: dict[frozenset, str] = {}


@functools.lru_cache(maxsize=None)
def _tree(source: str) -> ast.AST:
    """The parsed module (read only here): each test walks the whole package, and parsing it
    again for each took most of their time (about 2 s a test)."""
    return ast.parse(source)


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
        for node in _runtime_nodes(_tree(path.read_text())):
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
        if imported in mods and imported != importer:
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
    """The layer of ``module``: the most specific group entry naming it or a package above it
    (``nbxla`` itself matches only the package ``__init__``)."""
    best, best_len = None, -1
    for k, group in enumerate(LAYERS):
        for g in group:
            covers = module == g or (g != "nbxla" and module.startswith(g + "."))
            if covers and len(g) > best_len:
                best, best_len = k, len(g)
    return best


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in _modules() if _layer(m) is None)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_layers_import_only_downwards():
    wrong = []
    for importer, imported, _ in _imports(_modules()):
        low, high = _layer(imported), _layer(importer)
        if low is not None and high is not None and low > high:
            wrong.append(f"{importer} imports {imported}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(set(wrong)))


def test_layering_check_sees_init_and_function_level_imports():
    """The scan counts what Python runs: a package ``__init__``'s imports and imports inside
    functions (the shapes an upward import hides in) are edges like any other."""
    mods = _modules()
    edges = {(a, b) for a, b, _ in _imports(mods)}
    assert ("nbxla", "nbxla.cluster") in edges                      # from an __init__
    assert ("nbxla", "nbxla.jupyter.dashboard") in edges            # inside a function there
    assert _layer("nbxla.cluster.session") > _layer("nbxla.api") > _layer("nbxla.runtime.thunks")


# Private attributes: ``obj._name`` where ``_name`` belongs to another module.  A name "belongs"
# to the modules that define it: ``self._x = ...`` / ``cls._x = ...`` in a method, a ``_x``
# function, class or module-level name, a ``_x`` parameter or ``__slots__`` entry.  An access
# ``something._x`` (load or store) on anything other than ``self``/``cls`` is cross-module when
# the module making it does not itself define ``_x`` but another nbxla module does.  Names no
# nbxla module defines (``np._NoValue``, a namedtuple's ``_replace``) are other libraries' business.
PRIVATE_ATTRIBUTES_ALLOWED: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def _private_attributes(mods: dict[str, Path]):
    """(module, attribute name, line) for each cross-module private attribute access."""
    defined: dict[str, set[str]] = {}
    accessed: dict[str, list[tuple[str, int]]] = {}
    for name, path in mods.items():
        own, used = set(), []
        for node in ast.walk(_tree(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if _private(node.name):
                    own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                if _private(node.id):
                    own.add(node.id)
            elif isinstance(node, ast.arg) and _private(node.arg):
                own.add(node.arg)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__"
                                                      for t in node.targets):
                own.update(c.value for c in ast.walk(node.value)
                           if isinstance(c, ast.Constant) and _private(str(c.value)))
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    if isinstance(node.ctx, ast.Store):
                        own.add(node.attr)
                else:
                    used.append((node.attr, node.lineno))
        defined[name], accessed[name] = own, used
    owners: dict[str, set[str]] = {}
    for name, own in defined.items():
        for attr in own:
            owners.setdefault(attr, set()).add(name)
    for name, used in accessed.items():
        for attr, line in used:
            if attr not in defined[name] and attr in owners:
                yield name, attr, line


def test_no_private_attributes_reached_across_modules():
    found: dict[tuple[str, str], list[int]] = {}
    for name, attr, line in _private_attributes(_modules()):
        found.setdefault((name, attr), []).append(line)
    unexpected = sorted(f"{m}:{lines[0]} ._{a.lstrip('_')}" for (m, a), lines in found.items()
                        if (m, a) not in PRIVATE_ATTRIBUTES_ALLOWED)
    assert not unexpected, "private attributes of another module reached:\n" + "\n".join(unexpected)
    stale = sorted(PRIVATE_ATTRIBUTES_ALLOWED.keys() - found.keys())
    assert not stale, f"allow-list entries no longer needed: {stale}"


def test_private_attribute_check_can_fail(tmp_path):
    """The check flags ``other._x`` when ``_x`` is another module's and passes ``self._x``."""
    (tmp_path / "a.py").write_text("class A:\n    def __init__(self):\n        self._x = 1\n")
    (tmp_path / "b.py").write_text("def f(a):\n    return a._x\n")
    (tmp_path / "c.py").write_text("class C:\n    def __init__(self):\n        self._x = 2\n"
                                   "    def same(self, other):\n        return other._x\n")
    mods = {m: tmp_path / f"{m}.py" for m in ("a", "b", "c")}
    assert sorted(_private_attributes(mods)) == [("b", "_x", 2)]


def test_api_knows_no_room_above_it():
    """Modes (auto-clustering), adapters (Dask) and views plug into ``jit`` from above
    (``api.register_mode`` / ``register_array_adapter``): ``api`` imports none of them."""
    above = ("nbxla.cluster", "nbxla.dask", "nbxla.jupyter", "nbxla.autodiff")
    found = [(imported, name) for importer, imported, name in _imports(_modules())
             if importer == "nbxla.api" and imported.startswith(above)]
    assert not found, found
