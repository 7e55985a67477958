"""The HLO IR: shapes, instructions, computations, modules, text form and reference evaluator."""

from .builder import Builder, scalar_computation
from .ir import Computation, Instruction, Module, SourceLocation
from .shapes import Shape, TupleShape, from_numpy_dtype, shape_of, to_numpy_dtype

__all__ = ["Builder", "scalar_computation", "Computation", "Instruction", "Module",
           "SourceLocation", "Shape", "TupleShape", "from_numpy_dtype", "shape_of",
           "to_numpy_dtype"]
