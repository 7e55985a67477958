"""``NBXLA_FLAGS``: XLA-style defaults from the environment (``--dump_to=DIR --device=cpu``)."""

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


_KNOWN = {"device": str, "dump_to": str}


def parse_flags(text: str | None) -> Flags:
    values = {}
    for item in shlex.split(text or ""):
        if not item.startswith("--") or "=" not in item:
            raise FlagError(f"NBXLA_FLAGS entry {item!r} must look like --name=value "
                            f"(known: {', '.join('--' + k for k in _KNOWN)})")
        name, value = item[2:].split("=", 1)
        if name not in _KNOWN:
            raise FlagError(f"unknown NBXLA_FLAGS flag --{name}; known: {', '.join('--' + k for k in _KNOWN)}")
        values[name] = _KNOWN[name](value)
    return Flags(**values)


_parsed: dict[str | None, Flags] = {}


def current_flags() -> Flags:
    text = os.environ.get("NBXLA_FLAGS")
    flags = _parsed.get(text)
    if flags is None:
        flags = _parsed[text] = parse_flags(text)
    return flags
