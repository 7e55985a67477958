"""Convolutions: nbxla's CPU backend against JAX's ``lax.conv_general_dilated`` (XLA:CPU) and
a plain NumPy im2col reference.

    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/conv.py            # all cases
    PYTHONPATH=. /work/benchvenv/bin/python benchmarks/conv.py --quick    # small shapes (a smoke test)
    ... --only dw,block,relu,mobilenet --repeats 30      (relu: dense conv + bias + relu)
    taskset -c 0 ... --cpu-time      # CPU time on one core: steadier when the cores are shared

Method
------
* One process, the same float32 (or bf16) inputs for every contender.  Each contender is
  compiled and warmed up first; then per repeat each takes one sample, in an order rotated
  by one per repeat, so that noise on this shared machine hits all alike.  A sample is
  ``inner`` back-to-back calls (a sample lasts >= ~10 ms) divided by ``inner``; the table
  shows the minimum of the samples (the least disturbed one).
* nbxla: the HLO module (a convolution, or the MobileNet-like block) compiled by
  ``nbxla.compiler.compile_module(module, "cpu")`` -- the ``run-hlo --backend cpu`` path --
  and called through ``executable.run``.
* JAX: ``jax.jit`` of ``lax.conv_general_dilated`` with the same dimension numbers, window
  strides, padding, dilations and groups (the block: the same chain in jax.numpy), inputs
  placed on the CPU device beforehand, timed with ``block_until_ready``.
* ``relu(conv+b)``: a dense convolution with its bias add and relu, both layouts (TensorFlow's
  NHWC/HWIO, JAX's NCHW/OIHW), against the same in JAX.
* The whole MobileNet v1 body (224x224, 27 convolutions, each with bias and relu6) as one
  HLO module against the same network in JAX.
* numpy: a plain NumPy reference, ``numpy_conv``: im2col (``sliding_window_view``, patches
  copied contiguous) and one matmul per group -- what nbxla's library call did before its
  own kernels (for the block chain, it plus NumPy's bias and clip).
* ``xJAX`` = JAX's time / nbxla's time (> 1: nbxla faster), from the minima; same for
  ``xNumPy``.  ``check`` compares nbxla's and JAX's results with the NumPy reference.
* OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the environment before NumPy
  loads (the header line says whether they were set).

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# The timer: wall time, or with --cpu-time the process's CPU time (all its threads): on cores
# shared with other work, time spent descheduled is not counted, so ratios measured under load
# are steadier.  Use it with one core (``taskset -c 0``): a contender's threads that spin
# waiting for work count as CPU time.
CLOCK = [time.perf_counter]

_UNSET = {k: os.environ.pop(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}

import numpy as np   # noqa: E402

from nbxla.compiler import compile_module                  # noqa: E402
from nbxla.hlo.parser import parse_hlo                     # noqa: E402
from numpy.lib.stride_tricks import sliding_window_view    # noqa: E402

# name, input dims, kernel dims, dim_labels, strides, padding (low, high) per dim, rhs
# dilation, feature groups, element type
LAYOUT = {"NHWC": ("b01f_01io->b01f", ("NHWC", "HWIO", "NHWC")),
          "NCHW": ("bf01_oi01->bf01", ("NCHW", "OIHW", "NCHW"))}


def case(name, n, h, w, c, o, k, layout="NHWC", stride=1, pad=None, dilation=1, groups=1, t="f32"):
    pad = (k - 1) * dilation // 2 if pad is None else pad
    if layout == "NHWC":
        x, kern = (n, h, w, c), (k, k, c // groups, o)
    else:
        x, kern = (n, c, h, w), (o, c // groups, k, k)
    return dict(name=name, x=x, k=kern, layout=layout, stride=stride, pad=pad, dilation=dilation,
                groups=groups, t=t)


def cases(quick: bool):
    if quick:
        return [case("dw3x3 NHWC s1", 1, 16, 16, 8, 8, 3, groups=8),
                case("dw3x3 NCHW s2", 1, 16, 16, 8, 8, 3, "NCHW", stride=2, groups=8),
                case("1x1 NHWC", 1, 8, 8, 16, 16, 1), case("3x3 NCHW", 1, 8, 8, 8, 8, 3, "NCHW")]
    out = []
    for (h, c), s in [((112, 32), 1), ((112, 32), 2), ((56, 128), 1), ((56, 128), 2), ((14, 512), 1),
                      ((14, 512), 2)]:
        out.append(case(f"dw3x3 NHWC {h}x{h}x{c} s{s}", 1, h, h, c, c, 3, stride=s, groups=c))
    for (h, c), s in [((112, 32), 1), ((56, 128), 2), ((14, 512), 1)]:
        out.append(case(f"dw3x3 NCHW {c}x{h}x{h} s{s}", 1, h, h, c, c, 3, "NCHW", stride=s, groups=c))
    out += [case("dw3x3 NHWC 56x56x128 dil2", 1, 56, 56, 128, 128, 3, dilation=2, groups=128),
            case("dw5x5 NHWC 28x28x256", 1, 28, 28, 256, 256, 5, groups=256),
            case("dw3x3 NHWC 56x56x128 bf16", 1, 56, 56, 128, 128, 3, groups=128, t="bf16"),
            case("grouped3x3 NHWC 28x28x256 g64", 1, 28, 28, 256, 256, 3, groups=64),
            case("grouped3x3 NHWC 28x28x256 g8", 1, 28, 28, 256, 256, 3, groups=8),
            case("1x1 NHWC 56x56 128->128", 1, 56, 56, 128, 128, 1),
            case("1x1 NHWC 14x14 512->512", 1, 14, 14, 512, 512, 1),
            case("1x1 NCHW 56x56 128->128", 1, 56, 56, 128, 128, 1, "NCHW"),
            case("3x3 NHWC 56x56 64->64", 1, 56, 56, 64, 64, 3),
            case("3x3 NCHW 56x56 64->64", 1, 56, 56, 64, 64, 3, "NCHW"),
            case("3x3 NHWC 28x28 128->128 s2", 1, 28, 28, 128, 128, 3, stride=2),
            case("3x3 NHWC 8x32x32 3->32 batch", 8, 32, 32, 3, 32, 3)]
    return out


def numpy_conv(x, k, c) -> np.ndarray:
    """The NumPy reference: im2col with ``sliding_window_view`` (patches copied contiguous)
    and one matmul per group, in float32, for the benchmark's 2-D layouts."""
    x, k = x.astype(np.float32), k.astype(np.float32)
    if c["layout"] == "NCHW":
        x, k = x.transpose(0, 2, 3, 1), k.transpose(2, 3, 1, 0)        # -> NHWC, HWIO
    p, s, d, g = c["pad"], c["stride"], c["dilation"], c["groups"]
    kh = k.shape[0]
    x = np.pad(x, [(0, 0), (p, p), (p, p), (0, 0)])
    span = (kh - 1) * d + 1
    win = sliding_window_view(x, (span, span), axis=(1, 2))[:, ::s, ::s, :, ::d, ::d]   # N,OH,OW,C,KH,KW
    n, oh, ow, cin = win.shape[:4]
    ci, o = cin // g, k.shape[3]
    patches = np.ascontiguousarray(win.reshape(n, oh, ow, g, ci, kh, kh).transpose(3, 0, 1, 2, 5, 6, 4))
    patches = patches.reshape(g, n * oh * ow, kh * kh * ci)
    kern = k.reshape(kh, kh, ci, g, o // g).transpose(3, 0, 1, 2, 4).reshape(g, kh * kh * ci, o // g)
    out = np.matmul(patches, kern).transpose(1, 0, 2).reshape(n, oh, ow, o)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2) if c["layout"] == "NCHW" else out)


