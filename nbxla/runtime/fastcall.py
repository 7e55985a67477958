"""Small kernels called as Python built-in functions instead of through ctypes.

Why: a ctypes call converts every argument through its prototype and builds a libffi call;
on a 20-op chain over 128 floats that was ~0.5 us of a ~3 us jit call, several times the
kernel's own work.  A built-in function with CPython's vectorcall convention ("fastcall":
``f(self, PyObject *const *args, nargs)``) is called by the interpreter directly.

One trampoline serves every kernel of the process: ``kernel_caller(address, extent, extras)``
returns a built-in function ``call(*arrays)`` whose ``self`` is a small int64 array
``[address, extent, number of arrays, len(extras), data pointers of extras...]``.  The
trampoline checks the argument count and that every argument is an exact ``numpy.ndarray`` (else ``TypeError``),
reads each array's data pointer from the object (``ARRAY_DATA_OFFSET``), appends the extras'
pointers (the run-time sizes array), and calls the kernel's pointer-array entry point
``kernel(void **buffers, i64 begin=0, i64 end=extent)``; it returns None.  The caller
guarantees shapes, dtypes and contiguity as it did for ctypes (the kernel reads raw memory).

The GIL stays held during the kernel (ctypes released it): only kernels too small to be
split over threads (``KernelThunk.object_fn``'s condition) are called this way, where
releasing and taking the GIL back costs more than the kernel.

The trampoline embeds this process's addresses (``numpy.ndarray``'s type object, ``None``,
``PyErr_SetString``): it is compiled in each process (~30 ms, once, on first use) and never
stored in the persistent cache.  ``None`` where CPython's C API is not reachable (not
CPython, or ids are not addresses): callers keep ctypes.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np
from llvmlite import ir

# The most buffers one call may pass (the kernel's pointer array lives on the trampoline's
# stack); kernels with more keep ctypes.
MAX_BUFFERS = 256
METH_FASTCALL = 0x0080

_I8 = ir.IntType(8)
_I8P = _I8.as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_lock = threading.Lock()
_state: dict = {}       # "engine", "method", "new" once compiled; "failed" when not available


def trampoline_ir(data_offset: int, array_type: int, none: int, set_error: int, type_error: int) -> str:
    """The LLVM IR of ``nbxla_kernel_call(self, args, nargs)`` (see the module docstring) for
    this process's addresses."""
    module = ir.Module(name="nbxla_fastcall")
    fn = ir.Function(module, ir.FunctionType(_I8P, [_I8P, _I8P.as_pointer(), _I64]), "nbxla_kernel_call")
    self_obj, args, nargs = fn.args
    entry, check, gather, fail, call = (fn.append_basic_block(n) for n in
                                        ("entry", "check", "gather", "fail", "call"))
    b = ir.IRBuilder(entry)

    def field(obj, offset, kind):
        return b.load(b.bitcast(b.gep(obj, [ir.Constant(_I64, offset)]), kind.as_pointer()))

    def const_ptr(address):
        return ir.Constant(_I64, address).inttoptr(_I8P)

    words = b.bitcast(field(self_obj, data_offset, _I8P), _I64.as_pointer())
    word = lambda k: b.load(b.gep(words, [ir.Constant(_I64, k)]))   # noqa: E731
    address, extent, n_arrays, n_extra = word(0), word(1), word(2), word(3)
    # (1 <= n_arrays and n_arrays + n_extra <= MAX_BUFFERS: kernel_caller made sure)
    ok = b.icmp_unsigned("==", nargs, n_arrays)
    pointers = b.alloca(_I8P, ir.Constant(_I64, MAX_BUFFERS))
    b.cbranch(ok, check, fail)

    # check / gather: every argument an exact ndarray; its data pointer into the array
    b = ir.IRBuilder(check)
    k = b.phi(_I64)
    k.add_incoming(ir.Constant(_I64, 0), entry)
    obj = b.load(b.gep(args, [k]))
    exact = b.icmp_unsigned("==", b.ptrtoint(field(obj, 8, _I8P), _I64), ir.Constant(_I64, array_type))
    b.cbranch(exact, gather, fail)
    b = ir.IRBuilder(gather)
    b.store(field(obj, data_offset, _I8P), b.gep(pointers, [k]))
    nxt = b.add(k, ir.Constant(_I64, 1))
    k.add_incoming(nxt, gather)
    b.cbranch(b.icmp_signed("<", nxt, nargs), check, call)

    b = ir.IRBuilder(call)
    # the extras' pointers after the arrays (a short loop: usually none or one)
    extra_head = fn.append_basic_block("extras")
    extra_body = fn.append_basic_block("extra")
    run = fn.append_basic_block("run")
    b.branch(extra_head)
    b = ir.IRBuilder(extra_head)
    e = b.phi(_I64)
    e.add_incoming(ir.Constant(_I64, 0), call)
    b.cbranch(b.icmp_signed("<", e, n_extra), extra_body, run)
    b = ir.IRBuilder(extra_body)
    extra = b.inttoptr(b.load(b.gep(words, [b.add(e, ir.Constant(_I64, 4))])), _I8P)
    b.store(extra, b.gep(pointers, [b.add(nargs, e)]))
    e.add_incoming(b.add(e, ir.Constant(_I64, 1)), extra_body)
    b.branch(extra_head)

    b = ir.IRBuilder(run)
    kernel_type = ir.FunctionType(ir.VoidType(), [_I8P.as_pointer(), _I64, _I64])
    b.call(b.inttoptr(address, kernel_type.as_pointer()), [pointers, ir.Constant(_I64, 0), extent])
    none_refs = b.inttoptr(ir.Constant(_I64, none), _I64.as_pointer())
    b.store(b.add(b.load(none_refs), ir.Constant(_I64, 1)), none_refs)     # Py_INCREF(None)
    b.ret(const_ptr(none))

    b = ir.IRBuilder(fail)
    message = "nbxla kernel call: wrong number of arguments or an argument that is not a numpy.ndarray"
    text = bytearray(message.encode() + b"\0")
    glob = ir.GlobalVariable(module, ir.ArrayType(_I8, len(text)), "nbxla_fastcall_message")
    glob.global_constant, glob.linkage = True, "private"
    glob.initializer = ir.Constant(ir.ArrayType(_I8, len(text)), text)
    set_type = ir.FunctionType(ir.VoidType(), [_I8P, _I8P])
    exc = b.load(b.inttoptr(ir.Constant(_I64, type_error), _I8P.as_pointer()))
    b.call(b.inttoptr(ir.Constant(_I64, set_error), set_type.as_pointer()),
           [exc, b.bitcast(glob, _I8P)])
    b.ret(ir.Constant(_I8P, None))
    return str(module)


