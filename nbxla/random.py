"""``nbxla.random``: random numbers from explicit keys, the same in compiled code and outside.

NumPy's generators have hidden state, so ``np.random`` cannot be part of a compiled program
(it would be drawn once, at trace time).  Here, as in JAX, the state is an explicit *key*
(a ``uint64[2]`` array: ThreeFry's key word and a counter), and the bits come from HLO's
counter-based ``rng-bit-generator`` (XLA's ThreeFry, bit for bit).  A key passed into
``nbxla.jit`` or a ``%%xla`` cell is an ordinary input, so dropout masks and initializations
live inside the compiled program and change when the key changes::

    key = nbxla.random.key(0)
    key, sub = nbxla.random.split(key)
    w = nbxla.random.normal(sub, (784, 256), np.float32) * 0.05

    @nbxla.jit
    def step(params, x, key):
        mask = nbxla.random.bernoulli(key, 0.9, x.shape)      # dropout, drawn in the kernel
        ...

Called on a NumPy key, each function runs the same HLO through a cached ``jit``: the numbers
are identical to those drawn inside compiled code from the same key.  Reusing a key gives
the same numbers again: ``split`` it into fresh keys instead.
"""

from __future__ import annotations

import functools

import numpy as np

from .api import jit
from .frontend.rules import emit
from .frontend.tracer import Tracer
from .hlo import Shape, TupleShape, from_numpy_dtype

ALGORITHM = "rng_three_fry"
# Mantissa bits below the float's fraction, and the bit pattern of 1.0: (bits >> shift) | one
# is a float in [1, 2), uniformly spaced.
_FLOAT_BITS = {np.dtype(np.float16): (16, 6, 0x3C00), np.dtype(np.float32): (32, 9, 0x3F800000),
               np.dtype(np.float64): (64, 12, 0x3FF0000000000000)}


def key(seed: int) -> np.ndarray:
    """A key for ``seed`` (any integer that fits in 64 bits)."""
    return np.array([int(seed) & 0xFFFFFFFFFFFFFFFF, 0], np.uint64)


def _eager(traced):
    """Run ``traced`` (written for a traced key) on a NumPy key through a cached jit."""
    compiled = jit(traced)

    @functools.wraps(traced)
    def call(key, *args, **kwargs):
        if isinstance(key, Tracer):
            return traced(key, *args, **kwargs)
        key = np.asarray(key)
        if key.shape != (2,) or key.dtype != np.uint64:
            raise TypeError(f"a key is a uint64 array of shape (2,) (nbxla.random.key(seed)), "
                            f"not {key.dtype}{list(key.shape)}")
        return compiled(key, *args, **kwargs)
    return call


def _bits(k: Tracer, shape: tuple, width: int) -> Tracer:
    state = Shape("u64", (2,))
    pair = emit(k.ctx, "rng-bit-generator", k, shape=TupleShape((state, Shape(f"u{width}", shape))),
                algorithm=ALGORITHM)
    return emit(k.ctx, "get-tuple-element", pair, index=1)


def _unit(k: Tracer, shape: tuple, dtype: np.dtype) -> Tracer:
    """Uniform on [0, 1) in ``dtype``, every value a multiple of its spacing near 1."""
    width, shift, one = _FLOAT_BITS[dtype]
    bits = _bits(k, shape, width)
    utype = np.dtype(f"uint{width}")
    mantissa = np.bitwise_or(np.right_shift(bits, utype.type(shift)), utype.type(one))
    return emit(k.ctx, "bitcast-convert", mantissa, shape=Shape(from_numpy_dtype(dtype), shape)) - dtype.type(1)


def _check(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in _FLOAT_BITS:
        raise TypeError(f"nbxla.random draws float16, float32 or float64 numbers, not {dtype}")
    return dtype


@_eager
def split(key, num: int = 2):
    """``num`` new keys (rows of a ``(num, 2)`` array), independent of each other and of ``key``."""
    words = _bits(key, (int(num),), 64)
    return np.stack([words, np.zeros_like(words)], axis=1)


@_eager
def uniform(key, shape=(), dtype=np.float32, low=0.0, high=1.0):
    """Uniform on ``[low, high)``."""
    dtype = _check(dtype)
    u = _unit(key, tuple(shape), dtype)
    if (low, high) == (0.0, 1.0):
        return u
    # (rounding can reach ``high`` in low precision: keep the interval half-open)
    v = u * dtype.type(high - low) + dtype.type(low)
    return np.minimum(v, np.nextafter(dtype.type(high), dtype.type(low)))


@_eager
def normal(key, shape=(), dtype=np.float32):
    """Standard normal (Box-Muller on two uniforms, computed in at least float32)."""
    dtype = _check(dtype)
    work = np.promote_types(dtype, np.float32)
    u = _unit(key, (2,) + tuple(shape), work)
    radius = np.sqrt(work.type(-2) * np.log(work.type(1) - u[0]))     # 1 - u: in (0, 1]
    return (radius * np.cos(work.type(2 * np.pi) * u[1])).astype(dtype)


@_eager
def bernoulli(key, p=0.5, shape=()):
    """Booleans, True with probability ``p``."""
    return _unit(key, tuple(shape), np.dtype(np.float32)) < np.float32(p)


__all__ = ["key", "split", "uniform", "normal", "bernoulli"]
