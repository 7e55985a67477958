"""The CPU backend's convolution epilogues: a convolution that runs in the native kernel and
whose only user is a loop fusion consuming it elementwise (MobileNet's bias add and relu6
clamp) is moved into that fusion, so that one kernel computes the sum of each point, applies
the fusion to it in registers and stores the fusion's result (``codegen/convolution.py``).

A dense convolution that nbxla's patch-GEMM kernel runs is folded the same way when the
fusion is a bias add and relu / relu6 (``conv_bias_act``): the fusion then runs as a library
call, that kernel with the epilogue in its store.

This is the runtime's own placement, not an optimizer pass: the passes do not know which
backend runs the module, and only this backend has a kernel that can take the convolution
(other backends keep the separate fusion).  The rewrite is done on the optimized module the
executable runs, before its kernels are compiled: the fusion keeps its name and output,
gains the convolution's two operands as its last parameters, and the convolution
instruction leaves the program.  The buffer plan was made for the two steps: the fusion now
reads the convolution's operands later than the plan assumed, so a fold is made only where
no value placed from the convolution to the fusion shares their memory.
"""

from __future__ import annotations

from ..codegen.convolution import epilogue_refusal, native_convolution_refusal
from ..hlo import Module
from ..hlo.ir import Computation, Instruction
from .conv_bias_act import bias_activation, dense_convolution, takes_dense
from .fusion_fold import fold_producer, operands_survive, sole_loop_fusion_user, users_by_operand


def fold_convolution_epilogues(module: Module, plan=None) -> dict[str, bool]:
    """Fold every foldable convolution into its consuming fusion, in place.  Returns, for
    each fusion that took one, whether its output must have memory of its own instead of
    its place in the buffer plan (see ``fusion_fold.operands_survive``)."""
    folded = {}
    for comp in list(module.computations):
        users = users_by_operand(comp)
        for conv in [i for i in comp.instructions if i.opcode == "convolution"]:
            if native_convolution_refusal(conv) is not None and not takes_dense(conv):
                continue
            fusion = sole_loop_fusion_user(comp, conv, users)
            if fusion is None:
                continue
            survive = operands_survive(plan if comp is module.entry else None, conv, fusion)
            if survive is not None and fold_producer(comp, conv, fusion, _takes_epilogue):
                folded[fusion.name] = survive == "own output"
    return folded


def _takes_epilogue(new_inner: Computation, inner_conv: Instruction) -> bool:
    if native_convolution_refusal(inner_conv) is None:
        return epilogue_refusal(new_inner, inner_conv) is None
    return bias_activation(new_inner, inner_conv) is not None


def runs_as_library(fusion: Instruction) -> bool:
    """Is ``fusion`` a dense convolution folded with its bias / activation (run by the
    library call ``conv_bias_act.ConvolutionWithEpilogue``, not a compiled fusion kernel)?"""
    comp = fusion.attrs.get("calls")
    if fusion.opcode != "fusion" or comp is None:
        return False
    conv = dense_convolution(comp)
    return conv is not None and native_convolution_refusal(conv) is not None and takes_dense(conv) and \
        bias_activation(comp, conv) is not None
