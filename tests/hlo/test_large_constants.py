"""Large constants in module text: full where the text must read back, a digest of their bytes
in cache keys, ``{...}`` in per-pass records (as XLA's dumps).  Printing a 100 000-element
constant (an ``np.empty`` output made a constant by the writes into it) took about a second,
several times per compilation (issue 30)."""

from __future__ import annotations

import re

import numpy as np

from nbxla.hlo import Builder, Module, Shape
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.printer import LARGE_CONSTANT_ELEMENTS, PrintOptions, print_module

DIGEST = PrintOptions(large_constants="digest")
ELIDE = PrintOptions(large_constants="elide")


def _module(values: np.ndarray) -> Module:
    b = Builder("m")
    x = b.parameter(Shape("f32", (values.size,)), "x")
    b.op("add", x, b.constant(values.astype(np.float32)))
    return Module("m", b.build())


def _constant_text(text: str) -> str:
    return re.search(r"constant\((.*)\)", text).group(1)


def test_digest_tells_large_constants_apart_by_value_only():
    n = LARGE_CONSTANT_ELEMENTS + 1
    base = np.arange(n, dtype=np.float32)
    other = base.copy()
    other[-1] += 1
    a, same, diff = (_constant_text(print_module(_module(v), DIGEST)) for v in (base, base.copy(), other))
    assert a == same and a != diff
    assert "sha256:" in a and str(float(n - 1)) not in a
    assert "{...}" in print_module(_module(base), ELIDE)
    full = print_module(_module(base))                         # the default reads back
    np.testing.assert_array_equal(parse_hlo(full).entry.root.operands[1].literal, base)


def test_constants_up_to_the_limit_print_in_full_everywhere():
    small = np.arange(LARGE_CONSTANT_ELEMENTS, dtype=np.float32)
    module = _module(small)
    texts = {print_module(module, opts) for opts in (PrintOptions(), DIGEST, ELIDE)}
    assert len(texts) == 1 and "sha256" not in texts.pop()
