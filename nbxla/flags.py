"""``NBXLA_FLAGS``: XLA-style defaults from the environment (``--dump_to=DIR --device=cpu``;
``--pass_timing`` prints where each compilation's time goes).

``--auto_jit`` (a switch) turns on auto-clustering for every ``%%xla`` cell and every
``nbxla.jit`` function made without an explicit ``mode`` (like ``TF_XLA_FLAGS=--tf_xla_auto_jit``).
``--verify`` (a switch) makes every ``nbxla.jit`` function check the first call of each
compiled signature against the plain function, as ``jit(fn, verify=True)`` does.
``--unroll_max=N`` unrolls Python loops of at most N steps (4), ``--unroll_budget=N`` longer ones
whose unrolled body stays within N instructions (512); ``--unroll_max=0`` rolls every loop that
can be rolled into an HLO ``while``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from .errors import NbxlaError


class FlagError(NbxlaError, ValueError):
    """A malformed NBXLA_FLAGS entry."""


@dataclass(frozen=True)
class Flags:
    device: str = "cpu"
    dump_to: str | None = None
    pass_timing: bool = False
    # Out-of-range traced indices: False raises NumPy's IndexError (a check after each run),
    # True clamps them into range as XLA does (no check).
    clamp_indices: bool = False
    auto_jit: bool = False
    # Python loops over traced values of at most this many steps are unrolled; longer ones
    # become an HLO while.  0 rolls every loop it can (the path long loops take), which the
    # test suite runs once more with, so that short test loops do not hide that path.
    unroll_max: int = 4
    # Longer loops are unrolled too while steps x instructions of the body traced once stay
    # within this budget: a rolled step costs a host round trip (~1 us), and unrolled steps
    # fuse into one kernel.  (--unroll_max=0 turns this off as well.)
    unroll_budget: int = 512
    verify: bool = False


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise FlagError(f"NBXLA_FLAGS: boolean flag value {text!r} must be true or false")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise FlagError(f"NBXLA_FLAGS: flag value {text!r} must be a whole number >= 0")
    return value


_KNOWN = {"device": str, "dump_to": str, "pass_timing": _boolean, "clamp_indices": _boolean,
          "auto_jit": _boolean, "unroll_max": _count, "unroll_budget": _count,
          "verify": _boolean}


def parse_flags(text: str | None) -> Flags:
    values = {}
    for item in shlex.split(text or ""):
        if item.startswith("--") and "=" not in item and _KNOWN.get(item[2:]) is _boolean:
            item += "=true"                      # a boolean flag alone: --pass_timing
        if not item.startswith("--") or "=" not in item:
            raise FlagError(f"NBXLA_FLAGS entry {item!r} must look like --name=value "
                            f"(known: {', '.join('--' + k for k in _KNOWN)})")
        name, value = item[2:].split("=", 1)
        if name not in _KNOWN:
            raise FlagError(f"unknown NBXLA_FLAGS flag --{name}; known: {', '.join('--' + k for k in _KNOWN)}")
        if _KNOWN[name] is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise FlagError(f"NBXLA_FLAGS --{name} takes no value (or true/false), not {value!r}")
            values[name] = value.lower() in ("true", "1")
            continue
        values[name] = _KNOWN[name](value)
    return Flags(**values)


_parsed: dict = {}

# Read on every jit call, where os.environ.get (~0.6 us, it encodes the key and decodes the
# value) is a fifth of the dispatch budget.  os.environ keeps its encoded items in ``_data``
# (CPython since 3.2); reading that directly costs ~0.05 us and sees every change made through
# os.environ (%env, os.environ[...] = ...).  Any other Python falls back to the public API.
_ENVIRON_DATA = getattr(os.environ, "_data", None)
_ENCODED_NAME = os.environ.encodekey("NBXLA_FLAGS") if hasattr(os.environ, "encodekey") else None
_ENVIRON_FAST = _ENVIRON_DATA is not None and _ENCODED_NAME is not None


def current_flags() -> Flags:
    text = _ENVIRON_DATA.get(_ENCODED_NAME) if _ENVIRON_FAST else os.environ.get("NBXLA_FLAGS")
    flags = _parsed.get(text)
    if flags is None:
        decoded = os.environ.get("NBXLA_FLAGS")       # text, whatever form ``text`` had
        flags = _parsed[text] = parse_flags(decoded)
    return flags


def switch_on(name: str) -> None:
    """Turn on the switch ``--name`` in ``NBXLA_FLAGS`` (``os.environ``: this process and the
    processes it starts), keeping the flags already there.  Benchmark scripts and the demo
    notebooks' test run with ``switch_on("verify")``: only each compiled signature's first
    call pays for the check, so steady-state timings are unchanged."""
    if _KNOWN.get(name) is not _boolean:
        raise FlagError(f"--{name} is not an NBXLA_FLAGS switch; switches: "
                        f"{', '.join('--' + k for k, v in _KNOWN.items() if v is _boolean)}")
    text = os.environ.get("NBXLA_FLAGS", "")
    if not getattr(parse_flags(text), name):
        os.environ["NBXLA_FLAGS"] = f"{text} --{name}".strip()
