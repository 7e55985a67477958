"""The optimizer: a pipeline of small passes over an HLO module."""

from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion import Fusion
from .pipeline import Pass, Pipeline, PipelineResult
from .simplify import AlgebraicSimplifier, ConstantFolding
from .verifier import verify_module


def default_pipeline() -> Pipeline:
    return Pipeline([
        AlgebraicSimplifier(), ConstantFolding(), CommonSubexpressionElimination(),
        DeadCodeElimination(), Fusion(), DeadCodeElimination(),
    ])


def optimize(module) -> PipelineResult:
    return default_pipeline().run(module)


__all__ = ["Pass", "Pipeline", "PipelineResult", "default_pipeline", "optimize", "verify_module",
           "AlgebraicSimplifier", "ConstantFolding", "CommonSubexpressionElimination",
           "DeadCodeElimination", "Fusion"]
