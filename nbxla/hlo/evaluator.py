"""The NumPy reference evaluator: runs an HLO module on NumPy arrays, op by op.

This is the oracle the rest of nbxla is checked against (passes must not change what it
computes, backends must agree with it), so it favours following XLA's operation semantics
over speed.  Each opcode has one rule in ``RULES``; a rule gets the instruction, its operand
values and the ``Interpreter`` (to run called computations) and returns a value: an
``np.ndarray`` with exactly the instruction's element type and dimensions, or a tuple.

Values are logical arrays; layouts only matter to ``bitcast``.  NumPy warnings are
silenced: HLO defines what overflow, division by zero or NaN produce, not NumPy.

The rules live in topic modules (``evaluator_elementwise``, ``evaluator_data``,
``evaluator_reduce``, ``evaluator_linalg``); this module holds the walk over instructions,
control flow, the public API and the custom-call registry.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..errors import EvaluationError, HloShapeError, NbxlaError
from .elided import check_no_elided_constants
from .evaluator_common import label
from .evaluator_data import DATA_RULES
from .evaluator_elementwise import ELEMENTWISE_RULES
from .evaluator_lapack import (GEQRF_TARGETS, GETRF_TARGETS, ORGQR_TARGETS, SYEVD_TARGETS, TRSM_TARGETS,
                               lapack_geqrf, lapack_getrf, lapack_orgqr, lapack_syevd, lapack_trsm)
from .evaluator_linalg import LINALG_RULES, MASKED_DOT_TARGET, SOLVE_TARGET, lapack_potrf, linalg_solve, masked_dot
from .evaluator_reduce import REDUCE_RULES, topk_custom_call
from .symbolic import bind_module, bind_symbols, symbols_of_module
from .ir import Computation, Instruction, Module
from .low_precision import Widener, computes_in_f32, widen_value
from .shapes import AnyShape, from_numpy_dtype

__all__ = ["evaluate", "flatten", "CUSTOM_CALL_TARGETS", "RULES", "Interpreter"]

# custom_call_target -> fn(instr, operand values, interpreter) -> value.
CUSTOM_CALL_TARGETS: dict[str, Callable] = {
    # JAX's CPU Cholesky (jnp.linalg.cholesky) calls LAPACK's potrf through XLA's FFI.
    "lapack_spotrf_ffi": lapack_potrf,
    "lapack_dpotrf_ffi": lapack_potrf,
    # XLA:CPU rewrites a sort followed by a slice of its first k (lax.top_k) into this call.
    "TopK": topk_custom_call,
    # np.linalg.solve / inv (nbxla's own target; the CPU backend calls NumPy's LAPACK for it).
    SOLVE_TARGET: linalg_solve,
    # a dot of index-dependent slices, at their true lengths (nbxla's own target)
    MASKED_DOT_TARGET: masked_dot,
    # JAX's CPU LU (jnp.linalg.solve, det, inv) and triangular solves (solve_triangular)
    **{target: lapack_getrf for target in GETRF_TARGETS},
    **{target: lapack_trsm for target in TRSM_TARGETS},
    # ... QR (jnp.linalg.qr) and symmetric / Hermitian eigenproblems (eigh)
    **{target: lapack_geqrf for target in GEQRF_TARGETS},
    **{target: lapack_orgqr for target in ORGQR_TARGETS},
    **{target: lapack_syevd for target in SYEVD_TARGETS},
}


def evaluate(module_or_computation: Module | Computation, args: Sequence):
    """Run the entry computation on ``args``; returns an ndarray or a (nested) tuple of them.

    Arguments must already have each parameter's element type and dimensions (nothing is
    converted silently).  Results are fresh, writeable arrays (0-d for scalars).
    """
    comp = module_or_computation
    if isinstance(comp, Module):
        if comp.entry is None:
            raise EvaluationError(f"module {comp.name} has no entry computation to evaluate")
        check_no_elided_constants(comp, "evaluate")
        if symbols_of_module(comp):         # unknown dimensions: sizes read off the arguments
            comp = bind_module(comp, bind_symbols(comp, list(args)))
        comp = comp.entry
    values = _check_entry_args(comp, list(args))
    with np.errstate(all="ignore"):
        result = Interpreter().call(comp, values)
    return _fresh(result)


def flatten(value) -> list[np.ndarray]:
    """The array leaves of a (nested) tuple value, depth-first (JAX's ``out0, out1, ...``)."""
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flatten(v)]
    return [value]


