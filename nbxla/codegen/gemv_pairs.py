"""LLVM IR of two matrix-vector products of one matrix in one pass over it (see
``runtime/dual_gemv.py``, which compiles and calls them): ``dual`` makes ``s = r @ A`` and
``q = A @ p``, ``chained`` makes ``q = A @ p`` and then ``s = q @ A``.

Eight rows at a time: each ``A[i, j]`` loaded once feeds both products, ``s[j]`` and ``p[j]``
are loaded once per eight rows; rows left over run one at a time.  LLVM vectorizes the column
loops (the row sums may be reassociated, as BLAS does).  Written as IR text: these are not
HLO fusions (the elemental emitter's kernels compute the elements of one output shape).
"""

from __future__ import annotations

# Rows per block of the main loop.  The kernels are bound by loads and stores (per column: one
# of ``p``, a load and a store of ``s``, one load of ``A`` per row), so more rows per block
# spread the vector traffic thinner: 8 against 4, measured in one process on the shared 2-core
# VM (best of repeats, f64): chained 400x400 22.9 against 25.5 us, 1800x2200 1382 against
# 1465 us; dual 190x210 4.8 against 5.1 us, 400x400 16.5 against 19.0 us; 37x53 and
# 1000x1000 unchanged.
ROWS = 8
assert ROWS & (ROWS - 1) == 0, "the blocks end at m & -ROWS: a power of two"
# (Tried: the column loops in 512-bit vectors, two per iteration.  f64 chained 190x210 5.7
# against 6.2 us, but 210x190 6.2 against 6.0 and dual 5.4 against 4.6: the scalar remainder
# of 16 columns an iteration; f32 1.3-1.5x slower everywhere.  Kept at LLVM's own choice.)
LLVM_TYPES = {"f32": "float", "f64": "double"}


def _fma(t: str) -> str:
    return f"@llvm.fmuladd.{'f64' if t == 'double' else 'f32'}"


def _prologue(t: str) -> str:
    """Both kernels: ``s`` zeroed (nothing at all when there are no columns), then the blocks
    of ``ROWS`` rows (``%rowsB``) or the rows left over (``%tail``)."""
    return f"""entry:
  %mb = and i64 %m, -{ROWS}
  %hasb = icmp ne i64 %mb, 0
  %hascols = icmp ne i64 %n, 0
  br i1 %hascols, label %zero, label %done
zero:
  %z = phi i64 [0, %entry], [%z1, %zero]
  %sz = getelementptr inbounds {t}, {t}* %s, i64 %z
  store {t} 0.0, {t}* %sz
  %z1 = add nuw nsw i64 %z, 1
  %zd = icmp eq i64 %z1, %n
  br i1 %zd, label %startb, label %zero
startb:
  br i1 %hasb, label %rowsB, label %tail
"""


def _rows_left(t: str, row_extra: str, column_extra: str, after: str) -> str:
    """Both kernels: the rows after the last block, one at a time, ``q[i]``'s sum in
    ``%acc1``; ``row_extra`` and ``column_extra`` are what the kernel adds to each row's and
    each column's step, ``after`` the label the column loop ends at."""
    return f"""tail:
  %tstart = phi i64 [0, %startb], [%mb, %rowendB]
  %more = icmp ult i64 %tstart, %m
  br i1 %more, label %rows, label %done
rows:
  %i = phi i64 [%tstart, %tail], [%i1, %rowend]
  %rowbase = mul nuw nsw i64 %i, %n
{row_extra}  br label %cols
cols:
  %jj = phi i64 [0, %rows], [%jj1, %cols]
  %acc = phi {t} [0.0, %rows], [%acc1, %cols]
  %aj = add nuw nsw i64 %rowbase, %jj
  %a.p = getelementptr inbounds {t}, {t}* %A, i64 %aj
  %a = load {t}, {t}* %a.p
  %pjj.p = getelementptr inbounds {t}, {t}* %p, i64 %jj
  %pjj = load {t}, {t}* %pjj.p
  %acc1 = call reassoc contract {t} {_fma(t)}({t} %a, {t} %pjj, {t} %acc)
{column_extra}  %jj1 = add nuw nsw i64 %jj, 1
  %jjd = icmp eq i64 %jj1, %n
  br i1 %jjd, label %{after}, label %cols
"""


# Both kernels' end of a left-over row (after the label %rowend), and of the function.
_NEXT_ROW = """  %i1 = add nuw nsw i64 %i, 1
  %id = icmp eq i64 %i1, %m
  br i1 %id, label %done, label %rows
done:
  ret void
}
"""


def _row_sum(t: str, k: int) -> str:
    """Row ``k`` of a block at column ``%j``: its element ``%a{k}`` loaded and ``%a{k} * p[j]``
    added to the row's sum."""
    return (f"  %ai{k} = add nuw nsw i64 %base{k}, %j\n"
            f"  %ap{k} = getelementptr inbounds {t}, {t}* %A, i64 %ai{k}\n"
            f"  %a{k} = load {t}, {t}* %ap{k}\n"
            f"  %baccn{k} = call reassoc contract {t} {_fma(t)}({t} %a{k}, {t} %pj, {t} %bacc{k})\n")


