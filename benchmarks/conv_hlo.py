"""HLO text of convolution modules shared by a benchmark and its test (no imports: a benchmark
run by an interpreter without pytest imports it from here, not from the test)."""


def conv_bias_relu(layout: str, groups: int, features: int, out_features: int, batch="b") -> str:
    """A 3x3 valid convolution, then a bias along the features and a relu (one loop fusion)."""
    c, o = features, out_features
    if layout == "nhwc":
        x, k, y, labels, fdim = f"f32[{batch},12,12,{c}]", f"f32[3,3,{c // groups},{o}]", \
            f"f32[{batch},10,10,{o}]", "b01f_01io->b01f", 3
    else:
        x, k, y, labels, fdim = f"f32[{batch},{c},12,12]", f"f32[{o},{c // groups},3,3]", \
            f"f32[{batch},{o},10,10]", "bf01_oi01->bf01", 1
    return f"""HloModule conv_bias_relu
%epilogue (p0: {y}, p1: f32[{o}]) -> {y} {{
  %p0 = {y} parameter(0)
  %p1 = f32[{o}] parameter(1)
  %bias = {y} broadcast(%p1), dimensions={{{fdim}}}
  %add = {y} add(%p0, %bias)
  %zero = f32[] constant(0)
  %zeros = {y} broadcast(%zero), dimensions={{}}
  ROOT %relu = {y} maximum(%add, %zeros)
}}
ENTRY %main (x: {x}, k: {k}, bias: f32[{o}]) -> {y} {{
  %x = {x} parameter(0)
  %k = {k} parameter(1)
  %bias = f32[{o}] parameter(2)
  %conv = {y} convolution(%x, %k), window={{size=3x3}}, dim_labels={labels}, feature_group_count={groups}
  ROOT %f = {y} fusion(%conv, %bias), kind=kLoop, calls=%epilogue
}}
"""