def _fresh(value):
    if isinstance(value, tuple):
        return tuple(_fresh(v) for v in value)
    return np.array(value)  # a copy: results never alias inputs, constants or each other


# --- entry arguments ----------------------------------------------------------------------------

def _check_entry_args(comp: Computation, args: list) -> list:
    params = comp.parameters
    numbers = [p.parameter_number for p in params]
    if numbers != list(range(len(params))):
        raise EvaluationError(f"computation %{comp.name} has parameter numbers {numbers}: they "
                              "must be 0..n-1, each once (a module built or edited by hand?)")
    if len(args) != len(params):
        raise EvaluationError(f"computation %{comp.name} takes {len(params)} argument(s) "
                              f"({', '.join(p.shape.to_text(False) for p in params)}) but got {len(args)}")
    return [_check_arg(p, p.shape, a, f"parameter {p.parameter_number} (%{p.name})")
            for p, a in zip(params, args)]


def _check_arg(param: Instruction, shape: AnyShape, arg, what: str):
    if shape.is_tuple:
        if not isinstance(arg, (tuple, list)) or len(arg) != len(shape.elements):
            raise EvaluationError(f"{what} expects a tuple {shape.to_text(False)} but got {_describe(arg)}")
        return tuple(_check_arg(param, s, a, f"{what} element {i}")
                     for i, (s, a) in enumerate(zip(shape.elements, arg)))
    arr = np.asarray(arg) if isinstance(arg, (np.ndarray, np.generic)) else None
    if arr is None or arr.dtype != shape.dtype or arr.shape != shape.dims:
        raise EvaluationError(f"{what} expects {shape.to_text(False)} but got {_describe(arg)}; "
                              "convert the argument (e.g. np.asarray(x, dtype)) before evaluating")
    return np.array(arr)  # a private copy: rules may assume nobody else writes to it


def _describe(arg) -> str:
    if isinstance(arg, (tuple, list)):
        return "(" + ", ".join(_describe(a) for a in arg) + ")"
    if isinstance(arg, (np.ndarray, np.generic)):
        arr = np.asarray(arg)
        try:
            name = from_numpy_dtype(arr.dtype)
        except HloShapeError:
            name = f"numpy {arr.dtype}"
        return f"{name}[{','.join(map(str, arr.shape))}]"
    return f"a Python {type(arg).__name__}"


# --- the interpreter ----------------------------------------------------------------------------

# Ops that are identities when operand and result are scalars; they may appear inside a
# reducer or comparator that is then still evaluated on whole arrays (see ``map``).
_SCALAR_IDENTITIES = {"broadcast", "reshape", "transpose", "copy"}
_VECTORIZABLE_STRUCTURE = {"parameter", "constant", "tuple", "get-tuple-element", "call", "fusion"}


