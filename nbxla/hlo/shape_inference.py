"""Shape rules: the result shape of every opcode from its operands and attributes.

``infer_shape`` is used by the builder (to compute shapes) and by the parser and verifier
(to check the shapes written in HLO text).  Some opcodes take their result shape from the
caller (``declared``): parameter, constant, iota, broadcast, reshape, bitcast, convert,
custom-call...; for those the rule only checks consistency.
"""

from __future__ import annotations

from ..errors import HloShapeError
from . import shapes as S
from .opcodes import BINARY_ELEMENTWISE, TERNARY_ELEMENTWISE, UNARY_ELEMENTWISE
from .shapes import AnyShape, Shape, TupleShape

# Opcodes whose result shape (or element type) is given, not derived.
DECLARED = {"parameter", "constant", "iota", "broadcast", "reshape", "bitcast", "convert",
            "bitcast-convert", "custom-call", "rng-bit-generator"}
# Opcodes whose result element type may be chosen by the caller (preferred_element_type).
DECLARED_TYPE = {"dot", "convolution"}


def _err(opcode: str, operands, message: str) -> HloShapeError:
    ops = ", ".join(str(s) for s in operands)
    return HloShapeError(f"{opcode}({ops}): {message}")


def _array(opcode, operands, i) -> Shape:
    s = operands[i]
    if s.is_tuple:
        raise _err(opcode, operands, f"operand {i} must be an array, not a tuple")
    return s


def infer_shape(opcode: str, operands: list[AnyShape], attrs: dict,
                declared: AnyShape | None = None) -> AnyShape:
    """Result shape of ``opcode`` applied to ``operands``; raises HloShapeError if inconsistent."""
    if opcode in DECLARED:
        if declared is None:
            raise HloShapeError(f"{opcode} needs its result shape to be given")
        _check_declared(opcode, operands, attrs, declared)
        return declared
    rule = _RULES.get(opcode)
    if rule is None:
        raise HloShapeError(f"no shape rule for opcode {opcode!r}")
    shape = rule(opcode, operands, attrs)
    if opcode in DECLARED_TYPE and declared is not None and not declared.is_tuple:
        shape = shape.with_type(declared.element_type)
    return shape


# --- elementwise -------------------------------------------------------------------------

def _same_dims(opcode, operands, allow_scalar=()):
    """All array operands have the same dims (scalars allowed at positions in allow_scalar)."""
    arrays = [_array(opcode, operands, i) for i in range(len(operands))]
    full = [s for i, s in enumerate(arrays) if not (i in allow_scalar and s.rank == 0)]
    dims = full[0].dims if full else ()
    for s in full:
        if s.dims != dims:
            raise _err(opcode, operands, f"operand dimensions differ ({list(s.dims)} vs {list(dims)}); "
                       "HLO has no implicit broadcasting: insert a broadcast")
    return dims


def _unary(opcode, operands, attrs):
    (x,) = operands
    _array(opcode, operands, 0)
    t = x.element_type
    if opcode == "is-finite":
        if not S.is_float(t):
            raise _err(opcode, operands, "operand must be floating point")
        return x.with_type("pred")
    if opcode in ("real", "imag", "abs") and S.is_complex(t):
        return x.with_type(S.complex_component(t))
    if opcode in ("not",) and not (t == "pred" or S.is_integral(t)):
        raise _err(opcode, operands, "operand must be pred or integral")
    if opcode in ("popcnt", "count-leading-zeros") and not S.is_integral(t):
        raise _err(opcode, operands, "operand must be integral")
    float_only = {"exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt",
                  "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "erf", "floor", "ceil",
                  "round-nearest-even", "round-nearest-afz", "reduce-precision"}
    if opcode in float_only and not (S.is_float(t) or S.is_complex(t)):
        raise _err(opcode, operands, f"operand must be floating point (got {t}); convert it first")
    if opcode in ("negate", "abs", "sign") and t == "pred":
        raise _err(opcode, operands, "operand must be numeric, not pred")
    return x


