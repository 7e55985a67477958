"""The driver's support code (``aot_runtime.c``'s routines, compiled as an object of their own)
compiled while LLVM works: see ``SupportInBackground``."""

from __future__ import annotations

import re
import threading

from ..compile_clock import stage

GENERATED = "/* ---- generated ---- */"       # (in a driver's C: what follows is generated)

# The support code's routines, by the names its interface declares (a driver's calls of them).
RUNTIME_API = re.compile(r"\bnbxla_(?:parallel|full_reduce|transpose|solve|sort|topk|select_and_scatter|fft|"
                         r"(?:gemm|conv|masked_dot|potrf)_[a-z0-9]+(?:_prepacked)?)\b")


def support_routines(c_source: str) -> set[str]:
    """The support-code routines the generated part of the driver's C ``c_source`` calls."""
    return set(RUNTIME_API.findall(c_source[c_source.index(GENERATED):]))


class SupportInBackground:
    """``runtime_object(names)`` (the support code's object: a C compiler run, 0.2-0.4 s for a
    complex GEMM at -O3) started on a thread of its own as soon as the driver's C says which
    routines it needs (``start``), so that it runs while LLVM optimizes and emits the kernels
    (they release the GIL, the compiler is a process of its own: two cores work at once);
    ``_link`` then calls this object for it and waits only for what is left.  Called for other
    routines than those started (or never started), it compiles them then."""

    def __init__(self, runtime_object):
        self.runtime_object = runtime_object
        self.names: set[str] | None = None
        self.thread: threading.Thread | None = None
        self.result: tuple[bytes | None, BaseException | None] = (None, None)

    def start(self, c_source: str) -> None:
        self.names = support_routines(c_source)

        def compile_support():
            try:
                self.result = (self.runtime_object(self.names), None)
            except BaseException as e:      # (raised where it is waited for, in __call__)
                self.result = (None, e)
        self.thread = threading.Thread(target=compile_support, name="nbxla-support-code", daemon=True)
        self.thread.start()

    def __call__(self, names) -> bytes:
        if self.thread is None or set(names) != self.names:
            return self.runtime_object(names)
        with stage("c-compiler"):
            self.thread.join()
        obj, error = self.result
        if error is not None:
            raise error
        return obj
