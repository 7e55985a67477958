"""``%%xla``, ``%xla_ir`` and ``%xla_cache``: thin wrappers over ``nbxla.frontend.cell``.

The magics parse options, name the cell the way IPython does (``Cell In[N]``), call the
public API, and present errors: an ``NbxlaError`` as a short message with the cell line, any
other exception from the user's code as a traceback trimmed to the notebook's frames.  The
exception is still raised, so "run all" stops at the failing cell as usual.
"""

from __future__ import annotations

import os
import re
import sys
from types import TracebackType

import numpy as np
from IPython.core.error import UsageError
from IPython.core.magic import (Magics, cell_magic, line_magic, magics_class,
                                output_can_be_silenced)
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import NbxlaError, TraceError
from ..frontend.cell import prepare_cell
from ..frontend.cell_check import compare_times, verify
from ..runtime.cache import DEFAULT_CACHE

_NBXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


class CellSyntaxError(NbxlaError):
    """The %%xla cell is not valid Python (shown like IPython shows a SyntaxError)."""


@magics_class
class XlaMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.last_compilation = None      # of the last %%xla cell, for %xla_ir

    # ---- %%xla ------------------------------------------------------------------------------

    @magic_arguments()
    @argument("--device", choices=["cpu", "cuda", "auto"], default=None,
              help="where to run (default: NBXLA_FLAGS --device, else cpu)")
    @argument("--compare", action="store_true",
              help="also time the cell with eager NumPy and report the speedup")
    @argument("--verify", action="store_true",
              help="check every output against eager NumPy on copies of the inputs")
    @argument("--stage", metavar="NAME", help="show a stage after compiling (hlo, optimized_hlo, ...)")
    @argument("--dump", metavar="DIR", help="write every stage to DIR/module_NNNN.<name>.<stage>.txt")
    @argument("--no-cache", action="store_true", dest="no_cache",
              help="compile afresh, neither using nor filling the compilation cache")
    @cell_magic
    @output_can_be_silenced
    def xla(self, line, cell):
        """Compile and run this cell of NumPy code with nbxla.

        Arrays the cell reads are inputs; Python scalars it reads are compile-time constants;
        names it binds are written back as NumPy arrays; the last expression is displayed.
        On a cache hit the cell's Python does not run again: print() and other side effects
        happen only when the cell is compiled.
        """
        args = parse_argstring(self.xla, line)
        number = self._cell_number()
        source = "\n" + cell                      # line numbers as in the notebook (line 1: %%xla)
        filename = self.shell.compile.cache(source, number)
        ns = self.shell.user_ns
        try:
            prepared = prepare_cell(source, ns, label=f"Cell In[{number}]", filename=filename,
                                    name=f"cell_{number}", device=args.device,
                                    use_cache=not args.no_cache, filename_display=self._display_name)
            self.last_compilation = prepared.compilation
            result = prepared.run()
            report = []
            if args.verify:
                checked = verify(prepared, result, ns, filename)
                report.append(f"--verify: {len(checked)} output(s) match eager NumPy")
            if args.compare:
                report.append(str(compare_times(prepared, ns, filename)))
            if args.stage:
                report.append(prepared.compilation.stage(args.stage))
            if args.dump:
                paths = prepared.compilation.dump(args.dump)
                report.append(f"wrote {len(paths)} files to {args.dump}")
        except SyntaxError as e:
            # IPython would show a SyntaxError with the stack into nbxla; keep its usual display.
            e.filename = filename
            error = CellSyntaxError(str(e))
            lines = self.shell.SyntaxTB.structured_traceback(type(e), e, [])
            error._render_traceback_ = lambda: lines
            raise error from e
        except Exception as e:
            self._presentable(e)
            raise
        value = result.commit(ns)                 # only now does the namespace change
        for text in report:
            print(text)
        return value

    # ---- %xla_ir, %xla_cache ----------------------------------------------------------------

    @line_magic
    def xla_ir(self, line):
        """%xla_ir [stage=]NAME [function]: show a stage of the last %%xla cell or of a jit function."""
        words = line.split()
        if not words or len(words) > 2:
            raise UsageError("usage: %xla_ir [stage=]NAME [function_name], "
                             "e.g. %xla_ir stage=optimized_hlo")
        stage = words[0].split("=", 1)[1] if words[0].startswith("stage=") else words[0]
        if len(words) == 2:
            fn = self.shell.user_ns.get(words[1])
            if not hasattr(fn, "last_compilation"):
                raise UsageError(f"{words[1]!r} is not an @nbxla.jit function in this namespace")
            compilation = fn.last_compilation
            if compilation is None:
                raise UsageError(f"{words[1]} has not been called yet: call it once to compile it")
        else:
            compilation = self.last_compilation
            if compilation is None:
                raise UsageError("no %%xla cell has been compiled yet")
        try:
            print(compilation.stage(stage))
        except NbxlaError as e:
            self._presentable(e)
            raise

    @line_magic
    def xla_cache(self, line):
        """%xla_cache: show the compilation cache; %xla_cache clear: empty it."""
        if line.strip() == "clear":
            DEFAULT_CACHE.clear()
            print("nbxla compilation cache cleared")
        elif not line.strip():
            print(DEFAULT_CACHE.table())
        else:
            raise UsageError("usage: %xla_cache [clear]")

    # ---- naming cells and presenting errors ---------------------------------------------------

    def _cell_number(self) -> int:
        """The running cell's number: from the IPython cell file on the stack, as tracebacks do."""
        frame = sys._getframe(1)
        while frame is not None:
            name = self.shell.compile.format_code_name(frame.f_code.co_filename)
            match = name and re.search(r"\d+", name[1])
            if match:
                return int(match.group())
            frame = frame.f_back
        return self.shell.execution_count

    def _display_name(self, filename: str) -> str | None:
        name = self.shell.compile.format_code_name(filename)
        return " ".join(name) if name else None

    def _presentable(self, e: BaseException) -> None:
        """Give ``e`` the short rendering IPython shows instead of a traceback into nbxla."""
        if isinstance(e, NbxlaError):
            lines = [_short_message(e)]
        else:
            tb = _user_frames(e.__traceback__, self._display_name)
            lines = (self.shell.InteractiveTB.structured_traceback(type(e), e, tb) if tb is not None
                     else self.shell.InteractiveTB.get_exception_only(type(e), e))
        e._render_traceback_ = lambda: lines


def _short_message(e: NbxlaError) -> str:
    if not isinstance(e, TraceError) or e.location is None:
        return f"{type(e).__name__}: {e}"
    loc = e.location
    text = f"{type(e).__name__}: {e.bare_message}\n  {loc.file}, line {loc.line}"
    if loc.source:
        text += f"\n    {loc.source.strip()}"
    if e.hint:
        text += f"\n{e.hint}"
    return text


def _user_frames(tb: TracebackType | None, display_name) -> TracebackType | None:
    """The traceback from the first notebook-cell frame on, without nbxla's and NumPy's frames."""
    frames = []
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if frames or display_name(filename):
            if not filename.startswith((_NBXLA_DIR, _NUMPY_DIR)):
                frames.append(tb)
        tb = tb.tb_next
    trimmed = None
    for t in reversed(frames):
        trimmed = TracebackType(trimmed, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return trimmed


def register(ipython) -> None:
    ipython.register_magics(XlaMagics)
