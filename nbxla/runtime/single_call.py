"""The runner of an entry that is one kernel on its parameters, written out per executable.

Why: the jit fast path calls it on every call of a small program.  Written as a loop over the
operands (a list of the arguments, ``zip`` with their expected strides, a list of outputs, a
call with ``*args``), it took ~0.9 us of Python around a 0.6 us kernel call on a 20-op chain
over 128 elements; written out for the kernel's arity it takes a third of that (the names
below are bound once, as ``collections.namedtuple`` does).  Strides, run-time sizes and the
extent are names, not literals: the instances of a program with unknown dimensions (one per
size) write the same text, compiled once (``_code``), as straight_line.py does.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np


def single_kernel_runner(fn: Callable, makers: list, extent: int, order: list[int],
                         strides: list[tuple], pick: int, scalar: bool,
                         fallback: Callable, sizes: tuple = (), call: Callable | None = None) -> Callable:
    """``run_single(inputs)``: checks that ``inputs[order[j]]`` is an exact ndarray with
    ``strides[j]`` (C-contiguous: the kernel reads it by its data pointer), else returns
    ``fallback(inputs)``; makes the outputs, calls ``fn(*operands, *outputs, *sizes, 0,
    extent)`` -- or ``call(*operands, *outputs)``, the kernel's built-in caller (fastcall.py),
    when there is one -- and returns output ``pick`` (as a NumPy scalar when ``scalar``: 0-d
    results)."""
    env = {"ndarray": np.ndarray, "kernel": fn, "fallback": fallback, "extent": extent}
    lines = ["def run_single(inputs):"]
    names = _checked_inputs_and_outputs(env, lines, list(order), strides, makers)
    if call is not None:                    # (it passes the sizes and the extent itself)
        env["kernel"] = call
        lines.append(f"    kernel({', '.join(names)})")
    else:
        for k, size in enumerate(sizes):    # (the sizes a kernel reads at run time, last)
            env[f"size{k}"] = size
            names.append(f"size{k}")
        lines.append(f"    kernel({', '.join(names)}, 0, extent)")
    lines.append(f"    return o{pick}[()]" if scalar else f"    return o{pick}")
    source = "\n".join(lines)
    exec(_code(source), env)
    run = env["run_single"]
    run.source = source
    return run


def _checked_inputs_and_outputs(env: dict, lines: list, sources: list, strides: list, makers: list) -> list:
    """Lines that bind ``a{j}`` to ``inputs[sources[j]]`` (or, where ``sources[j]`` is not an
    int, to that constant array), return ``fallback(inputs)`` unless each bound input is an
    exact ndarray with ``strides[j]``, and make the outputs ``o{k}``; returns their names."""
    checks, names = [], []
    for j, (source, st) in enumerate(zip(sources, strides)):
        if isinstance(source, (int, np.integer)):
            env[f"st{j}"] = tuple(st)
            lines.append(f"    a{j} = inputs[{int(source)}]")
            checks.append(f"type(a{j}) is not ndarray or a{j}.strides != st{j}")
        else:
            env[f"a{j}"] = source           # (a constant: the same array every call)
        names.append(f"a{j}")
    if checks:
        lines += ["    if " + " or ".join(checks) + ":", "        return fallback(inputs)"]
    for k, make in enumerate(makers):
        env[f"make{k}"] = make
        lines.append(f"    o{k} = make{k}()")
        names.append(f"o{k}")
    return names


@functools.lru_cache(maxsize=256)
def _code(source: str):
    return compile(source, "<nbxla single-kernel entry>", "exec")


def loop_entry_runner(call: Callable, sources: list, strides: list, makers: list, pick: int | tuple,
                      scalar: bool, fallback: Callable, check: Callable) -> Callable:
    """``run_single(inputs)`` of an entry that is one native loop called through its built-in
    caller (fastcall.py): state leaf ``j`` is ``inputs[sources[j]]`` (checked to be an exact
    ndarray with ``strides[j]``, else ``fallback(inputs)``) or, where ``sources[j]`` is not an
    int, that constant array; the loop's results are made by ``makers``; a non-None return
    code goes to ``check``; returns result ``pick`` (a NumPy scalar when ``scalar``), or the
    list of results ``pick`` names when it is a tuple."""
    env = {"ndarray": np.ndarray, "loop": call, "fallback": fallback, "check": check}
    lines = ["def run_single(inputs):"]
    names = _checked_inputs_and_outputs(env, lines, sources, strides, makers)
    lines += [f"    rc = loop({', '.join(names)})", "    if rc is not None:", "        check(rc)"]
    if isinstance(pick, tuple):
        lines.append(f"    return [{', '.join(f'o{k}' for k in pick)}]")
    else:
        lines.append(f"    return o{pick}[()]" if scalar else f"    return o{pick}")
    source = "\n".join(lines)
    exec(_code(source), env)
    run = env["run_single"]
    run.source = source
    return run
