"""Sorts in ahead-of-time objects and native loops (the same driver, ``codegen/aot_library.py``):
a comparator that orders by plain operand keys runs the typed sort ``nbxla_sort_keys``
(``codegen/sort_keys.py``; insertion sort up to NBXLA_SORT_SHORT = 64 elements, radix sort
beyond), the others the comparator's merge sort ``nbxla_sort``.  The oracle is the reference
evaluator, bit for bit: equal keys keep their order (the index operand shows it), NaNs and
signed zeros land where the comparator says.  Every module sorts rows of 40 and of 100
elements (both sides of the insertion sort's limit), and of 1 and 0."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla.aot
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.shapes import Shape

from tests.runtime.test_cpu_library_calls import NBXLA_NAN_LAST

from .aot_util import build, needs_cc, run

pytestmark = needs_cc

LENGTHS = (40, 100, 1, 0)

SPECIAL = np.array([np.nan, -np.nan, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 2.0, 1.0, -0.0, np.nan, 1e-30, -3.5])

NAN_LAST = NBXLA_NAN_LAST           # (nbxla's own NaN-last comparator, as the library path's tests)

NAN_FIRST = """
  lt = pred[] compare(l0, r0), direction=LT
  rnan = pred[] compare(r0, r0), direction=NE
  lnan = pred[] compare(l0, l0), direction=NE
  rnum = pred[] not(rnan)
  nan_first = pred[] and(lnan, rnum)
  ROOT less = pred[] or(lt, nan_first)"""

# JAX's key canonicalization (NaNs -> one NaN, -0 -> 0): a computed key, not the typed sort's
JAX_KEYS = """
  c_nan = {t}[] constant(nan)
  c_zero = {t}[] constant(0)
  ln = pred[] compare(l0, l0), direction=NE
  lz = pred[] compare(l0, c_zero), direction=EQ
  lk0 = {t}[] select(lz, c_zero, l0)
  lk = {t}[] select(ln, c_nan, lk0)
  rn = pred[] compare(r0, r0), direction=NE
  rz = pred[] compare(r0, c_zero), direction=EQ
  rk0 = {t}[] select(rz, c_zero, r0)
  rk = {t}[] select(rn, c_nan, rk0)
  ROOT lt = pred[] compare(lk, rk), direction=LT, type=TOTALORDER"""

# name -> (comparator, runs the typed sort, calls the comparator's merge sort too)
FLOAT_COMPARATORS = {
    "nan-last": (NAN_LAST.format(direction="LT"), True, False),
    "nan-last-descending": (NAN_LAST.format(direction="GT"), True, False),
    "nan-first": (NAN_FIRST, True, False),
    "totalorder-LT": ("  ROOT lt = pred[] compare(l0, r0), direction=LT, type=TOTALORDER", True, False),
    "totalorder-GT": ("  ROOT gt = pred[] compare(l0, r0), direction=GT, type=TOTALORDER", True, False),
    "plain-LT": ("  ROOT lt = pred[] compare(l0, r0), direction=LT", True, True),
    "swapped-GT": ("  ROOT gt = pred[] compare(r0, l0), direction=GT", True, True),
    "jax-LT": (JAX_KEYS, False, True),
}


def sorts_module(types: list[str], comparator: str, lengths=LENGTHS, keep=None) -> str:
    """A module sorting (p0, p1, ...) of shape [3, n] along axis 1 for each n of ``lengths``
    (one sort each) with ``comparator`` (a body on l0 r0 l1 r1 ...); with ``keep``, the results
    are the first ``keep`` of each row (slices)."""
    params = "\n".join(f"  {n}{k} = {t}[] parameter({2 * k + j})"
                       for k, t in enumerate(types) for j, n in enumerate(("l", "r")))
    body, results = [], []
    for m, n in enumerate(lengths):
        args = [f"a{m}_{k}" for k in range(len(types))]
        body += [f"  {a} = {t}[3,{n}] parameter({m * len(types) + k})" for k, (a, t) in enumerate(zip(args, types))]
        shape = "(" + ", ".join(f"{t}[3,{n}]" for t in types) + ")" if len(types) > 1 else f"{types[0]}[3,{n}]"
        body.append(f"  s{m} = {shape} sort({', '.join(args)}), dimensions={{1}}, to_apply=less")
        if len(types) > 1:
            results += [f"  g{m}_{k} = {t}[3,{n}] get-tuple-element(s{m}), index={k}" for k, t in enumerate(types)]
    names = [f"g{m}_{k}" if len(types) > 1 else f"s{m}" for m in range(len(lengths)) for k in range(len(types))]
    shapes = [f"{t}[3,{n}]" for n in lengths for t in types]
    if keep is not None:
        kept = [min(keep, n) for n in lengths for _ in types]
        results += [f"  h{j} = {shape.split('[')[0]}[3,{k}] slice({name}), slice={{[0:3], [0:{k}]}}"
                    for j, (name, shape, k) in enumerate(zip(names, shapes, kept))]
        names = [f"h{j}" for j in range(len(names))]
        shapes = [f"{shape.split('[')[0]}[3,{k}]" for shape, k in zip(shapes, kept)]
    root = f"  ROOT out = ({', '.join(shapes)}) tuple({', '.join(names)})"
    return "HloModule sorts\n\nless {\n" + params + "\n" + comparator + "\n}\n\nENTRY main {\n" + \
        "\n".join(body + results + [root]) + "\n}\n"


def _inputs(keys_for, types, lengths=LENGTHS):
    inputs = []
    for n in lengths:
        inputs.append(keys_for((3, n)))
        inputs += [np.broadcast_to(np.arange(n, dtype=Shape(t).dtype), (3, n)).copy() for t in types[1:]]
    return inputs


def _check_against_the_evaluator(text: str, tmp_path, name: str, input_sets, typed: bool, merge: bool):
    obj, exe = build(parse_hlo(text), None, tmp_path, name)
    driver = open(nbxla.aot.compile(parse_hlo(text), None, str(tmp_path / "c"), name, emit_c=True).files["driver.c"]).read()
    generated = driver[driver.index("/* ---- generated ---- */"):]
    assert ("nbxla_sort_keys(" in generated) == typed
    assert ("nbxla_sort(" in generated) == merge
    for inputs in input_sets:
        got = run(obj, exe, inputs, tmp_path)
        want = flatten(evaluate(parse_hlo(text), inputs))
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert g.tobytes() == w.tobytes(), f"got {g!r}, expected {w!r}"


@pytest.mark.parametrize("name", sorted(FLOAT_COMPARATORS))
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_float_comparators_match_the_evaluator(name, t, tmp_path):
    comparator, typed, merge = FLOAT_COMPARATORS[name]
    rng = np.random.default_rng(0)
    dtype = Shape(t).dtype
    numbers = SPECIAL[~np.isnan(SPECIAL)]
    input_sets = [_inputs(lambda s: rng.choice(pool, s).astype(dtype), [t, "s32"])
                  for pool in (numbers, SPECIAL)]
    input_sets.append(_inputs(lambda s: rng.standard_normal(s).astype(dtype), [t, "s32"]))   # (no ties)
    if merge and typed:     # (NaNs under a plain comparison: see the test below)
        input_sets = input_sets[::2]
    _check_against_the_evaluator(sorts_module([t, "s32"], comparator.format(t=t)), tmp_path, f"sort_{t}_{name.replace('-', '_')}",
                                 input_sets, typed, merge)


def test_plain_float_comparison_with_nans_runs_the_comparators_merge_sort(tmp_path):
    """A NaN under a plain comparison (no strict weak order): the typed sort hands the call to
    ``nbxla_sort``, the comparator's merge sort, which answers as it did before the typed sort
    (an object whose key is a copy of the operand, which only the merge sort takes; that answer
    is not the evaluator's for such comparators: its merge places elements another way)."""
    rng = np.random.default_rng(5)
    inputs = _inputs(lambda s: rng.choice(SPECIAL, s), ["f64", "s64"])
    plain = sorts_module(["f64", "s64"], "  ROOT lt = pred[] compare(l0, r0), direction=LT")
    copied = sorts_module(["f64", "s64"], """
  lc = f64[] copy(l0)
  rc = f64[] copy(r0)
  ROOT lt = pred[] compare(lc, rc), direction=LT""")
    results = []
    for name, text, typed in (("plain_nan", plain, True), ("copied_nan", copied, False)):
        c_dir = str(tmp_path / name)
        driver = open(nbxla.aot.compile(parse_hlo(text), None, c_dir, name, emit_c=True).files["driver.c"]).read()
        assert ("nbxla_sort_keys(" in driver[driver.index("/* ---- generated ---- */"):]) == typed
        obj, exe = build(parse_hlo(text), None, tmp_path, name)
        results.append(run(obj, exe, inputs, tmp_path))
        assert any(np.isnan(r).any() for r in results[-1][::2])
    for got, want in zip(*results, strict=True):
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("t", ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "pred"])
@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_integer_keys_ascending_and_descending(t, direction, tmp_path):
    rng = np.random.default_rng(1)
    dtype = Shape(t).dtype
    if t == "pred":
        keys = lambda s: rng.random(s) < 0.5     # noqa: E731
    else:
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, 0, 1, 2, 2, 3, info.max - 1, info.min + 1], dtype)
        keys = lambda s: rng.choice(pool, s)     # noqa: E731
    comparator = f"  ROOT c = pred[] compare(l0, r0), direction={direction}"
    _check_against_the_evaluator(sorts_module([t, "s32"], comparator), tmp_path, f"sort_{t}_{direction}",
                                 [_inputs(keys, [t, "s32"])], True, False)


