"""Layout normalization: bitcasts that read or write non-row-major layouts (XLA's way of
writing a transpose) keep their meaning through the optimizer and on the CPU backend."""

import numpy as np

from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate, flatten
from nbxla.hlo.parser import parse_hlo
from nbxla.passes import LayoutNormalization, optimize

# As XLA:CPU writes it: a dot result transposed by a bitcast into a column-major layout and
# copied back to row-major; a transpose (in a transposed layout) copied and bitcast to 2-D;
# a bitcast that changes the layout back and the element type at once.
TRANSPOSING_BITCASTS = """
HloModule layouts
%copy_back (p: f32[4,2,3]) -> f32[4,2,3] {
  %p = f32[4,2,3]{0,2,1} parameter(0)
  ROOT %c = f32[4,2,3]{2,1,0} copy(%p)
}
ENTRY %main (x: f32[2,3,4], y: f32[2,5,3]) -> (f32[4,2,3], f32[6,5], f32[2,3,4], s32[3,8]) {
  %x = f32[2,3,4]{2,1,0} parameter(0)
  %y = f32[2,5,3]{2,1,0} parameter(1)
  %b = f32[4,2,3]{0,2,1} bitcast(%x)
  %f = f32[4,2,3]{2,1,0} fusion(%b), kind=kLoop, calls=%copy_back
  %t = f32[2,3,5]{1,2,0} transpose(%y), dimensions={0,2,1}
  %tc = f32[2,3,5]{2,1,0} copy(%t)
  %flat = f32[6,5]{1,0} bitcast(%tc)
  %u = s32[2,3,4]{0,1,2} bitcast-convert(%x)
  %back = f32[2,3,4]{2,1,0} bitcast-convert(%u)
  %bits = s32[3,8]{1,0} bitcast(%b)
  ROOT %r = (f32[4,2,3]{2,1,0}, f32[6,5]{1,0}, f32[2,3,4]{2,1,0}, s32[3,8]{1,0}) tuple(%f, %flat, %back, %bits)
}"""


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 5, 3)).astype(np.float32)]


def test_transposing_bitcasts_mean_what_xla_means():
    x, y = _inputs()
    b, flat, back, bits = flatten(evaluate(parse_hlo(TRANSPOSING_BITCASTS), [x, y]))
    # {0,2,1} stores dim 1 outermost, then 2, then 0: x's bytes read as [2][3][4] -> b[k,i,j] = x[i,j,k].
    assert np.array_equal(b, np.transpose(x, (2, 0, 1)))
    assert np.array_equal(flat, np.transpose(y, (0, 2, 1)).reshape(6, 5))
    assert np.array_equal(back, x)
    # b's bytes (x's own) read as row-major s32[3,8]: an element type change too.
    assert np.array_equal(bits, x.view(np.int32).reshape(3, 8))


def test_optimizer_and_cpu_backend_keep_their_meaning():
    x, y = _inputs()
    want = flatten(evaluate(parse_hlo(TRANSPOSING_BITCASTS), [x, y]))
    result = optimize(parse_hlo(TRANSPOSING_BITCASTS))
    # No bitcast is left reading a layout, and no value carries one.
    assert all(i.shape.is_tuple or i.shape.layout is None for i in result.module.instructions())
    for got in (flatten(evaluate(result.module, [x, y])),
                compile_module(parse_hlo(TRANSPOSING_BITCASTS), "cpu").executable.run([x, y])):
        assert all(np.array_equal(g, w) for g, w in zip(got, want))


def test_width_changing_bitcast_keeps_the_layouts_it_reads():
    text = """
HloModule widths
ENTRY %main (x: u8[4,2]) -> u16[4] {
  %x = u8[4,2]{0,1} parameter(0)
  ROOT %b = u16[4]{0} bitcast(%x)
}"""
    module = parse_hlo(text)
    x = np.arange(8, dtype=np.uint8).reshape(4, 2)
    want = evaluate(module, [x])
    assert not LayoutNormalization().run(module)
    assert module.entry.root.operands[0].shape.layout == (0, 1)
    assert np.array_equal(evaluate(module, [x]), want)


def test_optimization_barrier_is_dropped_and_its_value_kept():
    text = """
HloModule remat
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %one = f32[] constant(1)
  %t = (f32[4]{0}, f32[]) tuple(%x, %one)
  %barrier = (f32[4]{0}, f32[]) opt-barrier(%t)
  %v = f32[4]{0} get-tuple-element(%barrier), index=0
  %s = f32[] get-tuple-element(%barrier), index=1
  %sb = f32[4]{0} broadcast(%s), dimensions={}
  ROOT %r = f32[4]{0} add(%v, %sb)
}"""
    x = np.arange(4, dtype=np.float32)
    result = optimize(parse_hlo(text))
    assert all(i.opcode != "opt-barrier" for i in result.module.instructions())
    assert np.array_equal(evaluate(result.module, [x]), x + 1)
    assert np.array_equal(compile_module(parse_hlo(text), "cpu").executable.run([x])[0], x + 1)
