"""Reading a function's source for Python side effects: what ``jit`` would change by tracing
it once and then running compiled code (a ``print`` would happen once instead of on every
call), so that auto mode compiles a function whole only where that is the same as running
it (``whole.py``).

``side_effect`` names the first such thing it finds, with its line: a call of a builtin
outside a pure list, ``global``/``with``/``try``/``yield``, setting an attribute, writing
into (or calling a changing method of) something the function neither made nor received,
``np.random``, NumPy's file and global-state functions, calls into installed libraries
other than NumPy or into code without readable source, methods it cannot see into.  Writes
are followed through views, local aliases and helper functions to the parameters they
reach: those are collected (arrays there are fine: ``jit`` writes them back).  The
analysis is conservative: what it cannot follow counts as a side effect.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import inspect
import textwrap
import types

import numpy as np

from .records import LIBRARY_DIRS

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
# NumPy functions that write into their first argument.
WRITING_FUNCTIONS = frozenset({"copyto", "put", "place", "putmask", "fill_diagonal",
                               "put_along_axis"})
# Methods that change their object (or write files): fine on a list or array the function
# made itself, a side effect on anything else.
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
    "popitem", "add", "discard", "sort", "fill", "put", "itemset", "resize", "partition",
    "setflags", "setfield", "byteswap", "tofile", "dump", "write", "writelines", "flush",
    "close", "send",
})
# Methods with no side effect: an array's (but those above), a dict's or a string's readers.
PURE_METHODS = frozenset(n for n in dir(np.ndarray) if not n.startswith("_")) - \
    MUTATING_METHODS | {"get", "items", "keys", "values", "index", "count", "format", "join",
                        "split", "strip", "startswith", "endswith", "lower", "upper", "replace"}
_NOT_ALLOWED = {ast.Global: "a 'global' statement", ast.Nonlocal: "a 'nonlocal' statement",
                ast.Yield: "'yield'", ast.YieldFrom: "'yield from'", ast.Await: "'await'",
                ast.With: "a 'with' block", ast.Try: "a 'try' block",
                ast.ClassDef: "a class definition"}
MAX_DEPTH = 4                     # how deep calls into other user functions are followed
# Values a write cannot change (a parameter holding one is rebound, not written).
IMMUTABLE = (bool, int, float, complex, str, bytes, np.generic, type(None))


def side_effect(fn, depth: int = 0, seen: dict | None = None, written: set | None = None,
                methods: dict | None = None) -> str | None:
    """The first Python side effect ``fn``'s source shows (as a phrase naming its line), or
    None when it has none that compiling it whole would change.  ``written`` collects the
    parameters it may write into (``x[i] = v``, ``x += v``, directly, through a view or a
    helper): fine for arrays, which ``jit`` writes back, and for scalars (rebound, not
    written); a side effect on anything else (the caller checks the arguments).
    ``methods`` collects the methods it calls on parameters ({name: {method}}: ``xp.sqrt``
    with NumPy passed in is fine, a method of some object is not; the caller checks)."""
    fn = _unwrap(fn)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return f"it calls {getattr(fn, '__name__', fn)!r}, whose source nbxla cannot read"
    seen = {} if seen is None else seen
    if code not in seen:
        seen[code] = (None, set(), {})           # (a recursive call: known so far)
        seen[code] = _check_source(fn, depth, seen)
    why, wrote, called = seen[code]
    if written is not None:
        written.update(wrote)
    if methods is not None:
        for name, names in called.items():
            methods.setdefault(name, set()).update(names)
    return why


def _unwrap(fn):
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "fn", fn)                     # an nbxla.jit function: what it wraps


def _check_source(fn, depth: int, seen: dict) -> tuple[str | None, set]:
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return f"the source of {fn.__name__!r} is not available", set(), {}
    ast.increment_lineno(tree, first - 1)
    code = fn.__code__
    func = tree.body[0] if tree.body else None
    if isinstance(func, ast.FunctionDef):
        body = func.body
    else:                          # a lambda: the one on its lines with its parameters
        names = list(code.co_varnames[:code.co_argcount])
        lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and
                   [a.arg for a in n.args.args] == names]
        if fn.__name__ != "<lambda>" or len(lambdas) != 1:
            return f"the source of {fn.__name__!r} is not a plain function", set(), {}
        body = [lambdas[0].body]
    namespace = dict(getattr(fn, "__globals__", {}))
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            namespace[name] = cell.cell_contents
        except ValueError:
            pass
    params = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    checker = _Checker(fn.__name__, namespace, params, depth, seen)
    return checker.check(body), checker.written, checker.methods


def cell_side_effect(source: str, namespace: dict, written: set) -> str | None:
    """``side_effect`` for a notebook cell: the names it reads from the namespace are its
    parameters (``written`` collects those it writes into); the names it binds, its own."""
    body = ast.parse(source).body
    if body and isinstance(body[-1], ast.Expr):
        body = body[:-1] + [body[-1].value]            # (its displayed value: no statement)
    checker = _Checker("the cell", namespace, set(namespace), 0, {})
    why = checker.check(body)
    written.update(checker.written)
    for name, methods in checker.methods.items():    # (the values are known: check them)
        if not methods_are_pure(namespace.get(name), methods):
            return f"it calls .{min(methods)}() of {name}, which nbxla cannot see into"
    return why


class _Checker:
    def __init__(self, name: str, namespace: dict, params: set, depth: int, seen: dict):
        self.name, self.depth, self.seen = name, depth, seen
        self.written: set = set()
        self.methods: dict = {}                  # parameter -> methods called on it
        self.namespace = {**builtins.__dict__, **namespace}
        self.params = params
        self.locals: set = set()                 # names the function binds
        self.aliases: dict = {}                  # local -> names its value may share memory with

    def check(self, body: list) -> str | None:
        nodes = [n for stmt in body for n in ast.walk(stmt)]
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)) and _numeric_import(node):
                self.namespace.update(_imported(node))   # (import numpy as np inside it)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.locals.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.Lambda, ast.arguments)):
                self.locals.update(a.arg for a in ast.walk(node) if isinstance(a, ast.arg))
                if isinstance(node, ast.FunctionDef):
                    self.locals.add(node.name)
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.For, ast.comprehension,
                                 ast.NamedExpr)) and getattr(node, "value", None) is not None \
                    or isinstance(node, (ast.For, ast.comprehension)):
                source = node.iter if isinstance(node, (ast.For, ast.comprehension)) else node.value
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._bind(target, source)
        self.locals -= self.params
        self.called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        for node in nodes:
            why = self._node(node)
            if why is not None:
                return f"{why} (line {getattr(node, 'lineno', '?')} of {self.name})"
        return None

    def _bind(self, target, source) -> None:
        """``target = source``: what each name bound may share memory with."""
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(source, (ast.Tuple, ast.List)) \
                and len(target.elts) == len(source.elts):
            for t, v in zip(target.elts, source.elts):       # a, b = x, y: pairwise
                self._bind(t, v)
            return
        origins = self._origins(source)
        for t in ast.walk(target):
            if isinstance(t, ast.Name):
                self.aliases.setdefault(t.id, set()).update(origins)

    def _origins(self, node) -> set:
        """The names whose memory the value of ``node`` may share (conservatively)."""
        if isinstance(node, ast.Name):
            return {node.id}
        if isinstance(node, ast.Attribute):
            value = _resolve(node, self.namespace, self.locals | self.params)
            if value is not None:             # (np.inf, np.float64: a module's attribute)
                return set() if isinstance(value, IMMUTABLE + (type, types.ModuleType)) or \
                    callable(value) else {ast.unparse(node)}
            return self._origins(node.value)
        if isinstance(node, (ast.Subscript, ast.Starred, ast.NamedExpr)):
            return self._origins(node.value)
        if isinstance(node, (ast.Tuple, ast.List)):
            return set().union(*(self._origins(e) for e in node.elts)) if node.elts else set()
        if isinstance(node, ast.IfExp):
            return self._origins(node.body) | self._origins(node.orelse)
        if not isinstance(node, ast.Call):
            return set()                          # (operators, constants: new values)
        func = node.func
        arguments = set().union(*(self._origins(a) for a in node.args)) if node.args else set()
        if isinstance(func, ast.Attribute):
            module = _resolve(func.value, self.namespace, self.locals | self.params)
            if isinstance(module, types.ModuleType):          # np.reshape(x, ...)
                return arguments if func.attr in VIEW_FUNCTIONS else set()
            return self._origins(func.value) if func.attr in VIEW_METHODS else set()
        value = self.namespace.get(getattr(func, "id", None))
        if getattr(value, "__module__", "") in ("builtins", "math") or \
                isinstance(value, np.ufunc) or getattr(value, "__module__", "").startswith("numpy"):
            return arguments if getattr(func, "id", "") in VIEW_FUNCTIONS else set()
        return arguments          # (a helper of the user's: it may hand back an argument)

    def _reach(self, name: str | None) -> set:
        """``name`` and the names its value may share memory with (through local aliases)."""
        todo, done = [name], set()
        while todo:
            n = todo.pop()
            if n not in done:
                done.add(n)
                todo.extend(self.aliases.get(n, ()))
        return done

    def _made(self, name: str) -> bool:
        """Is ``name`` a local whose value the function made (shares memory with nothing
        it received or did not make)?"""
        return all(n not in self.params and n in self.locals for n in self._reach(name))

    def _writes(self, name: str | None, augmented: bool = False) -> str | None:
        """A write through ``name``: the parameters it reaches (its own, or the ones it is a
        view of) are collected; a name it may reach that the function neither made nor
        received is a side effect (``augmented``: ``name += v``, which only rebinds a name
        holding a number)."""
        for n in self._reach(name):
            if n in self.params:
                self.written.add(n)
            elif n is None or n not in self.locals:
                if not (augmented and isinstance(self.namespace.get(n), IMMUTABLE)):
                    return f"it writes into {n or 'an object'}, which it did not make or receive"
        return None

    def _node(self, node) -> str | None:
        for kind, what in _NOT_ALLOWED.items():
            if isinstance(node, kind):
                return f"it has {what}"
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not _numeric_import(node):
            return "it imports a module other than numpy or math"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and isinstance(t.ctx, (ast.Store, ast.Del)):
                        return "it sets an attribute"
                    if isinstance(t, ast.Subscript) and isinstance(t.ctx, (ast.Store, ast.Del)):
                        if isinstance(node, ast.Delete):
                            return "it deletes items"
                        why = self._writes(_root_name(t))
                        if why is not None:
                            return why
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                return self._writes(node.target.id, augmented=True)   # (an array, a list: in place)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                id(node) not in self.called and node.id not in self.locals | self.params:
            return self._passed(node.id, self.namespace.get(node.id))
        return None

    def _passed(self, name: str, value) -> str | None:
        """A function of the user's passed as a value (``map(f, xs)``, a ``key=``): whatever
        receives it may call it, so it must have no side effect of its own."""
        if not isinstance(value, (types.FunctionType, types.MethodType)):
            return None                # (data, a module, a class: read here, not called)
        if (getattr(value, "__module__", None) or "").split(".")[0] in ("numpy", "math"):
            return None
        if self.depth >= MAX_DEPTH:
            return f"it passes {name}, which nbxla cannot see into"
        written: set = set()
        why = side_effect(value, self.depth + 1, self.seen, written)
        return why or (f"it passes {name}, which writes into its arguments" if written else None)

    def _call(self, node: ast.Call) -> str | None:
        why = self._out_arguments(node)
        if why is not None:
            return why
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in self.locals:
                return None                       # its own lambda or def: checked above
            if func.id in self.params:            # (np.outer passed in: the caller checks)
                self.methods.setdefault(func.id, set()).add("__call__")
                return None
            if func.id not in self.namespace:
                return None                       # (a NameError: the trace says so)
            return self._callee(func.id, self.namespace[func.id], node)
        if isinstance(func, ast.Attribute):
            owner = _resolve(func.value, self.namespace, self.locals | self.params)
            if isinstance(owner, types.ModuleType):
                if owner.__name__.startswith("numpy.random"):
                    return f"it calls {owner.__name__}.{func.attr} (hidden random state)"
                return self._callee(f"{owner.__name__}.{func.attr}",
                                    getattr(owner, func.attr, None), node)
            if isinstance(owner, np.ufunc):
                return None           # (np.add.outer, .reduce; .at's write is checked above)
            if func.attr in MUTATING_METHODS:
                return self._writes(_root_name(func.value))
            if func.attr in PURE_METHODS:
                return None
            root = _root_name(func.value)
            if isinstance(func.value, ast.Name) and root in self.params:
                self.methods.setdefault(root, set()).add(func.attr)   # (xp.sqrt: the caller
                return None                                            # checks what xp is)
            if root is not None and root not in self.params and self._made(root):
                return None           # (a method of something it made: changes only that)
            if root is not None and root not in self.locals and root not in self.params:
                method = getattr(_value_of(func.value, self.namespace), func.attr, None)
                if isinstance(method, (types.MethodType, types.FunctionType)):
                    return self._callee(f"{root}...{func.attr}", method, node)  # (user code)
            return f"it calls .{func.attr}(), which nbxla cannot see into"
        return "it calls the result of an expression"

    def _out_arguments(self, node: ast.Call) -> str | None:
        """Writes a NumPy call makes into its arguments: ``out=``, ``np.copyto(dst, ...)``
        and the like, ``np.add.at(a, ...)``."""
        for keyword in node.keywords:
            if keyword.arg == "out":
                for target in (keyword.value.elts if isinstance(keyword.value, ast.Tuple)
                               else [keyword.value]):
                    why = self._writes(_root_name(target))
                    if why is not None:
                        return why
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if node.args and (name in WRITING_FUNCTIONS or name == "at" and isinstance(
                _resolve(func.value, self.namespace, self.locals | self.params), np.ufunc)):
            return self._writes(_root_name(node.args[0]))
        return None

    def _callee(self, name: str, value, node: ast.Call) -> str | None:
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
        if code is not None and code.co_filename.startswith(LIBRARY_DIRS):
            return f"it calls {name}, library code it does not trace"
        if not callable(value) or self.depth >= MAX_DEPTH:
            return f"it calls {name}, which nbxla cannot see into"
        written, methods = set(), {}
        why = side_effect(value, self.depth + 1, self.seen, written, methods)
        if why is not None or not (written or methods):
            return why
        # The helper writes into some of its parameters, or calls their methods: what this
        # call hands them decides
        try:
            bound = inspect.signature(_unwrap(value)).bind(*node.args, **{
                k.arg: k.value for k in node.keywords if k.arg is not None})
        except TypeError:                         # (*args, **kwargs at the call)
            return f"it calls {name}, whose arguments it cannot follow"
        for param in written | set(methods):
            if param not in bound.arguments:
                return f"{name} writes into or calls its default value of {param!r}"
        for param in written:
            why = self._writes(_root_name(bound.arguments[param]))
            if why is not None:
                return why
        for param, names in methods.items():
            given = bound.arguments[param]
            if isinstance(given, ast.Name) and given.id in self.params:
                self.methods.setdefault(given.id, set()).update(names)
                continue
            value = _resolve(given, self.namespace, self.locals | self.params)
            if not methods_are_pure(value, names):      # (np passed in, np.outer: fine)
                return f"{name} calls .{min(names)}() of what it is given, which nbxla " \
                       "cannot see into"
        return None


# Methods and NumPy functions whose result may share memory with their object / first
# argument (a write into the result writes there); anything else makes a new value.
VIEW_METHODS = frozenset({"reshape", "view", "ravel", "transpose", "swapaxes", "squeeze",
                          "diagonal", "T", "mT", "real", "imag", "flat", "__getitem__"})
VIEW_FUNCTIONS = frozenset({"asarray", "asanyarray", "ascontiguousarray", "reshape", "ravel",
                            "transpose", "swapaxes", "moveaxis", "rollaxis", "squeeze",
                            "expand_dims", "broadcast_to", "atleast_1d", "atleast_2d",
                            "atleast_3d", "diagonal", "real", "imag", "flip", "fliplr",
                            "flipud", "rot90", "split", "array_split", "hsplit", "vsplit",
                            "dsplit"})


def methods_are_pure(value, methods: set) -> bool:
    """May ``value.m(...)`` be traced for each ``m`` of ``methods``: a NumPy or math module's
    functions (``xp.sqrt`` with NumPy passed in), an array's pure methods?"""
    if isinstance(value, types.ModuleType):
        return value.__name__.split(".")[0] in ("numpy", "math") and \
            not value.__name__.startswith("numpy.random") and \
            not methods & NUMPY_EFFECTS and all(hasattr(value, m) for m in methods)
    if methods == {"__call__"}:                   # a function passed in: NumPy's
        module = getattr(value, "__module__", None) or ""
        return isinstance(value, np.ufunc) or module.split(".")[0] in ("numpy", "math") and \
            not module.startswith("numpy.random") and \
            getattr(value, "__name__", "") not in NUMPY_EFFECTS
    return type(value) is np.ndarray and methods <= PURE_METHODS


