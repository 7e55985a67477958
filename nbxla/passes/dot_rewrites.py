"""Dot rewrites that let BLAS do the work: a batched dot of a broadcast matrix becomes one
plain dot (one GEMM), and a scalar factor on an operand moves after the dot (an epilogue).

``x @ W`` with a 3-D or 4-D ``x`` and a 2-D ``W`` is traced as NumPy defines it: ``W`` broadcast
along the batch dims, then a batched ``dot``.  Run as written, that materializes the broadcast
(``batch`` copies of ``W``) and makes ``batch`` small matrix products.  When the broadcast only
adds the leading batch dims, the batch dims of ``x`` are ordinary rows: the same result, in the
same dim order, is one ``dot`` of ``x`` with ``W`` itself, contracting the same dim -- a single
GEMM of ``(batch * m) x k`` by ``k x n``.

``(alpha * A) @ B`` scales all of ``A`` (a pass over an ``m x k`` operand) before the GEMM;
``alpha * (A @ B)`` scales the ``m x n`` result, which the elementwise work after the dot
(``+ beta * C``) fuses with: one GEMM and one kernel, as BLAS's own ``alpha``/``beta`` do.  The
two differ only in rounding (integers: not at all).

``A @ x`` with a 1-D ``x`` is traced as ``reshape(A @ reshape(x, (k, 1)), (m,))``: size-1 free
dims added only to make a matrix.  The dot then reads as a GEMM with ``n == 1`` and every call
pays for the reshapes around it (tiny programs are mostly such dispatch).  A dot operand that
is a reshape only inserting size-1 free dims is read without them: the dot gives the smaller
result (a plain GEMV, ``matrix @ vector``), and a reshape back gives the old one to its readers;
readers that are reshapes themselves read the new dot directly (or it replaces them).

An inner product of two vectors (``x[:i] @ y[:i]`` in a loop, ``np.dot(a, b)``) becomes
``reduce(multiply(a, b))``: a BLAS call cannot take its operands' producers along, but a
reduction fuses with them, so a masked or sliced vector is read straight from the array
(one kernel per step of a triangular solve instead of two copies and a call).
"""

from __future__ import annotations

import numpy as np

from ..hlo import Module, Shape, scalar_computation
from ..hlo.builder import unique_name
from ..hlo.ir import Instruction
from .pipeline import Pass, instruction_ids, rename_new_instructions


class DotRewrites(Pass):
    name = "dot-rewrites"

    def run(self, module: Module) -> bool:
        before, changed = instruction_ids(module), False
        for comp in module.computations:
            users = comp.users()
            for instr in list(comp.instructions):
                if instr.opcode == "dot":
                    changed |= _fold_transposes(instr, users)
                    changed |= _unbatch(instr)
                    changed |= _drop_unit_free_dims(comp, instr, users)
                    changed |= _scale_after(comp, instr, users)
                    changed |= _inner_product(module, comp, instr)
        rename_new_instructions(module, before)
        return changed


def _fold_transposes(dot: Instruction, users) -> bool:
    """``dot(transpose(x), y)`` -> ``dot(x, y)`` contracting ``x``'s own dims (``x.T @ g``, a
    weight gradient), when the free dims keep their order and there are no batch dims: BLAS
    reads a transposed operand in place (NumPy passes the transpose flag), where the
    transpose was a kernel writing a copy -- and one whose loops bake in the sizes, so a
    program with an unknown batch could not use it (XLA's TransposeFolding does the same)."""
    if dot.attrs.get("lhs_batch_dims") or dot.attrs.get("rhs_batch_dims"):
        return False
    changed = False
    for k, side in ((0, "lhs"), (1, "rhs")):
        t = dot.operands[k]
        if t.opcode != "transpose" or t.shape.layout is not None or t.operands[0].shape.layout is not None:
            continue
        perm = tuple(t.attrs["dimensions"])          # (result dim d is operand dim perm[d])
        free = [perm[d] for d in _free_dims(dot, k)]
        if free != sorted(free):
            continue
        x = t.operands[0]
        attrs = dict(dot.attrs)
        attrs[f"{side}_contracting_dims"] = tuple(perm[d] for d in attrs.get(f"{side}_contracting_dims", ()))
        dot.attrs = attrs
        dot.operands = [x if j == k else o for j, o in enumerate(dot.operands)]
        users.setdefault(x, []).append(dot)
        users[t] = [u for u in users[t] if u is not dot]
        changed = True
    return changed