@pytest.mark.parametrize("kind", ["UNSIGNED", "SIGNED"])
@pytest.mark.parametrize("t", ["s32", "u32"])
def test_compare_type_reinterprets_integer_keys(kind, t, tmp_path):
    pool = np.array([-3, 5, -1, 0, 7, -3, 2, 2**31 - 1, -2**31]).astype(Shape(t).dtype)
    rng = np.random.default_rng(2)
    comparator = f"  ROOT c = pred[] compare(l0, r0), direction=LT, type={kind}"
    _check_against_the_evaluator(sorts_module([t, "s32"], comparator), tmp_path, f"sort_{t}_{kind}",
                                 [_inputs(lambda s: rng.choice(pool, s), [t, "s32"])], True, False)


def test_pred_comparator_orders_false_first(tmp_path):
    rng = np.random.default_rng(3)
    comparator = "  nl = pred[] not(l0)\n  ROOT less = pred[] and(nl, r0)"
    _check_against_the_evaluator(sorts_module(["pred", "s32"], comparator), tmp_path, "sort_pred",
                                 [_inputs(lambda s: rng.random(s) < 0.3, ["pred", "s32"])], True, False)


def test_lexicographic_keys_least_significant_pass_first(tmp_path):
    """JAX's lexsort form on two plain keys (f64 NaNs by total order, then u8 descending), a
    third operand carried along."""
    rng = np.random.default_rng(4)
    comparator = """
  lt0 = pred[] compare(l0, r0), direction=LT, type=TOTALORDER
  eq0 = pred[] compare(l0, r0), direction=EQ, type=TOTALORDER
  gt1 = pred[] compare(l1, r1), direction=GT
  tie = pred[] and(eq0, gt1)
  ROOT less = pred[] or(lt0, tie)"""
    types = ["f64", "u8", "s32"]
    inputs = []
    for n in LENGTHS:
        inputs += [rng.choice(SPECIAL[:6], (3, n)), rng.integers(0, 4, (3, n)).astype(np.uint8),
                   np.broadcast_to(np.arange(n, dtype=np.int32), (3, n)).copy()]
    _check_against_the_evaluator(sorts_module(types, comparator), tmp_path, "lexsort", [inputs], True, False)