class Interpreter:
    """Evaluates computations; rules use it to run the computations an instruction calls.

    One interpreter lives for one ``evaluate`` call, so it may cache facts about
    computations (which instructions are live, whether a reducer is vectorizable): the
    module does not change while it runs.
    """

    def __init__(self):
        self._live: dict[int, list[Instruction]] = {}
        self._vectorizable: dict[int, bool] = {}
        self._widener = Widener()

    def call(self, comp: Computation, args: Sequence):
        """Evaluate ``comp`` on argument values of its parameters' shapes."""
        return self._run(comp, args, batched=False)

    def apply(self, instr: Instruction, values: list, batched: bool = False):
        """``instr``'s value from its operands' values: its rule, exactly of its shape.  bf16 /
        f8 arithmetic runs the rule on f32 and rounds once (``low_precision``)."""
        if computes_in_f32(instr):
            value = RULES[instr.opcode](self._widener.instruction(instr), [widen_value(v) for v in values], self)
        else:
            value = RULES[instr.opcode](instr, values, self)
        return conform_value(instr, instr.shape, value, batched)

    def map(self, comp: Computation, args: Sequence[np.ndarray]):
        """Apply a computation on scalars elementwise over broadcastable arrays ``args``.

        This is how reducers, comparators and scatter combiners run: a computation whose
        instructions are all scalar and elementwise is evaluated once on whole arrays
        ("batched"); anything else falls back to a Python loop over elements.
        """
        args = [np.asarray(a) for a in args]
        shape = np.broadcast_shapes(*(a.shape for a in args))
        if self._is_vectorizable(comp):
            return _broadcast_value(self._run(comp, args, batched=True), shape)
        full = np.broadcast_arrays(*args)
        per_element = [self._run(comp, [np.asarray(a[idx]) for a in full], False)
                       for idx in np.ndindex(*shape)]
        return _stack(per_element, comp.root.shape, shape)

    def _run(self, comp: Computation, args: Sequence, batched: bool):
        env: dict[Instruction, object] = {}
        for instr in self._live_instructions(comp):
            try:
                if instr.opcode == "parameter":
                    env[instr] = conform_value(instr, instr.shape, args[instr.parameter_number], batched)
                elif batched and instr.opcode in _SCALAR_IDENTITIES:
                    env[instr] = conform_value(instr, instr.shape, env[instr.operands[0]], batched)
                else:
                    env[instr] = self.apply(instr, [env[o] for o in instr.operands], batched)
            except HloShapeError as e:  # a shape problem inside a rule: say which instruction
                raise EvaluationError(f"while evaluating {label(instr)}: {e}") from e
            except NbxlaError:
                raise
            except Exception as e:  # a NumPy error inside a rule: say which instruction
                raise EvaluationError(f"while evaluating {label(instr)}: {type(e).__name__}: {e}") from e
        return env[comp.root]

    def _live_instructions(self, comp: Computation) -> list[Instruction]:
        """Instructions the root depends on, in the computation's (topological) order.

        Dead instructions are skipped so that, e.g., an unsupported but unused custom-call
        does not stop evaluation.
        """
        live = self._live.get(id(comp))
        if live is None:
            needed = {id(i) for i in comp.post_order()}
            live = self._live[id(comp)] = [i for i in comp.instructions if id(i) in needed]
        return live

    def _is_vectorizable(self, comp: Computation) -> bool:
        known = self._vectorizable.get(id(comp))
        if known is None:
            known = self._vectorizable[id(comp)] = all(
                self._instr_vectorizable(i) for i in self._live_instructions(comp))
        return known

    def _instr_vectorizable(self, instr: Instruction) -> bool:
        shapes = [instr.shape] + [o.shape for o in instr.operands]
        if not all(_all_scalar(s) for s in shapes):
            return False
        if instr.opcode in ("call", "fusion"):
            return all(self._is_vectorizable(c) for c in instr.called_computations)
        if instr.is_elementwise:
            # Elementwise rules broadcast like NumPy, except tuple-valued select.
            return not instr.shape.is_tuple
        return instr.opcode in _VECTORIZABLE_STRUCTURE or instr.opcode in _SCALAR_IDENTITIES


def _all_scalar(shape: AnyShape) -> bool:
    if shape.is_tuple:
        return all(_all_scalar(s) for s in shape.elements)
    return shape.rank == 0


