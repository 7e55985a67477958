"""The C compiler's runs for a native loop module (the support code, the driver), made while
LLVM works: see ``SupportInBackground``."""

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
    """The C compiler's two runs for a driver -- the support code's object
    (``runtime_object(names)``: 0.2-0.4 s for a complex GEMM at -O3) and the driver's own
    (``compile_driver(c_source)``, at -O1) -- started on threads of their own as soon as the
    driver's C is known (``start``), so that they run while LLVM optimizes and emits the
    kernels (LLVM releases the GIL, the compiler is a process of its own: the cores work at
    once; scattering_self_energies S waited for them one after the other, after LLVM).
    ``_link`` then calls this object for the support code and ``driver_object`` for the
    driver, waiting only for what is left, and links the objects.  Asked for other routines or
    another driver than those started (or never started), it compiles the routines then and
    gives no driver object (``_link`` compiles the driver itself)."""

    def __init__(self, runtime_object, compile_driver=None):
        self.runtime_object, self.compile_driver = runtime_object, compile_driver
        self.names: set[str] | None = None
        self.c_source: str | None = None
        self.jobs: dict[str, _Job] = {}

    def start(self, c_source: str) -> None:
        self.names, self.c_source = support_routines(c_source), c_source
        self.jobs["support"] = _Job(lambda: self.runtime_object(self.names))
        if self.compile_driver is not None:
            self.jobs["driver"] = _Job(lambda: self.compile_driver(c_source))

    def __call__(self, names) -> bytes:
        if "support" not in self.jobs or set(names) != self.names:
            return self.runtime_object(names)
        return self.jobs["support"].result()

    def driver_object(self, c_source: str) -> bytes | None:
        if "driver" not in self.jobs or c_source != self.c_source:
            return None
        return self.jobs["driver"].result()


class _Job:
    """``work()`` on a thread of its own; ``result()`` waits for it (charged to the
    c-compiler stage) and returns its value or raises its exception."""

    def __init__(self, work):
        self.outcome: tuple = (None, None)

        def run():
            try:
                self.outcome = (work(), None)
            except BaseException as e:      # (raised where it is waited for)
                self.outcome = (None, e)
        self.thread = threading.Thread(target=run, name="nbxla-c-compiler", daemon=True)
        self.thread.start()

    def result(self):
        with stage("c-compiler"):
            self.thread.join()
        value, error = self.outcome
        if error is not None:
            raise error
        return value
