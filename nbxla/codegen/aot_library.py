"""The steps of an ahead-of-time driver that call the C routines of ``aot_runtime.c``.

``dot`` (a packed GEMM; constant weights packed here, at compile time), ``convolution``,
``sort`` (a typed sort on the keys a recognized comparator orders by, ``codegen/sort_keys.py``;
else a merge sort driven by a comparator kernel) and ``topk`` (that merge sort), ``select-and-scatter``,
``fft`` and the custom calls with a C implementation (LAPACK's Cholesky, XLA's TopK).  Each
emits the call with its geometry as constants, converts operands where the routine computes in
another type (through convert kernels), and asks for the scratch its step needs.  A mixin of
the program emitter (``aot_driver``): it uses the emitter's buffers, lines and regions.
"""

from __future__ import annotations

import numpy as np

from ..errors import AotError
from ..hlo.attributes import WindowDim
from ..hlo.evaluator_common import label
from ..hlo.evaluator_linalg import MASKED_DOT_TARGET, SOLVE_TARGET, lapack_uplo, masked_dot_axes
from ..hlo.ir import Computation, Instruction
from ..hlo.shapes import Shape
from ..passes.fused_dots import keeps_native
from .elemental import row_major_strides
from .kernels import standalone_computation
from .sort_keys import leading_elements_read, sort_may_meet_nans, typed_sort_keys
from .toolkit import product