def _broadcast_value(value, shape):
    if isinstance(value, tuple):
        return tuple(_broadcast_value(v, shape) for v in value)
    return np.broadcast_to(value, shape)


def _stack(values: list, result_shape: AnyShape, shape: tuple):
    """Assemble per-element results (scalars or tuples of scalars) into arrays of ``shape``."""
    if result_shape.is_tuple:
        return tuple(_stack([v[i] for v in values], s, shape)
                     for i, s in enumerate(result_shape.elements))
    out = np.empty(len(values), result_shape.dtype)
    for i, v in enumerate(values):
        out[i] = v
    return out.reshape(shape)


def conform_value(instr: Instruction, shape: AnyShape, value, batched: bool):
    """Make a rule's result exactly ``shape``: the right dtype always, the right dims unless
    batched (then scalar instructions carry the batch's dims)."""
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            raise EvaluationError(f"internal error: {label(instr)} produced {type(value).__name__}, "
                                  f"expected a tuple {shape}")
        return tuple(conform_value(instr, s, v, batched) for s, v in zip(shape.elements, value))
    arr = np.asarray(value)
    dtype = shape.dtype
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    if not batched and arr.shape != shape.dims:
        if arr.size == shape.size and instr.opcode == "constant":
            return arr.reshape(shape.dims)  # a literal stored flat
        raise EvaluationError(f"internal error: {label(instr)} produced dimensions {list(arr.shape)}, "
                              f"expected {shape.to_text(False)}")
    return arr


# --- structure and control flow ------------------------------------------------------------------

def _parameter(instr, args, interp):
    raise AssertionError("parameters are bound by Interpreter._run")  # never dispatched


def _constant(instr, args, interp):
    return np.asarray(instr.literal)


def _tuple(instr, args, interp):
    return tuple(args)


def _get_tuple_element(instr, args, interp):
    return args[0][instr.attrs["index"]]


def _call(instr, args, interp):
    return interp.call(instr.attrs["to_apply"], args)


def _fusion(instr, args, interp):
    return interp.call(instr.attrs["calls"], args)


def _while(instr, args, interp):
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    state = args[0]
    while bool(interp.call(cond, [state])):
        state = interp.call(body, [state])
    return state


def _conditional(instr, args, interp):
    selector = args[0]
    if "branch_computations" in instr.attrs:
        branches = list(instr.attrs["branch_computations"])
        index = int(selector)
        if not 0 <= index < len(branches):
            index = len(branches) - 1  # XLA: an out-of-range index runs the last branch
    else:
        branches = [instr.attrs["true_computation"], instr.attrs["false_computation"]]
        index = 0 if bool(selector) else 1
    return interp.call(branches[index], [args[1 + index]])


def _opt_barrier(instr, args, interp):
    return args[0]     # only stops XLA from moving work across it; the value passes through


def _custom_call(instr, args, interp):
    target = instr.attrs.get("custom_call_target", "")
    fn = CUSTOM_CALL_TARGETS.get(target)
    if fn is None:
        raise EvaluationError(
            f"custom-call target {target!r} (instruction {label(instr)}) is not supported by nbxla; "
            f"supported targets: {', '.join(sorted(CUSTOM_CALL_TARGETS))}. Rewrite the program "
            "without it or register a NumPy implementation in nbxla.hlo.evaluator.CUSTOM_CALL_TARGETS")
    return fn(instr, args, interp)


_STRUCTURE_RULES = {
    "parameter": _parameter, "constant": _constant, "tuple": _tuple,
    "get-tuple-element": _get_tuple_element, "call": _call, "fusion": _fusion,
    "while": _while, "conditional": _conditional, "custom-call": _custom_call,
    "opt-barrier": _opt_barrier,
}

RULES: dict[str, Callable] = {**ELEMENTWISE_RULES, **DATA_RULES, **REDUCE_RULES, **LINALG_RULES,
                              **_STRUCTURE_RULES}
