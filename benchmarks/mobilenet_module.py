"""MobileNet-like HLO modules as TensorFlow emits them (NHWC activations, HWIO kernels, TF's SAME
padding, batch norm folded into a bias, relu6 as ``clamp``), in f32 or with TensorFlow's
automatic mixed precision (bf16 weights and activations, an f32 image converted at the input,
the outputs converted back to f32) -- for timing nbxla against XLA:CPU on the same text.

    PYTHONPATH=. python benchmarks/mobilenet_module.py --version 2 --size 300 --type bf16 > /tmp/m.hlo
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/hlo_text_vs_xla.py /tmp/m.hlo

v1: a 3x3 stride-2 convolution 3 -> 32, then 13 blocks of depthwise 3x3 (stride 1 or 2) and
pointwise 1x1, each followed by bias and relu6.  v2: inverted residual blocks (1x1 expansion by
6 + relu6, depthwise 3x3 + relu6, linear 1x1 projection, the residual add where stride 1 keeps
the channels).  ``--width`` scales every layer's channels (SSD-MobileNet's feature extractor is
v2 at width 1.0 or v1; smaller widths make small test modules).  The weights are parameters
(``--constants`` makes them constants elided as ``{...}``, as XLA's dumps print frozen graphs;
the parser fills those).  The head: per-position box (4 values) and class (``--classes``) 1x1
convolutions on the last feature map, boxes as f32 and class scores through a logistic.
"""

from __future__ import annotations

import argparse
import sys

V1 = [(1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512)] + [(1, 512)] * 5 + [(2, 1024), (1, 1024)]
# (expansion, output channels, repeats, first stride), MobileNet v2's table
V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def same_padding(hw: int, k: int, stride: int) -> tuple[int, int, int]:
    """TensorFlow's SAME padding (low, high) and the output extent."""
    out = -(-hw // stride)
    total = max(0, (out - 1) * stride + k - hw)
    return total // 2, total - total // 2, out


class _Writer:
    def __init__(self, t: str, constants: bool):
        self.t, self.constants = t, constants
        self.params: list[str] = []
        self.lines: list[str] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}.{self.count}"

    def weight(self, stem: str, dims) -> str:
        n = self.name(stem)
        shape = f"{self.t}[{','.join(map(str, dims))}]"
        if self.constants:
            self.lines.append(f"  %{n} = {shape} constant({{...}})")
        else:
            self.lines.append(f"  %{n} = {shape} parameter({len(self.params)})")
            self.params.append(f"{n}: {shape}")
        return n

    def conv(self, x: str, hw: int, cin: int, cout: int, k: int, stride: int, depthwise: bool,
             act: bool) -> tuple[str, int]:
        """conv + bias (+ relu6); returns the value's name and the output extent."""
        t = self.t
        lo, hi, out = same_padding(hw, k, stride)
        if depthwise:
            w0 = self.weight("dw_kernel", (k, k, cin, 1))
            w = self.name("dw_reshaped")
            self.lines.append(f"  %{w} = {t}[{k},{k},1,{cin}] reshape(%{w0})")
            groups = f", feature_group_count={cin}"
        else:
            w, groups = self.weight("kernel", (k, k, cin, cout)), ""
        b = self.weight("bias", (cout,))
        shape = f"{t}[1,{out},{out},{cout}]"
        window = f"size={k}x{k}" + (f" stride={stride}x{stride}" if stride > 1 else "") + \
            (f" pad={lo}_{hi}x{lo}_{hi}" if lo or hi else "")
        c, bb, a = self.name("convolution"), self.name("broadcast"), self.name("add")
        self.lines += [f"  %{c} = {shape} convolution(%{x}, %{w}), window={{{window}}}, "
                       f"dim_labels=b01f_01io->b01f{groups}",
                       f"  %{bb} = {shape} broadcast(%{b}), dimensions={{3}}",
                       f"  %{a} = {shape} add(%{c}, %{bb})"]
        if not act:
            return a, out
        z, s, r = self.name("broadcast"), self.name("broadcast"), self.name("clamp")
        self.lines += [f"  %{z} = {shape} broadcast(%zero), dimensions={{}}",
                       f"  %{s} = {shape} broadcast(%six), dimensions={{}}",
                       f"  %{r} = {shape} clamp(%{z}, %{a}, %{s})"]
        return r, out


