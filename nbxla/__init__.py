"""nbxla: an XLA-style compiler for NumPy code in notebooks."""

__version__ = "0.1.0"