def _nan_payloads(dtype) -> np.ndarray:
    """NaNs of distinct bits (sign, payload): a sort must keep them apart and in order."""
    if dtype == np.float64:
        bits = np.array([0x7FF8000000000001, 0xFFF8000000000002, 0x7FF0000000000003], np.uint64)
    else:
        bits = np.array([0x7FC00001, 0xFFC00002, 0x7F800003], np.uint32)
    return bits.view(dtype)


@pytest.mark.parametrize("name", ["nan-last", "nan-last-descending", "nan-first", "totalorder-LT",
                                  "totalorder-GT", "plain-LT"])
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_one_operand_sorted_by_its_own_float_key(name, t, tmp_path):
    """np.sort's shape: the keys alone sorted and mapped back to values; -0 / +0 and NaNs of
    different bits (equal under a float comparison) come out in their input order."""
    comparator, typed, merge = FLOAT_COMPARATORS[name]
    rng = np.random.default_rng(6)
    dtype = Shape(t).dtype
    with np.errstate(invalid="ignore"):
        pool = np.concatenate([SPECIAL.astype(dtype), _nan_payloads(dtype)])
    pool = pool if name != "plain-LT" else pool[~np.isnan(pool)]
    input_sets = [_inputs(lambda s: rng.choice(pool, s), [t]),
                  _inputs(lambda s: rng.standard_normal(s).astype(dtype), [t])]
    _check_against_the_evaluator(sorts_module([t], comparator), tmp_path, f"one_{t}_{name.replace('-', '_')}",
                                 input_sets, typed, merge)