def mobilenet_text(version: int = 2, size: int = 300, t: str = "bf16", width: float = 1.0,
                   classes: int = 91, constants: bool = False, blocks: int | None = None) -> str:
    """The module's text; ``blocks`` keeps only the first blocks of the body (small test modules)."""
    w = _Writer(t, constants)

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)
    image = w.name("image")
    w.lines.append(f"  %{image} = f32[1,{size},{size},3] parameter(0)")
    w.params.append(f"{image}: f32[1,{size},{size},3]")
    w.lines += [f"  %zero = {t}[] constant(0)", f"  %six = {t}[] constant(6)"]
    x = image
    if t != "f32":
        x = w.name("convert")
        w.lines.append(f"  %{x} = {t}[1,{size},{size},3] convert(%{image})")
    c = ch(32)
    x, hw = w.conv(x, size, 3, c, 3, 2, False, True)
    if version == 1:
        for stride, out in V1[:blocks]:
            x, hw = w.conv(x, hw, c, c, 3, stride, True, True)
            x, hw = w.conv(x, hw, c, ch(out), 1, 1, False, True)
            c = ch(out)
    else:
        table = [(e, o, 1, f if r == 0 else 1) for e, o, n, f in V2 for r in range(n)]
        for expansion, out, repeats, first in table[:blocks]:
            for r in range(repeats):
                stride, block_in = (first if r == 0 else 1), x
                e = c * expansion
                y = x
                if expansion != 1:
                    y, _ = w.conv(y, hw, c, e, 1, 1, False, True)
                y, out_hw = w.conv(y, hw, e, e, 3, stride, True, True)
                y, _ = w.conv(y, out_hw, e, ch(out), 1, 1, False, False)
                if stride == 1 and c == ch(out):
                    s = w.name("add")
                    w.lines.append(f"  %{s} = {t}[1,{out_hw},{out_hw},{c}] add(%{block_in}, %{y})")
                    y = s
                x, hw, c = y, out_hw, ch(out)
    box, _ = w.conv(x, hw, c, 4, 1, 1, False, False)
    cls, _ = w.conv(x, hw, c, classes, 1, 1, False, False)
    n = hw * hw
    boxes, scores, logits = w.name("boxes"), w.name("scores"), w.name("logits")
    boxes_f, scores_f = w.name("boxes_f32"), w.name("scores_f32")
    w.lines += [f"  %{boxes} = {t}[1,{n},4] reshape(%{box})",
                f"  %{boxes_f} = f32[1,{n},4] convert(%{boxes})",
                f"  %{logits} = {t}[1,{n},{classes}] reshape(%{cls})",
                f"  %{scores} = {t}[1,{n},{classes}] logistic(%{logits})",
                f"  %{scores_f} = f32[1,{n},{classes}] convert(%{scores})",
                f"  ROOT %out = (f32[1,{n},4], f32[1,{n},{classes}]) tuple(%{boxes_f}, %{scores_f})"]
    name = f"mobilenet_v{version}_{size}_{t}"
    return f"HloModule {name}\n\nENTRY %{name} ({', '.join(w.params)}) -> (f32[1,{n},4], f32[1,{n},{classes}]) {{\n" + \
        "\n".join(w.lines) + "\n}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", type=int, choices=(1, 2), default=2)
    ap.add_argument("--size", type=int, default=300)
    ap.add_argument("--type", choices=("f32", "bf16"), default="bf16")
    ap.add_argument("--width", type=float, default=1.0)
    ap.add_argument("--classes", type=int, default=91)
    ap.add_argument("--constants", action="store_true", help="weights as elided constants ({...})")
    ap.add_argument("--blocks", type=int, help="only the first BLOCKS blocks of the body")
    opts = ap.parse_args(argv)
    sys.stdout.write(mobilenet_text(opts.version, opts.size, opts.type, opts.width, opts.classes, opts.constants,
                                    opts.blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