def _value_of(node, namespace: dict):
    """The value an attribute chain of a global names (``cfg.solver``), or None."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_value_of(node.value, namespace), node.attr, None)
    return None


def _numeric_import(node) -> bool:
    """An import of NumPy or math (inside a function: it binds a name, nothing else)."""
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module or "").split(".")[0] in ("numpy", "math") \
            and all(a.name != "*" for a in node.names)
    return all(a.name.split(".")[0] in ("numpy", "math") for a in node.names)


def _imported(node) -> dict:
    """The names a (NumPy or math) import binds, with their values."""
    if isinstance(node, ast.ImportFrom):
        module = importlib.import_module(node.module)
        return {a.asname or a.name: getattr(module, a.name, None) for a in node.names}
    bound = {}
    for a in node.names:               # (import numpy.linalg binds numpy)
        name = a.asname or a.name.split(".")[0]
        bound[name] = importlib.import_module(a.name if a.asname else name)
    return bound


def _root_name(node) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _resolve(node, namespace: dict, local: set):
    """The value an attribute chain of modules names (``np.linalg``, ``np.outer``), or a
    global name's (None for anything else)."""
    if isinstance(node, ast.Name):
        return None if node.id in local else namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, namespace, local)
        if isinstance(owner, types.ModuleType):
            return getattr(owner, node.attr, None)
    return None