KINDS = ("dual", "chained")


def module_ir(t: str, data_offset: int, kind: str) -> str:
    """The ``kind`` kernel ("dual" or "chained") on raw pointers (``noalias``: the vectorizer
    needs no overlap checks) and its two entries taking the array objects, reading each data
    pointer at ``data_offset``: one for ctypes (``nbxla_<kind>_gemv``: the sizes as ints), one
    for CPython's fastcall trampoline (``nbxla_<kind>_gemv_objects``, runtime/fastcall.py's
    ``object_caller``: array objects, then ``begin, end``; the sizes come in an int64 array
    ``[m, n]`` after the arrays, the range is not used).
    One kind a module, its kernel not inlined into the entries: a program uses one kind, and
    LLVM optimized and emitted the kernels once per entry (both kinds, four copies: 0.17 s of
    CPU, most of a GEMV program's first call, for code one call never ran)."""
    if kind not in KINDS:
        raise ValueError(f"unknown GEMV pair kind {kind!r}; one of {', '.join(KINDS)}")
    names = ("A", "p", "r", "s", "q") if kind == "dual" else ("A", "p", "s", "q")
    loads = "".join(f"  %{name}.at = getelementptr i8, i8* %{name}.obj, i64 {data_offset}\n"
                    f"  %{name}.pp = bitcast i8* %{name}.at to {t}**\n"
                    f"  %{name} = load {t}*, {t}** %{name}.pp\n" for name in names)
    objects = ", ".join(f"i8* %{name}.obj" for name in names)
    dims = (f"  %dims.at = getelementptr i8, i8* %dims.obj, i64 {data_offset}\n"
            f"  %dims.pp = bitcast i8* %dims.at to i64**\n  %dims = load i64*, i64** %dims.pp\n"
            f"  %m = load i64, i64* %dims\n  %n.p = getelementptr i64, i64* %dims, i64 1\n"
            f"  %n = load i64, i64* %n.p\n")
    call = (f"  call void @{kind}_gemv_kernel(" + ", ".join(f"{t}* %{name}" for name in names) +
            ", i64 %m, i64 %n)\n  ret void\n}\n")
    kernel = f"declare {t} {_fma(t)}({t}, {t}, {t})\n" + (_kernel_ir(t) if kind == "dual" else _chained_ir(t))
    return (f"define void @nbxla_{kind}_gemv_objects({objects}, i8* %dims.obj, i64 %begin, i64 %end) {{\n"
            f"entry:\n" + loads + dims + call + kernel +
            f"define void @nbxla_{kind}_gemv({objects}, i64 %m, i64 %n) {{\nentry:\n" + loads + call)


def _kernel_ir(t: str) -> str:
    fma = _fma(t)
    block = ["rowsB:\n  %bi = phi i64 [0, %startb], [%bi1, %rowendB]\n"]
    for k in range(ROWS):
        block.append(f"  %row{k} = add nuw nsw i64 %bi, {k}\n  %base{k} = mul nuw nsw i64 %row{k}, %n\n"
                     f"  %rp{k} = getelementptr inbounds {t}, {t}* %r, i64 %row{k}\n"
                     f"  %rv{k} = load {t}, {t}* %rp{k}\n")
    block.append("  br label %colsB\ncolsB:\n  %j = phi i64 [0, %rowsB], [%j1, %colsB]\n")
    for k in range(ROWS):
        block.append(f"  %bacc{k} = phi {t} [0.0, %rowsB], [%baccn{k}, %colsB]\n")
    block.append(f"  %pj.p = getelementptr inbounds {t}, {t}* %p, i64 %j\n  %pj = load {t}, {t}* %pj.p\n"
                 f"  %sj.p = getelementptr inbounds {t}, {t}* %s, i64 %j\n  %sj0 = load {t}, {t}* %sj.p\n")
    for k in range(ROWS):
        block.append(_row_sum(t, k) +
                     f"  %sj{k + 1} = call contract {t} {fma}({t} %rv{k}, {t} %a{k}, {t} %sj{k})\n")
    block.append(f"  store {t} %sj{ROWS}, {t}* %sj.p\n  %j1 = add nuw nsw i64 %j, 1\n"
                 f"  %jd = icmp eq i64 %j1, %n\n  br i1 %jd, label %rowendB, label %colsB\nrowendB:\n")
    for k in range(ROWS):
        block.append(f"  %qp{k} = getelementptr inbounds {t}, {t}* %q, i64 %row{k}\n"
                     f"  store {t} %baccn{k}, {t}* %qp{k}\n")
    block.append(f"  %bi1 = add nuw nsw i64 %bi, {ROWS}\n  %bd = icmp uge i64 %bi1, %mb\n"
                 f"  br i1 %bd, label %tail, label %rowsB\n")
    left = _rows_left(t, f"  %ri.p = getelementptr inbounds {t}, {t}* %r, i64 %i\n"
                         f"  %ri = load {t}, {t}* %ri.p\n",
                      f"  %sjj.p = getelementptr inbounds {t}, {t}* %s, i64 %jj\n"
                      f"  %sjj = load {t}, {t}* %sjj.p\n"
                      f"  %sjj1 = call contract {t} {fma}({t} %ri, {t} %a, {t} %sjj)\n"
                      f"  store {t} %sjj1, {t}* %sjj.p\n", "rowend")
    noalias = "noalias nocapture"
    return f"""
define internal void @dual_gemv_kernel({t}* {noalias} readonly %A, {t}* {noalias} readonly %p,
    {t}* {noalias} readonly %r, {t}* {noalias} %s, {t}* {noalias} %q, i64 %m, i64 %n) noinline {{
{_prologue(t)}{''.join(block)}{left}rowend:
  %qi.p = getelementptr inbounds {t}, {t}* %q, i64 %i
  store {t} %acc1, {t}* %qi.p
{_NEXT_ROW}"""


