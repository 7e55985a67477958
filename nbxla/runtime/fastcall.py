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

The GIL (which ctypes released around every call) is released around native loops and around
kernels a thunk marks as long enough (``release``): for a small kernel, releasing and taking
it back costs more than the kernel, and nothing else can run in that time anyway.

The trampoline embeds this process's addresses (``numpy.ndarray``'s type object, ``None``,
``PyErr_SetString``): it is compiled in each process (once, on first use; by the -O0 code
generator, as glue: ``cpu.object_engine``) and never stored in the persistent cache.  Native
loops' and object entry points' trampolines (one per count of arrays: those take them as
separate arguments) are compiled when a callee of that count first needs one.  ``None`` where CPython's C API is not reachable (not
CPython, or ids are not addresses): callers keep ctypes.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from contextlib import contextmanager

import numpy as np
from llvmlite import ir

# The most buffers one call may pass (the kernel's pointer array lives on the trampoline's
# stack); kernels with more keep ctypes.
MAX_BUFFERS = 256
# The most buffers a native loop's fast call passes (one call instruction per count).
MAX_LOOP_ARGS = 64
# The most arrays an object entry point's fast call passes (full reductions: a few).
MAX_OBJECT_ARGS = 16
METH_FASTCALL = 0x0080


def _array_data_offset() -> int | None:
    """Where an ndarray object keeps its data pointer, relative to the object's address: right
    after the object header (NumPy's PyArrayObject starts ``PyObject_HEAD; char *data``).
    Checked on a probe array; None where that does not hold (or ids are not addresses)."""
    if sys.implementation.name != "cpython":
        return None
    offset = object.__basicsize__                 # the header's size, whatever the build
    probe = np.empty(3)
    if ctypes.c_void_p.from_address(id(probe) + offset).value != probe.__array_interface__["data"][0]:
        return None
    return offset


# (Also compiled into the kernels' array-object entry points: codegen/cpu.py.)
ARRAY_DATA_OFFSET = _array_data_offset()

_I8 = ir.IntType(8)
_I8P = _I8.as_pointer()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_lock = threading.Lock()
_state: dict = {}       # "engine", "method", "new" once compiled; "failed" when not available


def trampoline_ir(data_offset: int, array_type: int, none: int, set_error: int, type_error: int,
                  long_from: int, save_thread: int, restore_thread: int) -> str:
    """The LLVM IR of ``nbxla_kernel_call`` (see the module docstring) for this process's
    addresses (``nbxla_loop_call_<count>`` and ``nbxla_object_call_<count>``:
    ``loop_trampoline_ir``, ``object_trampoline_ir``)."""
    module, addresses, gil = _trampoline_module("nbxla_fastcall", data_offset, array_type, none, set_error,
                                                type_error, save_thread, restore_thread)

    # nbxla_kernel_call: self = [kernel, arrays, release, extent, extras, extras' data pointers...]
    b, words, pointers, nargs, _ = _gathering_function(module, "nbxla_kernel_call", MAX_BUFFERS, addresses)
    fn = b.function
    extent, n_extra = _word(b, words, 3), _word(b, words, 4)
    head, body, run = (fn.append_basic_block(n) for n in ("extras", "extra", "run"))
    came_from = b.block
    b.branch(head)
    b.position_at_end(head)         # (the extras' pointers after the arrays: none or one)
    e = b.phi(_I64)
    e.add_incoming(ir.Constant(_I64, 0), came_from)
    b.cbranch(b.icmp_signed("<", e, n_extra), body, run)
    b.position_at_end(body)
    extra = b.inttoptr(b.load(b.gep(words, [b.add(e, ir.Constant(_I64, 5))])), _I8P)
    b.store(extra, b.gep(pointers, [b.add(nargs, e)]))
    e.add_incoming(b.add(e, ir.Constant(_I64, 1)), body)
    b.branch(head)
    b.position_at_end(run)
    kernel_type = ir.FunctionType(ir.VoidType(), [_I8P.as_pointer(), _I64, _I64])
    _without_gil(b, _word(b, words, 2), gil, lambda: b.call(
        b.inttoptr(_word(b, words, 0), kernel_type.as_pointer()), [pointers, ir.Constant(_I64, 0), extent]))
    _return_none(b, none)

    return str(module)