def _scalar_factor(x: Instruction):
    """(the other operand, the scalar) when ``x`` is ``y * broadcast(scalar)`` (either order)."""
    if x.opcode != "multiply":
        return None
    for k in (0, 1):
        b = x.operands[k]
        if b.opcode == "broadcast" and b.operands[0].shape.rank == 0:
            return x.operands[1 - k], b.operands[0]
    return None


def _scale_after(comp, dot: Instruction, users) -> bool:
    for k in (0, 1):
        operand = dot.operands[k]
        found = _scalar_factor(operand)
        if found is None or users[operand] != [dot] or operand.shape.element_type != dot.shape.element_type:
            continue
        other, scalar = found
        # The dot now reads the unscaled operand; its readers read the scaled result.
        readers = users[dot]
        dot.operands = [other if j == k else o for j, o in enumerate(dot.operands)]
        factor = Instruction("broadcast", dot.shape, [scalar], {"dimensions": ()}, unique_name("broadcast"),
                             operand.location)
        scaled = Instruction("multiply", dot.shape, [dot, factor], {}, unique_name("multiply"), dot.location)
        for r in readers:
            r.operands = [scaled if o is dot else o for o in r.operands]
        if comp.root is dot:
            comp.root = scaled
        position = comp.instructions.index(dot) + 1
        for new in (factor, scaled):
            new.parent = comp
        comp.instructions[position:position] = [factor, scaled]
        users[scaled], users[factor] = list(readers), [scaled]
        users[dot] = [scaled]
        return True
    return False


def _free_dims(dot: Instruction, k: int) -> list[int]:
    side = "lhs" if k == 0 else "rhs"
    taken = set(dot.attrs.get(f"{side}_batch_dims", ())) | set(dot.attrs.get(f"{side}_contracting_dims", ()))
    return [d for d in range(dot.operands[k].shape.rank) if d not in taken]


def _drop_unit_free_dims(comp, dot: Instruction, users) -> bool:
    """``dot(reshape(v), ...)`` where the reshape only adds size-1 free dims -> ``dot(v, ...)``
    with those dims gone from the result, reshaped back for the dot's readers."""
    changed = False
    for k in (0, 1):
        r = dot.operands[k]
        if r.opcode != "reshape" or r.shape.layout is not None or r.operands[0].shape.layout is not None:
            continue
        free = _free_dims(dot, k)
        unit = [d for d in free if r.shape.dims[d] == 1]
        v = r.operands[0]
        if not unit or tuple(n for d, n in enumerate(r.shape.dims) if d not in unit) != v.shape.dims:
            continue
        side = "lhs" if k == 0 else "rhs"
        # Result dims: batch, lhs free, rhs free (in operand order).
        nb = len(dot.attrs.get("lhs_batch_dims", ()))
        first = nb if k == 0 else nb + len(_free_dims(dot, 0))
        gone = {first + free.index(d) for d in unit}
        attrs = dict(dot.attrs)
        for name in (f"{side}_batch_dims", f"{side}_contracting_dims"):
            if name in attrs:
                attrs[name] = tuple(d - sum(u < d for u in unit) for d in attrs[name])
        old = dot.shape
        readers = users[dot]
        dot.attrs = attrs
        dot.operands = [v if j == k else o for j, o in enumerate(dot.operands)]
        dot.shape = old.with_dims(n for d, n in enumerate(old.dims) if d not in gone)
        users.setdefault(v, []).append(dot)
        users[r] = [u for u in users[r] if u is not dot]
        if not users[r] and comp.root is not r:
            # The reshape is dead now (DCE removes it): not a reader of ``v`` any more, so a
            # scalar factor in ``v`` (``(beta * y) @ A``) can still move after the dot.
            users[v] = [u for u in users[v] if u is not r]
        _reshape_back(comp, dot, old, readers, users)
        changed = True
    return changed


