"""Hypothesis strategies that build random valid HLO modules with ``nbxla.hlo.Builder``.

A graph grows one instruction at a time from a pool of values; operands are drawn mostly from
recent values (so chains form) and sometimes from older ones (so values get several users,
which is what makes fusion decide between duplicating, multi-output and refusing).  Ops whose
domain is restricted (log, sqrt, divide, power) are guarded so that results stay finite.
Constants 0, -0.0, 1, 2, 3, 4 are common so that the algebraic simplifier's rules fire.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from nbxla.hlo import Builder, Module, Shape, scalar_computation
from nbxla.hlo.attributes import PadDim, SliceDim
from nbxla.hlo.shapes import to_numpy_dtype

MAX_DIM = 4
MAX_RANK = 3

UNARY = ("negate", "abs", "exponential", "tanh", "logistic", "sine", "floor", "copy")
BINARY = ("add", "subtract", "multiply", "maximum", "minimum")
SPECIAL_CONSTANTS = (0.0, -0.0, 1.0, 2.0, 3.0, 4.0, 0.5, -1.5)


class GraphBuilder:
    """A Builder plus a pool of array values and the random choices that grow it."""

    def __init__(self, draw, element_type: str):
        self.draw, self.t = draw, element_type
        self.b = Builder("entry")
        self.pool = []
        self.params = []
        self.reducers = {}

    # ---- helpers -------------------------------------------------------------------------

    def pick(self, pred=lambda v: True):
        """A pool value (biased towards recent ones) satisfying ``pred``, or None."""
        cands = [v for v in self.pool if pred(v)]
        if not cands:
            return None
        if self.draw(st.booleans()):
            return cands[-1 - self.draw(st.integers(0, min(2, len(cands) - 1)))]
        return cands[self.draw(st.integers(0, len(cands) - 1))]

    def dims(self, min_rank=0):
        rank = self.draw(st.integers(min_rank, MAX_RANK))
        return tuple(self.draw(st.lists(st.integers(1, MAX_DIM), min_size=rank, max_size=rank)))

    def parameter(self, dims):
        p = self.b.parameter(Shape(self.t, tuple(dims)), f"p{len(self.params)}")
        self.params.append(p)
        self.pool.append(p)
        return p

    def scalar(self, value=None):
        if value is None:
            value = self.draw(st.sampled_from(SPECIAL_CONSTANTS) | st.floats(-3, 3, width=32))
        return self.b.constant(value, self.t)

    def splat(self, dims, value=None):
        """A constant broadcast to ``dims`` (how frontends spell ``x + 2``)."""
        c = self.scalar(value)
        return self.b.broadcast(c, tuple(dims)) if dims else c

    def like(self, v):
        """A value with ``v``'s dims: another pool value when one fits, else a constant."""
        other = self.pick(lambda w: w.shape.dims == v.shape.dims and w is not v)
        if other is not None and self.draw(st.integers(0, 3)):
            return other
        return self.splat(v.shape.dims)

    def positive(self, v):
        """``|v| + 1``: a value safe for log, sqrt and as a divisor."""
        return self.b.op("add", self.b.op("abs", v), self.splat(v.shape.dims, 1.0))

    def add(self, instr):
        self.pool.append(instr)
        return instr

    def reducer(self, op):
        if op not in self.reducers:
            self.reducers[op] = scalar_computation(op, self.t)
        return self.reducers[op]

    # ---- the ops -------------------------------------------------------------------------

    def step(self):
        kind = self.draw(st.sampled_from(KINDS))
        getattr(self, "op_" + kind)()

    def op_unary(self):
        v = self.pick()
        self.add(self.b.op(self.draw(st.sampled_from(UNARY)), v))

    def op_guarded(self):
        v = self.pick()
        which = self.draw(st.sampled_from(("log", "sqrt", "rsqrt", "divide", "power", "negneg")))
        if which in ("log", "sqrt", "rsqrt"):
            self.add(self.b.op(which, self.positive(v)))
        elif which == "divide":
            if self.draw(st.booleans()):     # by a constant: x/4 becomes x*0.25, x/3 stays
                divisor = self.draw(st.sampled_from((4.0, 3.0, 2.0, 1.0, 0.5, -1.5, 0.1)))
                self.add(self.b.op("divide", v, self.splat(v.shape.dims, divisor)))
            else:
                self.add(self.b.op("divide", v, self.positive(self.like(v))))
        elif which == "power":
            exponent = self.draw(st.sampled_from((1.0, 2.0, 3.0, 0.5)))
            base = self.positive(v) if exponent == 0.5 else v
            self.add(self.b.op("power", base, self.splat(v.shape.dims, exponent)))
        else:
            self.add(self.b.op("negate", self.b.op("negate", v)))

    def op_binary(self):
        v = self.pick()
        w = self.like(v)
        a, b = (v, w) if self.draw(st.booleans()) else (w, v)
        self.add(self.b.op(self.draw(st.sampled_from(BINARY)), a, b))

    def op_compare_select(self):
        v = self.pick()
        w = self.like(v)
        direction = self.draw(st.sampled_from(("LT", "LE", "GT", "GE", "EQ", "NE")))
        pred = self.b.op("compare", v, w, direction=direction)
        on_false = self.like(v)
        self.add(self.b.op("select", pred, v, on_false))

    def op_convert_chain(self):
        v = self.pick()
        wide = "f64" if self.t == "f32" else "f32"
        mid = self.b.convert(v, wide)
        if self.draw(st.booleans()):
            mid = self.b.op("multiply", mid, self.b.broadcast(self.b.constant(1.0, wide), mid.shape.dims)
                            if mid.shape.dims else self.b.constant(1.0, wide))
        self.add(self.b.convert(mid, self.t))

    def op_broadcast(self):
        v = self.pick(lambda w: w.shape.rank < MAX_RANK)
        if v is None:
            return self.op_reduce()
        out_rank = self.draw(st.integers(v.shape.rank, MAX_RANK))
        positions = sorted(self.draw(st.permutations(range(out_rank)))[:v.shape.rank])
        out = [0] * out_rank
        for i, d in enumerate(positions):
            out[d] = v.shape.dims[i]
        for d in range(out_rank):
            if d not in positions:
                out[d] = self.draw(st.integers(1, MAX_DIM))
        self.add(self.b.broadcast(v, tuple(out), positions))

    def op_reshape(self):
        v = self.pick()
        n = v.shape.size
        dims = []
        while n > 1 and len(dims) < MAX_RANK - 1:
            divisors = [d for d in range(1, n + 1) if n % d == 0]
            d = self.draw(st.sampled_from(divisors))
            dims.append(d)
            n //= d
        if n > 1 or self.draw(st.booleans()):
            dims.append(n)
        if self.draw(st.booleans()) and len(dims) < MAX_RANK:
            dims.insert(self.draw(st.integers(0, len(dims))), 1)
        self.add(self.b.reshape(v, dims))

    def op_transpose(self):
        v = self.pick(lambda w: w.shape.rank >= 1)
        if v is None:
            return self.op_broadcast()
        perm = tuple(self.draw(st.permutations(range(v.shape.rank))))
        t = self.b.op("transpose", v, dimensions=perm)
        if self.draw(st.integers(0, 3)) == 0:     # transpose of transpose
            t = self.b.op("transpose", t, dimensions=tuple(self.draw(st.permutations(range(v.shape.rank)))))
        self.add(t)

    def op_reduce(self):
        v = self.pick(lambda w: w.shape.rank >= 1)
        if v is None:
            return self.op_broadcast()
        axes = sorted(set(self.draw(st.lists(st.integers(0, v.shape.rank - 1), min_size=1,
                                             max_size=v.shape.rank))))
        op = self.draw(st.sampled_from(("add", "maximum", "minimum")))
        init = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf}[op]
        r = self.b.reduce(v, self.b.constant(init, self.t), axes, self.reducer(op))
        self.add(r)
        if self.draw(st.booleans()) and r.shape.rank < v.shape.rank:
            # broadcast back along the reduced axes (softmax / layernorm style)
            kept = [d for d in range(v.shape.rank) if d not in axes]
            back = self.b.broadcast(r, v.shape.dims, kept)
            self.add(self.b.op(self.draw(st.sampled_from(("subtract", "multiply"))), v, back))

    def op_slice(self):
        v = self.pick(lambda w: w.shape.rank >= 1)
        if v is None:
            return self.op_broadcast()
        sl = []
        for n in v.shape.dims:
            start = self.draw(st.integers(0, n - 1))
            limit = self.draw(st.integers(start + 1, n))
            sl.append(SliceDim(start, limit, self.draw(st.integers(1, 2))))
        if self.draw(st.integers(0, 4)) == 0:    # a full slice
            sl = [SliceDim(0, n, 1) for n in v.shape.dims]
        self.add(self.b.op("slice", v, slice=tuple(sl)))

    def op_concatenate(self):
        v = self.pick(lambda w: w.shape.rank >= 1)
        if v is None:
            return self.op_broadcast()
        d = self.draw(st.integers(0, v.shape.rank - 1))
        others = [w for w in self.pool if w.shape.rank == v.shape.rank and all(
            a == b for i, (a, b) in enumerate(zip(w.shape.dims, v.shape.dims)) if i != d)]
        w = others[self.draw(st.integers(0, len(others) - 1))]
        self.add(self.b.op("concatenate", v, w, dimensions=(d,)))

    def op_pad(self):
        v = self.pick(lambda w: w.shape.rank >= 1)
        if v is None:
            return self.op_broadcast()
        pads = []
        for n in v.shape.dims:
            low = self.draw(st.integers(-min(1, n - 1), 2))
            pads.append(PadDim(low, self.draw(st.integers(0, 2)), self.draw(st.integers(0, 1))))
        self.add(self.b.op("pad", v, self.scalar(), padding=tuple(pads)))

    def op_reverse(self):
        v = self.pick(lambda w: w.shape.rank >= 1)
        if v is None:
            return self.op_broadcast()
        dims = tuple(sorted(set(self.draw(st.lists(st.integers(0, v.shape.rank - 1), min_size=1)))))
        self.add(self.b.op("reverse", v, dimensions=dims))

    def op_iota(self):
        dims = self.dims(min_rank=1)
        i = self.b.iota(Shape("s32", dims), self.draw(st.integers(0, len(dims) - 1)))
        self.add(self.b.convert(i, self.t))

    def op_dot(self):
        a = self.pick(lambda w: w.shape.rank in (1, 2))
        if a is None:
            return self.op_reduce()
        k = a.shape.dims[-1]
        rhs_rank = self.draw(st.integers(1, 2))
        rhs = self.pick(lambda w: w.shape.rank == rhs_rank and w.shape.dims[0] == k)
        if rhs is None:
            rhs = self.parameter((k,) if rhs_rank == 1 else (k, self.draw(st.integers(1, MAX_DIM))))
        self.add(self.b.op("dot", a, rhs, lhs_contracting_dims=(a.shape.rank - 1,),
                           rhs_contracting_dims=(0,)))

    def op_batch_dot(self):
        a = self.pick(lambda w: w.shape.rank == 3)
        if a is None:
            return self.op_dot()
        bsz, _, k = a.shape.dims
        rhs = self.pick(lambda w: w.shape.rank == 3 and w.shape.dims[:2] == (bsz, k))
        if rhs is None:
            rhs = self.parameter((bsz, k, self.draw(st.integers(1, MAX_DIM))))
        self.add(self.b.op("dot", a, rhs, lhs_batch_dims=(0,), rhs_batch_dims=(0,),
                           lhs_contracting_dims=(2,), rhs_contracting_dims=(1,)))

    def op_call(self):
        """A value computed in a called computation (how JAX wraps jnp.where, clip, ...)."""
        v = self.pick()
        w = self.like(v)
        inner = Builder(f"callee_{len(self.pool)}")
        a, c = inner.parameter(v.shape, "a"), inner.parameter(w.shape, "c")
        body = inner.op(self.draw(st.sampled_from(BINARY)), inner.op("exponential", inner.op("negate", a)), c)
        self.add(self.b.op("call", v, w, to_apply=inner.build(body)))

    def op_new_parameter(self):
        self.parameter(self.dims())


