"""Keys of compiled object code that do not depend on the kernels' names.

Kernel symbols are made from HLO instruction names (``nbxla_fusion_19``), and those come from a
process-wide counter: the same program traced twice -- a second ``nbxla.jit`` of one function,
a test's cases that differ only in their values, a program with unknown dimensions compiled
again at the sizes of a static compile -- gets other names, so a key made of the module's text
never finds the first compile's machine code, and LLVM (most of a compile's time) runs again
for the same code.  The key here is the kernels' LLVM IR text itself, with each kernel symbol
replaced by its place in the list of symbols: what LLVM is given, up to a renaming of the
kernels.  Everything semantic is in that text (shapes, dtypes, layouts, constants, comparison
directions, the sizes a kernel reads, the loop hints of light kernels, the object entries'
offsets); what the machine code depends on besides it is added by the caller (the target's
fingerprint, the code generator's switches).

The replacement is a renaming that can be undone (``restore``): each symbol is replaced where
it begins a global's name (``@"nbxla_fusion_19"``, its object entry
``@"nbxla_fusion_19_objects"``), by a marker that LLVM's text never holds.  Two texts with the
same canonical form are therefore the same text up to the kernels' names, and the machine code
of one serves the other once its symbols are looked up under the first one's names
(``renamed``).
"""

from __future__ import annotations

import hashlib
import re

_MARK = "\x01"          # (never in llvmlite's text: its strings escape control characters)
_MODULE_ID = re.compile(r'^(; ModuleID = |source_filename = ).*$', re.M)


def _pattern(symbols: list[str]) -> re.Pattern:
    # Longest first, so that ``nbxla_x_v2`` is not read as ``nbxla_x`` followed by ``_v2``.
    names = "|".join(re.escape(s) for s in sorted(symbols, key=len, reverse=True))
    # (after ``@`` or ``@"``: llvmlite quotes every global's name, LLVM's printer only those
    # that need it; followed by the end of the name, or by ``_`` of a name made from it)
    return re.compile(f'(?<=@)("?)({names})(?=[^\\w.$-]|_)')


def canonical_ir(text: str, symbols: list[str]) -> str:
    """``text`` with each of ``symbols`` (where it begins a quoted global name) replaced by a
    marker of its place in ``symbols``, and without the module's own name."""
    text = _MODULE_ID.sub("", text)
    if not symbols:
        return text
    place = {s: k for k, s in enumerate(symbols)}
    return _pattern(symbols).sub(lambda m: f"{m.group(1)}{_MARK}{place[m.group(2)]}{_MARK}", text)


def restore(canonical: str, symbols: list[str]) -> str:
    """The text whose canonical form is ``canonical``, with ``symbols`` as its kernels' names."""
    return re.sub(f"{_MARK}(\\d+){_MARK}", lambda m: symbols[int(m.group(1))], canonical)


def renamed(text: str, old: list[str], new: list[str]) -> str:
    """``text`` (LLVM IR, or one global's name: quoted as ``@"name"`` there) with the kernel
    symbols ``old`` renamed to ``new``, place by place."""
    if not old:
        return text
    return restore(_pattern(old).sub(lambda m: f"{m.group(1)}{_MARK}{old.index(m.group(2))}{_MARK}", text), new)


def with_module_id(text: str, of: str) -> str:
    """``text`` with the module name lines of the LLVM IR ``of`` (the module compiled now)."""
    found = {m.group(1): m.group(0) for m in _MODULE_ID.finditer(of)}
    return _MODULE_ID.sub(lambda m: found.get(m.group(1), m.group(0)), text)


def global_name(name: str, old: list[str], new: list[str]) -> str:
    """A global's name (a kernel, its object entry, its finishing function) with ``old``
    symbols renamed to ``new``."""
    return renamed(f'@"{name}"', old, new)[2:-1]


def object_key(text: str, symbols: list[str], context: str) -> str:
    """The store's key for machine code of the LLVM IR ``text`` (kernels ``symbols``) compiled
    under ``context`` (target fingerprint, code generator switches)."""
    digest = hashlib.sha256(b"ir-1\0" + context.encode() + b"\0" + canonical_ir(text, symbols).encode())
    return "ir-" + digest.hexdigest()