def _chained_ir(t: str) -> str:
    """``q = A @ p`` then ``s = q @ A``: per block of rows, a first column loop makes the
    rows' sums (stored in ``q``), a second adds ``q[i] * A[i, :]`` into ``s`` while the rows
    are still in L1."""
    fma = _fma(t)
    rows = range(ROWS)
    head = "".join(f"  %row{k} = add nuw nsw i64 %bi, {k}\n  %base{k} = mul nuw nsw i64 %row{k}, %n\n" for k in rows)
    phis = "".join(f"  %bacc{k} = phi {t} [0.0, %rowsB], [%baccn{k}, %colsA]\n" for k in rows)
    sums = "".join(_row_sum(t, k) for k in rows)
    stores = "".join(f"  %qp{k} = getelementptr inbounds {t}, {t}* %q, i64 %row{k}\n"
                     f"  store {t} %baccn{k}, {t}* %qp{k}\n" for k in rows)
    adds = "".join(f"  %bi{k} = add nuw nsw i64 %base{k}, %jb\n"
                   f"  %bp{k} = getelementptr inbounds {t}, {t}* %A, i64 %bi{k}\n"
                   f"  %b{k} = load {t}, {t}* %bp{k}\n"
                   f"  %sj{k + 1} = call contract {t} {fma}({t} %baccn{k}, {t} %b{k}, {t} %sj{k})\n" for k in rows)
    noalias = "noalias nocapture"
    return f"""
define internal void @chained_gemv_kernel({t}* {noalias} readonly %A, {t}* {noalias} readonly %p,
    {t}* {noalias} %s, {t}* {noalias} %q, i64 %m, i64 %n) noinline {{
{_prologue(t)}rowsB:
  %bi = phi i64 [0, %startb], [%bnext, %rowendB]
{head}  br label %colsA
colsA:
  %j = phi i64 [0, %rowsB], [%j1, %colsA]
{phis}  %pj.p = getelementptr inbounds {t}, {t}* %p, i64 %j
  %pj = load {t}, {t}* %pj.p
{sums}  %j1 = add nuw nsw i64 %j, 1
  %jd = icmp eq i64 %j1, %n
  br i1 %jd, label %midB, label %colsA
midB:
{stores}  br label %colsS
colsS:
  %jb = phi i64 [0, %midB], [%jb1, %colsS]
  %sj.p = getelementptr inbounds {t}, {t}* %s, i64 %jb
  %sj0 = load {t}, {t}* %sj.p
{adds}  store {t} %sj{ROWS}, {t}* %sj.p
  %jb1 = add nuw nsw i64 %jb, 1
  %jbd = icmp eq i64 %jb1, %n
  br i1 %jbd, label %rowendB, label %colsS
rowendB:
  %bnext = add nuw nsw i64 %bi, {ROWS}
  %bd = icmp uge i64 %bnext, %mb
  br i1 %bd, label %tail, label %rowsB
{_rows_left(t, "", "", "rowmid")}rowmid:
  %qi.p = getelementptr inbounds {t}, {t}* %q, i64 %i
  store {t} %acc1, {t}* %qi.p
  br label %cols2
cols2:
  %jc = phi i64 [0, %rowmid], [%jc1, %cols2]
  %ac = add nuw nsw i64 %rowbase, %jc
  %ac.p = getelementptr inbounds {t}, {t}* %A, i64 %ac
  %av = load {t}, {t}* %ac.p
  %sc.p = getelementptr inbounds {t}, {t}* %s, i64 %jc
  %sc = load {t}, {t}* %sc.p
  %sc1 = call contract {t} {fma}({t} %acc1, {t} %av, {t} %sc)
  store {t} %sc1, {t}* %sc.p
  %jc1 = add nuw nsw i64 %jc, 1
  %jcd = icmp eq i64 %jc1, %n
  br i1 %jcd, label %rowend, label %cols2
rowend:
{_NEXT_ROW}"""