def _trampoline_module(name: str, data_offset: int, array_type: int, none: int, set_error: int,
                       type_error: int, save_thread: int, restore_thread: int) -> tuple:
    """A module with the TypeError message: (module, the addresses _gathering_function takes,
    the GIL's (save, restore) functions)."""
    module = ir.Module(name=name)
    message = "nbxla fast call: wrong number of arguments or an argument that is not a numpy.ndarray"
    text = bytearray(message.encode() + b"\0")
    glob = ir.GlobalVariable(module, ir.ArrayType(_I8, len(text)), "nbxla_fastcall_message")
    glob.global_constant, glob.linkage = True, "private"
    glob.initializer = ir.Constant(ir.ArrayType(_I8, len(text)), text)
    addresses = dict(data_offset=data_offset, array_type=array_type, none=none, set_error=set_error,
                     type_error=type_error, message=glob)
    return module, addresses, (save_thread, restore_thread)


def loop_trampoline_ir(count: int, data_offset: int, array_type: int, none: int, set_error: int,
                       type_error: int, long_from: int, save_thread: int, restore_thread: int) -> str:
    """The LLVM IR of ``nbxla_loop_call_<count>``: self = [loop function, arrays (= count),
    release]; calls ``int loop(void *buffer_0, ..., void *buffer_<count-1>)``.  One function
    (and module) per count, compiled when a loop of that count first needs it: one function
    for every count up to MAX_LOOP_ARGS (a switch of 64 calls of 1..64 arguments, 2080 loads)
    cost 0.12-0.15 s of CPU in every process that ran a native loop, for the one or two counts
    a program uses."""
    module, addresses, gil = _trampoline_module(f"nbxla_loop_call_{count}", data_offset, array_type, none,
                                                set_error, type_error, save_thread, restore_thread)
    b, words, pointers, nargs, fail = _gathering_function(module, f"nbxla_loop_call_{count}", count, addresses)
    address = _word(b, words, 0)
    release = b.icmp_unsigned("!=", _word(b, words, 2), ir.Constant(_I64, 0))
    state = b.alloca(_I8P)
    with b.if_then(release):
        b.store(b.call(b.inttoptr(ir.Constant(_I64, gil[0]), _SAVE.as_pointer()), []), state)
    loop_type = ir.FunctionType(_I32, [_I8P] * count)
    buffers = [b.load(b.gep(pointers, [ir.Constant(_I64, k)])) for k in range(count)]
    rc = b.call(b.inttoptr(address, loop_type.as_pointer()), buffers)
    with b.if_then(release):
        b.call(b.inttoptr(ir.Constant(_I64, gil[1]), _RESTORE.as_pointer()), [b.load(state)])
    failed, fine = b.function.append_basic_block("failed"), b.function.append_basic_block("fine")
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(_I32, 0)), fine, failed)
    b.position_at_end(fine)
    _return_none(b, none)
    b.position_at_end(failed)       # (the code as a Python int: check_loop_code says what it means)
    long_type = ir.FunctionType(_I8P, [ir.IntType(64)])
    b.ret(b.call(b.inttoptr(ir.Constant(_I64, long_from), long_type.as_pointer()), [b.sext(rc, _I64)]))
    return str(module)


def object_trampoline_ir(count: int, data_offset: int, array_type: int, none: int, set_error: int,
                         type_error: int, long_from: int, save_thread: int, restore_thread: int) -> str:
    """The LLVM IR of ``nbxla_object_call_<count>``: self = [entry, arrays (= count), release,
    extent]; calls ``void entry(PyObject *array_0, ..., i64 begin = 0, i64 end = extent)``.
    One per count, made on first need, as ``loop_trampoline_ir``'s (all 16 counts in one
    switch were 20 ms of every process's first fast call)."""
    name = f"nbxla_object_call_{count}"
    module, addresses, gil = _trampoline_module(name, data_offset, array_type, none, set_error, type_error,
                                                save_thread, restore_thread)
    b, words, _, nargs, fail = _gathering_function(module, name, count, addresses)
    address, extent, release = _word(b, words, 0), _word(b, words, 3), _word(b, words, 2)
    entry_type = ir.FunctionType(ir.VoidType(), [_I8P] * count + [_I64, _I64])
    objects = [b.load(b.gep(b.function.args[1], [ir.Constant(_I64, k)])) for k in range(count)]
    _without_gil(b, release, gil, lambda: b.call(b.inttoptr(address, entry_type.as_pointer()),
                                                 objects + [ir.Constant(_I64, 0), extent]))
    _return_none(b, none)
    return str(module)


