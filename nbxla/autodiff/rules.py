"""One VJP rule per HLO opcode: the fourth per-opcode table (JAX would call most of them
JVP-then-transpose; here each opcode maps its output cotangent to its operands' directly).

A rule is ``rule(e, instr, g) -> [thunk or None per operand]``: ``instr`` is the forward
instruction, ``g`` its cotangent (an instruction of ``instr``'s shape; a list per element
for tuple shapes) and ``e`` the ``Emitter`` to build with.  Each thunk returns the
cotangent of one operand; ``backward`` calls only the thunks of operands that depend on what
is being differentiated, so a rule never builds work for indices or constants.  ``None``
means "no gradient flows to this operand".

Every opcode is in exactly one of three tables (``tests/autodiff`` checks the partition):
``VJP_RULES``, ``ZERO_GRADIENT`` (piecewise constant or integer-valued: the gradient
is zero or undefined, none flows) and ``NOT_DIFFERENTIABLE`` (with the reason shown to the
user).

Ties: ``maximum``/``minimum`` of two equal values give each half the gradient, and a
``max``/``min`` reduction splits the gradient evenly among the tied maxima, as JAX does, so
that ``max(x)`` of a constant vector has the gradient of ``mean(x)``.  A max/min *window*
reduction (max pooling, cummax) gives each window's cotangent to the first tied extreme, as
XLA's pooling gradient (select-and-scatter) does.
"""

from __future__ import annotations

import math

import numpy as np

from ..hlo import Builder, Shape
from ..hlo.attributes import PadDim, SliceDim, Window, WindowDim
from ..hlo.builder import unique_name
from ..hlo.ir import Computation
from ..hlo.opcodes import OPCODES
from ..hlo.reducers import reducer_op, returns_second
from .emit import Emitter, inverse_permutation
from .sort import sort_vjp

VJP_RULES: dict[str, object] = {}

# Piecewise-constant or integer/boolean-valued: no gradient flows through them.
ZERO_GRADIENT = {
    "parameter", "constant", "iota", "floor", "ceil", "round-nearest-even", "round-nearest-afz",
    "sign", "not", "is-finite", "popcnt", "count-leading-zeros", "bitcast-convert", "compare",
    "and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical",
    "rng-bit-generator",
}

NOT_DIFFERENTIABLE = {
    "real": "complex numbers are not differentiated",
    "imag": "complex numbers are not differentiated",
    "complex": "complex numbers are not differentiated",
    "convolution": "no transpose rule for convolution yet (write the convolution as a dot or "
                   "a sum of shifted slices)",
    "select-and-scatter": "it is itself a gradient (of max pooling); second derivatives of "
                          "pooling are not supported",
    "fft": "complex numbers are not differentiated",
    "topk": "no transpose rule for top-k yet (sort and slice instead)",
    "custom-call": "an opaque library call has no known derivative",
    "conditional": "no transpose rule for conditionals yet (compute both branches and choose "
                   "with np.where)",
    "fusion": "differentiate before optimizing: fusions only exist after the pass pipeline",
    "opt-barrier": "an optimization barrier has no derivative",
}


def vjp_rule(*opcodes):
    """Register ``fn`` as the VJP rule of ``opcodes`` -- the one spelling, as a decorator
    (``@vjp_rule("add")``) or a call (``vjp_rule("sort")(sort_vjp)``)."""
    def register(fn):
        for op in opcodes:
            VJP_RULES[op] = fn
        return fn
    return register


# ---- elementwise --------------------------------------------------------------------------------

def _unary(derivative):
    """Rule for ``y = f(x)`` given ``derivative(e, x, y) -> dy/dx``."""
    def transpose(e: Emitter, instr, g):
        x = instr.operands[0]
        return [lambda: e.mul(g, derivative(e, x, instr))]
    return transpose


