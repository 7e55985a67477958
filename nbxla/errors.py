"""User-facing errors.

Every error a user can see is an ``NbxlaError``: its message says what went wrong, where
(the HLO line or the cell line) and what to do instead.  Lower layers raise the specific
subclass; the notebook layer only formats them.
"""

from __future__ import annotations

import numpy as np


class NbxlaError(Exception):
    """Base class of every error nbxla reports to a user."""


class HloShapeError(NbxlaError, ValueError):
    """Operands of an HLO instruction are inconsistent with its opcode or attributes."""


class HloParseError(NbxlaError, ValueError):
    """Malformed HLO text; the message starts with ``file:line:column``."""

    def __init__(self, message: str, filename: str = "<hlo>", line: int = 0, column: int = 0,
                 source_line: str | None = None):
        self.filename, self.line, self.column = filename, line, column
        self.bare_message = message
        text = f"{filename}:{line}:{column}: {message}"
        if source_line is not None:
            text += f"\n    {source_line.rstrip()}\n    {' ' * max(column - 1, 0)}^"
        super().__init__(text)


class HloVerificationError(NbxlaError, ValueError):
    """A module violates an IR invariant (dangling operand, wrong operand count, ...)."""


class EvaluationError(NbxlaError, RuntimeError):
    """The reference evaluator cannot run an instruction (e.g. unknown custom-call target)."""


class InterpretedWarning(UserWarning):
    """Part of a compiled program runs on the reference evaluator (an interpreter, far slower
    than native code): said once per compilation, naming each instruction and why."""


class UnsupportedError(NbxlaError, NotImplementedError):
    """A construct nbxla understands but does not (yet) run."""


class TraceError(NbxlaError):
    """A problem found while tracing user code; ``location`` is the user's file/cell and line."""

    def __init__(self, message: str, location=None, hint: str | None = None):
        self.location, self.hint, self.bare_message = location, hint, message
        text = f"{location}: {message}" if location is not None else message
        if location is not None and getattr(location, "source", None):
            text += f"\n    {source_excerpt(location.source)}"
        if hint:
            text += f"\n{hint}"
        super().__init__(text)


def source_excerpt(line: str, limit: int = 200) -> str:
    """A source line as an error shows it: stripped, and cut short past ``limit`` characters
    (a cell line holding a 100 000-character literal would bury the message)."""
    line = line.strip()
    return line if len(line) <= limit else f"{line[:limit]} ... ({len(line)} characters)"


class NotCompilableError(TraceError):
    """Code that cannot become one static HLO graph (data-dependent shapes, hidden state, ...)."""


class ConcretizationError(TraceError):
    """Python needed a concrete value (``if``, ``float()``, ``int()``) from a traced array."""


class AotError(UnsupportedError):
    """Something that cannot be compiled ahead of time into a self-contained object file (an
    operation with no native implementation, a missing C compiler or linker, a bad spec)."""


class RuntimeCheckError(TraceError):
    """A check the compiled program makes on its data failed (NumPy would have raised here):
    an index out of bounds, an integer raised to a negative power.  Located at the line that
    traced the operation."""


class IndexCheckError(RuntimeCheckError, IndexError):
    """A traced index is out of bounds (NumPy's ``IndexError``)."""


class ValueCheckError(RuntimeCheckError, ValueError):
    """A traced value NumPy rejects (NumPy's ``ValueError``)."""


class LinAlgCheckError(RuntimeCheckError, np.linalg.LinAlgError):
    """A matrix NumPy's linear algebra rejects (NumPy's ``LinAlgError``): not positive definite."""


class UnsupportedInputError(TraceError, TypeError):
    """An argument nbxla cannot compile for (``np.matrix``, masked and big-endian arrays, ...)."""


class VerificationError(NbxlaError, ValueError):
    """A compiled result checked against eager NumPy differs (``%%xla --verify``,
    ``nbxla.jit(verify=True)``, ``NBXLA_FLAGS=--verify``): a bug in nbxla; the message names
    the output or argument that differs and by how much."""


class UncheckedWarning(UserWarning):
    """``verify`` could not check a compiled function: its plain function runs only under
    nbxla (a gradient tape), so NumPy has no result to compare with."""


class ResourceError(NbxlaError, MemoryError):
    """A program needs more memory than can be allocated; the message names the user's shape."""
