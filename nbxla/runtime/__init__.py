"""Running compiled modules: executables, backends and the compilation cache."""

from .cache import DEFAULT_CACHE, CompilationCache
from .executable import Executable, build_executable, resolve_device

__all__ = ["DEFAULT_CACHE", "CompilationCache", "Executable", "build_executable", "resolve_device"]