KINDS = tuple(name[3:] for name in vars(GraphBuilder) if name.startswith("op_"))
# More weight to the ops fusion is about.
KINDS = KINDS + ("unary", "binary", "binary", "reduce", "broadcast", "guarded")


@st.composite
def hlo_modules(draw, max_steps: int = 14):
    """(module, args): a random valid module and arguments for its parameters."""
    t = draw(st.sampled_from(("f32", "f32", "f64")))
    g = GraphBuilder(draw, t)
    for _ in range(draw(st.integers(1, 3))):
        g.parameter(g.dims())
    for _ in range(draw(st.integers(1, max_steps))):
        g.step()
    computed = [v for v in g.pool if v.opcode != "parameter"]
    outputs = [computed[-1]] if computed else [g.pool[-1]]
    extra = draw(st.lists(st.integers(0, len(g.pool) - 1), max_size=2, unique=True))
    for i in extra:                   # more outputs: a tuple root
        if g.pool[i] not in outputs:
            outputs.append(g.pool[i])
    root = outputs[0] if len(outputs) == 1 else g.b.op("tuple", *outputs)
    if root.opcode == "parameter":
        root = g.b.op("copy", root)
    module = Module("random", g.b.build(root))
    module.make_names_unique()
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    args = [rng.uniform(-2, 2, p.shape.dims).astype(to_numpy_dtype(t)) for p in g.params]
    return module, args