def _dims(d) -> str:
    return ",".join(str(v) for v in d)


def conv_hlo(c) -> tuple[str, tuple]:
    labels = LAYOUT[c["layout"]][0]
    n = c["x"][0]
    s, p, d, g, t = c["stride"], c["pad"], c["dilation"], c["groups"], c["t"]
    spatial_in = c["x"][1:3] if c["layout"] == "NHWC" else c["x"][2:]
    k = c["k"][0] if c["layout"] == "NHWC" else c["k"][2]
    o = c["k"][3] if c["layout"] == "NHWC" else c["k"][0]
    out_sp = [(h + 2 * p - (k - 1) * d - 1) // s + 1 for h in spatial_in]
    out = (n, *out_sp, o) if c["layout"] == "NHWC" else (n, o, *out_sp)
    window = f"size={k}x{k} stride={s}x{s} pad={p}_{p}x{p}_{p}" + (f" rhs_dilate={d}x{d}" if d > 1 else "")
    text = f"""HloModule conv
ENTRY main {{
  x = {t}[{_dims(c['x'])}] parameter(0)
  k = {t}[{_dims(c['k'])}] parameter(1)
  ROOT conv = {t}[{_dims(out)}] convolution(x, k), window={{{window}}}, dim_labels={labels}, feature_group_count={g}
}}"""
    return text, out


def block_hlo(h: int, c: int, o: int, stride: int) -> str:
    """One MobileNet block, NHWC: depthwise 3x3 -> bias -> relu6 -> pointwise 1x1 -> bias -> relu6."""
    pad = "1_1x1_1" if stride == 1 else "0_1x0_1"
    oh = (h + (2 if stride == 1 else 1) - 3) // stride + 1
    return f"""HloModule mobilenet_block
ENTRY main {{
  x = f32[1,{h},{h},{c}] parameter(0)
  dw = f32[3,3,1,{c}] parameter(1)
  b1 = f32[{c}] parameter(2)
  pw = f32[1,1,{c},{o}] parameter(3)
  b2 = f32[{o}] parameter(4)
  zero = f32[] constant(0)
  six = f32[] constant(6)
  d = f32[1,{oh},{oh},{c}] convolution(x, dw), window={{size=3x3 stride={stride}x{stride} pad={pad}}}, dim_labels=b01f_01io->b01f, feature_group_count={c}
  bb1 = f32[1,{oh},{oh},{c}] broadcast(b1), dimensions={{3}}
  a1 = f32[1,{oh},{oh},{c}] add(d, bb1)
  z1 = f32[1,{oh},{oh},{c}] broadcast(zero), dimensions={{}}
  s1 = f32[1,{oh},{oh},{c}] broadcast(six), dimensions={{}}
  r1 = f32[1,{oh},{oh},{c}] clamp(z1, a1, s1)
  p = f32[1,{oh},{oh},{o}] convolution(r1, pw), window={{size=1x1}}, dim_labels=b01f_01io->b01f
  bb2 = f32[1,{oh},{oh},{o}] broadcast(b2), dimensions={{3}}
  a2 = f32[1,{oh},{oh},{o}] add(p, bb2)
  z2 = f32[1,{oh},{oh},{o}] broadcast(zero), dimensions={{}}
  s2 = f32[1,{oh},{oh},{o}] broadcast(six), dimensions={{}}
  ROOT r2 = f32[1,{oh},{oh},{o}] clamp(z2, a2, s2)
}}"""


MOBILENET = [(1, 64), (2, 128), (1, 128), (2, 256), (1, 256), (2, 512)] + [(1, 512)] * 5 + [(2, 1024), (1, 1024)]


def mobilenet_layers(size: int):
    """MobileNet v1's body (width 1.0): a 3x3 stride-2 convolution 3 -> 32, then 13 blocks of
    depthwise 3x3 (stride 1 or 2, TF's SAME padding) and pointwise 1x1, each followed by bias
    and relu6.  Yields (kind, input hw, channels in, channels out, stride)."""
    hw, c = size, 3
    layers = [("dense", hw, c, 32, 2)]
    hw, c = -(-hw // 2), 32
    for stride, out in MOBILENET:
        layers.append(("dw", hw, c, c, stride))
        hw = -(-hw // stride)
        layers.append(("pw", hw, c, out, 1))
        c = out
    return layers


def _same(hw: int, k: int, stride: int) -> tuple[int, int]:
    """TF's SAME padding (low, high) and the output size."""
    out = -(-hw // stride)
    total = max(0, (out - 1) * stride + k - hw)
    return total // 2, total - total // 2


def mobilenet_hlo(size: int) -> tuple[str, list[tuple]]:
    lines, shapes = [f"  x = f32[1,{size},{size},3] parameter(0)"], [(1, size, size, 3)]
    lines += ["  zero = f32[] constant(0)", "  six = f32[] constant(6)"]
    prev = "x"
    for i, (kind, hw, cin, cout, stride) in enumerate(mobilenet_layers(size)):
        k = 1 if kind == "pw" else 3
        kshape = (k, k, 1 if kind == "dw" else cin, cout)
        lo, hi = _same(hw, k, stride)
        out = -(-hw // stride)
        o = f"f32[1,{out},{out},{cout}]"
        shapes += [kshape, (cout,)]
        n = 2 * i + 1
        group = f", feature_group_count={cin}" if kind == "dw" else ""
        lines += [f"  w{i} = f32[{_dims(kshape)}] parameter({n})", f"  b{i} = f32[{cout}] parameter({n + 1})",
                  f"  c{i} = {o} convolution({prev}, w{i}), window={{size={k}x{k} stride={stride}x{stride} "
                  f"pad={lo}_{hi}x{lo}_{hi}}}, dim_labels=b01f_01io->b01f{group}",
                  f"  bb{i} = {o} broadcast(b{i}), dimensions={{3}}", f"  a{i} = {o} add(c{i}, bb{i})",
                  f"  z{i} = {o} broadcast(zero), dimensions={{}}", f"  s{i} = {o} broadcast(six), dimensions={{}}",
                  f"  {'ROOT ' if i == len(mobilenet_layers(size)) - 1 else ''}r{i} = {o} clamp(z{i}, a{i}, s{i})"]
        prev = f"r{i}"
    return "HloModule mobilenet_v1\nENTRY main {\n" + "\n".join(lines) + "\n}", shapes


def run_mobilenet(size, rng, jx, repeats):
    name = f"MobileNet v1 body {size}x{size}"
    text, shapes = mobilenet_hlo(size)
    module = parse_hlo(text)
    args = []
    for k, shape in enumerate(shapes):
        scale = 1.0 if k == 0 or len(shape) == 1 else 1.0 / np.sqrt(np.prod(shape[:-1]))
        args.append((rng.standard_normal(shape) * scale).astype(np.float32))
    ex = compile_module(module, "cpu").executable
    contenders = {"nbxla": lambda: ex.run(args)}
    got = np.asarray(ex.run(args)[0])
    bad = []
    if jx:
        jax, jnp, lax = jx

        def net(x, *weights):
            for i, (kind, hw, cin, cout, stride) in enumerate(mobilenet_layers(size)):
                lo, hi = _same(hw, 1 if kind == "pw" else 3, stride)
                x = lax.conv_general_dilated(x, weights[2 * i], (stride, stride), [(lo, hi), (lo, hi)],
                                             dimension_numbers=LAYOUT["NHWC"][1],
                                             feature_group_count=cin if kind == "dw" else 1)
                x = jnp.clip(x + weights[2 * i + 1], 0, 6)
            return x
        f = jax.jit(net)
        jargs = [jax.device_put(a) for a in args]
        want = np.asarray(f(*jargs).block_until_ready())
        contenders["jax"] = lambda: f(*jargs).block_until_ready()
        if np.abs(got - want).max() > 1e-3 * (np.abs(want).max() or 1):
            bad.append("nbxla vs jax")
    return report(name, contenders, repeats, f"run-hlo path, {len(ex.native.convolution_epilogues)} epilogues folded",
                  bad)


def timed(fn, repeats_inner):
    t0 = CLOCK[0]()
    for _ in range(repeats_inner):
        fn()
    return (CLOCK[0]() - t0) / repeats_inner


def inner_count(fn) -> int:
    t = timed(fn, 1)
    return max(1, min(2000, int(0.01 / max(t, 1e-7))))


def measure(contenders: dict, repeats: int) -> dict:
    inner = {name: inner_count(fn) for name, fn in contenders.items()}
    samples = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(timed(contenders[name], inner[name]))
    return samples


def mismatches(results: list, want: np.ndarray, tol: float = 1e-3) -> list[str]:
    """Names of the contenders whose result is off ``want`` by more than ``tol`` of its largest value."""
    scale = float(np.abs(want).max()) or 1.0
    return [n for n, r in results if r.shape != want.shape or np.abs(r - want).max() > tol * scale]


def report(name: str, contenders: dict, repeats: int, how: str, bad: list) -> tuple[str, float]:
    """Time the contenders side by side and print the row: ms each, xJAX and xNumPy of nbxla."""
    samples = measure(contenders, repeats)
    best = {n: min(v) * 1e3 for n, v in samples.items()}
    xj = best["jax"] / best["nbxla"] if "jax" in best else float("nan")
    numpy_ms, xn = (f"{best['numpy']:9.3f}", f"{best['numpy'] / best['nbxla']:7.2f}") if "numpy" in best \
        else (f"{'':>9s}", f"{'':>7s}")
    print(f"{name:36s} {best['nbxla']:9.3f} {best.get('jax', float('nan')):9.3f} {numpy_ms} {xj:6.2f} {xn}  {how}"
          f"{'  MISMATCH: ' + ','.join(bad) if bad else '  ok'}")
    sys.stdout.flush()
    return name, xj


def jax_setup():
    try:
        import jax
        jax.config.update("jax_platforms", "cpu")
        import jax.numpy as jnp
        from jax import lax
        return jax, jnp, lax
    except ImportError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--only", default="", help="comma-separated substrings of case names ('block' for the chain)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by the process's CPU time (steadier on busy cores; use with taskset -c 0)")
    opts = ap.parse_args()
    if opts.cpu_time:
        CLOCK[0] = time.process_time
    jx = jax_setup()
    import ml_dtypes
    print(f"# OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE: {'unset here (were ' + repr(_UNSET) + ')' if _UNSET else 'not set'}; "
          f"cores: {len(os.sched_getaffinity(0))}; jax: {jx[0].__version__ if jx else 'absent'}")
    print(f"{'case':36s} {'nbxla ms':>9s} {'jax ms':>9s} {'numpy ms':>9s} {'xJAX':>6s} {'xNumPy':>7s}  how / check")
    rng = np.random.default_rng(0)
    wanted = [s for s in opts.only.split(",") if s]
    ratios = []
    for c in cases(opts.quick):
        if wanted and not any(s in c["name"] for s in wanted):
            continue
        text, _ = conv_hlo(c)
        module = parse_hlo(text)
        dtype = ml_dtypes.bfloat16 if c["t"] == "bf16" else np.float32
        x = rng.standard_normal(c["x"]).astype(dtype)
        k = rng.standard_normal(c["k"]).astype(dtype)
        compilation = compile_module(module, "cpu")
        ex = compilation.executable
        contenders = {"nbxla": lambda: ex.run([x, k])}
        if c["t"] == "f32":
            contenders["numpy"] = lambda: numpy_conv(x, k, c)
        # (the reference runs in f32: a bf16 convolution is an f32 one rounded once)
        want = numpy_conv(x, k, c)
        got = np.asarray(ex.run([x, k])[0]).astype(np.float32)
        check = []
        if jx:
            jax, jnp, lax = jx
            dn = LAYOUT[c["layout"]][1]
            p, s, d = c["pad"], c["stride"], c["dilation"]
            f = jax.jit(lambda a, b: lax.conv_general_dilated(
                a, b, (s, s), [(p, p), (p, p)], rhs_dilation=(d, d), dimension_numbers=dn,
                feature_group_count=c["groups"]))
            jxx, jkk = jax.device_put(x), jax.device_put(k)
            jres = np.asarray(f(jxx, jkk).block_until_ready()).astype(np.float32)
            contenders["jax"] = lambda: f(jxx, jkk).block_until_ready()
            check.append(("jax", jres))
        check.append(("nbxla", got))
        bad = mismatches(check, want, 3e-2 if c["t"] == "bf16" else 1e-3)
        how = "native kernel"
        if "conv" in ex.native.library_calls:      # (the library call's own words: BLAS or nbxla's kernel)
            line = next((l for l in ex.native.describe().splitlines() if l.strip().startswith("%conv:")), "")
            how = "by nbxla's GEMM kernel" if "by nbxla" in line else "BLAS"
        ratios.append(report(c["name"], contenders, opts.repeats, how, bad))
    if not wanted or any("block" in s for s in wanted):
        for h, cin, cout, s in ([(16, 8, 16, 1)] if opts.quick else
                                [(112, 32, 64, 1), (56, 128, 128, 2), (14, 512, 512, 1)]):
            ratios.append(run_block(h, cin, cout, s, rng, jx, opts.repeats))
    if not wanted or any("relu" in s for s in wanted):
        for c in ([case("3x3 NHWC 8x8 8->8", 1, 8, 8, 8, 8, 3), case("3x3 NCHW 8x8 8->8", 1, 8, 8, 8, 8, 3, "NCHW")]
                  if opts.quick else DENSE_BLOCKS):
            ratios.append(run_dense_block(c, rng, jx, opts.repeats))
    if not wanted or any("mobilenet" in s for s in wanted):
        ratios.append(run_mobilenet(64 if opts.quick else 224, rng, jx, opts.repeats))
    if ratios:
        finite = [r for _, r in ratios if r == r]
        if finite:
            print(f"# geometric mean xJAX over {len(finite)} cases: "
                  f"{float(np.exp(np.mean(np.log(finite)))):.2f}; below 1.0: "
                  f"{', '.join(n for n, r in ratios if r == r and r < 1.0) or 'none'}")
    return 0


def dense_block_hlo(c) -> str:
    """A dense convolution + bias + relu (TensorFlow's Conv2D/BiasAdd/Relu, JAX's conv + b + relu)."""
    conv_text, out = conv_hlo(c)
    o = c["k"][3] if c["layout"] == "NHWC" else c["k"][0]
    feature = 3 if c["layout"] == "NHWC" else 1
    t = f"f32[{_dims(out)}]"
    body = conv_text.replace("ROOT conv", "conv").rstrip("}")
    return body + f"""  b = f32[{o}] parameter(2)
  bb = {t} broadcast(b), dimensions={{{feature}}}
  a = {t} add(conv, bb)
  zero = f32[] constant(0)
  z = {t} broadcast(zero), dimensions={{}}
  ROOT r = {t} maximum(a, z)
}}"""


def run_dense_block(c, rng, jx, repeats):
    name = f"relu(conv+b) {c['name']}"
    ex = compile_module(parse_hlo(dense_block_hlo(c)), "cpu").executable
    o = c["k"][3] if c["layout"] == "NHWC" else c["k"][0]
    x = rng.standard_normal(c["x"]).astype(np.float32)
    k = (rng.standard_normal(c["k"]) / np.sqrt(np.prod(c["k"]) / o)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    bias = b if c["layout"] == "NHWC" else b[:, None, None]
    contenders = {"nbxla": lambda: ex.run([x, k, b]), "numpy": lambda: np.maximum(numpy_conv(x, k, c) + bias, 0)}
    want = contenders["numpy"]()
    results = [("nbxla", np.asarray(ex.run([x, k, b])[0]))]
    if jx:
        jax, jnp, lax = jx
        dn = LAYOUT[c["layout"]][1]
        p, s = c["pad"], c["stride"]
        jb = bias if c["layout"] == "NHWC" else b[:, None, None]
        f = jax.jit(lambda a, w, bb: jax.nn.relu(lax.conv_general_dilated(a, w, (s, s), [(p, p), (p, p)],
                                                                          dimension_numbers=dn) + bb))
        jargs = [jax.device_put(a) for a in (x, k, jb)]
        results.append(("jax", np.asarray(f(*jargs).block_until_ready())))
        contenders["jax"] = lambda: f(*jargs).block_until_ready()
    root = ex.native.module.entry.root.name
    line = next((l.split(":", 1)[1].strip() for l in ex.native.describe().splitlines()
                 if l.strip().startswith(f"%{root}:")), "")
    how = "conv + bias + relu in nbxla's kernel" if "applied in its kernel" in line else "conv, then a loop kernel"
    return report(name, contenders, repeats, how, mismatches(results, want))


DENSE_BLOCKS = [case("3x3 NHWC 56x56 64->64", 1, 56, 56, 64, 64, 3),
                case("3x3 NCHW 56x56 64->64", 1, 56, 56, 64, 64, 3, "NCHW"),
                case("3x3 NHWC 14x14 256->256", 1, 14, 14, 256, 256, 3),
                case("3x3 NCHW 14x14 256->256", 1, 14, 14, 256, 256, 3, "NCHW"),
                case("1x1 NHWC 28x28 128->512", 1, 28, 28, 128, 512, 1),
                case("1x1 NCHW 28x28 128->512", 1, 28, 28, 128, 512, 1, "NCHW"),
                case("3x3 NHWC 4x28x28 32->32", 4, 28, 28, 32, 32, 3),
                case("3x3 NCHW 4x28x28 32->32", 4, 28, 28, 32, 32, 3, "NCHW"),
                case("5x5 NCHW 8x28x28 1->32 (LeNet)", 8, 28, 28, 1, 32, 5, "NCHW"),
                case("7x7 NHWC 224x224 3->64 s2", 1, 224, 224, 3, 64, 7, stride=2, pad=3),
                case("7x7 NCHW 224x224 3->64 s2", 1, 224, 224, 3, 64, 7, "NCHW", stride=2, pad=3)]


def run_block(h, cin, cout, stride, rng, jx, repeats):
    name = f"block {h}x{h}x{cin}->{cout} s{stride}"
    module = parse_hlo(block_hlo(h, cin, cout, stride))
    x = rng.standard_normal((1, h, h, cin)).astype(np.float32)
    dw = rng.standard_normal((3, 3, 1, cin)).astype(np.float32)
    b1 = rng.standard_normal(cin).astype(np.float32)
    pw = (rng.standard_normal((1, 1, cin, cout)) / np.sqrt(cin)).astype(np.float32)
    b2 = rng.standard_normal(cout).astype(np.float32)
    args = [x, dw, b1, pw, b2]
    ex = compile_module(module, "cpu").executable
    pad = 1 if stride == 1 else 0
    dwc = dict(layout="NHWC", pad=pad, stride=stride, dilation=1, groups=cin)
    pwc = dict(layout="NHWC", pad=0, stride=1, dilation=1, groups=1)

    def numpy_block():
        xx = x if stride == 1 else np.pad(x, [(0, 0), (0, 1), (0, 1), (0, 0)])    # TF's SAME, stride 2
        a = np.clip(numpy_conv(xx, dw, dwc) + b1, 0, 6)
        return np.clip(numpy_conv(a, pw, pwc) + b2, 0, 6)
    contenders = {"nbxla": lambda: ex.run(args), "numpy": numpy_block}
    want = numpy_block()
    results = [("nbxla", np.asarray(ex.run(args)[0]))]
    if jx:
        jax, jnp, lax = jx
        pad = [(1, 1), (1, 1)] if stride == 1 else [(0, 1), (0, 1)]

        def chain(x, dw, b1, pw, b2):
            d = lax.conv_general_dilated(x, dw, (stride, stride), pad, dimension_numbers=LAYOUT["NHWC"][1],
                                         feature_group_count=cin)
            a = jnp.clip(d + b1, 0, 6)
            p = lax.conv_general_dilated(a, pw, (1, 1), "VALID", dimension_numbers=LAYOUT["NHWC"][1])
            return jnp.clip(p + b2, 0, 6)
        f = jax.jit(chain)
        jargs = [jax.device_put(a) for a in args]
        results.append(("jax", np.asarray(f(*jargs).block_until_ready())))
        contenders["jax"] = lambda: f(*jargs).block_until_ready()
    return report(name, contenders, repeats, "run-hlo path", mismatches(results, want))


if __name__ == "__main__":
    sys.exit(main())