@pytest.mark.parametrize("t", ["s8", "s64", "u16", "u32", "pred"])
@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_one_operand_sorted_by_its_own_integer_key(t, direction, tmp_path):
    rng = np.random.default_rng(7)
    dtype = Shape(t).dtype
    if t == "pred":
        keys = lambda s: rng.random(s) < 0.5     # noqa: E731
    else:
        info = np.iinfo(dtype)
        keys = lambda s: rng.integers(info.min, info.max, s, dtype=dtype, endpoint=True)     # noqa: E731
    comparator = f"  ROOT c = pred[] compare(l0, r0), direction={direction}"
    _check_against_the_evaluator(sorts_module([t], comparator), tmp_path, f"one_{t}_{direction}",
                                 [_inputs(keys, [t])], True, False)


@pytest.mark.parametrize("keep", [1, 5, 16, 17])
@pytest.mark.parametrize("name", ["nan-last", "nan-last-descending", "nan-first", "totalorder-GT", "plain-LT"])
@pytest.mark.parametrize("operands", [["f64", "s32"], ["f32"]])
def test_only_the_first_elements_read_select_them(keep, name, operands, tmp_path):
    """Where only a row's first ``keep`` elements are read (slices from 0, np.argsort(d)[:k]),
    up to 16 of a row longer than 64 are selected, not sorted: the same first elements, ties by
    position (rows of 40: sorted; keep 17: sorted; a plain comparison meeting NaNs: the merge
    sort)."""
    comparator, typed, merge = FLOAT_COMPARATORS[name]
    rng = np.random.default_rng(8)
    t = operands[0]
    dtype = Shape(t).dtype
    with np.errstate(invalid="ignore"):
        pool = np.concatenate([SPECIAL.astype(dtype), _nan_payloads(dtype)])
    pools = [pool[~np.isnan(pool)], pool] if name != "plain-LT" else [pool[~np.isnan(pool)]]
    lengths = (40, 100, 300)
    input_sets = [_inputs(lambda s: rng.choice(p, s), operands, lengths) for p in pools]
    input_sets.append(_inputs(lambda s: rng.standard_normal(s).astype(dtype), operands, lengths))
    descending = rng.standard_normal((3, 300)).astype(dtype)
    descending.sort(axis=1)
    input_sets.append(_inputs(lambda s: descending[:, ::-1][:, :s[1]].copy(), operands, lengths))  # (every key enters)
    text = sorts_module(operands, comparator, lengths, keep=keep)
    _check_against_the_evaluator(text, tmp_path, f"keep_{keep}_{t}_{len(operands)}_{name.replace('-', '_')}",
                                 input_sets, typed, merge)
    generated = open(nbxla.aot.compile(parse_hlo(text), None, str(tmp_path / "k"), "k", emit_c=True)
                     .files["driver.c"]).read().split("/* ---- generated ---- */")[1]
    assert f", keys, {keep}, " in generated


def test_a_row_read_whole_anywhere_is_sorted_whole(tmp_path):
    """One user slicing the first 3, another reading the whole row: every element is sorted."""
    text = sorts_module(["f64"], FLOAT_COMPARATORS["nan-last"][0], (100,))
    text = text.replace("  ROOT out = (f64[3,100]) tuple(s0)",
                        "  first = f64[3,3] slice(s0), slice={[0:3], [0:3]}\n  ROOT out = (f64[3,3], f64[3,100]) tuple(first, s0)")
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal((3, 100))]
    obj, exe = build(parse_hlo(text), None, tmp_path, "whole")
    got = run(obj, exe, inputs, tmp_path)
    want = flatten(evaluate(parse_hlo(text), inputs))
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
    generated = open(nbxla.aot.compile(parse_hlo(text), None, str(tmp_path / "c"), "whole", emit_c=True)
                     .files["driver.c"]).read().split("/* ---- generated ---- */")[1]
    assert ", keys, 100, " in generated
