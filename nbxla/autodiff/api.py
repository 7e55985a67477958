"""``nbxla.grad``, ``nbxla.value_and_grad`` and ``GradientTape``.

Differentiation happens on the traced graph.  Inside a trace (``nbxla.jit``, a ``%%xla``
cell) the differentiated arguments get fresh stand-ins (a ``copy`` of each value), the
function is traced on them into the surrounding computation, and ``backward`` appends the
gradient instructions there too, so a whole training step is one program that the pass
pipeline optimizes and fuses as a whole.  Called on NumPy arrays, the same thing happens
inside a ``jit`` of its own: forward and backward are compiled together and cached by
argument shapes and dtypes like any ``jit`` function.

The stand-ins isolate the differentiated inputs: a value the function reads from outside
(a closure) counts as a constant even when it was computed from the same array, as in JAX.
After ``backward``, the stand-ins are replaced by the values they stood for.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import Callable

import numpy as np

from ..api import CompiledFunction, array_tree_key
from ..errors import NbxlaError
from ..frontend.context import TraceContext
from ..frontend.trace import is_array_leaf, tree_flatten, tree_unflatten
from ..frontend.tracer import ScalarTracer, Tracer
from ..hlo.shapes import is_float
from .backward import backward
from .emit import Emitter


class GradientError(NbxlaError, TypeError):
    """``grad`` was used on something it cannot differentiate (integer input, array output...)."""


def _context(leaves) -> TraceContext | None:
    for leaf in leaves:
        if isinstance(leaf, Tracer):
            return leaf.ctx
    return TraceContext.active.get()


class GradFunction:
    """What ``grad``/``value_and_grad`` return: callable on arrays or on traced values."""

    def __init__(self, fn: Callable, argnums, with_value: bool, device: str = "cpu", cache=None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.single = isinstance(argnums, (int, np.integer))
        self.argnums = (int(argnums),) if self.single else tuple(int(a) for a in argnums)
        if not self.argnums:
            raise GradientError("argnums is empty: name at least one argument to differentiate")
        self.with_value = with_value

        @functools.wraps(fn)
        def forward_and_backward(*args, **kwargs):
            return self._traced(args, kwargs)
        forward_and_backward.__name__ = f"{'value_and_grad' if with_value else 'grad'}_{_name(fn)}"
        # (it runs only traced: NumPy cannot check it under --verify)
        self.compiled = CompiledFunction(forward_and_backward, device, cache, checkable=False)

    @property
    def last_compilation(self):
        return self.compiled.last_compilation

    def get_compiler_ir(self, *args, **kwargs):
        """Like ``jit``'s: the stages of the compiled forward + backward program."""
        return self.compiled.get_compiler_ir(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        if kwargs or array_tree_key(args) is None:      # (all NumPy arrays: no trace to join)
            leaves = tree_flatten((args, kwargs))[0]
            if any(isinstance(leaf, Tracer) for leaf in leaves):
                return self._traced(args, kwargs)      # inside jit / %%xla: join that trace
        return self.compiled(*args, **kwargs)

    # ---- the traced form ----------------------------------------------------------------------

    def _arg_label(self, n: int) -> str:
        try:
            params = list(inspect.signature(self.fn).parameters)
            return f"argument {n} ({params[n]!r})" if n < len(params) else f"argument {n}"
        except (TypeError, ValueError):
            return f"argument {n}"

    def _traced(self, args: tuple, kwargs: dict):
        ctx = _context(tree_flatten((args, kwargs))[0])
        if ctx is None:
            raise AssertionError("GradFunction._traced outside a trace")
        builder = ctx.builder
        args = list(args)
        seeds, treedefs = [], []
        for n in self.argnums:
            if not -len(args) <= n < len(args):
                raise GradientError(f"{_name(self.fn)} was called with {len(args)} positional "
                                    f"argument(s); argnums names argument {n}")
            leaves, treedef = tree_flatten(args[n])
            stand_ins = []
            for leaf in leaves:
                value = self._leaf_tracer(ctx, leaf, n)
                builder.location = None
                seed = builder.op("copy", value.instr)
                seeds.append((seed, value.instr))
                stand_ins.append((ScalarTracer if isinstance(leaf, (ScalarTracer, np.generic, float))
                                  else Tracer)(ctx, seed))
            args[n] = tree_unflatten(treedef, stand_ins)
            treedefs.append(treedef)
        first_new = len(builder.instructions) - len(seeds)

        out = self.fn(*args, **kwargs)
        value = self._scalar_output(ctx, out)
        e = Emitter(builder)
        builder.location = ctx.user_location()
        one = e.full(value.instr.shape, 1)
        grads = backward(builder, value.instr, one, [s for s, _ in seeds])
        grads = [g if g is not None else e.zeros(s.shape) for g, (s, _) in zip(grads, seeds)]

        # The stand-ins were only the leaves of the backward walk: use the real values again.
        real = {id(s): v for s, v in seeds}
        for instr in builder.instructions[first_new:]:
            if any(id(o) in real for o in instr.operands):
                instr.operands = [real.get(id(o), o) for o in instr.operands]
        value_instr = real.get(id(value.instr), value.instr)
        grads = [real.get(id(g), g) for g in grads]

        it = iter(grads)
        trees = [tree_unflatten(d, [Tracer(ctx, next(it)) for _ in range(_count(d))])
                 for d in treedefs]
        result = trees[0] if self.single else tuple(trees)
        if self.with_value:
            kind = ScalarTracer if isinstance(out, (np.generic, float)) else Tracer
            return kind(ctx, value_instr), result
        return result

    def _leaf_tracer(self, ctx, leaf, n: int) -> Tracer:
        if isinstance(leaf, Tracer):
            t = leaf
        elif is_array_leaf(leaf) or isinstance(leaf, float):
            t = Tracer(ctx, ctx.constant(np.asarray(leaf)))
        else:
            raise GradientError(
                f"{_name(self.fn)}: {self._arg_label(n)} holds a {type(leaf).__name__}, which "
                "cannot be differentiated; pass floating-point arrays (or lists/tuples/dicts of "
                "them) in the positions named by argnums")
        if not is_float(t.instr.shape.element_type):
            raise GradientError(
                f"{_name(self.fn)}: {self._arg_label(n)} has dtype {t.dtype}; only floating-point "
                "arrays can be differentiated (convert it with .astype(np.float32), or leave it "
                "out of argnums: integer labels and indices need no gradient)")
        return t

    def _scalar_output(self, ctx, out) -> Tracer:
        if not isinstance(out, Tracer):
            if isinstance(out, (float, np.floating)) or (isinstance(out, np.ndarray) and out.shape == ()
                                                         and out.dtype.kind == "f"):
                return Tracer(ctx, ctx.constant(np.asarray(out)))    # does not depend on the input
            raise GradientError(f"{_name(self.fn)} must return a scalar float to be "
                                f"differentiated; it returned a {type(out).__name__}")
        if out.shape != ():
            raise GradientError(
                f"{_name(self.fn)} must return a scalar to be differentiated; it returned an "
                f"array of shape {out.shape} (reduce it, e.g. with .sum() or .mean())")
        if not is_float(out.instr.shape.element_type):
            raise GradientError(f"{_name(self.fn)} returned a {out.dtype} scalar; only a "
                                "floating-point result can be differentiated")
        return out

    def __repr__(self) -> str:
        kind = "value_and_grad" if self.with_value else "grad"
        return f"<nbxla.{kind} {_name(self.fn)} argnums={self.argnums[0] if self.single else self.argnums}>"


def _count(treedef) -> int:
    return 1 if treedef.kind == "leaf" else sum(_count(c) for c in treedef.children)


def _name(fn) -> str:
    return getattr(fn, "__name__", "fn")


# (fn, argnums, with_value, device, cache) -> GradFunction: ``nbxla.grad(f)(x)`` written
# inside a function that runs eagerly makes a new GradFunction on every call; it must reuse
# the compiled program (whose cache key is the GradFunction's jit).  The values are weak: a
# GradFunction lives while its user or a compilation-cache entry holds it, and it holds
# ``fn`` and ``cache``, so their ids are not reused meanwhile.
_MADE: "weakref.WeakValueDictionary[tuple, GradFunction]" = weakref.WeakValueDictionary()


def _make(fn, argnums, with_value, device, cache) -> GradFunction:
    key = (id(fn), argnums if isinstance(argnums, (int, np.integer)) else tuple(argnums),
           with_value, device, id(cache))
    made = _MADE.get(key)
    if made is None or made.fn is not fn:
        made = _MADE[key] = GradFunction(fn, argnums, with_value, device, cache)
    return made


def grad(fn: Callable, argnums=0, *, device: str = "cpu", cache=None) -> GradFunction:
    """The gradient of ``fn`` (a function returning a float scalar) with respect to the
    arguments ``argnums`` (an int, or a tuple: then a tuple of gradients).  An argument may be
    an array or a list/tuple/dict of arrays; its gradient has the same structure and dtypes.
    The same arguments give the same (compiled, cached) gradient function.
    """
    return _make(fn, argnums, False, device, cache)


def value_and_grad(fn: Callable, argnums=0, *, device: str = "cpu", cache=None) -> GradFunction:
    """Like ``grad``, returning ``(fn(*args), gradient)``; both from one compiled program."""
    return _make(fn, argnums, True, device, cache)


class GradientTape:
    """TensorFlow's ``GradientTape`` as a thin layer over the traced graph, for compiled code::

        @nbxla.jit
        def step(w, x):
            with nbxla.GradientTape() as tape:
                loss = np.mean((x @ w) ** 2)
            return w - 0.1 * tape.gradient(loss, w)

    ``gradient(target, sources)`` differentiates ``target`` with respect to the traced values
    ``sources`` (a Tracer or a list/tuple/dict of them) through everything computed from them.
    Outside a trace there is no graph to differentiate: use ``nbxla.grad`` there.
    """

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def gradient(self, target, sources):
        leaves, treedef = tree_flatten(sources)
        if not isinstance(target, Tracer) or not all(isinstance(s, Tracer) for s in leaves):
            raise GradientError(
                "GradientTape.gradient needs traced values: use the tape inside @nbxla.jit or a "
                "%%xla cell (outside compiled code, nbxla.grad(fn)(arrays) gives gradients)")
        if target.shape != () or not is_float(target.instr.shape.element_type):
            raise GradientError(f"GradientTape.gradient needs a float scalar target, not "
                                f"{target.dtype}{list(target.shape)}")
        ctx = target.ctx
        e = Emitter(ctx.builder)
        ctx.builder.location = ctx.user_location()
        grads = backward(ctx.builder, target.instr, e.full(target.instr.shape, 1),
                         [s.instr for s in leaves])
        return tree_unflatten(treedef, [Tracer(ctx, g if g is not None else e.zeros(s.instr.shape))
                                        for g, s in zip(grads, leaves)])