ALIGN = 64
_GEMM_TYPES = {"f32", "f64", "c64", "c128", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"}
# custom-call targets with a C implementation -> the method that emits the call
CUSTOM_CALLS = {"lapack_spotrf_ffi": "_potrf", "lapack_dpotrf_ffi": "_potrf", "TopK": "_topk_call",
                MASKED_DOT_TARGET: "_masked_dot", SOLVE_TARGET: "_solve"}


def align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _packed_panels(b: np.ndarray) -> np.ndarray:
    """[batch, k, n] as the GEMM's panels: [batch, n / 16, k, 16], zero-padded (NBXLA_NR = 16)."""
    batch, k, n = b.shape
    wide = np.zeros((batch, k, -(-n // 16) * 16), b.dtype)
    wide[:, :, :n] = b
    return np.ascontiguousarray(wide.reshape(batch, k, -1, 16).transpose(0, 2, 1, 3))



def solve_kind(driver, instr: Instruction) -> int:
    """The runtime's ``nbxla_solve`` code of ``instr``'s element type (0 f32, 1 f64, 2 c64,
    3 c128); refused where the driver has no LAPACK (ahead-of-time objects) or the type none."""
    if not driver.host_lapack:
        raise AotError(f"{label(instr)}: {SOLVE_TARGET} needs LAPACK, which only the jit's native "
                       "loops have (NumPy's); an ahead-of-time object has none")
    t = instr.shape.element_type
    kinds = {"f32": 0, "f64": 1, "c64": 2, "c128": 3}
    if t not in kinds or any(x.shape.element_type != t for x in instr.operands):
        raise AotError(f"{label(instr)}: {SOLVE_TARGET} of {t} has no native implementation")
    return kinds[t]

def small_dot_kernel(instr: Instruction) -> bool:
    """Does the dot ``instr`` run as an LLVM kernel of the object (the jit's dot kernel,
    ``codegen/dot_kernels.py``) rather than a call of the C GEMM?  Where fused dots keep that
    kernel (``passes/fused_dots.keeps_native``: products of at most SMALL_DOT_WORK
    multiply-adds).  Why: the C GEMM packs its operands into panels, a cost a 3x3 product
    does not repay; and a loop whose steps are all kernels is compiled by LLVM alone, with no
    C compiler run (``aot_loops``: a complex 3x3 product's support code cost ~0.1 s of gcc)."""
    return keeps_native(standalone_computation(instr))


class _Room:
    """Places in the per-step region for one step's temporaries."""

    def __init__(self, emitter: "LibrarySteps"):
        self.emitter, self.used = emitter, 0

    def take(self, nbytes: int) -> str:
        place = f"(void *){self.emitter.local_place(self.used)}"
        self.used += align_up(nbytes)
        return place


class LibrarySteps:
    """Steps that call aot_runtime.c (mixed into the program emitter)."""

    def _compute_type(self, instr: Instruction, what: str) -> str:
        """The type a dot or convolution computes in: its result's, f32 for half precision."""
        t = instr.shape.element_type
        compute = "f32" if t in ("f16", "bf16") else t
        if compute not in _GEMM_TYPES:
            raise AotError(f"{label(instr)}: a {what} giving {t} has no ahead-of-time implementation (supported "
                           f"result types: {', '.join(sorted(_GEMM_TYPES | {'f16', 'bf16'}))}). Convert the "
                           "operands first, or use nbxla.jit")
        return compute

    def _operand_in(self, operand: Instruction, compute: str, room: "_Room") -> tuple[str, Shape]:
        """The operand's buffer, converted to ``compute`` first when it has another type (as
        the evaluator does: operands in the result type)."""
        source, shape = self._array(operand), operand.shape
        if shape.element_type != compute:
            shape = shape.with_type(compute)
            source = self._convert(operand.shape, compute, source, room.take(shape.byte_size))
        return source, shape

    def _result_via(self, instr: Instruction, compute: str, room: "_Room", emit) -> None:
        """``emit(target)`` writes the result in ``compute``; rounded into the result if needed."""
        wide = instr.shape.with_type(compute)
        result = self._array(instr)
        target = result if compute == instr.shape.element_type else room.take(wide.byte_size)
        emit(target)
        if target != result:
            self._convert(wide, instr.shape.element_type, target, result)

    def _dot(self, instr: Instruction) -> None:
        """A GEMM per batch over operands put in [batch, m, k] and [batch, k, n] order
        (half-precision results computed in f32 and rounded once, like the evaluator); a
        small product is the jit's dot kernel instead (``small_dot_kernel``)."""
        if small_dot_kernel(instr):
            self._kernel(instr)
            return
        lhs, rhs = instr.operands
        compute = self._compute_type(instr, "dot")
        a = instr.attrs
        lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
        lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
        lfree = [d for d in range(lhs.shape.rank) if d not in lb + lc]
        rfree = [d for d in range(rhs.shape.rank) if d not in rb + rc]
        ld, rd = lhs.shape.dims, rhs.shape.dims
        batch, m = product(ld[d] for d in lb), product(ld[d] for d in lfree)
        k, n = product(ld[d] for d in lc), product(rd[d] for d in rfree)
        room = _Room(self)
        pointers = []
        self.lines.append("{")
        lperm, rperm = lb + lfree + lc, rb + rc + rfree
        if rhs.opcode == "constant" and rhs.shape.element_type == compute and rperm == sorted(rperm) \
                and lperm == sorted(lperm):
            # Constant weights: packed into the GEMM's panels here, once, not on every call.
            packed = _packed_panels(np.asarray(rhs.literal, rhs.shape.dtype).reshape(batch, k, n))
            panels = f"(void *){self.driver.kernels.constant(packed.tobytes())}"
            source, _ = self._operand_in(lhs, compute, room)
            self._result_via(instr, compute, room, lambda target: self.lines.append(
                f"    nbxla_gemm_{compute}_prepacked({batch}, {m}, {n}, {k}, {source}, {panels}, {target});"))
            self.lines.append("}")
            self._region(room.used)
            return
        for name, operand, perm in (("a", lhs, lperm), ("b", rhs, rperm)):
            source, shape = self._operand_in(operand, compute, room)
            if perm != sorted(perm):
                if len(perm) > 16:
                    raise AotError(f"{label(instr)}: a dot operand of rank {len(perm)} (> 16) cannot be "
                                   "compiled ahead of time")
                place = room.take(shape.byte_size)
                dims = ", ".join(str(d) for d in shape.dims)
                self.lines += [f"    static const int64_t {name}_dims[] = {{{dims}}};",
                               f"    static const int64_t {name}_perm[] = {{{', '.join(map(str, perm))}}};",
                               f"    nbxla_transpose({source}, {place}, {len(perm)}, {name}_dims, {name}_perm, "
                               f"{shape.dtype.itemsize});"]
                source = place
            pointers.append(source)
        packed = room.take(-(-n // 16) * 16 * k * instr.shape.with_type(compute).dtype.itemsize)  # NBXLA_NR = 16
        self._result_via(instr, compute, room, lambda target: self.lines.append(
            f"    nbxla_gemm_{compute}({batch}, {m}, {n}, {k}, {pointers[0]}, {pointers[1]}, {target}, {packed});"))
        self.lines.append("}")
        self._region(room.used)

    def _convolution(self, instr: Instruction) -> None:
        """A direct convolution (any dim_labels, strides, padding, dilations, reversal,
        feature and batch groups): ``nbxla_conv`` with the geometry as a constant struct."""
        x, w = instr.operands
        compute = self._compute_type(instr, "convolution")
        dn = instr.attrs["dim_labels"]
        spatial = len(dn.input_spatial)
        if spatial > 8:
            raise AotError(f"{label(instr)}: a convolution with {spatial} (> 8) spatial dimensions cannot be "
                           "compiled ahead of time")
        window = instr.attrs.get("window")
        dims = window.dims if window is not None else \
            [WindowDim(w.shape.dims[d]) for d in dn.kernel_spatial]
        xs, ws, os_ = (row_major_strides(i.shape.dims) for i in (x, w, instr))
        groups = instr.attrs.get("feature_group_count", 1)
        batch_groups = instr.attrs.get("batch_group_count", 1)
        features = instr.shape.dims[dn.output_feature]

        def each(values) -> str:
            return "{" + ", ".join(str(int(v)) for v in values) + "}"
        fields = [
            spatial, instr.shape.dims[dn.output_batch], features, w.shape.dims[dn.kernel_input_feature],
            features // groups, features // batch_groups,
            xs[dn.input_batch], xs[dn.input_feature], ws[dn.kernel_output_feature], ws[dn.kernel_input_feature],
            os_[dn.output_batch], os_[dn.output_feature]]
        arrays = [[xs[d] for d in dn.input_spatial], [ws[d] for d in dn.kernel_spatial],
                  [os_[d] for d in dn.output_spatial], [x.shape.dims[d] for d in dn.input_spatial],
                  [w.shape.dims[d] for d in dn.kernel_spatial], [instr.shape.dims[d] for d in dn.output_spatial],
                  [wd.stride for wd in dims], [wd.pad_low for wd in dims], [wd.base_dilation for wd in dims],
                  [wd.window_dilation for wd in dims], [wd.reversal for wd in dims]]
        room = _Room(self)
        self.lines.append("{")
        (xp, _), (wp, _) = (self._operand_in(o, compute, room) for o in (x, w))
        self.lines.append("    static const struct nbxla_conv cd = {" +
                          ", ".join([str(f) for f in fields] + [each(a) for a in arrays]) + "};")
        self._result_via(instr, compute, room,
                         lambda target: self.lines.append(f"    nbxla_conv_{compute}({xp}, {wp}, {target}, &cd);"))
        self.lines.append("}")
        self._region(room.used)

    def _convert(self, shape: Shape, to: str, source: str, target: str) -> str:
        """Emit a call of a native convert kernel ``source`` -> ``target``; gives ``target``."""
        spec = self.driver.kernels.convert(shape, to)
        self.lines.append(f"    {{ void *cb[2] = {{{source}, {target}}}; {spec.name}(cb, 0, {spec.parallel_extent}); }}")
        return target

    def _sort(self, instr: Instruction) -> None:
        operands = instr.operands
        ins = [self._array(o) for o in operands]
        outs = self._leaves(instr)
        dims = operands[0].shape.dims
        if not dims:
            self.lines += [f"memcpy({o}, {i}, {b.nbytes});" for i, o, b in zip(ins, outs, self.values[id(instr)])]
            return
        axis = instr.attrs["dimensions"][0]
        sizes = ", ".join(str(o.shape.dtype.itemsize) for o in operands)
        n = dims[axis]
        geometry = f"{product(dims[:axis])}, {n}, {product(dims[axis + 1:])}"
        self.lines += ["{", f"    char *si[] = {{{', '.join(ins)}}};", f"    char *so[] = {{{', '.join(outs)}}};",
                       f"    static const int64_t es[] = {{{sizes}}};"]
        keys = typed_sort_keys(instr.attrs["to_apply"])
        if keys is not None:
            # (the comparator orders by keys: a typed sort on them, no call per comparison)
            self.lines.append("    static const struct nbxla_sort_key keys[] = {" +
                              ", ".join("{%d, %d, %d}" % key for key in keys) + "};")
            # (only the first `keep` of each row read, np.argsort(d)[:k]: a selection may do)
            keep = max(1, leading_elements_read(self.comp, instr))
            typed = f"nbxla_sort_keys({len(ins)}, si, so, es, {geometry}, {len(keys)}, keys, {keep}, " \
                    f"(uint64_t *){self.local_place()})"
            if not sort_may_meet_nans(instr.attrs["to_apply"]):
                self.lines += [f"    {typed};", "}"]
                self._region(24 * n)
                return
            self.lines.append(f"    if ({typed})")        # (NaNs under a plain float comparison)
        less = self.driver.kernels.scalar(instr.attrs["to_apply"], "sort comparator")
        self.lines += [f"    nbxla_sort({len(ins)}, si, so, es, {geometry}, "
                       f"{less.name}, {less.parallel_extent}, (int64_t *){self.local_place()});", "}"]
        self._region(24 * n)

    def _topk(self, instr: Instruction) -> None:
        (x,) = instr.operands
        t, k = x.shape.element_type, instr.attrs["k"]
        # The order as a comparator on (lhs x, rhs x, lhs position, rhs position): floats by
        # IEEE totalOrder (NaN above +inf, -0 below +0), as the evaluator orders them.
        params = [Instruction("parameter", Shape(s, ()), attrs={"parameter_number": i}, name=f"p{i}")
                  for i, s in enumerate((t, t, "s32", "s32"))]
        attrs = {"direction": "GT" if instr.attrs.get("largest", True) else "LT"}
        if t in ("f16", "bf16", "f32", "f64"):
            attrs["type"] = "TOTALORDER"
        root = Instruction("compare", Shape("pred", ()), params[:2], attrs, name="before")
        before = self.driver.kernels.scalar(Computation(f"{instr.name}.order", params + [root], root), "topk order")
        self._topk_with(instr, x, k, before)

    def _topk_with(self, instr: Instruction, x: Instruction, k: int, before) -> None:
        n, rows = x.shape.dims[-1], product(x.shape.dims[:-1])
        values, positions = self._leaves(instr)
        esize = x.shape.dtype.itemsize
        self.lines.append(f"nbxla_topk({self._array(x)}, {values}, {positions}, {rows}, {n}, {k}, {esize}, "
                          f"{before.name}, {before.parallel_extent}, {self.local_place()});")
        self._region(sum(-(-b // 8) * 8 for b in (4 * n * rows, esize * n * rows, 4 * n * rows)) + 16 * n)

    def _select_and_scatter(self, instr: Instruction) -> None:
        operand, source, init = instr.operands
        window = instr.attrs["window"].dims
        rank = operand.shape.rank
        if rank > 8 or any(w.reversal for w in window):
            raise AotError(f"{label(instr)}: a select-and-scatter of rank {rank} > 8 or with a reversed window "
                           "cannot be compiled ahead of time")
        select = self.driver.kernels.scalar(instr.attrs["select"], "select-and-scatter selection")
        scatter = self.driver.kernels.scalar(instr.attrs["scatter"], "select-and-scatter combiner")

        def each(values) -> str:
            return "{" + ", ".join(str(int(v)) for v in values) + "}"
        fields = [rank] + [each(a) for a in (operand.shape.dims, row_major_strides(operand.shape.dims),
                                             source.shape.dims, [w.size for w in window], [w.stride for w in window],
                                             [w.pad_low for w in window], [w.base_dilation for w in window],
                                             [w.window_dilation for w in window])]
        self.lines += ["{", f"    static const struct nbxla_window win = {{{', '.join(map(str, fields))}}};",
                       f"    nbxla_select_and_scatter({self._array(operand)}, {self._array(source)}, "
                       f"{self._array(init)}, {self._array(instr)}, {operand.shape.dtype.itemsize}, &win, "
                       f"{select.name}, {select.parallel_extent}, {scatter.name}, {scatter.parallel_extent});", "}"]

    def _fft(self, instr: Instruction) -> None:
        (x,) = instr.operands
        kinds = {"FFT": 0, "IFFT": 1, "RFFT": 2, "IRFFT": 3}
        types = {"f32": 0, "f64": 1, "c64": 2, "c128": 3}
        lengths = list(instr.attrs["fft_length"])
        t_in, t_out = x.shape.element_type, instr.shape.element_type
        if t_in not in types or t_out not in types or not lengths or len(lengths) > 8:
            raise AotError(f"{label(instr)}: an fft of {t_in} -> {t_out} over {len(lengths)} dims cannot be "
                           "compiled ahead of time")
        batch = product(x.shape.dims[:x.shape.rank - len(lengths)])
        full = batch * product(lengths)
        if full == 0:
            return
        work = align_up(16 * full)
        self.lines += ["{", f"    static const int64_t len[] = {{{', '.join(map(str, lengths))}}};",
                       f"    nbxla_fft({self._array(x)}, {self._array(instr)}, {kinds[instr.attrs['fft_type']]}, "
                       f"{types[t_in]}, {types[t_out]}, {batch}, {len(lengths)}, len, "
                       f"(double complex *){self.local_place()}, (double complex *){self.local_place(work)});", "}"]
        self._region(work + 16 * max(lengths))

    def _potrf(self, instr: Instruction) -> None:
        (a,) = instr.operands
        t = a.shape.element_type
        n = a.shape.dims[-1]
        if t not in ("f32", "f64") or a.shape.rank < 2 or a.shape.dims[-2] != n:
            raise AotError(f"{label(instr)}: {instr.attrs['custom_call_target']} needs square f32/f64 matrices")
        factor, info = self._leaves(instr)
        lower = int(lapack_uplo(instr) == "L")
        self.lines.append(f"nbxla_potrf_{t}({self._array(a)}, {factor}, {info}, {product(a.shape.dims[:-2])}, {n}, "
                          f"{lower}, (double *){self.local_place()});")
        self._region(8 * n * n)

    def _masked_dot(self, instr: Instruction) -> None:
        """``nbxla_masked_dot`` of matmul form (lhs [m, k] or [k], rhs [k, n] or [k], both in the
        result type): the window {m0, m1, k0, k1, n0, n1} from the run-time bounds (each clamped
        to its axis; the contracted axis where both operands' masks hold), then one call."""
        lhs, rhs = instr.operands[:2]
        t = instr.shape.element_type
        if t not in ("f32", "f64", "c64", "c128") or lhs.shape.element_type != t or rhs.shape.element_type != t \
                or not 1 <= lhs.shape.rank <= 2 or not 1 <= rhs.shape.rank <= 2 \
                or tuple(instr.attrs.get("lhs_contracting_dims", ())) != (lhs.shape.rank - 1,) \
                or tuple(instr.attrs.get("rhs_contracting_dims", ())) != (0,):
            raise AotError(f"{label(instr)}: {MASKED_DOT_TARGET} has a C implementation only for "
                           "matmul-form f32/f64/c64/c128 operands of rank 1 or 2")
        m = lhs.shape.dims[0] if lhs.shape.rank == 2 else 1
        k = lhs.shape.dims[-1]
        n = rhs.shape.dims[1] if rhs.shape.rank == 2 else 1
        # the window entry each masked axis narrows: lhs rows, lhs k, rhs k, rhs columns
        entry = {0: 0} if lhs.shape.rank == 2 else {}
        entry[lhs.shape.rank - 1] = 2
        entry[lhs.shape.rank] = 2
        if rhs.shape.rank == 2:
            entry[lhs.shape.rank + 1] = 4
        lines = [f"int64_t r[6] = {{0, {m}, 0, {k}, 0, {n}}}, lo, hi;"]
        for j, axis in enumerate(masked_dot_axes(instr)):
            e, size = entry[axis], (m, k, n)[entry[axis] // 2]
            lo, hi = (f"*(const int64_t *){self._array(b)}" for b in instr.operands[2 + 2 * j:4 + 2 * j])
            lines += [f"lo = {lo}; hi = {hi};",
                      f"lo = lo < 0 ? 0 : lo > {size} ? {size} : lo; hi = hi < 0 ? 0 : hi > {size} ? {size} : hi;",
                      f"if (lo > r[{e}]) r[{e}] = lo;", f"if (hi < r[{e + 1}]) r[{e + 1}] = hi;"]
        self.lines += ["{"] + ["    " + line for line in lines] + [
            f"    nbxla_masked_dot_{t}({self._array(lhs)}, {self._array(rhs)}, {self._array(instr)}, {m}, {k}, {n}, r);",
            "}"]

    def _solve(self, instr: Instruction) -> None:
        """``nbxla_linalg_solve`` through the LAPACKE ``?gesv`` the jit runtime hands a native
        loop library (an AOT object has none: refused here, at build time)."""
        kind = solve_kind(self.driver, instr)
        a, b = instr.operands
        n, nrhs = a.shape.dims[-1], b.shape.dims[-1]
        batch = product(a.shape.dims[:-2])
        esize = instr.shape.dtype.itemsize
        self.lines.append(f"if ((rc = nbxla_solve({kind}, {self._array(a)}, {self._array(b)}, {self._array(instr)}, "
                          f"{batch}, {n}, {nrhs}, {esize}, (char *){self.local_place()}))) return rc;")
        self._region(n * n * esize + 8 * n)

    def _topk_call(self, instr: Instruction) -> None:
        """XLA:CPU's ``TopK`` custom call: (x, positions) sorted by its comparator, first k kept."""
        (x,) = instr.operands
        before = self.driver.kernels.scalar(instr.attrs["called_computations"][0], "TopK comparator")
        self._topk_with(instr, x, instr.shape.elements[0].dims[-1], before)