_SAVE = ir.FunctionType(_I8P, [])                   # PyThreadState *PyEval_SaveThread(void)
_RESTORE = ir.FunctionType(ir.VoidType(), [_I8P])   # void PyEval_RestoreThread(PyThreadState *)


def _without_gil(b: ir.IRBuilder, release, gil: tuple, emit) -> None:
    """``emit()`` the call, between releasing and taking back the GIL when ``release`` (an i64
    word) is not 0, else with the GIL held."""
    with b.if_else(b.icmp_unsigned("!=", release, ir.Constant(_I64, 0))) as (then, otherwise):
        with then:
            state = b.call(b.inttoptr(ir.Constant(_I64, gil[0]), _SAVE.as_pointer()), [])
            emit()
            b.call(b.inttoptr(ir.Constant(_I64, gil[1]), _RESTORE.as_pointer()), [state])
        with otherwise:
            emit()


def _word(b: ir.IRBuilder, words, k: int):
    return b.load(b.gep(words, [ir.Constant(_I64, k)]))


def _return_none(b: ir.IRBuilder, none: int) -> None:
    refs = b.inttoptr(ir.Constant(_I64, none), _I64.as_pointer())
    b.store(b.add(b.load(refs), ir.Constant(_I64, 1)), refs)     # Py_INCREF(None)
    b.ret(ir.Constant(_I64, none).inttoptr(_I8P))


def _gathering_function(module: ir.Module, name: str, capacity: int, addresses: dict) -> tuple:
    """A fastcall function ``name(self, args, nargs)`` up to the point where every argument
    was checked to be an exact ndarray, ``nargs`` equal to the count in ``self``'s words (word
    1), and the arrays' data pointers gathered: (its builder there, the ``self`` array's int64
    words, the pointer array of ``capacity`` slots, nargs, the block raising TypeError)."""
    fn = ir.Function(module, ir.FunctionType(_I8P, [_I8P, _I8P.as_pointer(), _I64]), name)
    self_obj, args, nargs = fn.args
    entry, check, gather, fail, gathered = (fn.append_basic_block(n) for n in
                                            ("entry", "check", "gather", "fail", "gathered"))
    b = ir.IRBuilder(entry)
    offset = addresses["data_offset"]

    def field(obj, at, kind):
        return b.load(b.bitcast(b.gep(obj, [ir.Constant(_I64, at)]), kind.as_pointer()))

    words = b.bitcast(field(self_obj, offset, _I8P), _I64.as_pointer())
    # (1 <= arrays <= capacity, less the extras: the makers of ``self`` made sure)
    ok = b.icmp_unsigned("==", nargs, _word(b, words, 1))
    pointers = b.alloca(_I8P, ir.Constant(_I64, capacity))
    b.cbranch(ok, check, fail)

    b.position_at_end(check)
    k = b.phi(_I64)
    k.add_incoming(ir.Constant(_I64, 0), entry)
    obj = b.load(b.gep(args, [k]))
    exact = b.icmp_unsigned("==", b.ptrtoint(field(obj, 8, _I8P), _I64),
                            ir.Constant(_I64, addresses["array_type"]))
    b.cbranch(exact, gather, fail)
    b.position_at_end(gather)
    b.store(field(obj, offset, _I8P), b.gep(pointers, [k]))
    nxt = b.add(k, ir.Constant(_I64, 1))
    k.add_incoming(nxt, gather)
    b.cbranch(b.icmp_signed("<", nxt, nargs), check, gathered)

    b.position_at_end(fail)
    set_type = ir.FunctionType(ir.VoidType(), [_I8P, _I8P])
    exc = b.load(b.inttoptr(ir.Constant(_I64, addresses["type_error"]), _I8P.as_pointer()))
    b.call(b.inttoptr(ir.Constant(_I64, addresses["set_error"]), set_type.as_pointer()),
           [exc, b.bitcast(addresses["message"], _I8P)])
    b.ret(ir.Constant(_I8P, None))
    b.position_at_end(gathered)
    return b, words, pointers, nargs, fail


def _api_addresses() -> tuple:
    """This process's addresses the trampolines embed, in ``trampoline_ir``'s order after the
    data offset."""
    api = ctypes.pythonapi
    type_error = ctypes.c_void_p.in_dll(api, "PyExc_TypeError")
    return (id(np.ndarray), id(None), ctypes.cast(api.PyErr_SetString, ctypes.c_void_p).value,
            ctypes.addressof(type_error), *[ctypes.cast(getattr(api, name), ctypes.c_void_p).value
                                            for name in ("PyLong_FromLong", "PyEval_SaveThread",
                                                         "PyEval_RestoreThread")])


