"""Modules with unknown dimensions: finding them, binding them, reading their sizes off arguments.

An unknown dimension is a ``SymDim`` (``b``, ``64*b``: see ``shapes.py``).  A symbolic module is
found by *generalizing* two probes: the same program built (traced, or optimized) for two
different values of every symbol.  Where the two agree except in dimensions that scale with a
symbol -- ``k*h1`` in the first, ``k*h2`` in the second -- those dimensions become ``k*b``;
anything else that differs (a constant computed from a size, a different structure, an
attribute holding a size) means the program depends on the size in a way the symbol cannot
stand for, and ``SymbolicDimensionError`` says where.  Why probes rather than symbolic shape
rules in every pass: every pass and rule keeps working on plain integers, and whatever depends
on a size shows up as a difference; nothing is assumed.

The second probe's sizes are ``2*h + 1``: no number greater than 1 divides both ``h`` and
``2*h + 1``, so no divisibility shortcut taken for one probe can be taken for the other without
showing as a difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import Computation, Instruction, Module
from .shapes import SymDim, SymbolicDimensionError, TupleShape, bind_shape, is_symbolic


def second_probe(hint: int) -> int:
    """The size a symbol takes in the second probe."""
    return 2 * hint + 1


# The smallest size the largest probe traces at: a symbolic program serves 2 <= b <= its bound.
UPPER_PROBE = 65537


def upper_probes(hints: list[int]) -> dict[int, int]:
    """The size each symbol (by its first-probe size) takes in the largest probe: the upper
    bound of the sizes the program serves."""
    return {h: max(UPPER_PROBE + 2 * k, second_probe(h)) for k, h in enumerate(sorted(hints))}


def generalize_module(m1: Module, m2: Module, symbols: dict[int, str], probe=second_probe) -> Module:
    """The symbolic module both probes are instances of (``m1`` with unknown dimensions);
    ``symbols`` maps each symbol's first-probe size to its name (its size in ``m2`` is
    ``probe(size)``).  Renames ``m2``'s computations and instructions to ``m1``'s, so that
    what is generated from them can be compared as text.  Raises ``SymbolicDimensionError``."""
    if len(m1.computations) != len(m2.computations):
        raise SymbolicDimensionError(f"the program has {len(m1.computations)} computations at one size "
                                     f"and {len(m2.computations)} at another")
    pairs = {id(c2): c1 for c1, c2 in zip(m1.computations, m2.computations)}
    out_comps = {id(c1): Computation(c1.name) for c1 in m1.computations}
    result = Module(m1.name)
    # (a program has few distinct pairs of shapes -- eos: about ten over 2K instructions --, and
    # shapes are immutable: each pair is generalized once and its result shared)
    general: dict = {}
    for c1, c2 in zip(m1.computations, m2.computations):
        if len(c1.instructions) != len(c2.instructions):
            raise SymbolicDimensionError(
                f"{c1.name} has {len(c1.instructions)} instructions at one size and {len(c2.instructions)} "
                "at another (a Python loop over a size, or a size-dependent choice)")
        c2.name = c1.name
        index2 = {id(i): k for k, i in enumerate(c2.instructions)}
        index1 = {id(i): k for k, i in enumerate(c1.instructions)}
        new = out_comps[id(c1)]
        made: list[Instruction] = []
        for i1, i2 in zip(c1.instructions, c2.instructions):
            # (``where`` is the instruction, named (``_where``) only in an error: formatting the
            # name of every instruction was a fifth of a comparison made three times a compile)
            where = i1
            if i1.opcode != i2.opcode or len(i1.operands) != len(i2.operands) or \
                    [index1[id(o)] for o in i1.operands] != [index2[id(o)] for o in i2.operands]:
                raise SymbolicDimensionError(f"the program's structure depends on the size ({_where(where)})")
            # (equal shapes -- most of a program's, its constants and its unbatched values -- are
            # immutable and shared, as ``clone_module`` shares them)
            pair = (i1.shape, i2.shape)
            shape = general.get(pair)
            if shape is None:
                shape = general[pair] = i1.shape if i1.shape == i2.shape else \
                    _general_shape(i1.shape, i2.shape, symbols, probe, where)
            attrs = {}
            for key in (i1.attrs.keys() | i2.attrs.keys() if i1.attrs or i2.attrs else ()):
                attrs[key] = _general_attr(key, i1.attrs.get(key), i2.attrs.get(key), pairs, out_comps, where)
            i2.name = i1.name
            copy = Instruction(i1.opcode, shape, [made[index1[id(o)]] for o in i1.operands], attrs,
                               i1.name, i1.location)
            made.append(copy)
            new.add(copy)
        new.root = made[index1[id(c1.root)]]
        result.add_computation(new)
    result.entry = out_comps[id(m1.entry)]
    result.header = dict(m1.header)
    return result


def _where(instr: Instruction) -> str:
    return f"%{instr.name}" + (f" at line {instr.location.line}" if instr.location is not None else "")


def _general_shape(s1, s2, symbols: dict[int, str], probe, where: Instruction):
    if s1.is_tuple or s2.is_tuple:
        if not (s1.is_tuple and s2.is_tuple and len(s1.elements) == len(s2.elements)):
            raise SymbolicDimensionError(f"a result whose structure depends on the size ({_where(where)})")
        return TupleShape(tuple(_general_shape(a, b, symbols, probe, where) for a, b in zip(s1.elements, s2.elements)))
    if s1.element_type != s2.element_type or len(s1.dims) != len(s2.dims) or s1.layout != s2.layout:
        raise SymbolicDimensionError(f"a result type that depends on the size ({_where(where)})")
    dims = []
    for d1, d2 in zip(s1.dims, s2.dims):
        if d1 == d2:
            dims.append(d1)
            continue
        dims.append(_scaled_symbol(d1, d2, symbols, probe, where))
    return type(s1)(s1.element_type, tuple(dims), s1.layout)


def _scaled_symbol(d1: int, d2: int, symbols: dict[int, str], probe, where: Instruction) -> SymDim:
    """``k*b`` where ``d1 = k*h1`` and ``d2 = k*probe(h1)`` for one symbol's size ``h1``."""
    for hint, name in symbols.items():
        if d1 % hint == 0 and d1 // hint * probe(hint) == d2:
            return SymDim(name, d1 // hint)
    raise SymbolicDimensionError(f"a dimension ({d1} at one size, {d2} at another) that is not a "
                                 f"multiple of one unknown size ({_where(where)})")


def _general_attr(key, v1, v2, pairs, out_comps, where):
    if isinstance(v1, Computation):
        if pairs.get(id(v2)) is not v1:
            raise SymbolicDimensionError(f"{key} calls different computations at different sizes ({_where(where)})")
        return out_comps[id(v1)]
    if isinstance(v1, tuple) and v1 and all(isinstance(v, Computation) for v in v1):
        if not (isinstance(v2, tuple) and len(v1) == len(v2) and all(pairs.get(id(b)) is a for a, b in zip(v1, v2))):
            raise SymbolicDimensionError(f"{key} calls different computations at different sizes ({_where(where)})")
        return tuple(out_comps[id(v)] for v in v1)
    if isinstance(v1, np.ndarray) or isinstance(v2, np.ndarray):
        if not (isinstance(v1, np.ndarray) and isinstance(v2, np.ndarray) and v1.dtype == v2.dtype
                and v1.shape == v2.shape and np.array_equal(v1, v2, equal_nan=v1.dtype.kind in "fc")):
            raise SymbolicDimensionError(f"a constant computed from a size ({_where(where)}): the code uses "
                                         "a size as a number")
        return v1
    if key == "metadata":
        return v1
    if v1 != v2:
        raise SymbolicDimensionError(f"the attribute {key}={v1} depends on the size ({_where(where)})")
    return v1


def lift_size_constants(m1: Module, m2: Module, symbols: dict[int, str],
                        probe=second_probe) -> list[tuple[SymDim, np.dtype]]:
    """Scalar constants of the two probes' entries that are a size (``k*h1`` in one, ``k*h2`` in
    the other: a mean's count) become new entry parameters in both, in place; returns each new
    parameter's value (``k*b``) and dtype, in parameter order.  Why: the count is then read
    when the program runs, as any argument is, instead of baked into its code."""
    lifted: list[tuple[SymDim, np.dtype]] = []
    c1, c2 = m1.entry, m2.entry
    if len(c1.instructions) != len(c2.instructions):
        return lifted
    number = len(c1.parameters)
    for k, (i1, i2) in enumerate(zip(list(c1.instructions), list(c2.instructions))):
        if i1.opcode != "constant" or i2.opcode != "constant" or i1.shape.rank or i2.shape.rank:
            continue
        v1, v2 = i1.literal.reshape(()), i2.literal.reshape(())
        if v1.dtype != v2.dtype or v1.dtype.kind not in "iuf" or v1 == v2:
            continue
        size = None
        for hint, name in symbols.items():
            coeff = v1 / hint
            if coeff >= 1 and coeff == int(coeff) and int(coeff) * probe(hint) == v2:
                size = SymDim(name, int(coeff))
        if size is None:
            continue
        for comp, old in ((c1, i1), (c2, i2)):
            param = Instruction("parameter", old.shape, attrs={"parameter_number": number},
                                name=f"size.{number}", location=old.location)
            param.parent = comp
            comp.instructions[k] = param
            comp.replace_all_uses(old, param)
        lifted.append((size, v1.dtype))
        number += 1
    return lifted


def symbols_of_module(module: Module) -> list[str]:
    """The size symbols of the entry's parameters, in order of first appearance."""
    names: list[str] = []
    for param in module.entry.parameters:
        for leaf in (param.shape.leaves() if param.shape.is_tuple else [param.shape]):
            for d in leaf.dims:
                if isinstance(d, SymDim) and d.name not in names:
                    names.append(d.name)
    return names


def bind_symbols(module: Module, args) -> dict[str, int]:
    """The value of every symbol, read off the arguments' shapes (the entry parameters say which
    dimension of which argument carries it); an error names an argument whose sizes disagree."""
    from ..errors import HloShapeError
    values: dict[str, int] = {}
    for param in module.entry.parameters:
        arg = args[param.parameter_number]
        if param.shape.is_tuple or not is_symbolic(param.shape):
            continue                # (only the parameters that carry a symbol are read)
        dims = np.shape(arg)
        if len(dims) != param.shape.rank:
            raise HloShapeError(f"parameter %{param.name} is {param.shape} but its argument has shape {dims}")
        for d, n in zip(param.shape.dims, dims):
            if not isinstance(d, SymDim):
                continue
            if n % d.coeff:
                raise HloShapeError(f"parameter %{param.name}: size {n} is not a multiple of {d.coeff} ({d})")
            value = n // d.coeff
            if values.setdefault(d.name, value) != value:
                raise HloShapeError(f"parameter %{param.name}: {d.name} = {value} here but {values[d.name]} "
                                    "in an earlier argument")
    return values


def symbol_reader(module: Module):
    """``bind_symbols`` for one module, its parameters examined once: a function of the
    arguments giving every symbol's value.  Why: ``bind_symbols`` examines each parameter's
    shape on every call (15 us a call, against 1.6 us for the kernels of a small dense layer
    at 8 rows).  An argument that does not fit is handed to ``bind_symbols``, whose error names it."""
    places = []
    for param in module.entry.parameters:
        if param.shape.is_tuple or not is_symbolic(param.shape):
            continue
        dims = [(d, s.coeff, s.name) for d, s in enumerate(param.shape.dims) if isinstance(s, SymDim)]
        places.append((param.parameter_number, param.shape.rank, dims))

    def read(args) -> dict[str, int]:
        values: dict[str, int] = {}
        for number, rank, dims in places:
            shape = getattr(args[number], "shape", None)
            if shape is None or len(shape) != rank:
                return bind_symbols(module, args)
            for d, coeff, name in dims:
                value, rest = divmod(shape[d], coeff)
                if rest or values.setdefault(name, value) != value:
                    return bind_symbols(module, args)
        return values
    return read


def bind_module(module: Module, values: dict[str, int]) -> Module:
    """A concrete copy of a symbolic module: every unknown dimension replaced by its size."""
    comp_map = {id(comp): Computation(comp.name) for comp in module.computations}
    out = Module(module.name)
    for comp in module.computations:
        made: dict[int, Instruction] = {}
        new = comp_map[id(comp)]
        for instr in comp.instructions:
            attrs = {k: (comp_map[id(v)] if isinstance(v, Computation) else
                         tuple(comp_map[id(c)] for c in v)
                         if isinstance(v, tuple) and v and all(isinstance(c, Computation) for c in v) else v)
                     for k, v in instr.attrs.items()}
            copy = Instruction(instr.opcode, bind_shape(instr.shape, values),
                               [made[id(o)] for o in instr.operands], attrs, instr.name, instr.location)
            made[id(instr)] = copy
            new.add(copy)
        new.root = made[id(comp.root)]
        out.add_computation(new)
    out.entry = comp_map[id(module.entry)]
    out.header = dict(module.header)
    return out


def bind_entry(module: Module, values: dict[str, int]) -> Module:
    """A module whose entry is the symbolic module's entry with sizes filled in, for running
    over kernels compiled already: the computations the entry's fusions call stay the symbolic
    ones (shared, not copied -- copying them was most of the cost of a new size for a wide
    formula), so only what the runtime reads is concrete.  Not for code generation or control
    flow (the computations a ``while`` runs would stay symbolic)."""
    entry = module.entry
    made: dict[int, Instruction] = {}
    new = Computation(entry.name)
    for instr in entry.instructions:
        copy = Instruction(instr.opcode, bind_shape(instr.shape, values), [made[id(o)] for o in instr.operands],
                           instr.attrs, instr.name, instr.location)
        made[id(instr)] = copy
        new.add(copy)
    new.root = made[id(entry.root)]
    out = Module(module.name)
    out.computations.append(new)           # (not add_computation: the callees keep their parent)
    new.parent = out
    out.entry = new
    out.header = dict(module.header)
    return out


def module_is_symbolic(module: Module) -> bool:
    return any(is_symbolic(i.shape) for c in module.computations for i in c.instructions)


@dataclass(frozen=True)
class SizeProduct:
    """``coeff * s1 * s2 * ...``: a size that is a product of unknown sizes (``names`` sorted,
    a name repeated for a power), such as the range of an elementwise kernel over ``f32[m,n]``
    (``m*n``) or the bytes of a buffer.  A ``SymDim`` is the one-symbol case, an int none."""
    coeff: int
    names: tuple = ()

    @staticmethod
    def of(value) -> "SizeProduct":
        if isinstance(value, SizeProduct):
            return value
        if isinstance(value, SymDim):
            return SizeProduct(value.coeff, (value.name,))
        return SizeProduct(int(value))

    def __mul__(self, other) -> "SizeProduct":
        other = SizeProduct.of(other)
        if not self.coeff or not other.coeff:
            return SizeProduct(0)
        return SizeProduct(self.coeff * other.coeff, tuple(sorted(self.names + other.names)))

    __rmul__ = __mul__

    def bind(self, values: dict) -> int:
        n = self.coeff
        for name in self.names:
            n *= values[name]
        return n

    def fits_in(self, other: "SizeProduct") -> bool:
        """Whether this size is at most ``other`` at every size (symbols >= 1): its symbols
        are among the other's (as many times or fewer) and its factor no larger."""
        rest = list(other.names)
        for name in self.names:
            if name not in rest:
                return False
            rest.remove(name)
        return self.coeff <= other.coeff

    def __str__(self) -> str:
        return "*".join(([str(self.coeff)] if self.coeff != 1 or not self.names else []) + list(self.names))


def size_from_probes(v1: int, v2: int, probes: tuple[dict[str, int], dict[str, int]], max_degree: int = 2):
    """``v`` (an int at the first probe, at the second ``v2``) as an int, or a ``SizeProduct``
    of at most ``max_degree`` symbols whose value it is at both probes (``probes``: each
    symbol's size at each); None when it is neither."""
    if v1 == v2:
        return v1
    names = sorted(probes[0])
    candidates = [(n,) for n in names]
    if max_degree >= 2:
        candidates += [(a, b) for i, a in enumerate(names) for b in names[i:]]
    for combo in candidates:
        p1 = SizeProduct(1, combo).bind(probes[0])
        p2 = SizeProduct(1, combo).bind(probes[1])
        if v1 % p1 == 0 and v1 // p1 * p2 == v2 and v1:
            return SymDim(combo[0], v1 // p1) if len(combo) == 1 else SizeProduct(v1 // p1, combo)
    return None


def mark_unknown_axes(symbolic, *concrete) -> None:
    """Give every fused computation of the ``concrete`` probes (instances of ``symbolic``,
    computation by computation, instruction names equal: ``generalize_module``) the axes of
    each instruction whose size is unknown, for the kernel emitters (``comp.unknown_axes``);
    the entry's too, for the standalone kernel ops it runs (``codegen/kernels.standalone_computation``).
    A tuple-shaped instruction's leaves are marked under (name, leaf number)."""
    for sym, *probes in zip(symbolic.computations, *(m.computations for m in concrete)):
        axes, shapes, entry_shapes = {}, {}, {}
        for instr in sym.instructions:
            if is_symbolic(instr.shape):
                # (fused computations' for run_sizes; the entry's apart, for the standalone
                # kernel ops it runs: the entry itself is no kernel)
                (entry_shapes if sym is symbolic.entry else shapes)[instr.name] = instr.shape
            leaves = [(instr.name, instr.shape)] if not instr.shape.is_tuple else \
                [((instr.name, k), leaf) for k, leaf in enumerate(instr.shape.elements) if not leaf.is_tuple]
            for key, shape in leaves:
                found = tuple(d for d, n in enumerate(shape.dims) if isinstance(n, SymDim))
                if found:
                    axes[key] = found
        for comp in probes:
            # (``unknown_shapes``: the symbolic shapes themselves, for ``codegen/run_sizes``)
            comp.unknown_axes, comp.unknown_shapes = axes, shapes
            if sym is symbolic.entry:
                comp.entry_unknown_shapes = entry_shapes
