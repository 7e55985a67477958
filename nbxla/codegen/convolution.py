"""Native convolutions with few input features per group: depthwise (``feature_group_count`` =
input channels, MobileNet's 3x3 per-channel filters) and narrowly grouped ones.

Such a convolution does little arithmetic per output (a few taps), so it is a pass over
memory: the BLAS path (patches gathered, then a batched matmul of tiny matrices) spends
nearly all its time gathering.  This kernel reads the input in place instead.

**Loop nest.**  The output is walked in its own row-major order, whatever the dim_labels:
a unit of the parallel range is one index of the output dims before the last two (NHWC:
one output row (n, oh); NCHW: one (n, c) plane), then a loop over the second-to-last dim,
then the innermost loop over the last dim, which LLVM vectorizes.  Its body is every tap
(kernel spatial offset x input feature of the group) unrolled, summed in a register and
stored once: with channels minor (NHWC / HWIO) the loads of input, kernel and the store are
all contiguous in the vectorized channel; with a spatial dim minor (NCHW / OIHW) the
kernel value is a broadcast and the input contiguous at stride 1.

**Padding without tests.**  For each spatial dim the output positions whose taps all fall
inside the input form one interior range, computed here.  Inside it (all spatial indices
of the loop nest interior) the body has no bounds test; elsewhere a checked body skips the
taps on padding or on holes of lhs (base) dilation, so padding is never loaded.  rhs
(window) dilation and window reversal only change the taps' constant offsets; lhs dilation
sends everything through the checked body (correct, not fast: it is rare outside
gradients).

**Epilogue.**  The sum of a point is final when it is stored, so a fusion whose root
consumes the convolution elementwise (a bias add, relu6's clamp: the runtime folds such a
consumer into the convolution, ``runtime/conv_epilogue.py``) is computed on the sum in the
register, by the elemental emitter, and only the fusion's result is stored: one pass over
the output instead of two.

Precision: f32 and f64 accumulate in their own type; bf16 operands are widened to f32
(exact), summed in f32 and rounded once at the store, as XLA:CPU's FloatNormalization
(and the evaluator) compute them.  The taps are summed in fused multiply-adds in tap order:
within float tolerance of the evaluator's matmul, not bit-equal to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..errors import UnsupportedError
from ..hlo.attributes import WindowDim
from ..hlo.ir import Computation, Instruction
from . import bf16
from .elemental import const_i64, delinearize, ElementalEmitter, row_major_strides
from .toolkit import counted_loop, entry_alloca, kernel_function, KernelBuffers, KernelSpec, load_at, product

# Taps (kernel window size x input features per group) unrolled into the innermost loop body.
# Beyond this the body would be too large to keep its sum in registers, and the convolution
# does enough arithmetic per input element for the BLAS path to win.
MAX_TAPS = 64
# Input features per group the native kernel takes: with more, each output is a dot product
# long enough for the grouped GEMM of the BLAS path.
MAX_GROUP_INPUTS = 8
_TYPES = {("f32", "f32"): "f32", ("f64", "f64"): "f64", ("bf16", "bf16"): "f32", ("bf16", "f32"): "f32"}


def native_convolution_refusal(instr: Instruction) -> str | None:
    """Why ``instr`` does not run in the native kernel (None when it does)."""
    x, w = instr.operands
    types = (x.shape.element_type, instr.shape.element_type)
    if x.shape.element_type != w.shape.element_type or types not in _TYPES:
        return (f"the native convolution kernel takes f32, f64 or bf16 operands, not "
                f"{x.shape.element_type}/{w.shape.element_type} -> {instr.shape.element_type}")
    if instr.attrs.get("batch_group_count", 1) > 1:
        return "batch_group_count > 1 (a weight gradient) runs as BLAS GEMMs"
    groups = instr.attrs.get("feature_group_count", 1)
    dn = instr.attrs["dim_labels"]
    group_inputs = w.shape.dims[dn.kernel_input_feature]
    if groups == 1:
        return "a dense convolution (feature_group_count 1) runs as BLAS GEMMs"
    if group_inputs > MAX_GROUP_INPUTS:
        return (f"{group_inputs} input features per group (> {MAX_GROUP_INPUTS}): the library path "
                "(nbxla's patch-GEMM kernel or BLAS GEMMs) does this better")
    taps = product([w.shape.dims[d] for d in dn.kernel_spatial]) * group_inputs
    if taps > MAX_TAPS:
        return f"{taps} taps per output (> {MAX_TAPS}) do not unroll: runs as BLAS GEMMs"
    return None


@dataclass(frozen=True)
class _Spatial:
    """One spatial dim: input extent, window, output extent and the interior output range
    [lo, hi) where every tap is inside the input."""
    n: int
    w: WindowDim
    out: int
    lo: int
    hi: int


def _spatial(n: int, w: WindowDim, out: int) -> _Spatial:
    if w.base_dilation > 1:
        return _Spatial(n, w, out, 0, 0)
    span = (w.size - 1) * w.window_dilation
    lo = min(out, max(0, -(-w.pad_low // w.stride)))            # p*s - pad_low >= 0
    last = n - 1 + w.pad_low - span                               # p*s <= last
    hi = min(out, last // w.stride + 1) if last >= 0 else 0
    return _Spatial(n, w, out, lo, max(lo, hi))


class _Convolution:
    """The geometry of one convolution: strides of each role in the three buffers."""

    def __init__(self, instr: Instruction):
        x, w = instr.operands
        dn = instr.attrs["dim_labels"]
        self.dn = dn
        window = instr.attrs.get("window")
        kdims = w.shape.dims
        wdims = window.dims if window is not None else tuple(WindowDim(kdims[d]) for d in dn.kernel_spatial)
        self.spatial = [_spatial(x.shape.dims[dx], wd, instr.shape.dims[do])
                        for dx, wd, do in zip(dn.input_spatial, wdims, dn.output_spatial)]
        self.xs, self.ws, self.os = (row_major_strides(s.shape.dims) for s in (x, w, instr))
        self.out_dims = instr.shape.dims
        self.group_inputs = kdims[dn.kernel_input_feature]
        self.group_outputs = instr.shape.dims[dn.output_feature] // instr.attrs.get("feature_group_count", 1)
        self.kernel_sizes = [kdims[d] for d in dn.kernel_spatial]
        # The role of each output dim: ("b",), ("f",) or ("s", i).
        self.roles = [None] * len(self.out_dims)
        self.roles[dn.output_batch] = ("b",)
        self.roles[dn.output_feature] = ("f",)
        for i, d in enumerate(dn.output_spatial):
            self.roles[d] = ("s", i)
        self.dilated = any(s.w.base_dilation > 1 for s in self.spatial)

    def taps(self):
        """(spatial offsets k, input feature ci, constant kernel offset) of every tap."""
        dn, out = self.dn, []

        def walk(i, ks):
            if i == len(self.kernel_sizes):
                for ci in range(self.group_inputs):
                    off = ci * self.ws[dn.kernel_input_feature]
                    for j, k in enumerate(ks):
                        s = self.spatial[j]
                        kk = s.w.size - 1 - k if s.w.reversal else k
                        off += kk * self.ws[dn.kernel_spatial[j]]
                    out.append((tuple(ks), ci, off))
                return
            for k in range(self.kernel_sizes[i]):
                walk(i + 1, ks + [k])
        walk(0, [])
        return out


def emit_convolution_kernel(module: ir.Module, name: str, comp: Computation) -> KernelSpec:
    """A computation of ``convolution(input, kernel)`` of two of its parameters, either its
    root or followed by an elementwise epilogue (see ``epilogue_refusal``)."""
    convs = [i for i in comp.instructions if i.opcode == "convolution"]
    if len(convs) != 1:
        raise UnsupportedError(f"a fusion of {len(convs)} convolutions has no native code path")
    conv = convs[0]
    if any(o.opcode != "parameter" for o in conv.operands):
        raise UnsupportedError("a convolution of fused operands has no native code path yet")
    why = native_convolution_refusal(conv) or epilogue_refusal(comp, conv)
    if why is not None:
        raise UnsupportedError(why)
    return _Emitter(module, name, comp, conv).emit()


def epilogue_refusal(comp: Computation, conv: Instruction) -> str | None:
    """Why the rest of ``comp`` cannot be computed point by point from the convolution's sum
    (None when it can): every value that depends on the convolution must be elementwise with
    the convolution's dims, so that it reads the sum at the point being stored; the root
    must be one of them (one output, the convolution's extents)."""
    if comp.root is conv:
        return None
    if comp.root.shape.is_tuple or comp.root.shape.dims != conv.shape.dims:
        return "a convolution epilogue must give one array of the convolution's shape"
    depends = {id(conv)}
    for instr in comp.instructions:
        if instr is conv or not any(id(o) in depends for o in instr.operands):
            continue
        if not instr.is_elementwise or instr.shape.dims != conv.shape.dims:
            return (f"%{instr.name} ({instr.opcode}) reads the convolution at other points than its "
                    "own: only elementwise epilogues run in the convolution kernel")
        depends.add(id(instr))
    if id(comp.root) not in depends:
        return "the fusion's root does not use the convolution"
    return None


class _Emitter:
    def __init__(self, module, name, comp, instr):
        self.name = name
        self.fn, self.b = kernel_function(module, name)
        x, w = instr.operands
        params = comp.parameters
        self.bufs = KernelBuffers(self.b, self.fn.args[0], [p.shape for p in params] + [comp.root.shape])
        self.slot_x, self.slot_w, self.slot_out = x.parameter_number, w.parameter_number, len(params)
        self.g = _Convolution(instr)
        self.t = ir.DoubleType() if instr.shape.element_type == "f64" else ir.FloatType()
        self.taps = self.g.taps()
        self.conv, self.root = instr, comp.root
        # The epilogue's other operands (a bias, clamp bounds) are read at the output point.
        self.em = None if comp.root is instr else ElementalEmitter(
            self.b, comp, lambda k, index: load_at(self.b, self.bufs, k, params[k].shape.dims, index))

    # -- helpers ------------------------------------------------------------------------------

    def _fma(self, acc, a, c):
        b = self.b
        return b.fadd(acc, b.fmul(a, c, flags=("contract",)), flags=("contract",))

    def _feature_base(self, o):
        """(input offset, kernel offset) of output feature ``o``'s group (tap 0)."""
        b, g, dn = self.b, self.g, self.g.dn
        group = o if g.group_outputs == 1 else b.udiv(o, const_i64(g.group_outputs))
        x_off = b.mul(group, const_i64(g.group_inputs * g.xs[dn.input_feature]))
        return x_off, b.mul(o, const_i64(g.ws[dn.kernel_output_feature]))

    def _point(self, index, checked: bool):
        """Compute and store the output at ``index`` (one value per output dim)."""
        b, g, dn = self.b, self.g, self.g.dn
        x_base, w_base, positions = const_i64(0), const_i64(0), {}
        out_off = const_i64(0)
        for d, (role, i) in enumerate(zip(g.roles, index)):
            out_off = b.add(out_off, b.mul(i, const_i64(g.os[d])))
            if role[0] == "b":
                x_base = b.add(x_base, b.mul(i, const_i64(g.xs[dn.input_batch])))
            elif role[0] == "f":
                xo, wo = self._feature_base(i)
                x_base, w_base = b.add(x_base, xo), b.add(w_base, wo)
            else:
                s = g.spatial[role[1]]
                # position of tap 0 in the padded (dilated) input
                positions[role[1]] = b.sub(b.mul(i, const_i64(s.w.stride)), const_i64(s.w.pad_low))
        if not checked:
            for j, pos in positions.items():
                x_base = b.add(x_base, b.mul(pos, const_i64(g.xs[dn.input_spatial[j]])))
        acc = ir.Constant(self.t, 0.0)
        slot = entry_alloca(b, self.t) if checked else None
        if checked:
            b.store(acc, slot)
        for ks, ci, w_off in self.taps:
            feature = ci * g.xs[dn.input_feature]
            if not checked:
                x_off = feature + sum(k * g.spatial[j].w.window_dilation * g.xs[dn.input_spatial[j]]
                                      for j, k in enumerate(ks))
                xv = self._load(self.slot_x, b.add(x_base, const_i64(x_off)))
                wv = self._load(self.slot_w, b.add(w_base, const_i64(w_off)))
                acc = self._fma(acc, xv, wv)
                continue
            valid, x_off = ir.Constant(ir.IntType(1), 1), b.add(x_base, const_i64(feature))
            for j, k in enumerate(ks):
                s = g.spatial[j]
                pos = b.add(positions[j], const_i64(k * s.w.window_dilation))
                last = (s.n - 1) * s.w.base_dilation
                valid = b.and_(valid, b.and_(b.icmp_signed(">=", pos, const_i64(0)),
                                             b.icmp_signed("<=", pos, const_i64(last))))
                if s.w.base_dilation > 1:
                    bd = const_i64(s.w.base_dilation)
                    valid = b.and_(valid, b.icmp_signed("==", b.srem(pos, bd), const_i64(0)))
                    pos = b.sdiv(pos, bd)
                x_off = b.add(x_off, b.mul(pos, const_i64(g.xs[dn.input_spatial[j]])))
            with b.if_then(valid):
                xv = self._load(self.slot_x, x_off)
                wv = self._load(self.slot_w, b.add(w_base, const_i64(w_off)))
                b.store(self._fma(b.load(slot), xv, wv), slot)
        if checked:
            acc = b.load(slot)
        self.bufs.store(b, self.slot_out, out_off, self.epilogue(acc, index))

    def epilogue(self, value, index):
        """The value stored at ``index``: the sum itself, or the fusion's root computed from
        it (bias add, clamp, ...) while it is still in a register."""
        if self.em is None:
            return value
        if self.conv.shape.element_type == "bf16":
            value = bf16.round_to_bf16(self.b, value)       # the convolution's own result, rounded once
        self.em.reset_memo()
        self.em.reduced[id(self.conv)] = value
        return self.em.value(self.root, index)

    def _load(self, slot, offset):
        v = self.bufs.load(self.b, slot, offset)
        if v.type != self.t:                     # (bf16 loads are f32 already; f32 -> f64 never)
            v = self.b.fpext(v, self.t)
        return v

    def _interior(self, index_dims) -> ir.Value:
        """Are the spatial indices among ``index_dims`` ((dim, value) pairs) all interior?"""
        b, g = self.b, self.g
        flag = ir.Constant(ir.IntType(1), 0 if g.dilated else 1)
        if g.dilated:
            return flag
        for d, i in index_dims:
            role = g.roles[d]
            if role[0] == "s":
                s = g.spatial[role[1]]
                flag = b.and_(flag, b.and_(b.icmp_signed(">=", i, const_i64(s.lo)),
                                           b.icmp_signed("<", i, const_i64(s.hi))))
        return flag

    # -- the kernel ---------------------------------------------------------------------------

    def emit(self) -> KernelSpec:
        b, g = self.b, self.g
        dims = list(g.out_dims)
        if product(dims) == 0:
            b.ret_void()
            return KernelSpec(self.name, "convolution", 0, 1)
        outer_dims, (n2, n1) = dims[:-2], dims[-2:]
        d2, d1 = len(dims) - 2, len(dims) - 1
        role1 = g.roles[d1]
        if role1[0] == "s" and not g.dilated:
            lo1, hi1 = g.spatial[role1[1]].lo, g.spatial[role1[1]].hi
        else:
            lo1, hi1 = (0, 0) if g.dilated else (0, n1)

        def unit(u):
            outer = delinearize(b, u, outer_dims) if outer_dims else []

            def row(j2):
                prefix = outer + [j2]
                interior = self._interior(list(enumerate(prefix)))
                with b.if_else(interior) as (fast, slow):
                    with fast:
                        self._columns(prefix, 0, lo1, True)
                        self._columns(prefix, lo1, hi1, False)
                        self._columns(prefix, hi1, n1, True)
                    with slow:
                        self._columns(prefix, 0, n1, True)
            counted_loop(b, const_i64(0), const_i64(n2), "conv.j2", row)

        counted_loop(b, self.fn.args[1], self.fn.args[2], "conv.unit", unit)
        b.ret_void()
        units = product(outer_dims)
        return KernelSpec(self.name, "convolution", units, max(1, n2 * n1 * len(self.taps)))

    def _columns(self, prefix, lo: int, hi: int, checked: bool) -> None:
        if hi <= lo:
            return
        counted_loop(self.b, const_i64(lo), const_i64(hi), "conv.c" if checked else "conv.v",
                     lambda j1: self._point(prefix + [j1], checked))
