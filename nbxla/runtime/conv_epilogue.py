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


def fold_convolution_epilogues(module: Module, plan=None) -> dict[str, bool]:
    """Fold every foldable convolution into its consuming fusion, in place.  Returns, for
    each fusion that took one, whether its output must have memory of its own instead of
    its place in the buffer plan (see ``_operands_survive``)."""
    folded = {}
    for comp in list(module.computations):
        users: dict[int, list[Instruction]] = {}
        for instr in comp.instructions:
            for o in instr.operands:
                users.setdefault(id(o), []).append(instr)
        for conv in [i for i in comp.instructions if i.opcode == "convolution"]:
            fusion = _consumer(comp, conv, users)
            if fusion is None:
                continue
            survive = _operands_survive(plan if comp is module.entry else None, conv, fusion)
            if survive is not None and _fold(comp, conv, fusion):
                folded[fusion.name] = survive == "own output"
    return folded


def _operands_survive(plan, conv: Instruction, fusion: Instruction) -> str | None:
    """Do the convolution's operands keep their values until the fusion runs, now that the
    fusion reads them?  The plan let their memory be reused from the convolution on.  None:
    a value defined between the two steps shares it (no fold); "own output": only the
    fusion's planned output does (a fusion usually takes the place of the input that died at
    the convolution), so it is written to memory of its own; "yes" otherwise, and always
    without a plan (every value has memory of its own)."""
    if plan is None:
        return "yes"
    values = plan.values
    if conv.name not in values or fusion.name not in values:
        return None
    first, last = values[conv.name].start, values[fusion.name].start
    answer = "yes"
    for operand in conv.operands:
        v = values.get(operand.name)
        if v is None or (v.kind == "parameter" and v.parameter in plan.donated):
            return None
        if v.kind != "arena":
            continue                # parameters and constants are never written
        if v.offset is None:
            return None
        for other in values.values():
            if other is v or other.kind != "arena" or not first < other.start <= last:
                continue
            if other.offset is None or (other.offset < v.offset + v.size and v.offset < other.offset + other.size):
                if other.start < last or other.name != fusion.name:
                    return None
                answer = "own output"
    return answer


def _consumer(comp: Computation, conv: Instruction, users) -> Instruction | None:
    """The loop fusion that is the convolution's only user and reads it once, or None."""
    found = users.get(id(conv), [])
    if len(found) != 1 or conv is comp.root or (native_convolution_refusal(conv) is not None and
                                                  not takes_dense(conv)):
        return None
    fusion = found[0]
    if fusion.opcode != "fusion" or fusion.attrs.get("kind", "kLoop") != "kLoop" or \
            sum(o is conv for o in fusion.operands) != 1:
        return None
    inner = fusion.attrs["calls"]
    if any(i.opcode == "convolution" for i in inner.instructions):
        return None
    return fusion


def _fold(comp: Computation, conv: Instruction, fusion: Instruction) -> bool:
    inner = fusion.attrs["calls"]
    position = fusion.operands.index(conv)
    params = inner.parameters
    clone: dict[int, Instruction] = {}
    kept = [p for p in params if p.parameter_number != position]
    new_params = []
    for number, p in enumerate(kept):
        copy = Instruction("parameter", p.shape, attrs={**p.attrs, "parameter_number": number}, name=p.name)
        clone[id(p)] = copy
        new_params.append(copy)
    conv_params = [Instruction("parameter", o.shape, attrs={"parameter_number": len(kept) + k},
                               name=f"{conv.name}.operand{k}") for k, o in enumerate(conv.operands)]
    inner_conv = Instruction("convolution", conv.shape, conv_params, dict(conv.attrs), name=conv.name,
                             location=conv.location)
    clone[id(next(p for p in params if p.parameter_number == position))] = inner_conv
    body = []
    for instr in inner.instructions:
        if instr.opcode == "parameter":
            continue
        copy = Instruction(instr.opcode, instr.shape, [clone[id(o)] for o in instr.operands], dict(instr.attrs),
                           name=instr.name, location=instr.location)
        clone[id(instr)] = copy
        body.append(copy)
    new_inner = Computation(inner.name, new_params + conv_params + [inner_conv] + body, clone[id(inner.root)])
    if native_convolution_refusal(inner_conv) is None:
        if epilogue_refusal(new_inner, inner_conv) is not None:
            return False
    elif bias_activation(new_inner, inner_conv) is None:
        return False
    module = inner.parent
    if module is not None:
        shared = any(i is not fusion and inner in i.called_computations
                     for c in module.computations for i in c.instructions)
        if shared:                      # (another fusion calls the same computation: keep it)
            new_inner.name = f"{inner.name}.{conv.name}"
            for instr in new_inner.instructions:          # (names stay unique in the module)
                if instr is not inner_conv and not instr.name.startswith(conv.name + ".operand"):
                    instr.name = f"{instr.name}.{conv.name}"
            module.add_computation(new_inner)
        else:
            new_inner.parent = module
            module.computations[module.computations.index(inner)] = new_inner
    fusion.attrs["calls"] = new_inner
    fusion.operands = [o for o in fusion.operands if o is not conv] + list(conv.operands)
    comp.instructions.remove(conv)
    return True


def runs_as_library(fusion: Instruction) -> bool:
    """Is ``fusion`` a dense convolution folded with its bias / activation (run by the
    library call ``conv_bias_act.ConvolutionWithEpilogue``, not a compiled fusion kernel)?"""
    comp = fusion.attrs.get("calls")
    if fusion.opcode != "fusion" or comp is None:
        return False
    conv = dense_convolution(comp)
    return conv is not None and native_convolution_refusal(conv) is not None and takes_dense(conv) and \
        bias_activation(comp, conv) is not None