UNARY_DERIVATIVES = {
    "abs": lambda e, x, y: e.op("sign", x),
    "exponential": lambda e, x, y: y,
    "exponential-minus-one": lambda e, x, y: e.add(y, e.full_like(y, 1)),
    "log": lambda e, x, y: e.div(e.full_like(x, 1), x),
    "log-plus-one": lambda e, x, y: e.div(e.full_like(x, 1), e.add(x, e.full_like(x, 1))),
    "sqrt": lambda e, x, y: e.div(e.full_like(y, 0.5), y),
    "rsqrt": lambda e, x, y: e.div(e.scale(y, -0.5), x),
    "cbrt": lambda e, x, y: e.div(e.full_like(y, 1 / 3), e.mul(y, y)),
    "tanh": lambda e, x, y: e.sub(e.full_like(y, 1), e.mul(y, y)),
    "logistic": lambda e, x, y: e.mul(y, e.sub(e.full_like(y, 1), y)),
    "sine": lambda e, x, y: e.op("cosine", x),
    "cosine": lambda e, x, y: e.neg(e.op("sine", x)),
    "tan": lambda e, x, y: e.add(e.full_like(y, 1), e.mul(y, y)),
    "erf": lambda e, x, y: e.scale(e.op("exponential", e.neg(e.mul(x, x))), 2 / math.sqrt(math.pi)),
}
for _op, _d in UNARY_DERIVATIVES.items():
    vjp_rule(_op)(_unary(_d))


@vjp_rule("negate")
def _negate(e, instr, g):
    return [lambda: e.neg(g)]


@vjp_rule("copy", "reduce-precision")
def _identity(e, instr, g):
    return [lambda: g]


@vjp_rule("convert")
def _convert(e, instr, g):
    return [lambda: e.convert(g, instr.operands[0].shape.element_type)]


@vjp_rule("add")
def _add(e, instr, g):
    return [lambda: g, lambda: g]


@vjp_rule("subtract")
def _subtract(e, instr, g):
    return [lambda: g, lambda: e.neg(g)]


@vjp_rule("multiply")
def _multiply(e, instr, g):
    a, b = instr.operands
    return [lambda: e.mul(g, b), lambda: e.mul(g, a)]


@vjp_rule("divide")
def _divide(e, instr, g):
    a, b = instr.operands
    return [lambda: e.div(g, b), lambda: e.neg(e.div(e.mul(g, instr), b))]


@vjp_rule("remainder")
def _remainder(e, instr, g):
    # fmod: a - trunc(a / b) * b
    a, b = instr.operands

    def db():
        q = e.div(a, b)
        trunc = e.mul(e.op("sign", q), e.op("floor", e.op("abs", q)))
        return e.neg(e.mul(g, trunc))
    return [lambda: g, db]


@vjp_rule("power")
def _power(e, instr, g):
    a, b = instr.operands

    def da():
        # b * a**(b-1), taken as 0 where b == 0 (also at a == 0, where the formula is 0*inf).
        d = e.mul(b, e.op("power", a, e.sub(b, e.full_like(b, 1))))
        return e.mul(g, e.where(e.compare(b, e.full_like(b, 0), "NE"), d))

    def db():
        # a**b * log(a), taken as 0 at a == 0 (the one-sided limit of 0**b for b > 0).
        log_a = e.where(e.compare(a, e.full_like(a, 0), "NE"), e.op("log", a))
        return e.mul(g, e.mul(instr, log_a))
    return [da, db]


def _extreme_rule(direction):
    def transpose(e, instr, g):
        a, b = instr.operands

        def share(x, y):                  # 1 where x wins, 1/2 where tied, 0 where it loses
            wins = e.indicator(e.compare(x, y, direction), g)
            ties = e.where(e.compare(x, y, "EQ"), e.full_like(g, 0.5))
            return e.mul(g, e.add(wins, ties))
        return [lambda: share(a, b), lambda: share(b, a)]
    return transpose


vjp_rule("maximum")(_extreme_rule("GT"))
vjp_rule("minimum")(_extreme_rule("LT"))


@vjp_rule("atan2")
def _atan2(e, instr, g):
    a, b = instr.operands

    def norm():
        return e.add(e.mul(a, a), e.mul(b, b))
    return [lambda: e.div(e.mul(g, b), norm()), lambda: e.neg(e.div(e.mul(g, a), norm()))]


@vjp_rule("select")
def _select(e, instr, g):
    p = instr.operands[0]
    zero = e.full_like(g, 0)
    return [None, lambda: e.select(p, g, zero), lambda: e.select(p, zero, g)]


