"""The optimizer: a pipeline of small passes over an HLO module."""

from .buffer_assignment import BufferAssignment, BufferPlan
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .dot_rewrites import DotRewrites
from .float_normalization import FloatNormalization
from .fusion import Fusion
from .imported_fusions import ImportedFusions
from .inline import CallInliner
from .layouts import LayoutNormalization
from .loop_dots import LoopInvariantDots
from .loop_layouts import LoopLayouts
from .pipeline import Pass, Pipeline, PipelineResult
from .simplify import AlgebraicSimplifier, ConstantFolding
from .update_order import UpdatesAfterReaders
from .verifier import verify_module
from .while_state import WhileStateElimination
from .window_loops import WindowLoops


def default_pipeline(donated_parameters=frozenset()) -> Pipeline:
    """The optimizer; ``donated_parameters`` are entry parameters whose buffers the caller gives
    up, so that outputs may be written into them (see ``buffer_assignment``)."""
    return Pipeline([
        LayoutNormalization(), CallInliner(), ImportedFusions(), AlgebraicSimplifier(), ConstantFolding(),
        CommonSubexpressionElimination(), DotRewrites(), WhileStateElimination(), LoopInvariantDots(), WindowLoops(),
        LoopLayouts(), DeadCodeElimination(), FloatNormalization(),
        Fusion(), DeadCodeElimination(), UpdatesAfterReaders(),
        BufferAssignment(donated_parameters),
    ])


def optimize(module, donated_parameters=frozenset()) -> PipelineResult:
    return default_pipeline(donated_parameters).run(module)


__all__ = ["Pass", "Pipeline", "PipelineResult", "default_pipeline", "optimize", "verify_module",
           "AlgebraicSimplifier", "ConstantFolding", "CommonSubexpressionElimination",
           "DeadCodeElimination", "Fusion", "BufferAssignment", "BufferPlan", "CallInliner",
           "LayoutNormalization", "DotRewrites", "WhileStateElimination", "ImportedFusions", "UpdatesAfterReaders",
           "LoopInvariantDots", "FloatNormalization", "WindowLoops", "LoopLayouts"]
