"""The object-code cache's keys (codegen/object_keys.py): the kernels' LLVM IR with their symbols
replaced by their places, so that the same program under other instruction names finds the
machine code compiled first -- and a program that differs in anything else does not."""

from __future__ import annotations

import numpy as np
import pytest

from nbxla.codegen.object_keys import canonical_ir, global_name, object_key, renamed, restore
from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NBXLA_CACHE_DIR", str(tmp_path))
    return tmp_path


# One program in several spellings: {names} are the instruction names, the rest its semantics.
PROGRAM = """
HloModule {module}

{sum} {{
  {x} = f32[] parameter(0)
  {y} = f32[] parameter(1)
  ROOT {s} = f32[] add({x}, {y})
}}

ENTRY {entry} {{
  {p} = {dtype}[{rows},{cols}]{layout} parameter(0)
  {c} = {dtype}[] constant({value})
  {b} = {dtype}[{rows},{cols}]{layout} broadcast({c}), dimensions={{}}
  {m} = {dtype}[{rows},{cols}]{layout} multiply({p}, {b})
  {t} = pred[{rows},{cols}]{layout} compare({m}, {b}), direction={direction}
  {z} = {dtype}[{rows},{cols}]{layout} select({t}, {m}, {p})
  {f} = f32[{rows},{cols}]{layout} convert({z})
  {zero} = f32[] constant(0)
  ROOT {r} = f32[{rows}]{{0}} reduce({f}, {zero}), dimensions={{1}}, to_apply={sum}
}}
"""
NAMES = ("module", "sum", "x", "y", "s", "entry", "p", "c", "b", "m", "t", "z", "f", "zero", "r")
BASE = dict(dtype="f32", rows=8, cols=16, layout="{1,0}", value="1.5", direction="GT")


def program(suffix: str, **semantics) -> str:
    names = {n: f"{n}_{suffix}.{7 + len(suffix)}" for n in NAMES}
    return PROGRAM.format(**names, **{**BASE, **semantics})


def compiled(text: str):
    """(from the cache?, kernel symbols, results == the evaluator's) of the module compiled."""
    module = parse_hlo(text)
    comp = compile_module(module, "cpu")
    kernels = comp.executable.native.kernels
    dtype = module.entry.parameters[0].shape.element_type
    x = np.random.default_rng(0).uniform(-2, 2, module.entry.parameters[0].shape.dims).astype(
        {"f32": np.float32, "f64": np.float64, "s32": np.int32}[dtype])
    got = comp.executable.run([x])
    want = flatten(evaluate(module, [x]))
    np.testing.assert_allclose(np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want[0], rtol=1e-6)
    return kernels.from_cache, list(kernels.specs), kernels


def test_the_same_program_under_other_names_shares_machine_code(cache_dir):
    first, symbols1, _ = compiled(program("a"))
    again, symbols2, kernels = compiled(program("bb"))
    assert (first, again) == (False, True)
    assert symbols1 != symbols2             # (other names: the module's key alone would miss)
    # The kernels answer to this module's names, and its optimized IR says them.
    assert all(kernels.addresses[s] for s in symbols2)
    assert all(s in kernels.llvm_ir_optimized for s in symbols2)
    assert not any(s in kernels.llvm_ir_optimized for s in symbols1)


@pytest.mark.parametrize("what,change", [
    ("a constant's value", dict(value="2.5")),
    ("a row's length", dict(cols=17)),
    ("a dtype", dict(dtype="f64")),
    ("a comparison direction", dict(direction="LT")),
])
def test_a_program_that_differs_in_anything_else_is_compiled_again(cache_dir, what, change):
    assert compiled(program("a"))[0] is False
    assert compiled(program("bb", **change))[0] is False, what
    assert compiled(program("ccc", **change))[0] is True, what     # (and then is found itself)


@pytest.mark.parametrize("what,change", [
    ("the row count (a row reduction's range, which the spec gives: not in the code)", dict(rows=9)),
    ("the parameter's layout (the passes make every array row-major before code generation)",
     dict(layout="{0,1}")),
])
def test_what_the_code_does_not_hold_shares_it_and_is_right(cache_dir, what, change):
    """Differences that leave the kernels' LLVM IR as it was share its machine code, and the
    results still equal the evaluator's (``compiled`` compares them) at the other program."""
    assert compiled(program("a"))[0] is False
    assert compiled(program("bb", **change))[0] is True, what


IR = '''; ModuleID = "m1"
define void @"nbxla_f_3"(i8* %"a") {
  call void @"nbxla_f_3_v2"(i8* %"a")
  ret void
}
define void @nbxla_f_3_v2(i8* %a) {
  ret void
}
define void @"nbxla_f_3_objects"() {
  call void @"nbxla_f_30"(i8* null)
  ret void
}
'''


def test_canonical_text_renames_kernels_place_by_place():
    other = IR.replace("nbxla_f_3", "nbxla_g_9").replace("nbxla_g_90", "nbxla_f_30").replace("m1", "m2")
    assert canonical_ir(IR, ["nbxla_f_3", "nbxla_f_3_v2"]) == canonical_ir(other, ["nbxla_g_9", "nbxla_g_9_v2"])
    # (a global that only begins like a kernel's name is not the kernel's)
    assert "nbxla_f_30" in canonical_ir(IR, ["nbxla_f_3", "nbxla_f_3_v2"])
    # The places matter: the same two names the other way round are another program.
    assert canonical_ir(IR, ["nbxla_f_3", "nbxla_f_3_v2"]) != canonical_ir(IR, ["nbxla_f_3_v2", "nbxla_f_3"])
    renamed_ir = renamed(IR, ["nbxla_f_3", "nbxla_f_3_v2"], ["nbxla_g_9", "nbxla_g_9_v2"])
    assert renamed_ir == IR.replace("nbxla_f_3", "nbxla_g_9").replace("nbxla_g_90", "nbxla_f_30")
    assert restore(canonical_ir(IR, ["nbxla_f_3", "nbxla_f_3_v2"]), ["nbxla_f_3", "nbxla_f_3_v2"]) == \
        IR.replace('; ModuleID = "m1"', "")
    assert global_name("nbxla_g_9_objects", ["nbxla_g_9"], ["nbxla_f_3"]) == "nbxla_f_3_objects"


def test_the_key_holds_the_context_and_every_character_of_the_code():
    key = object_key(IR, ["nbxla_f_3"], "cpu-a,lsr=True")
    assert key == object_key(IR, ["nbxla_f_3"], "cpu-a,lsr=True")
    assert key != object_key(IR, ["nbxla_f_3"], "cpu-a,lsr=False")
    assert key != object_key(IR.replace("ret void\n}\ndefine void @nbxla", "ret void\n}\n\ndefine void @nbxla"),
                             ["nbxla_f_3"], "cpu-a,lsr=True")