@vjp_rule("clamp")
def _clamp(e, instr, g):
    lo, x, hi = instr.operands

    def wide(v):                       # scalar bounds are broadcast over x
        return v if v.shape.dims == x.shape.dims else e.broadcast(v, x.shape.dims, ())

    def narrow(c, v):
        return c if v.shape.dims == x.shape.dims else e.sum(c, range(x.shape.rank))

    def d_lo():
        wins = e.op("and", e.compare(wide(lo), x, "GT"), e.compare(wide(lo), wide(hi), "LT"))
        return narrow(e.where(wins, g), lo)

    def d_x():
        inside = e.op("and", e.compare(x, wide(lo), "GT"), e.compare(x, wide(hi), "LT"))
        return e.where(inside, g)
    return [d_lo, d_x, lambda: narrow(e.where(e.compare(wide(hi), x, "LT"), g), hi)]


# ---- data movement ------------------------------------------------------------------------------

@vjp_rule("broadcast")
def _broadcast(e, instr, g):
    x = instr.operands[0]
    dims = instr.attrs.get("dimensions", ())

    def t():
        # Sum the new dimensions away; the kept ones come out in result order.
        kept = sorted(range(len(dims)), key=lambda i: dims[i])
        s = e.sum(g, [d for d in range(instr.shape.rank) if d not in dims])
        s = e.transpose(s, inverse_permutation(kept))
        return e.sum_to_shape(s, x.shape)     # operand dims of size 1 that were stretched
    return [t]


@vjp_rule("reshape", "bitcast")
def _reshape(e, instr, g):
    x = instr.operands[0]
    if x.shape.element_type != instr.shape.element_type:
        return [None]
    return [lambda: e.reshape(g, x.shape.dims)]


@vjp_rule("transpose")
def _transpose(e, instr, g):
    return [lambda: e.transpose(g, inverse_permutation(instr.attrs["dimensions"]))]


@vjp_rule("reverse")
def _reverse(e, instr, g):
    return [lambda: e.op("reverse", g, dimensions=tuple(instr.attrs.get("dimensions", ())))]


@vjp_rule("slice")
def _slice(e, instr, g):
    x = instr.operands[0]

    def t():
        if instr.shape.size == 0:
            return e.zeros(x.shape)
        pads = []
        for s, n, m in zip(instr.attrs["slice"], x.shape.dims, instr.shape.dims):
            last = s.start + (m - 1) * s.stride
            pads.append(PadDim(s.start, n - last - 1, s.stride - 1))
        return e.pad(g, pads)
    return [t]


@vjp_rule("pad")
def _pad(e, instr, g):
    x = instr.operands[0]

    def operand():
        if x.shape.size == 0:
            return e.zeros(x.shape)
        pre = [PadDim(max(-p.low, 0), max(-p.high, 0)) for p in instr.attrs["padding"]]
        h = e.pad(g, pre)          # negative padding cut the operand: give it back as zeros
        dims = []
        for p, q, n in zip(instr.attrs["padding"], pre, x.shape.dims):
            start = p.low + q.low
            dims.append(SliceDim(start, start + (n - 1) * (p.interior + 1) + 1, p.interior + 1))
        return e.slice(h, dims)

    def value():
        everything = e.sum(g, range(g.shape.rank))
        return e.sub(everything, e.sum(operand(), range(x.shape.rank)))
    return [operand, value]


@vjp_rule("concatenate")
def _concatenate(e, instr, g):
    (axis,) = instr.attrs["dimensions"]
    thunks, start = [], 0
    for x in instr.operands:
        n = x.shape.dims[axis]
        dims = [SliceDim(start, start + n) if d == axis else SliceDim(0, m)
                for d, m in enumerate(instr.shape.dims)]
        thunks.append(lambda dims=dims: e.slice(g, dims))
        start += n
    return thunks


@vjp_rule("dynamic-slice")
def _dynamic_slice(e, instr, g):
    x, starts = instr.operands[0], instr.operands[1:]
    return [lambda: e.op("dynamic-update-slice", e.zeros(x.shape), g, *starts)] + [None] * len(starts)