def _binary(opcode, operands, attrs):
    dims = _same_dims(opcode, operands)
    a, b = operands
    if a.element_type != b.element_type:
        raise _err(opcode, operands, f"element types differ ({a.element_type} vs {b.element_type}); "
                   "insert a convert")
    t = a.element_type
    if opcode == "compare":
        direction = attrs.get("direction")
        if direction not in ("EQ", "NE", "LT", "LE", "GT", "GE"):
            raise _err(opcode, operands, f"direction must be one of EQ NE LT LE GT GE, got {direction!r}")
        return Shape("pred", dims)
    if opcode == "complex":
        if t not in ("f32", "f64"):
            raise _err(opcode, operands, "operands must be f32 or f64")
        return Shape("c64" if t == "f32" else "c128", dims)
    if opcode in ("and", "or", "xor") and not (t == "pred" or S.is_integral(t)):
        raise _err(opcode, operands, "operands must be pred or integral")
    if opcode.startswith("shift") and not S.is_integral(t):
        raise _err(opcode, operands, "operands must be integral")
    if opcode == "atan2" and not (S.is_float(t) or S.is_complex(t)):
        raise _err(opcode, operands, "operands must be floating point")
    if opcode in ("add", "subtract", "multiply", "divide", "remainder", "power") and t == "pred" \
            and opcode not in ("add", "multiply"):
        raise _err(opcode, operands, "operands must be numeric, not pred")
    return Shape(t, dims, a.layout)


def _select(opcode, operands, attrs):
    p, a, b = operands
    if p.is_tuple or p.element_type != "pred":
        raise _err(opcode, operands, "first operand must be a pred array")
    if a.is_tuple or b.is_tuple:
        if not a.compatible(b) or p.rank != 0:
            raise _err(opcode, operands, "tuple select needs equal tuple shapes and a scalar predicate")
        return a
    _same_dims(opcode, operands, allow_scalar=(0,))
    if a.element_type != b.element_type:
        raise _err(opcode, operands, "on_true and on_false must have the same element type")
    return a


def _clamp(opcode, operands, attrs):
    lo, x, hi = operands
    _same_dims(opcode, operands, allow_scalar=(0, 2))
    if not (lo.element_type == x.element_type == hi.element_type):
        raise _err(opcode, operands, "min, operand and max must have the same element type")
    return x


