"""The transpose of ``sort``: route each cotangent back to where its element came from.

The sort is repeated with an iota riding along (the comparator ignores it), which gives the
permutation; a scatter-add then puts each cotangent element at its source position.
"""

from __future__ import annotations

from ..hlo import Builder, Shape
from ..hlo.builder import unique_name
from ..hlo.ir import Computation
from .emit import Emitter


def _with_passenger(comparator: Computation, index_type: str) -> Computation:
    """``comparator`` taking two more (ignored) parameters: the iota's pair."""
    b = Builder(unique_name(comparator.name.split(".")[0] + "_perm"))
    mapping = {}
    for p in comparator.parameters:
        mapping[id(p)] = b.parameter(p.shape, p.name)
    b.parameter(Shape(index_type), "perm_lhs")
    b.parameter(Shape(index_type), "perm_rhs")
    for instr in comparator.instructions:
        if instr.opcode == "parameter":
            continue
        mapping[id(instr)] = b.op(instr.opcode, *[mapping[id(o)] for o in instr.operands],
                                  shape=instr.shape, **instr.attrs)
    return b.build(mapping[id(comparator.root)])


def sort_vjp(e: Emitter, instr, g):
    operands = instr.operands
    (axis,) = instr.attrs["dimensions"]
    shape = operands[0].shape
    cots = g if instr.shape.is_tuple else [g]
    cache = {}

    def permutation():
        if "perm" not in cache:
            iota = e.op("iota", shape=Shape("s64", shape.dims), iota_dimension=axis)
            attrs = {k: v for k, v in instr.attrs.items() if k not in ("to_apply", "metadata")}
            pair = e.op("sort", *operands, iota,
                        to_apply=_with_passenger(instr.attrs["to_apply"], "s64"), **attrs)
            perm = e.op("get-tuple-element", pair, index=len(operands))
            # Full coordinates of each sorted element's source: iotas, with perm on the axis.
            coords = [perm if d == axis else e.op("iota", shape=Shape("s64", shape.dims), iota_dimension=d)
                      for d in range(shape.rank)]
            cache["perm"] = e.op("concatenate", *[e.reshape(c, shape.dims + (1,)) for c in coords],
                                 dimensions=(shape.rank,))
        return cache["perm"]

    def transpose(c):
        if c is None:
            return None
        return lambda: e.op("scatter", e.zeros(c.shape), permutation(), c, update_window_dims=(),
                            inserted_window_dims=tuple(range(shape.rank)),
                            scatter_dims_to_operand_dims=tuple(range(shape.rank)),
                            index_vector_dim=shape.rank, to_apply=e.adder(c.shape.element_type))
    return [transpose(c) for c in cots]