@vjp_rule("dynamic-update-slice")
def _dynamic_update_slice(e, instr, g):
    u, starts = instr.operands[1], instr.operands[2:]
    return ([lambda: e.op("dynamic-update-slice", g, e.zeros(u.shape), *starts),
             lambda: e.op("dynamic-slice", g, *starts, dynamic_slice_sizes=u.shape.dims)]
            + [None] * len(starts))


# ---- reductions ---------------------------------------------------------------------------------

def reducer_kind(comp: Computation) -> str | None:
    """'add', 'multiply', 'maximum', 'minimum', 'replace' (returns its second parameter) or None."""
    if returns_second(comp):
        return "replace"
    op = reducer_op(comp)                       # (hlo/reducers.py)
    return op if op in ("add", "multiply", "maximum", "minimum") else None


class NoVjpRule(Exception):
    """A rule met a form of its opcode it cannot differentiate; ``backward`` reports it."""


@vjp_rule("reduce")
def _reduce(e, instr, g):
    if len(instr.operands) != 2:
        raise NoVjpRule("a reduction of several arrays at once (argmax's value/index pair)")
    x, init = instr.operands
    kind = reducer_kind(instr.attrs["to_apply"])
    axes = tuple(instr.attrs["dimensions"])
    kept = [d for d in range(x.shape.rank) if d not in axes]

    def spread(v):               # result-shaped -> operand-shaped
        return e.broadcast(v, x.shape.dims, kept)

    if kind == "add":
        return [lambda: spread(g), lambda: e.sum(g, range(g.shape.rank))]
    if kind in ("maximum", "minimum"):
        def operand():
            hit = e.indicator(e.compare(x, spread(instr), "EQ"), x)
            count = e.sum(hit, axes)                 # ties share the gradient evenly
            return e.mul(spread(e.div(g, count)), hit)

        # (The initial value is NumPy's identity, a constant: no gradient flows to it.)
        return [operand, None]
    if kind == "multiply":
        # d prod / d x_i = prod / x_i (undefined where x_i == 0; see docs/autodiff.md)
        return [lambda: e.mul(spread(e.mul(g, instr)), e.div(e.full_like(x, 1), x)), None]
    raise NoVjpRule("a reduction with a custom reducer")


def _scan_axis(window: Window, dims) -> int | None:
    """The axis of an inclusive scan (cumsum's window: the whole axis, padded before), or None."""
    axes = [d for d, w in enumerate(window.dims) if w.size != 1 or w.pad_low or w.pad_high]
    if len(axes) != 1:
        return None
    (d,) = axes
    w, n = window.dims[d], dims[d]
    if (w.size, w.stride, w.pad_low, w.pad_high, w.window_dilation) == (n, 1, n - 1, 0, 1) and \
            all(v.stride == 1 and v.window_dilation == 1 for v in window.dims):
        return d
    return None


def _chooser(element_type: str, direction: str):
    """``(picked, candidate) -> picked direction candidate``: keeps the first extreme."""
    b = Builder(unique_name(f"select_{direction.lower()}_{element_type}"))
    scalar = Shape(element_type)
    picked, candidate = b.parameter(scalar, "picked"), b.parameter(scalar, "candidate")
    return b.build(b.compare(picked, candidate, direction))