def _check_declared(opcode, operands, attrs, declared):
    def fail(msg):
        raise _err(opcode, operands, f"result {declared}: {msg}")

    if opcode == "iota":
        d = attrs.get("iota_dimension")
        if declared.is_tuple or d is None or not 0 <= d < declared.rank:
            fail(f"iota_dimension={d} must name a dimension of the result")
    elif opcode == "broadcast":
        x = _array(opcode, operands, 0)
        dims = attrs.get("dimensions", ())
        if len(dims) != x.rank:
            fail(f"dimensions={{{','.join(map(str, dims))}}} must have one entry per operand dimension ({x.rank})")
        for i, d in enumerate(dims):
            if not 0 <= d < declared.rank or x.dims[i] not in (1, declared.dims[d]):
                fail(f"operand dimension {i} (size {x.dims[i]}) cannot map to result dimension {d}")
        if x.element_type != declared.element_type:
            fail("broadcast cannot change the element type")
    elif opcode in ("reshape", "bitcast"):
        x = _array(opcode, operands, 0)
        if opcode == "reshape" and (x.size != declared.size or x.element_type != declared.element_type):
            fail(f"reshape must keep the element count ({x.size}) and element type")
        if opcode == "bitcast" and x.byte_size != declared.byte_size:
            fail(f"bitcast must keep the byte size ({x.byte_size})")
    elif opcode == "convert":
        x = _array(opcode, operands, 0)
        if declared.is_tuple or x.dims != declared.dims:
            fail("convert keeps the dimensions")
    elif opcode == "bitcast-convert":
        x = _array(opcode, operands, 0)
        bi, bo = S.bit_width(x.element_type), S.bit_width(declared.element_type)
        if bi == bo:
            ok = x.dims == declared.dims
        elif bi > bo:
            ok = declared.dims == x.dims + (bi // bo,)
        else:
            ok = x.dims and x.dims[-1] == bo // bi and declared.dims == x.dims[:-1]
        if not ok:
            fail("bitcast-convert between widths adds or drops a minor dimension of the width ratio")
    elif opcode == "parameter" and "parameter_number" not in attrs:
        fail("parameter needs its number")
    elif opcode == "rng-bit-generator":
        _check_rng_state(_array(opcode, operands, 0), attrs, declared, fail)


# The state's length each algorithm takes (StableHLO's rng_bit_generator, C2: ThreeFry two
# words, Philox two or three; the default is ours to define: Philox, as the evaluator runs it).
_RNG_STATE_WORDS = {"rng_three_fry": (2,), "rng_philox": (2, 3), "rng_default": (2, 3)}


def _check_rng_state(state: Shape, attrs, declared, fail) -> None:
    """A state of the algorithm's length, the result ``(state, bits)`` keeping its shape.  (Why:
    a state of another length has no meaning -- a wrongly sized key -- and a program whose
    key length varies is another program, not one with a batch of unknown size.)"""
    if not declared.is_tuple or len(declared.elements) != 2 or declared.elements[0].is_tuple or \
            (declared.elements[0].element_type, declared.elements[0].dims) != (state.element_type, state.dims):
        fail(f"the result is (the state's shape {state}, the bits' shape)")
    algorithm = str(attrs.get("algorithm", "rng_default")).lower()
    words = _RNG_STATE_WORDS.get(algorithm)
    if state.rank != 1 or not isinstance(state.dims[0], int):
        if state.rank != 1:
            fail("the state is a vector of u64 words")
        return                  # (a symbolic length: checked where it is bound)
    if words is not None and state.dims[0] not in words:
        fail(f"{algorithm} takes a state of {' or '.join(map(str, words))} u64 words, not {state.dims[0]}")


# --- data movement -------------------------------------------------------------------------

def _transpose(opcode, operands, attrs):
    x = _array(opcode, operands, 0)
    perm = tuple(attrs.get("dimensions", ()))
    if sorted(perm) != list(range(x.rank)):
        raise _err(opcode, operands, f"dimensions={{{','.join(map(str, perm))}}} is not a permutation of 0..{x.rank - 1}")
    return Shape(x.element_type, tuple(x.dims[p] for p in perm))


def _slice(opcode, operands, attrs):
    x = _array(opcode, operands, 0)
    sl = attrs.get("slice", ())
    if len(sl) != x.rank:
        raise _err(opcode, operands, f"slice has {len(sl)} ranges for {x.rank} dimensions")
    out = []
    for d, s in enumerate(sl):
        if not (0 <= s.start <= s.limit <= x.dims[d]) or s.stride < 1:
            raise _err(opcode, operands, f"slice range [{s.start}:{s.limit}:{s.stride}] is out of bounds "
                       f"for dimension {d} of size {x.dims[d]}")
        out.append(-(-(s.limit - s.start) // s.stride))
    return Shape(x.element_type, out)


def _reverse(opcode, operands, attrs):
    x = _array(opcode, operands, 0)
    for d in attrs.get("dimensions", ()):
        if not 0 <= d < x.rank:
            raise _err(opcode, operands, f"dimension {d} out of range")
    return x


def _copy_like(opcode, operands, attrs):
    return operands[0]


def _pad(opcode, operands, attrs):
    x, v = _array(opcode, operands, 0), _array(opcode, operands, 1)
    if v.rank != 0 or v.element_type != x.element_type:
        raise _err(opcode, operands, "padding value must be a scalar of the operand's element type")
    pads = attrs.get("padding", ())
    if len(pads) != x.rank:
        raise _err(opcode, operands, f"padding has {len(pads)} entries for {x.rank} dimensions")
    out = []
    for n, p in zip(x.dims, pads):
        if p.interior < 0:
            raise _err(opcode, operands, "interior padding must be non-negative")
        size = p.low + p.high + n + max(n - 1, 0) * p.interior
        if size < 0:
            raise _err(opcode, operands, f"padding {p.to_text()} makes a negative dimension")
        out.append(size)
    return Shape(x.element_type, out)


def _start_indices(opcode, operands, first, rank):
    starts = operands[first:]
    if len(starts) == 1 and rank != 1 and not starts[0].is_tuple and starts[0].rank == 1:
        if starts[0].dims[0] != rank:
            raise _err(opcode, operands, "start index vector must have one entry per dimension")
        return
    if len(starts) != rank:
        raise _err(opcode, operands, f"needs {rank} scalar start indices, got {len(starts)}")
    for s in starts:
        if s.is_tuple or s.rank != 0 or not S.is_integral(s.element_type):
            raise _err(opcode, operands, "start indices must be integer scalars")


def _dynamic_slice(opcode, operands, attrs):
    x = _array(opcode, operands, 0)
    _start_indices(opcode, operands, 1, x.rank)
    sizes = tuple(attrs.get("dynamic_slice_sizes", ()))
    if len(sizes) != x.rank or any(not 0 <= s <= n for s, n in zip(sizes, x.dims)):
        raise _err(opcode, operands, f"dynamic_slice_sizes={{{','.join(map(str, sizes))}}} must fit the operand")
    return Shape(x.element_type, sizes)


def _dynamic_update_slice(opcode, operands, attrs):
    x, u = _array(opcode, operands, 0), _array(opcode, operands, 1)
    if u.rank != x.rank or any(a > b for a, b in zip(u.dims, x.dims)) or u.element_type != x.element_type:
        raise _err(opcode, operands, "update must have the operand's rank and type and fit inside it")
    _start_indices(opcode, operands, 2, x.rank)
    return x


def _concatenate(opcode, operands, attrs):
    arrays = [_array(opcode, operands, i) for i in range(len(operands))]
    if not arrays:
        raise _err(opcode, operands, "needs at least one operand")
    (d,) = attrs.get("dimensions", (None,))[:1] or (None,)
    first = arrays[0]
    if d is None or not 0 <= d < first.rank:
        raise _err(opcode, operands, "dimensions={d} must name one dimension of the operands")
    total = 0
    for s in arrays:
        if s.rank != first.rank or s.element_type != first.element_type or \
                any(a != b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != d):
            raise _err(opcode, operands, f"operands must agree except in dimension {d}")
        total += s.dims[d]
    dims = list(first.dims)
    dims[d] = total
    return Shape(first.element_type, dims)


# --- reductions and windows ------------------------------------------------------------------

def _split_inputs_inits(opcode, operands):
    if len(operands) % 2 or not operands:
        raise _err(opcode, operands, "needs N inputs followed by N initial values")
    n = len(operands) // 2
    inputs = [_array(opcode, operands, i) for i in range(n)]
    inits = [_array(opcode, operands, n + i) for i in range(n)]
    for s in inputs[1:]:
        if s.dims != inputs[0].dims:
            raise _err(opcode, operands, "all reduced inputs must have the same dimensions")
    for i, (x, init) in enumerate(zip(inputs, inits)):
        if init.rank != 0 or init.element_type != x.element_type:
            raise _err(opcode, operands, f"initial value {i} must be a scalar {x.element_type}")
    return inputs, inits


def _check_reducer(opcode, operands, attrs, types):
    comp = attrs.get("to_apply")
    if comp is None:
        raise _err(opcode, operands, "needs to_apply=<reducer computation>")
    want = [Shape(t) for t in types] * 2
    got = comp.parameter_shapes
    if len(got) != len(want) or not all(a.compatible(b) for a, b in zip(got, want)):
        raise _err(opcode, operands, f"reducer %{comp.name} must take {len(want)} scalars of types "
                   f"{'/'.join(types)}")


def _tuple_if_many(shapes):
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))


def _reduce(opcode, operands, attrs):
    inputs, inits = _split_inputs_inits(opcode, operands)
    dims = attrs.get("dimensions", ())
    rank = inputs[0].rank
    if len(set(dims)) != len(dims) or any(not 0 <= d < rank for d in dims):
        raise _err(opcode, operands, f"dimensions={{{','.join(map(str, dims))}}} must be distinct dimensions of the input")
    _check_reducer(opcode, operands, attrs, [s.element_type for s in inits])
    kept = tuple(n for i, n in enumerate(inputs[0].dims) if i not in dims)
    return _tuple_if_many([Shape(s.element_type, kept) for s in inits])


def window_output_size(n: int, w) -> int:
    """Output extent of one window dimension (shared with the evaluator)."""
    padded = (n - 1) * w.base_dilation + 1 + w.pad_low + w.pad_high if n else w.pad_low + w.pad_high
    span = (w.size - 1) * w.window_dilation + 1
    return 0 if padded < span else (padded - span) // w.stride + 1


def _reduce_window(opcode, operands, attrs):
    inputs, inits = _split_inputs_inits(opcode, operands)
    window = attrs.get("window")
    if window is None or len(window.dims) != inputs[0].rank:
        raise _err(opcode, operands, "window must have one entry per input dimension")
    _check_reducer(opcode, operands, attrs, [s.element_type for s in inits])
    _check_window(opcode, operands, window)
    out = tuple(window_output_size(n, w) for n, w in zip(inputs[0].dims, window.dims))
    return _tuple_if_many([Shape(s.element_type, out) for s in inits])


def _check_window(opcode, operands, window) -> None:
    for w in window.dims:
        if w.stride < 1 or w.base_dilation < 1 or w.window_dilation < 1 or w.size < 0:
            raise _err(opcode, operands, "window strides and dilations must be at least 1 "
                       f"(got size={w.size} stride={w.stride})")


def _check_dims(opcode, operands, name: str, dims, rank: int, ordered: bool = False) -> None:
    """Dimension numbers ``dims`` must be distinct (and sorted if ``ordered``) in [0, rank)."""
    if any(not 0 <= d < rank for d in dims) or len(set(dims)) != len(dims) or \
            ordered and list(dims) != sorted(dims):
        raise _err(opcode, operands, f"{name}={{{','.join(map(str, dims))}}} must be distinct"
                   f"{', sorted' if ordered else ''} dimension numbers below {rank}")


def _select_and_scatter(opcode, operands, attrs):
    x, source, init = (_array(opcode, operands, i) for i in range(3))
    window = attrs.get("window")
    if window is None or len(window.dims) != x.rank:
        raise _err(opcode, operands, "window must have one entry per operand dimension")
    _check_window(opcode, operands, window)
    windows = tuple(window_output_size(n, w) for n, w in zip(x.dims, window.dims))
    if source.dims != windows:
        raise _err(opcode, operands, f"source must have one element per window position "
                   f"({list(windows)}), not {list(source.dims)}")
    if init.rank != 0 or init.element_type != source.element_type:
        raise _err(opcode, operands, f"the initial value must be a scalar {source.element_type}")
    for key, types, result in (("select", [x.element_type] * 2, "pred"),
                               ("scatter", [source.element_type] * 2, source.element_type)):
        comp = attrs.get(key)
        if comp is None or len(comp.parameter_shapes) != 2 or \
                not all(p.compatible(Shape(t)) for p, t in zip(comp.parameter_shapes, types)) or \
                not comp.result_shape.compatible(Shape(result)):
            raise _err(opcode, operands, f"needs {key}=<computation ({types[0]}, {types[1]}) -> {result}>")
    return x.with_type(source.element_type)


def _dot(opcode, operands, attrs):
    a, b = _array(opcode, operands, 0), _array(opcode, operands, 1)
    lb, rb = attrs.get("lhs_batch_dims", ()), attrs.get("rhs_batch_dims", ())
    lc, rc = attrs.get("lhs_contracting_dims", ()), attrs.get("rhs_contracting_dims", ())
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise _err(opcode, operands, "lhs and rhs must have as many batch and contracting dims")
    for i, j in list(zip(lb, rb)) + list(zip(lc, rc)):
        if not (0 <= i < a.rank and 0 <= j < b.rank) or a.dims[i] != b.dims[j]:
            raise _err(opcode, operands, f"lhs dimension {i} and rhs dimension {j} must exist and match")
    if len(set(lb + lc)) != len(lb) + len(lc) or len(set(rb + rc)) != len(rb) + len(rc):
        raise _err(opcode, operands, "a dimension cannot be both batch and contracting")
    if a.element_type != b.element_type:
        raise _err(opcode, operands, "lhs and rhs must have the same element type")
    free_a = [n for i, n in enumerate(a.dims) if i not in lb and i not in lc]
    free_b = [n for i, n in enumerate(b.dims) if i not in rb and i not in rc]
    return Shape(a.element_type, [a.dims[i] for i in lb] + free_a + free_b)


def _convolution(opcode, operands, attrs):
    x, k = _array(opcode, operands, 0), _array(opcode, operands, 1)
    dn = attrs.get("dim_labels")
    if dn is None or len(dn.input_spatial) + 2 != x.rank or x.rank != k.rank:
        raise _err(opcode, operands, "dim_labels must describe the operands' dimensions")
    window = attrs.get("window")
    nsp = len(dn.input_spatial)
    if window is None:
        from .attributes import Window, WindowDim
        window = Window(tuple(WindowDim(k.dims[d]) for d in dn.kernel_spatial))
    if len(window.dims) != nsp:
        raise _err(opcode, operands, f"window must have {nsp} spatial dimensions")
    fgc, bgc = attrs.get("feature_group_count", 1), attrs.get("batch_group_count", 1)
    cin = x.dims[dn.input_feature]
    if cin % fgc or k.dims[dn.kernel_input_feature] * fgc != cin:
        raise _err(opcode, operands, f"input features ({cin}) must equal kernel input features "
                   f"({k.dims[dn.kernel_input_feature]}) x feature_group_count ({fgc})")
    if bgc != 1 and x.dims[dn.input_batch] % bgc:      # (bgc 1: any batch, an unknown one too)
        raise _err(opcode, operands, "batch must be divisible by batch_group_count")
    _check_window(opcode, operands, window)
    for w, kd in zip(window.dims, dn.kernel_spatial):
        if w.size != k.dims[kd]:
            raise _err(opcode, operands, f"window size {w.size} differs from kernel spatial size {k.dims[kd]}")
    out = [0] * x.rank
    out[dn.output_batch] = x.dims[dn.input_batch] if bgc == 1 else x.dims[dn.input_batch] // bgc
    out[dn.output_feature] = k.dims[dn.kernel_output_feature]
    for i, w in enumerate(window.dims):
        out[dn.output_spatial[i]] = window_output_size(x.dims[dn.input_spatial[i]], w)
    return Shape(x.element_type, out)


def gather_batch_dims(indices: Shape, index_vector_dim: int) -> list[int]:
    return [n for i, n in enumerate(indices.dims) if i != index_vector_dim]


def _gather(opcode, operands, attrs):
    x, idx = _array(opcode, operands, 0), _array(opcode, operands, 1)
    if not S.is_integral(idx.element_type):
        raise _err(opcode, operands, "start indices must be integral")
    ivd = attrs.get("index_vector_dim", idx.rank)
    offset_dims = tuple(attrs.get("offset_dims", ()))
    collapsed = tuple(attrs.get("collapsed_slice_dims", ()))
    operand_batching = tuple(attrs.get("operand_batching_dims", ()))
    start_map = tuple(attrs.get("start_index_map", ()))
    sizes = tuple(attrs.get("slice_sizes", ()))
    if len(sizes) != x.rank:
        raise _err(opcode, operands, f"slice_sizes must have {x.rank} entries")
    if any(not 0 <= s <= n for s, n in zip(sizes, x.dims)):
        raise _err(opcode, operands, "slice_sizes must fit inside the operand")
    if not 0 <= ivd <= idx.rank:
        raise _err(opcode, operands, f"index_vector_dim={ivd} must be at most {idx.rank}")
    _check_dims(opcode, operands, "collapsed_slice_dims", collapsed + operand_batching, x.rank)
    _check_dims(opcode, operands, "start_index_map", start_map, x.rank)
    index_len = idx.dims[ivd] if ivd < idx.rank else 1
    if len(start_map) != index_len:
        raise _err(opcode, operands, f"start_index_map has {len(start_map)} entries; index vectors have {index_len}")
    for d in collapsed + operand_batching:
        if sizes[d] != 1:
            raise _err(opcode, operands, f"collapsed dimension {d} must have slice size 1")
    kept = [sizes[d] for d in range(x.rank) if d not in collapsed and d not in operand_batching]
    if len(kept) != len(offset_dims):
        raise _err(opcode, operands, f"offset_dims has {len(offset_dims)} entries; {len(kept)} slice dimensions remain")
    batch = gather_batch_dims(idx, ivd)
    out_rank = len(batch) + len(offset_dims)
    _check_dims(opcode, operands, "offset_dims", offset_dims, out_rank, ordered=True)
    out, bi, oi = [], iter(batch), iter(kept)
    for d in range(out_rank):
        out.append(next(oi) if d in offset_dims else next(bi))
    return Shape(x.element_type, out)


def _scatter(opcode, operands, attrs):
    n = (len(operands) - 1) // 2
    if len(operands) != 2 * n + 1 or n < 1:
        raise _err(opcode, operands, "needs N operands, the indices, then N updates")
    targets = [_array(opcode, operands, i) for i in range(n)]
    idx = _array(opcode, operands, n)
    if not S.is_integral(idx.element_type):
        raise _err(opcode, operands, "scatter indices must be integral")
    updates = [_array(opcode, operands, n + 1 + i) for i in range(n)]
    uwd = tuple(attrs.get("update_window_dims", ()))
    inserted = tuple(attrs.get("inserted_window_dims", ()))
    batching = tuple(attrs.get("input_batching_dims", ()))
    if len(uwd) + len(inserted) + len(batching) != targets[0].rank:
        raise _err(opcode, operands, "update_window_dims + inserted_window_dims must cover the operand rank")
    ivd = attrs.get("index_vector_dim", idx.rank)
    if not 0 <= ivd <= idx.rank:
        raise _err(opcode, operands, f"index_vector_dim={ivd} must be at most {idx.rank}")
    _check_dims(opcode, operands, "inserted_window_dims", inserted + batching, targets[0].rank)
    to_operand = tuple(attrs.get("scatter_dims_to_operand_dims", ()))
    _check_dims(opcode, operands, "scatter_dims_to_operand_dims", to_operand, targets[0].rank)
    index_len = idx.dims[ivd] if ivd < idx.rank else 1
    if len(to_operand) != index_len:
        raise _err(opcode, operands, f"scatter_dims_to_operand_dims has {len(to_operand)} entries; "
                   f"index vectors have {index_len}")
    scatter_rank = len(gather_batch_dims(idx, ivd))
    for u in updates:
        if u.rank != scatter_rank + len(uwd):
            raise _err(opcode, operands, f"updates must have rank {scatter_rank + len(uwd)}")
        _check_dims(opcode, operands, "update_window_dims", uwd, u.rank, ordered=True)
    comp = attrs.get("to_apply")
    if comp is None:
        raise _err(opcode, operands, "needs to_apply=<combiner computation>")
    return _tuple_if_many(targets)


def _sort(opcode, operands, attrs):
    arrays = [_array(opcode, operands, i) for i in range(len(operands))]
    if not arrays:
        raise _err(opcode, operands, "needs at least one operand")
    dims = attrs.get("dimensions", ())
    if len(dims) != 1 or not 0 <= dims[0] < max(arrays[0].rank, 1):
        raise _err(opcode, operands, "dimensions={d} must name the one sorted dimension")
    if any(s.dims != arrays[0].dims for s in arrays):
        raise _err(opcode, operands, "all sorted operands must have the same dimensions")
    if "to_apply" not in attrs:
        raise _err(opcode, operands, "needs to_apply=<comparator computation>")
    return _tuple_if_many(arrays)


def _topk(opcode, operands, attrs):
    x = _array(opcode, operands, 0)
    k = attrs.get("k")
    if x.rank == 0 or k is None or not 0 <= k <= x.dims[-1]:
        raise _err(opcode, operands, f"k={k} must be at most the size of the last dimension")
    dims = x.dims[:-1] + (k,)
    return TupleShape((Shape(x.element_type, dims), Shape("s32", dims)))


_FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")


def _fft(opcode, operands, attrs):
    """FFT/IFFT keep a complex shape; RFFT keeps n//2+1 of the last axis' n outputs; IRFFT
    takes those back to fft_length real values."""
    x = _array(opcode, operands, 0)
    kind, lengths = attrs.get("fft_type"), tuple(attrs.get("fft_length", ()))
    if kind not in _FFT_TYPES:
        raise _err(opcode, operands, f"fft_type must be one of {', '.join(_FFT_TYPES)}")
    if not 1 <= len(lengths) <= min(3, x.rank):
        raise _err(opcode, operands, "fft_length must give 1 to 3 trailing dimensions")
    inner = x.dims[x.rank - len(lengths):]
    real_types = {"c64": "f32", "c128": "f64"}
    if kind == "RFFT":
        if x.element_type not in ("f32", "f64") or inner != lengths:
            raise _err(opcode, operands, f"RFFT takes f32/f64 operands ending in {list(lengths)}")
        complex_type = "c64" if x.element_type == "f32" else "c128"
        return Shape(complex_type, x.dims[:-1] + (lengths[-1] // 2 + 1,))
    if x.element_type not in real_types:
        raise _err(opcode, operands, f"{kind} takes complex operands")
    if kind == "IRFFT":
        if inner != lengths[:-1] + (lengths[-1] // 2 + 1,):
            raise _err(opcode, operands, f"IRFFT of fft_length {list(lengths)} takes trailing "
                       f"dimensions {list(lengths[:-1]) + [lengths[-1] // 2 + 1]}")
        return Shape(real_types[x.element_type], x.dims[:-1] + (lengths[-1],))
    if inner != lengths:
        raise _err(opcode, operands, f"{kind} operands must end in {list(lengths)}")
    return x


# --- control flow and structure ----------------------------------------------------------------

def _callee(opcode, operands, attrs, key):
    comp = attrs.get(key)
    if comp is None:
        raise _err(opcode, operands, f"needs {key}=<computation>")
    params = comp.parameter_shapes
    return comp, params


def _call(opcode, operands, attrs):
    key = "calls" if opcode == "fusion" else "to_apply"
    comp, params = _callee(opcode, operands, attrs, key)
    if len(params) != len(operands) or not all(p.compatible(o) for p, o in zip(params, operands)):
        raise _err(opcode, operands, f"operands do not match the parameters of %{comp.name} "
                   f"({', '.join(map(str, params))})")
    return comp.result_shape


def _while(opcode, operands, attrs):
    (init,) = operands
    body, bparams = _callee(opcode, operands, attrs, "body")
    cond, cparams = _callee(opcode, operands, attrs, "condition")
    for comp, params in ((body, bparams), (cond, cparams)):
        if len(params) != 1 or not params[0].compatible(init):
            raise _err(opcode, operands, f"%{comp.name} must take one parameter of shape {init}")
    if not body.result_shape.compatible(init):
        raise _err(opcode, operands, f"body %{body.name} returns {body.result_shape}, not {init}")
    if not cond.result_shape.compatible(Shape("pred")):
        raise _err(opcode, operands, f"condition %{cond.name} must return pred[]")
    return init


def _conditional(opcode, operands, attrs):
    selector = _array(opcode, operands, 0)
    if "branch_computations" in attrs:
        branches = list(attrs["branch_computations"])
        if selector.element_type != "s32" or selector.rank:
            raise _err(opcode, operands, "branch index must be s32[]")
    else:
        branches = [attrs.get("true_computation"), attrs.get("false_computation")]
        if None in branches or selector.element_type != "pred" or selector.rank:
            raise _err(opcode, operands, "needs a pred[] selector with true/false computations, "
                       "or an s32[] index with branch_computations")
    if len(branches) != len(operands) - 1:
        raise _err(opcode, operands, f"{len(branches)} branches need {len(branches)} branch operands")
    result = branches[0].result_shape
    for comp, arg in zip(branches, operands[1:]):
        params = comp.parameter_shapes
        if len(params) != 1 or not params[0].compatible(arg):
            raise _err(opcode, operands, f"branch %{comp.name} must take one parameter of shape {arg}")
        if not comp.result_shape.compatible(result):
            raise _err(opcode, operands, "all branches must return the same shape")
    return result


def _tuple(opcode, operands, attrs):
    return TupleShape(tuple(operands))


def _get_tuple_element(opcode, operands, attrs):
    (t,) = operands
    i = attrs.get("index")
    if not t.is_tuple or i is None or not 0 <= i < len(t.elements):
        raise _err(opcode, operands, f"index={i} must name an element of a tuple operand")
    return t.elements[i]


_RULES = {
    **{op: _unary for op in UNARY_ELEMENTWISE},
    **{op: _binary for op in BINARY_ELEMENTWISE},
    "select": _select, "clamp": _clamp,
    "copy": _copy_like, "reverse": _reverse, "transpose": _transpose, "slice": _slice,
    "pad": _pad, "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice,
    "concatenate": _concatenate, "reduce": _reduce, "reduce-window": _reduce_window,
    "dot": _dot, "convolution": _convolution, "gather": _gather, "scatter": _scatter,
    "sort": _sort, "call": _call, "fusion": _call, "while": _while,
    "conditional": _conditional, "tuple": _tuple, "get-tuple-element": _get_tuple_element,
    "select-and-scatter": _select_and_scatter, "topk": _topk, "fft": _fft, "opt-barrier": _copy_like,
}
for _op in DECLARED:
    _RULES.pop(_op, None)
assert set(TERNARY_ELEMENTWISE) <= set(_RULES)

SHAPE_RULE_OPCODES = frozenset(_RULES) | DECLARED
