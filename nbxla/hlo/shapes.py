"""Element types and shapes, with XLA's text spelling (``f32[8,8]{1,0}``, ``(s32[], f32[4])``).

A ``Shape`` is an array shape (element type, dimensions, layout); a ``TupleShape`` holds
other shapes.  The layout is XLA's ``minor_to_major`` list; ``None`` means the default
row-major layout.  Layouts only matter to ``bitcast`` and to printing: values are always
logical arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

import ml_dtypes
import numpy as np

from ..errors import HloShapeError

# XLA primitive type name -> NumPy dtype.  bf16 and the f8 types are ml_dtypes' NumPy dtypes
# (the package JAX and TensorFlow use), so their values are ordinary NumPy arrays.
_NUMPY_OF = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16),
    "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}
ELEMENT_TYPES = tuple(_NUMPY_OF)
_TYPE_OF = {dt: name for name, dt in _NUMPY_OF.items()}

SIGNED_INTS = ("s8", "s16", "s32", "s64")
UNSIGNED_INTS = ("u8", "u16", "u32", "u64")
INTEGRAL = SIGNED_INTS + UNSIGNED_INTS
# Floats too narrow to compute in: XLA's CPU backend (FloatNormalization) computes every
# arithmetic op on them in f32 and rounds its result once; data movement keeps them as they are.
LOW_PRECISION = ("bf16", "f8e4m3fn", "f8e5m2")
LOW_PRECISION_DTYPES = frozenset(_NUMPY_OF[t] for t in LOW_PRECISION)
FLOATS = ("f8e4m3fn", "f8e5m2", "f16", "bf16", "f32", "f64")
COMPLEX = ("c64", "c128")
_BITS = {"pred": 8, "s8": 8, "u8": 8, "f8e4m3fn": 8, "f8e5m2": 8,
         "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
         "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64,
         "c64": 64, "c128": 128}


def is_float(t: str) -> bool:
    return t in FLOATS


def is_complex(t: str) -> bool:
    return t in COMPLEX


def is_integral(t: str) -> bool:
    return t in INTEGRAL


def is_signed(t: str) -> bool:
    return t in SIGNED_INTS or t in FLOATS or t in COMPLEX


def is_low_precision(t: str) -> bool:
    return t in LOW_PRECISION


def compute_type(t: str) -> str:
    """The type arithmetic on ``t`` happens in: f32 for the low-precision floats."""
    return "f32" if t in LOW_PRECISION else t


def bit_width(t: str) -> int:
    return _BITS[t]


def complex_component(t: str) -> str:
    """The real type of a complex type (c64 -> f32)."""
    return {"c64": "f32", "c128": "f64"}[t]


def to_numpy_dtype(t: str) -> np.dtype:
    """NumPy dtype of an element type."""
    try:
        return _NUMPY_OF[t]
    except KeyError:
        raise HloShapeError(f"unknown element type {t!r}; expected one of {', '.join(ELEMENT_TYPES)}") from None


def from_numpy_dtype(dtype) -> str:
    """Element type of a NumPy dtype (e.g. float32 -> 'f32')."""
    dt = np.dtype(dtype)
    try:
        return _TYPE_OF[dt]
    except KeyError:
        raise HloShapeError(f"NumPy dtype {dt} has no HLO element type; supported: "
                            + ", ".join(str(d) for d in _TYPE_OF)) from None


@dataclass(frozen=True)
class SymDim:
    """An unknown dimension: ``coeff * name`` for a size symbol ``name`` bound when the program
    runs (``b`` in ``f32[b,64]``, ``64*b`` after a reshape that flattens it).

    Comparisons here take a symbol for sizes >= 2 (broadcasting treats 1 differently, and an
    empty array takes other paths), so ``b == 1`` and ``b < 0`` are decided here; any other
    comparison with a number has no answer at compile time and raises
    ``SymbolicDimensionError`` (the compile then falls back to the concrete size).  (A jit
    program that also serves size 1 was traced at 1 and found the same program there: its
    kernels come from concrete probes, never from these comparisons.)
    """

    name: str
    coeff: int = 1

    def __str__(self) -> str:
        return self.name if self.coeff == 1 else f"{self.coeff}*{self.name}"

    def __repr__(self) -> str:
        return f"SymDim({self})"

    def bind(self, values: dict) -> int:
        try:
            return self.coeff * values[self.name]
        except KeyError:
            raise HloShapeError(f"no size given for the dimension symbol {self.name!r}") from None

    def __mul__(self, other):
        if isinstance(other, SymDim):
            raise SymbolicDimensionError(f"a size {self} * {other} (a product of two symbols)")
        return SymDim(self.name, self.coeff * int(other)) if other else 0

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if isinstance(other, int) and other and self.coeff % other == 0:
            return SymDim(self.name, self.coeff // other)
        raise SymbolicDimensionError(f"a size {self} // {other} that is not a whole multiple of {self.name}")

    def _undecided(self, op, other):
        raise SymbolicDimensionError(f"a comparison {self} {op} {other} of an unknown size with a number")

    def __lt__(self, other):
        if isinstance(other, int) and other <= 2 * self.coeff:
            return False
        return self._undecided("<", other)

    def __ge__(self, other):
        return not self.__lt__(other)

    def __gt__(self, other):
        if isinstance(other, int) and other < 2 * self.coeff:
            return True
        return self._undecided(">", other)

    def __le__(self, other):
        return not self.__gt__(other)

    def __int__(self):
        raise SymbolicDimensionError(f"the unknown size {self} used as a number")

    __index__ = __int__


class SymbolicDimensionError(Exception):
    """Something met an unknown dimension it cannot handle symbolically.  Internal: the
    compile of a program with unknown dimensions catches it and compiles for the concrete
    sizes instead, recording the reason (never a user-visible error)."""


def _dimension(d):
    return d if isinstance(d, SymDim) else int(d)


def is_symbolic(shape) -> bool:
    """Does the shape (or any element of a tuple shape) have an unknown dimension?"""
    if shape.is_tuple:
        return any(is_symbolic(e) for e in shape.elements)
    return any(isinstance(d, SymDim) for d in shape.dims)


def bind_shape(shape, values: dict):
    """``shape`` with its symbols replaced by the sizes in ``values`` (name -> int)."""
    if shape.is_tuple:
        return TupleShape(tuple(bind_shape(e, values) for e in shape.elements))
    if not any(isinstance(d, SymDim) for d in shape.dims):
        return shape
    return Shape(shape.element_type, tuple(d.bind(values) if isinstance(d, SymDim) else d for d in shape.dims),
                 shape.layout)


@dataclass(frozen=True)
class Shape:
    """An array shape: element type, dimensions and (optional) minor-to-major layout."""

    element_type: str
    dims: tuple[int, ...] = ()
    layout: tuple[int, ...] | None = None

    is_tuple = False

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(_dimension(d) for d in self.dims))
        if self.element_type not in _NUMPY_OF:
            raise HloShapeError(f"unknown element type {self.element_type!r}")
        if any(d < 0 for d in self.dims):
            raise HloShapeError(f"negative dimension in {self.dims}")
        if self.layout is not None:
            layout = tuple(int(d) for d in self.layout)
            if sorted(layout) != list(range(len(self.dims))):
                raise HloShapeError(f"layout {{{','.join(map(str, layout))}}} is not a permutation "
                                    f"of the {len(self.dims)} dimensions of {self.to_text(with_layout=False)}")
            if layout == default_layout(len(self.dims)):
                layout = None  # normalise: default layout is stored as None
            object.__setattr__(self, "layout", layout)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        # (np.prod: ~3 us a call, read per instruction by passes)
        size = 1
        for d in self.dims:
            size = d * size if isinstance(d, SymDim) else size * d
        return size

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        return self.layout if self.layout is not None else default_layout(len(self.dims))

    @property
    def dtype(self) -> np.dtype:
        return to_numpy_dtype(self.element_type)

    @property
    def byte_size(self) -> int:
        return self.size * bit_width(self.element_type) // 8

    def with_type(self, element_type: str) -> "Shape":
        return Shape(element_type, self.dims, self.layout)

    def with_dims(self, dims: Iterable[int]) -> "Shape":
        return Shape(self.element_type, tuple(dims))

    def compatible(self, other: "AnyShape") -> bool:
        """Equal element type and dimensions (layouts may differ)."""
        return (not other.is_tuple and self.element_type == other.element_type
                and self.dims == other.dims)

    def to_text(self, with_layout: bool = True) -> str:
        text = f"{self.element_type}[{','.join(map(str, self.dims))}]"
        if with_layout and self.dims:
            text += "{" + ",".join(map(str, self.minor_to_major)) + "}"
        return text

    def __str__(self) -> str:
        return self.to_text()


@dataclass(frozen=True)
class TupleShape:
    """A tuple of shapes (possibly nested, possibly empty)."""

    elements: tuple["AnyShape", ...] = ()

    is_tuple = True
    element_type = "tuple"

    def __post_init__(self):
        object.__setattr__(self, "elements", tuple(self.elements))

    def compatible(self, other: "AnyShape") -> bool:
        return (other.is_tuple and len(self.elements) == len(other.elements)
                and all(a.compatible(b) for a, b in zip(self.elements, other.elements)))

    @property
    def byte_size(self) -> int:
        return sum(e.byte_size for e in self.elements)

    def leaves(self) -> list[Shape]:
        out: list[Shape] = []
        for e in self.elements:
            out.extend(e.leaves() if e.is_tuple else [e])
        return out

    def to_text(self, with_layout: bool = True) -> str:
        return "(" + ", ".join(e.to_text(with_layout) for e in self.elements) + ")"

    def __str__(self) -> str:
        return self.to_text()


AnyShape = Union[Shape, TupleShape]


def default_layout(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 1, -1, -1))


def shape_of(value) -> AnyShape:
    """The HLO shape of a NumPy value (array, scalar, or nested tuple of them)."""
    if isinstance(value, (tuple, list)):
        return TupleShape(tuple(shape_of(v) for v in value))
    arr = np.asarray(value)
    return Shape(from_numpy_dtype(arr.dtype), arr.shape)