@vjp_rule("reduce-window")
def _reduce_window(e, instr, g):
    kind = reducer_kind(instr.attrs["to_apply"]) if len(instr.operands) == 2 else None
    x = instr.operands[0]
    window: Window = instr.attrs["window"]
    if kind in ("maximum", "minimum") and all(w.base_dilation == w.window_dilation == 1
                                               for w in window.dims):
        # Max pooling, cummax: each window's cotangent goes to the element it picked (the
        # first of tied extremes, as XLA's and JAX's pooling gradients do).
        et = x.shape.element_type
        return [lambda: e.op("select-and-scatter", x, g, e.scalar(0, et), window=window,
                             select=_chooser(et, "GE" if kind == "maximum" else "LE"),
                             scatter=e.adder(et)), None]
    scan = _scan_axis(window, x.shape.dims)

    def reverse_cumsum(v):
        # the transpose of a cumsum is the reversed cumsum: as a scan again (O(n), not a window)
        r = e.op("reverse", v, dimensions=(scan,))
        r = e.op("reduce-window", r, e.scalar(0, v.shape.element_type), window=window,
                 to_apply=e.adder(v.shape.element_type))
        return e.op("reverse", r, dimensions=(scan,))
    if kind == "multiply" and scan is not None:
        # cumprod: d y_i / d x_j = y_i / x_j for i >= j (undefined where x_j == 0, like prod)
        return [lambda: e.div(reverse_cumsum(e.mul(g, instr)), x), None]
    if kind != "add":
        raise NoVjpRule("a window reduction other than a sum, max, min or cumulative "
                              "product (or a dilated max or min)")
    if any(w.base_dilation != 1 for w in window.dims):
        raise NoVjpRule("a window sum with base dilation")
    if scan is not None:
        return [lambda: reverse_cumsum(g), None]

    def t():
        # Each input element was added into every output whose window covered it: pad the
        # cotangent (strides become interior padding) and sum it with the same window.
        pads = []
        for w, n, m in zip(window.dims, x.shape.dims, instr.shape.dims):
            win = (w.size - 1) * w.window_dilation + 1
            lo = win - 1 - w.pad_low
            out = (m - 1) * w.stride + 1 if m else 0
            hi = n + win - 1 - out - lo
            pads.append(PadDim(lo, hi, w.stride - 1))
        if any(p.low < 0 or p.high < 0 for p in pads):
            raise NoVjpRule("a window sum whose padding exceeds its window")
        padded = e.pad(g, pads)
        dims = tuple(WindowDim(w.size, 1, 0, 0, 1, w.window_dilation) for w in window.dims)
        return e.op("reduce-window", padded, e.scalar(0, g.shape.element_type),
                    window=Window(dims), to_apply=e.adder(g.shape.element_type))
    return [t, None]


# ---- linear algebra -----------------------------------------------------------------------------

def _dot_cotangents(e, g, x, y, xc, yc, xb, yb):
    """Cotangents of ``x`` and ``y`` in ``dot(x, y)`` whose cotangent is ``g``.

    ``g``'s dims are (batch, x kept, y kept).  Each cotangent is one dot with the other
    operand, ordered so that the common case needs no transpose: ``g @ y.T`` for x and
    ``x.T @ g`` for y (the CPU backend hands transposed operands to BLAS as they are)."""
    x_kept = [d for d in range(x.shape.rank) if d not in xc and d not in xb]
    y_kept = [d for d in range(y.shape.rank) if d not in yc and d not in yb]
    nb = len(xb)
    batch = tuple(range(nb))
    g_x = tuple(range(nb, nb + len(x_kept)))
    g_y = tuple(range(nb + len(x_kept), nb + len(x_kept) + len(y_kept)))

    def dx():
        # dims: batch, x kept, y's contracting dims in y order (= x's, sorted by y)
        d = e.op("dot", g, y, lhs_batch_dims=batch, rhs_batch_dims=tuple(yb),
                 lhs_contracting_dims=g_y, rhs_contracting_dims=tuple(y_kept))
        x_by_y = [xc[i] for i in np.argsort(yc)]
        return e.transpose(d, inverse_permutation(list(xb) + x_kept + x_by_y))

    def dy():
        # dims: batch, x's contracting dims in x order (= y's, sorted by x), y kept
        d = e.op("dot", x, g, lhs_batch_dims=tuple(xb), rhs_batch_dims=batch,
                 lhs_contracting_dims=tuple(x_kept), rhs_contracting_dims=g_x)
        y_by_x = [yc[i] for i in np.argsort(xc)]
        return e.transpose(d, inverse_permutation(list(yb) + y_by_x + y_kept))
    return [dx, dy]


@vjp_rule("dot")
def _dot(e, instr, g):
    x, y = instr.operands
    a = instr.attrs
    if g.shape.element_type != x.shape.element_type:
        g = e.convert(g, x.shape.element_type)
    return _dot_cotangents(e, g, x, y, list(a.get("lhs_contracting_dims", ())),
                           list(a.get("rhs_contracting_dims", ())), list(a.get("lhs_batch_dims", ())),
                           list(a.get("rhs_batch_dims", ())))


