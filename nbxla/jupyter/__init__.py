"""The notebook layer: magics (and, later, widgets).  It only calls the public API."""

from .magics import XlaMagics, register

__all__ = ["XlaMagics", "register"]
