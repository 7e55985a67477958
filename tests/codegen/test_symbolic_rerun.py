"""The backend's kernel tests rerun with the leading dimension unknown.

Each fusion of test_cpu's modules (every elementwise op, the reductions, the data-movement
patterns) is taken alone (its operands as parameters) and made symbolic in its leading size:
every dimension of that size, in the entry and the fused computation, becomes ``b``.  Where the
result is a valid module at another size (a slice to a fixed limit is not), it is compiled once
by ``compile_symbolic_module`` and run at the test's size and at a larger one, against the same
oracle as the static tests: the reference evaluator on the module bound to that size.  Kernels
the symbolic compile refuses are recorded with the reason (``REFUSED``); the last test checks
that the kernels expected to serve every size do (a change that quietly made them specialise
shows there).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from nbxla.hlo import Computation, Instruction, Module
from nbxla.hlo.ir import clone_module
import tests.codegen.test_cpu as test_cpu
from tests.symbolic_rerun import check_symbolic as check_module

REFUSED: dict[str, str] = {}


def _each_fusion(module: Module) -> dict[str, tuple[Module, list[int]]]:
    """fusion name -> (a module computing only it, the entry parameter numbers it reads)."""
    out = {}
    for instr in module.entry.instructions:
        if instr.opcode != "fusion" or not all(o.opcode == "parameter" for o in instr.operands):
            continue
        params = [Instruction("parameter", o.shape, attrs={"parameter_number": k}, name=f"p{k}")
                  for k, o in enumerate(instr.operands)]
        root = Instruction("fusion", instr.shape, params, dict(instr.attrs), instr.name)
        holder = Module(f"one_{instr.name}")
        reached, stack = set(), [instr.attrs["calls"]]
        while stack:                # (the fused computation, and the reducers it calls)
            comp = stack.pop()
            if id(comp) not in reached:
                reached.add(id(comp))
                stack += [v for i in comp.instructions for v in i.attrs.values() if isinstance(v, Computation)]
        for comp in module.computations:
            if id(comp) in reached:
                holder.add_computation(comp)
        holder.add_computation(Computation(f"one_{instr.name}", params + [root], root))
        holder.entry = holder.computations[-1]
        out[instr.name] = (clone_module(holder), [o.parameter_number for o in instr.operands])
    return out


def check_symbolic(name: str, module: Module, inputs: list, exact: bool) -> bool:
    """``tests.symbolic_rerun.check_symbolic`` on the test's inputs: False (the reason in
    REFUSED) when the module stays specialised."""
    why = check_module(module, inputs, exact)
    if why is not None:
        REFUSED[name] = why
    return why is None


# ---- the cases: test_cpu's modules, one fusion at a time -----------------------------------------

def _captured(build, *args):
    """The (module, inputs) a test_cpu case hands to ``compile_and_run`` (without compiling)."""
    seen = []
    original = test_cpu.compile_and_run
    test_cpu.compile_and_run = lambda module, inputs: (seen.append((module, inputs)), ([], [], {}))[1]
    try:
        build.__wrapped__(*args)
    finally:
        test_cpu.compile_and_run = original
    return seen[0]


@functools.cache
def elementwise_cases(t: str):
    module, inputs = _captured(test_cpu.elementwise_case, t)
    return module, inputs, _each_fusion(module)


@functools.cache
def reduction_cases():
    module, _ = test_cpu._reduction_module()
    return module, test_cpu._reduction_inputs(), _each_fusion(module)


def _inputs_of(all_inputs, numbers):
    return [all_inputs[k] for k in numbers]


ELEMENTWISE_TYPES = ["f32", "s32", "f64"]


@pytest.mark.parametrize("t", ELEMENTWISE_TYPES)
def test_elementwise_kernels_serve_every_size(t):
    _, inputs, fusions = elementwise_cases(t)
    served = [name for name, (m, numbers) in fusions.items()
              if check_symbolic(f"{t} {name}", m, _inputs_of(inputs, numbers), exact=not t.startswith("f"))]
    assert served, REFUSED


@pytest.mark.parametrize("name", test_cpu.REDUCTIONS)
def test_reduction_kernels_with_the_leading_size_unknown(name):
    _, inputs, fusions = reduction_cases()
    module, numbers = fusions[name]
    exact = not any(s in name for s in ("sum", "mean", "prod")) or "wraps" in name
    check_symbolic(name, module, _inputs_of(inputs, numbers), exact=exact)


# Kernels that must serve every size: elementwise work, row reductions (the leading axis is the
# range), column reductions (the kernel reads its row count when it runs).
MUST_BE_SYMBOLIC = ["row_sum", "column_sum", "max_nan_rows", "min_nan_cols", "prod_rows", "s32_sum_wraps",
                    "any_rows", "u8_max"]


def test_the_expected_kernels_went_symbolic():
    _, inputs, fusions = reduction_cases()
    for name in MUST_BE_SYMBOLIC:
        module, numbers = fusions[name]
        exact = "sum" not in name and "prod" not in name or "wraps" in name
        assert check_symbolic(name, module, _inputs_of(inputs, numbers), exact=exact), REFUSED.get(name)