def _compile() -> dict | None:
    from .cpu_kernels import ARRAY_DATA_OFFSET     # (cpu_kernels makes its thunks' callers here)
    if sys.implementation.name != "cpython" or ARRAY_DATA_OFFSET is None:
        return None
    import llvmlite.binding as llvm
    from ..codegen.cpu import object_engine
    api = ctypes.pythonapi
    type_error = ctypes.c_void_p.in_dll(api, "PyExc_TypeError")
    text = trampoline_ir(ARRAY_DATA_OFFSET, id(np.ndarray), id(None),
                         ctypes.cast(api.PyErr_SetString, ctypes.c_void_p).value,
                         ctypes.addressof(type_error))
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    engine, _ = object_engine(mod)      # (unoptimized IR: a dozen instructions, no loops worth it)
    method = _MethodDef(b"nbxla_kernel_call", engine.get_function_address("nbxla_kernel_call"),
                        METH_FASTCALL, None)
    new = api.PyCFunction_NewEx
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
    return {"engine": engine, "method": method, "new": new}


def _compiled() -> dict | None:
    state = _state.get("compiled", False)
    if state is False:
        with _lock:
            if "compiled" not in _state:
                try:
                    _state["compiled"] = _compile()
                except (OSError, AttributeError, RuntimeError, ValueError):     # no C API reachable
                    _state["compiled"] = None
            state = _state["compiled"]
    return state


def kernel_caller(address: int, extent: int, arrays: int, extras: tuple = ()):
    """A built-in function ``call(*arrays)`` of exactly ``arrays`` arrays, running the kernel
    at ``address`` (its pointer-array entry point) over ``[0, extent)`` on their buffers then the
    ``extras`` arrays' buffers; None where fast calls are not available.  The caller keeps
    ``extras`` alive as long as the function (a thunk holds both)."""
    state = _compiled()
    if state is None:
        return None
    if not 1 <= arrays or arrays + len(extras) > MAX_BUFFERS:
        return None
    words = np.array([address, extent, arrays, len(extras)] + [e.ctypes.data for e in extras], np.int64)
    return state["new"](ctypes.addressof(state["method"]), words, None)
