"""``%%xla``, ``%xla_ir``, ``%xla_cache`` and ``%xla_bench``: thin wrappers over the public API.

The magics parse options, name the cell the way IPython does (``Cell In[N]``), call the
public API, and present errors: an ``NbxlaError`` as a short message with the cell line, any
other exception from the user's code as a traceback trimmed to the notebook's frames.  The
exception is still raised, so "run all" stops at the failing cell as usual.  What they show
are the display objects of ``nbxla.jupyter.display`` (text in a terminal, HTML in a notebook).
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
from IPython.display import display

from ..errors import NbxlaError, TraceError, source_excerpt
from ..flags import current_flags
from ..cell import prepare_cell
from ..cell_check import compare_times, verify
from ..profiler import profile_cell
from ..runtime.cache import DEFAULT_CACHE
from ..runtime.cuda_executable import DeviceUnavailableError  # CUDA backend
from ..runtime.executable import resolve_device
from . import dashboard
from .bench import bench
from .cache_view import CacheTable
from .compare_view import Comparison
from .profile_view import ProfileView
from .stage_view import StageView

_NBXLA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep


class CellSyntaxError(NbxlaError):
    """The %%xla cell is not valid Python (shown like IPython shows a SyntaxError)."""


def show_compiled_only(compilation, stage: str, error: DeviceUnavailableError) -> None:
    """``%%xla --device cuda --stage NAME`` on a machine without a GPU: show the stage(s) and
    say plainly that the cell was compiled but not run."""
    names = compilation.stages if stage == "all" else [stage]
    for name in names:
        if len(names) > 1:
            print(f"==== {name} ====")
        print(compilation.stage(name))
    print(f"nbxla: compiled for device 'cuda', but this cell cannot run here -- {error}\n"
          "(nothing ran and no names were assigned)")


@magics_class
class XlaMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.last_compilation = None      # of the last %%xla cell, for %xla_ir
        self.last_source = None           # its text, line 1 being the %%xla line
        self.last_report = None           # of the last %%xla --auto cell

    # ---- %%xla ------------------------------------------------------------------------------

    @magic_arguments()
    @argument("--device", choices=["cpu", "cuda", "auto"], default=None,
              help="where to run (default: NBXLA_FLAGS --device, else cpu)")
    @argument("--compare", action="store_true",
              help="also time the cell with eager NumPy and report the speedup")
    @argument("--verify", action="store_true",
              help="check every output against eager NumPy on copies of the inputs")
    @argument("--stage", metavar="NAME",
              help="show a stage after compiling (hlo, optimized_hlo, ...), or 'all' for the stage viewer")
    @argument("--dump", metavar="DIR", help="write every stage to DIR/module_NNNN.<name>.<stage>.txt")
    @argument("--dynamic", action="store_true",
              help="compile once for every size of the arrays' dimensions (sizes 0 and 1 are "
                   "specialised; see docs/unknown_dimensions.md)")
    @argument("--profile", action="store_true",
              help="also run the compiled cell a few times with per-kernel timing: time per source "
                   "line, each kernel on the roofline with a verdict, loop and fusion decisions")
    @argument("--no-cache", action="store_true", dest="no_cache",
              help="compile afresh, neither using nor filling the compilation cache")
    @argument("--auto", action="store_true",
              help="auto-clustering: run the cell as Python, compile the array work that can be "
                   "compiled, run the rest eagerly (default with NBXLA_FLAGS=--auto_jit)")
    @argument("--compile", action="store_true", dest="must_compile",
              help="compile the whole cell or refuse it, even with NBXLA_FLAGS=--auto_jit")
    @argument("--explain", action="store_true",
              help="with --auto: show the clustering report (clusters, graph breaks, fraction compiled)")
    @cell_magic
    @output_can_be_silenced
    def xla(self, line, cell):
        """Compile and run this cell of NumPy code with nbxla.

        Arrays the cell reads are inputs; Python scalars it reads are compile-time constants;
        names it binds are written back as NumPy arrays; the last expression is displayed.
        On a cache hit the cell's Python does not run again: print() and other side effects
        happen only when the cell is compiled.  With --auto the cell always runs as Python
        (print and all), and only its array work is compiled, in clusters.
        """
        args = parse_argstring(self.xla, line)
        number = self._cell_number()
        source = "\n" + cell                      # line numbers as in the notebook (line 1: %%xla)
        filename = self.shell.compile.cache(source, number)
        ns = self.shell.user_ns
        if _reads_dask(source, ns):
            return self._xla_dask(args, source, number, filename)
        if args.explain and not args.auto and not current_flags().auto_jit:
            raise UsageError("--explain reports auto-clustering: use it with --auto")
        if args.auto or (current_flags().auto_jit and not args.must_compile):
            return self._auto_cell(args, line, source, filename, number, ns)
        try:
            prepared = prepare_cell(source, ns, label=f"Cell In[{number}]", filename=filename,
                                    name=f"cell_{number}", device=args.device,
                                    use_cache=not args.no_cache, filename_display=self._display_name,
                                    dynamic=args.dynamic)
            full_source = f"%%xla {line}".rstrip() + source
            self.last_compilation, self.last_source = prepared.compilation, full_source
            dashboard.notify(prepared.compilation, full_source)
            try:                          # CUDA backend: without a GPU, --stage shows, nothing runs
                result = prepared.run()
            except DeviceUnavailableError as e:
                if not args.stage:
                    raise
                return show_compiled_only(prepared.compilation, args.stage, e)
            report = []                   # texts and display objects, shown once all succeeded
            if args.verify:
                checked = verify(prepared, result, ns, filename)
                report.append(f"--verify: {len(checked)} output(s) match eager NumPy")
            if args.compare:
                report.append(Comparison(compare_times(prepared, ns, filename), prepared.compilation,
                                         reused=prepared.hit, name=f"Cell In[{number}]"))
            if args.stage:
                report.append(StageView(prepared.compilation,
                                        None if args.stage == "all" else [args.stage], source=full_source,
                                        title=f"Cell In[{number}]"))
            if args.profile:
                report.append(ProfileView(profile_cell(prepared, full_source, filename,
                                                       name=f"Cell In[{number}]")))
            if args.dump:
                paths = prepared.compilation.dump(args.dump)
                report.append(f"wrote {len(paths)} files to {args.dump}")
        except SyntaxError as e:
            raise self._syntax_error(e, filename) from e
        except Exception as e:
            self._presentable(e)
            raise
        value = result.commit(ns)                 # only now does the namespace change
        for item in report:
            if isinstance(item, str):
                print(item, flush=True)           # flushed: streams and displays stay in order
            else:
                display(item)
        return value

    def _syntax_error(self, e: SyntaxError, filename: str) -> CellSyntaxError:
        """The cell's SyntaxError shown as IPython shows one (IPython would otherwise print the
        stack into nbxla)."""
        e.filename = filename
        error = CellSyntaxError(str(e))
        lines = self.shell.SyntaxTB.structured_traceback(type(e), e, [])
        error._render_traceback_ = lambda: lines
        return error

    def _xla_dask(self, args, source: str, number: int, filename: str):
        """A cell reading dask arrays: the names it binds become dask arrays (nbxla.dask)."""
        unsupported = [o for o in ("compare", "verify", "stage", "dump", "profile") if getattr(args, o)]
        if unsupported or args.device not in (None, "cpu"):
            raise UsageError(f"--{', --'.join(unsupported) or 'device'} is not available for cells "
                             "with dask inputs; nbxla.dask.explain() shows their plan")
        from ..dask import run_cell as run_dask_cell
        try:
            return run_dask_cell(source, self.shell.user_ns, label=f"Cell In[{number}]",
                                 filename=filename, name=f"cell_{number}",
                                 filename_display=self._display_name)
        except Exception as e:
            self._presentable(e)
            raise

    def _auto_cell(self, args, line, source, filename, number, ns):
        """``%%xla --auto``: the cell runs as Python; its array work runs in compiled clusters."""
        if args.stage or args.verify or args.compare or args.dump or args.profile:
            raise UsageError("--auto runs the cell as Python (it always gives NumPy's result): "
                             "--stage/--verify/--compare/--dump/--profile are for compiled cells; use "
                             "--explain, or %xla_ir after an --auto cell")
        from ..cluster import run_cell
        try:
            value, report = run_cell(source, ns, filename, name=f"cell_{number}",
                                     device=resolve_device(args.device or current_flags().device),
                                     filename_display=self._display_name,
                                     label=f"Cell In[{number}]")
        except SyntaxError as e:
            raise self._syntax_error(e, filename) from e
        except Exception as e:
            self._presentable(e)
            raise
        self.last_report = report
        compiled = [c for c in report.clusters if c.compiled]
        if compiled:
            self.last_compilation = max(compiled, key=lambda c: c.work).compilation
            self.last_source = f"%%xla {line}".rstrip() + source
        if args.explain:
            display(report)
        return value

    # ---- %xla_ir, %xla_cache, %xla_bench ----------------------------------------------------

    @line_magic
    def xla_ir(self, line):
        """%xla_ir [[stage=]NAME] [function]: show a stage of the last %%xla cell or of a jit function.

        Without NAME (or with NAME ``all``) it shows every stage: the stage viewer, with the
        source beside the optimized HLO, each line colored by the kernel it went into.
        """
        words = line.split()
        if len(words) > 2:
            raise UsageError("usage: %xla_ir [stage=]NAME [function_name], "
                             "e.g. %xla_ir stage=optimized_hlo")
        stage = None
        if words:
            stage = words[0].split("=", 1)[1] if words[0].startswith("stage=") else words[0]
        source = None
        if len(words) == 2:
            fn = self.shell.user_ns.get(words[1])
            if not hasattr(fn, "last_compilation"):
                raise UsageError(f"{words[1]!r} is not an @nbxla.jit function in this namespace")
            compilation = fn.last_compilation
            if compilation is None:
                raise UsageError(f"{words[1]} has not been called yet: call it once to compile it")
        else:
            compilation, source = self.last_compilation, self.last_source
            if compilation is None:
                raise UsageError("no %%xla cell has been compiled yet")
        if stage == "profile" and compilation.profile is not None:
            return display(ProfileView(compilation.profile))
        try:
            view = StageView(compilation, None if stage in (None, "all") else [stage], source=source)
        except NbxlaError as e:
            self._presentable(e)
            raise
        display(view)

    @line_magic
    def xla_cache(self, line):
        """%xla_cache: show the compilation cache; %xla_cache clear: empty it."""
        if line.strip() == "clear":
            DEFAULT_CACHE.clear()
            print("nbxla compilation cache cleared")
        elif not line.strip():
            display(CacheTable(DEFAULT_CACHE))
        else:
            raise UsageError("usage: %xla_cache [clear]")

    @magic_arguments()
    @argument("-r", "--repeats", type=int, default=5, help="timed runs per size and contender (default 5)")
    @argument("--budget", type=float, default=2.0, metavar="SECONDS",
              help="stop repeating a size after this long (at least one run each; default 2)")
    @argument("-o", "--output", action="store_true",
              help="return the report (a BenchReport) instead of displaying it")
    @argument("function", help="an @nbxla.jit function")
    @argument("inputs", help="a function of the size n returning f's arguments (a tuple or one array)")
    @argument("sizes", nargs="*",
              help="sizes: numbers (1e6, 2**20) or a name holding a list (default 1e3 1e4 1e5 1e6)")
    @line_magic
    def xla_bench(self, line):
        """Time an @nbxla.jit function against eager NumPy over sizes, and chart time and GB/s.

            def inputs(n):
                return np.ones(n, np.float32), np.ones(n, np.float32)
            %xla_bench f inputs 1e4 1e5 1e6

        f's own Python body is the eager contender.  The first call per size (the one that
        compiles) is not in the timings; the chart's dashed line is a NumPy copy's bandwidth.
        """
        args = parse_argstring(self.xla_bench, line)
        ns = self.shell.user_ns
        f, make_inputs = ns.get(args.function), ns.get(args.inputs)
        if not hasattr(f, "last_compilation") or not hasattr(f, "fn"):
            raise UsageError(f"{args.function!r} is not an @nbxla.jit function in this namespace")
        if not callable(make_inputs):
            raise UsageError(f"{args.inputs!r} must be a function of the size n that returns "
                             f"{args.function}'s arguments")
        sizes = []
        for word in args.sizes or ["1e3", "1e4", "1e5", "1e6"]:
            try:
                value = eval(word, ns)           # the user's own namespace, as %timeit does
            except Exception as e:
                raise UsageError(f"size {word!r}: {type(e).__name__}: {e}") from None
            values = value if isinstance(value, (list, tuple, range)) else [value]
            try:
                sizes += [int(v) for v in values]
            except (TypeError, ValueError):
                raise UsageError(f"size {word!r} is not a number or a list of numbers") from None
        report = bench(f, make_inputs, sizes, repeats=args.repeats, budget_s=args.budget)
        if args.output:
            return report
        display(report)

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


def _reads_dask(source: str, ns: dict) -> bool:
    """Whether the cell reads a dask array (checked without importing dask)."""
    from ..frontend.cell_ast import analyze
    try:
        reads = analyze(source).reads
    except SyntaxError:
        return False                  # prepare_cell reports it
    return any(hasattr(type(ns.get(name)), "__dask_graph__") for name in reads)


def _short_message(e: NbxlaError) -> str:
    if not isinstance(e, TraceError) or e.location is None:
        return f"{type(e).__name__}: {e}"
    loc = e.location
    text = f"{type(e).__name__}: {e.bare_message}\n  {loc.file}, line {loc.line}"
    if loc.source:
        text += f"\n    {source_excerpt(loc.source)}"
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
