"""Reverse-mode automatic differentiation of traced NumPy code (``nbxla.grad``).

``rules.py`` holds one VJP rule per HLO opcode, ``backward.py`` runs them over a graph
(HloModule -> HloModule with ``vjp_module``), and ``api.py`` gives ``grad``/``value_and_grad``
for plain NumPy functions, compiled on their own or inside ``jit``/``%%xla``.
"""

from .api import GradFunction, GradientError, GradientTape, grad, value_and_grad
from . import calls  # noqa: F401  (registers the call and while VJP rules)
from .backward import NotDifferentiableError, backward, vjp_module

__all__ = ["grad", "value_and_grad", "GradientTape", "GradFunction", "GradientError", "backward",
           "vjp_module", "NotDifferentiableError"]