# ---- gather and scatter -------------------------------------------------------------------------

@vjp_rule("gather")
def _gather(e, instr, g):
    x, idx = instr.operands
    a = instr.attrs

    def t():
        attrs = dict(update_window_dims=tuple(a.get("offset_dims", ())),
                     inserted_window_dims=tuple(a.get("collapsed_slice_dims", ())),
                     scatter_dims_to_operand_dims=tuple(a.get("start_index_map", ())),
                     index_vector_dim=a.get("index_vector_dim", idx.shape.rank),
                     to_apply=e.adder(g.shape.element_type))
        if a.get("operand_batching_dims"):
            attrs["input_batching_dims"] = tuple(a["operand_batching_dims"])
            attrs["scatter_indices_batching_dims"] = tuple(a["start_indices_batching_dims"])
        return e.op("scatter", e.zeros(x.shape), idx, g, **attrs)
    return [t, None]


def _gather_like_scatter(e, instr, source):
    """Gather from ``source`` (operand-shaped) the elements the scatter ``instr`` addressed."""
    x, idx, u = instr.operands
    a = instr.attrs
    window = list(a.get("update_window_dims", ()))
    skipped = set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))
    sizes, k = [], 0
    for d in range(x.shape.rank):
        if d in skipped:
            sizes.append(1)
        else:
            sizes.append(u.shape.dims[window[k]])
            k += 1
    attrs = dict(offset_dims=tuple(window), collapsed_slice_dims=tuple(a.get("inserted_window_dims", ())),
                 start_index_map=tuple(a.get("scatter_dims_to_operand_dims", ())),
                 index_vector_dim=a.get("index_vector_dim", idx.shape.rank), slice_sizes=tuple(sizes))
    if a.get("input_batching_dims"):
        attrs["operand_batching_dims"] = tuple(a["input_batching_dims"])
        attrs["start_indices_batching_dims"] = tuple(a["scatter_indices_batching_dims"])
    return e.op("gather", source, idx, **attrs)


@vjp_rule("scatter")
def _scatter(e, instr, g):
    if len(instr.operands) != 3:
        raise NoVjpRule("a scatter of several arrays at once")
    x, idx, u = instr.operands
    kind = reducer_kind(instr.attrs["to_apply"])
    if kind == "add":
        return [lambda: g, None, lambda: _gather_like_scatter(e, instr, g)]
    if kind == "replace":
        # Overwritten elements get no gradient; each update gets the cotangent of the
        # element it wrote (with repeated indices every writer gets it: see docs/autodiff.md).
        def operand():
            attrs = {k: v for k, v in instr.attrs.items() if k != "metadata"}
            return e.op("scatter", g, idx, e.zeros(u.shape), **attrs)
        return [operand, None, lambda: _gather_like_scatter(e, instr, g)]
    raise NoVjpRule(f"a scatter that combines with {kind or 'a custom function'}")


# ---- tuples -------------------------------------------------------------------------------------

@vjp_rule("tuple")
def _tuple(e, instr, g):
    return [(lambda c=c: c) if c is not None else None for c in g]


@vjp_rule("get-tuple-element")
def _get_tuple_element(e, instr, g):
    n = len(instr.operands[0].shape.elements)
    index = instr.attrs["index"]
    return [lambda: [g if i == index else None for i in range(n)]]


# ---- sort ---------------------------------------------------------------------------------------

vjp_rule("sort")(sort_vjp)            # (sort.py: the rule lives beside its helpers)



def check_tables() -> list[str]:
    """Opcodes missing from, or listed twice in, the three tables (empty when consistent)."""
    problems = []
    for op in OPCODES:
        homes = [name for name, table in (("rules", VJP_RULES), ("zero", ZERO_GRADIENT),
                                          ("not", NOT_DIFFERENTIABLE)) if op in table]
        if len(homes) != 1:
            problems.append(f"{op}: {homes or 'nowhere'}")
    return problems


__all__ = ["VJP_RULES", "ZERO_GRADIENT", "NOT_DIFFERENTIABLE", "NoVjpRule", "vjp_rule",
           "reducer_kind", "check_tables"]