def _engine(text: str):
    import llvmlite.binding as llvm
    from ..codegen.cpu import object_engine
    mod = llvm.parse_assembly(text)
    mod.triple = llvm.get_process_triple()
    return object_engine(mod, glue=True)[0]   # (unoptimized IR: straight calls, no loops worth it)


def _compile() -> dict | None:
    if sys.implementation.name != "cpython" or ARRAY_DATA_OFFSET is None:
        return None
    addresses = _api_addresses()
    engine = _engine(trampoline_ir(ARRAY_DATA_OFFSET, *addresses))
    methods = {name: _MethodDef(name.encode(), engine.get_function_address(name), METH_FASTCALL, None)
               for name in ("nbxla_kernel_call",)}
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
    return {"engines": [engine], "methods": methods, "new": new, "addresses": addresses}


def _counted_method(state: dict, kind: str, count: int) -> str:
    """The name of the ``kind`` ("loop" or "object") trampoline for ``count`` arrays in
    ``state["methods"]``, compiled into its own engine on first use."""
    name = f"nbxla_{kind}_call_{count}"
    if name not in state["methods"]:
        with _lock:
            if name not in state["methods"]:
                make = loop_trampoline_ir if kind == "loop" else object_trampoline_ir
                engine = _engine(make(count, ARRAY_DATA_OFFSET, *state["addresses"]))
                state["engines"].append(engine)
                state["methods"][name] = _MethodDef(name.encode(), engine.get_function_address(name),
                                                    METH_FASTCALL, None)
    return name


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


def kernel_caller(address: int, extent: int, arrays: int, extras: tuple = (), release: bool = False):
    """A built-in function ``call(*arrays)`` of exactly ``arrays`` arrays, running the kernel
    at ``address`` (its pointer-array entry point) over ``[0, extent)`` on their buffers then the
    ``extras`` arrays' buffers; None where fast calls are not available.  ``release``: the GIL
    is released around the kernel (for kernels long enough that other Python threads should
    run meanwhile).  The caller keeps ``extras`` alive as long as the function (a thunk holds
    both)."""
    if not 1 <= arrays or arrays + len(extras) > MAX_BUFFERS:
        return None
    return _made("nbxla_kernel_call",
                 [address, arrays, int(release), extent, len(extras)] + [e.ctypes.data for e in extras])


def loop_caller(address: int, arrays: int):
    """A built-in function ``call(*arrays)`` of exactly ``arrays`` arrays, calling the native
    loop ``int loop(void *buffer_0, ...)`` at ``address`` on their buffers: None when it
    returns 0, else the code as an int (``native_loops.check_loop_code``); the GIL is released
    while it runs (a loop may run for seconds: other Python threads run meanwhile, as they did
    under ctypes).  None where fast calls are not available or the loop takes more than
    ``MAX_LOOP_ARGS`` buffers."""
    if not 1 <= arrays <= MAX_LOOP_ARGS:
        return None
    state = _compiled()
    if state is None:
        return None
    return _made(_counted_method(state, "loop", arrays), [address, arrays, 1])


def object_caller(address: int, extent: int, arrays: int, release: bool = False):
    """A built-in function ``call(*arrays)`` of exactly ``arrays`` arrays, calling a kernel's
    array-object entry point ``entry(array_0, ..., begin=0, end=extent)`` (codegen/cpu.py:
    a full reduction's both phases in one call); ``release`` as for ``kernel_caller``.  None
    where fast calls are not available or for more than ``MAX_OBJECT_ARGS`` arrays."""
    if not 1 <= arrays <= MAX_OBJECT_ARGS:
        return None
    state = _compiled()
    if state is None:
        return None
    return _made(_counted_method(state, "object", arrays), [address, arrays, int(release), extent])


def _made(name: str, words: list):
    state = _compiled()
    if state is None:
        return None
    return state["new"](ctypes.addressof(state["methods"][name]), np.array(words, np.int64), None)


@contextmanager
def ctypes_only():
    """Within it, new thunks get no built-in callers (they keep ctypes): to compare the two
    side by side in one process (benchmarks/small_calls.py) and to test the fallback."""
    state = _compiled()
    _state["compiled"] = None
    try:
        yield
    finally:
        _state["compiled"] = state