def _reshape_back(comp, dot: Instruction, old_shape, readers, users) -> None:
    """Give the readers of ``dot`` (whose shape just lost size-1 dims) its old shape: a reader
    that is a reshape reads ``dot`` itself (or is replaced by it, same dims); others read a
    new ``reshape(dot)``."""
    back, was_root = None, comp.root is dot
    users[dot] = []
    for reader in readers:
        if reader.opcode == "reshape" and reader.shape.layout is None:
            if reader.shape.dims == dot.shape.dims:
                for u in users[reader]:
                    u.operands = [dot if o is reader else o for o in u.operands]
                    users[dot].append(u)
                if comp.root is reader:
                    comp.root = dot
                users[reader] = []
            else:
                reader.operands = [dot]
                users[dot].append(reader)
            continue
        back = back or _reshape_after(comp, dot, old_shape, users)
        reader.operands = [back if o is dot else o for o in reader.operands]
        users[back].append(reader)
    if was_root:
        comp.root = back or _reshape_after(comp, dot, old_shape, users)


def _reshape_after(comp, dot: Instruction, shape, users) -> Instruction:
    """A new ``reshape(dot)`` to ``shape``, placed right after ``dot``."""
    back = Instruction("reshape", shape, [dot], {}, unique_name("reshape"), dot.location)
    back.parent = comp
    comp.instructions.insert(comp.instructions.index(dot) + 1, back)
    users[back] = []
    users[dot].append(back)
    return back


def _unbatch(dot) -> bool:
    at = dot.attrs
    lb, rb = tuple(at.get("lhs_batch_dims", ())), tuple(at.get("rhs_batch_dims", ()))
    nb = len(lb)
    rhs = dot.operands[1]
    if not nb or lb != tuple(range(nb)) or rb != tuple(range(nb)) or rhs.opcode != "broadcast":
        return False
    w = rhs.operands[0]
    if tuple(rhs.attrs["dimensions"]) != tuple(range(nb, rhs.shape.rank)) or w.shape.rank != rhs.shape.rank - nb:
        return False
    attrs = dict(at)
    attrs.pop("lhs_batch_dims", None)
    attrs.pop("rhs_batch_dims", None)
    attrs["rhs_contracting_dims"] = tuple(d - nb for d in at.get("rhs_contracting_dims", ()))
    dot.attrs = attrs
    dot.operands = [dot.operands[0], w]
    return True


def _inner_product(module: Module, comp, dot: Instruction) -> bool:
    """``dot(a, b)`` of one element, contracting one dim of k (every other dim of size 1), on
    real numbers -> ``reduce(multiply(a[k], b[k]), 0, add)`` (reshaped back to the dot's
    shape)."""
    if dot.opcode != "dot" or dot.shape.size != 1 or dot.attrs.get("lhs_batch_dims"):
        return False
    t = dot.shape.element_type
    contracting = dot.attrs.get("lhs_contracting_dims", ()), dot.attrs.get("rhs_contracting_dims", ())
    a, b = dot.operands
    if any(len(c) != 1 for c in contracting) or t in ("pred", "c64", "c128") \
            or {a.shape.element_type, b.shape.element_type} != {t} or a.shape.layout is not None \
            or b.shape.layout is not None:
        return False
    k = a.shape.dims[contracting[0][0]]
    at = comp.instructions.index(dot)
    made = []

    def new(opcode, shape, operands, attrs=None):
        instr = Instruction(opcode, shape, operands, attrs or {}, unique_name(opcode.replace("-", "_")), dot.location)
        instr.parent = comp
        made.append(instr)
        return instr
    vectors = [v if v.shape.rank == 1 else new("reshape", Shape(t, (k,)), [v]) for v in (a, b)]
    product = new("multiply", Shape(t, (k,)), vectors)
    zero = new("constant", Shape(t), [], {"literal": np.zeros((), product.shape.dtype)})
    add = module.add_computation(scalar_computation("add", t))
    attrs = {"dimensions": (0,), "to_apply": add}
    if dot.shape.rank == 0:
        dot.opcode, dot.operands, dot.attrs = "reduce", [product, zero], attrs
    else:
        total = new("reduce", Shape(t), [product, zero], attrs)
        dot.opcode, dot.operands, dot.attrs = "reshape", [total], {}
    comp.instructions[at:at] = made
    return True
