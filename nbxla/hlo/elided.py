"""Constants whose values were elided (``constant({...})``) when the module was printed, as
XLA's dumps and ``--xla_dump_to`` print large constants.

**What happens.**  The parser accepts them in any case: each such constant gets deterministic
stand-in values (``fill_values``) and the mark ``attrs["elided"]``, and the module prints
``{...}`` for it again (reads back to the same values).  Its values are needed only to run
it: the evaluator and the compiler refuse a module with marked constants
(``ElidedConstantError``, naming the constant), unless the caller accepts the stand-ins with
``accept_filled_constants`` -- ``run-hlo`` does that by default and says so on stderr (its
``--no-fill-elided`` refuses instead), as XLA's ``run_hlo_module`` fills such literals too.
Results computed from stand-ins are not the original model's: they are for timing and for
comparing two backends on the same filled module.

**The stand-ins.**  Seeded by the constant's name (two elided constants of one shape differ,
so CSE does not merge them), floats standard normal scaled by ``1/sqrt(fan-in)`` (the
product of all but the last dim: weights of that scale keep activations of order one
through a deep network, where unit weights overflow bf16 within a few layers), integers in
``[0, 8)`` (in range for small tables and indices), pred alternating at random.
"""

from __future__ import annotations

import zlib

import numpy as np

from ..errors import NbxlaError
from .shapes import Shape, is_complex, is_float

ELIDED = "elided"


class ElidedConstantError(NbxlaError, ValueError):
    """A module with elided constants was run without accepting stand-in values."""


def fill_values(name: str, shape: Shape) -> np.ndarray:
    """The deterministic stand-in values of the elided constant ``name``."""
    return model_values(shape, np.random.default_rng(zlib.crc32(name.encode())))


def model_values(shape: Shape, rng: np.random.Generator) -> np.ndarray:
    """Random values of ``shape`` at a trained model's scale (see "The stand-ins" above): also
    the inputs with which the model-module tests and benchmarks run HLO modules."""
    dims, t = shape.dims, shape.element_type
    if t == "pred":
        return rng.integers(0, 2, dims).astype(bool)
    if is_float(t) or is_complex(t):
        fan_in = int(np.prod(dims[:-1])) if len(dims) > 1 else 1
        x = rng.standard_normal(dims) / np.sqrt(max(fan_in, 1))
        if is_complex(t):
            x = x + 1j * rng.standard_normal(dims) / np.sqrt(max(fan_in, 1))
            return x.astype(shape.dtype)
        return x.astype(np.float32).astype(shape.dtype)
    return rng.integers(0, 8, dims).astype(shape.dtype)


def elided_constants(module) -> list:
    """The constants of ``module`` still holding stand-in values nobody accepted."""
    return [i for c in module.computations for i in c.instructions
            if i.opcode == "constant" and i.attrs.get(ELIDED)]


def accept_filled_constants(module) -> list[str]:
    """Keep the stand-in values of every elided constant as the module's own (they then print
    in full); returns the names of those constants."""
    names = []
    for instr in elided_constants(module):
        del instr.attrs[ELIDED]
        names.append(instr.name)
    return names


def check_no_elided_constants(module, what: str) -> None:
    """Raise ``ElidedConstantError`` when ``module`` has elided constants (``what``: the action
    that needs their values)."""
    found = elided_constants(module)
    if not found:
        return
    shown = ", ".join(f"%{i.name} ({i.shape})" for i in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    raise ElidedConstantError(
        f"cannot {what} module {module.name}: {len(found)} constant(s) were printed without their "
        f"values ({{...}}): {shown}.  Export the module with its constants printed in full, or "
        "accept deterministic stand-in values: nbxla.hlo.elided.accept_filled_constants(module) "
        "(run-hlo does that unless --no-fill-elided)")
