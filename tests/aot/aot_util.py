"""Build an AOT object, link it into a C test program with ``cc``, run it, read its results.

The program (``main.c``, generated per object) reads each argument from a file, calls
``NAME``, checks that ``NAME_arena`` and four threads calling ``NAME`` at once give the same
bytes (reentrancy), and writes each result to a file.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import nbxla.aot
from nbxla.codegen.aot import C_TYPES

needs_cc = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("ld") is None,
                              reason="AOT needs a C compiler (cc) and ld")

# The test drivers' file reads and writes (a case's inputs in, its results out).
C_FILE_HELPERS = r"""static void *load(const char *path, size_t n) {
    void *p = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    if (!f || fread(p, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    return p;
}

static void save(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
    fclose(f);
}
"""

_MAIN = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "@NAME@.h"

@FILE_HELPERS@

@DECLS@

static int call(void **r) { return @NAME@(@ARGS@@SEP@@RESULTS@); }

static void *in_thread(void *r) { return (void *)(long)call((void **)r); }

int main(int argc, char **argv) {
    (void)argc;
@LOADS@
    void *r[@NR1@], *again[4][@NR1@];
    size_t rbytes[@NR1@] = {@RBYTES@};
    for (int k = 0; k < @NR@; k++) {
        r[k] = calloc(1, rbytes[k] + 1);
        for (int t = 0; t < 4; t++) again[t][k] = calloc(1, rbytes[k] + 1);
    }
    int rc = call(r);
    if (rc) { fprintf(stderr, "@NAME@ returned %d\n", rc); return 10 + rc; }
    /* the caller's arena gives the same bytes */
    void *arena = aligned_alloc(64, @UPPER@_ARENA_BYTES + 64);
    rc = @NAME@_arena(@ARGS@@SEP@@AGAIN0@, arena);
    free(arena);
    if (rc) return 20 + rc;
    for (int k = 0; k < @NR@; k++)
        if (memcmp(r[k], again[0][k], rbytes[k])) { fprintf(stderr, "arena result %d differs\n", k); return 3; }
    /* four concurrent calls give the same bytes */
    pthread_t th[4];
    for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, in_thread, again[t]);
    for (int t = 0; t < 4; t++) {
        void *status;
        pthread_join(th[t], &status);
        if (status) return 30;
        for (int k = 0; k < @NR@; k++)
            if (memcmp(r[k], again[t][k], rbytes[k])) { fprintf(stderr, "thread %d result %d differs\n", t, k); return 4; }
    }
    for (int k = 0; k < @NR@; k++) save(argv[1 + @NA@ + k], r[k], rbytes[k]);
    return 0;
}
""".replace("@FILE_HELPERS@", C_FILE_HELPERS)


def write_main(obj, path: str) -> None:
    na, nr = len(obj.arg_shapes), len(obj.result_shapes)
    decls = "\n".join(f"static {C_TYPES[s.element_type]} *a{k};" for k, s in enumerate(obj.arg_shapes))
    loads = "\n".join(f"    a{k} = load(argv[{1 + k}], {s.byte_size});" for k, s in enumerate(obj.arg_shapes))
    results = ", ".join(f"({C_TYPES[s.element_type]} *)r[{k}]" for k, s in enumerate(obj.result_shapes))
    text = (_MAIN.replace("@DECLS@", decls).replace("@LOADS@", loads)
            .replace("@ARGS@", ", ".join(f"a{k}" for k in range(na)))
            .replace("@SEP@", ", " if na and nr else "")
            .replace("@RESULTS@", results)
            .replace("@AGAIN0@", results.replace("r[", "again[0][") if results else "")
            .replace("@RBYTES@", ", ".join(str(s.byte_size) for s in obj.result_shapes) or "0")
            .replace("@NR1@", str(max(1, nr))).replace("@NR@", str(nr)).replace("@NA@", str(na))
            .replace("@UPPER@", obj.name.upper()).replace("@NAME@", obj.name))
    with open(path, "w") as f:
        f.write(text)


def build(fn, specs, directory, name: str):
    """(AotObject, path of the linked test program): ``cc main.c NAME.o -lm -lpthread``."""
    directory = str(directory)
    obj = nbxla.aot.compile(fn, specs, directory, name)
    main = os.path.join(directory, f"{name}_main.c")
    write_main(obj, main)
    exe = os.path.join(directory, f"{name}_prog")
    done = subprocess.run(["cc", "-O1", f"-I{directory}", main, obj.object_path, "-o", exe, "-lm", "-lpthread"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return obj, exe


def run(obj, exe: str, args: list[np.ndarray], directory) -> list[np.ndarray]:
    """The program's results for ``args`` (NumPy arrays in the argument order)."""
    directory = str(directory)
    ins, outs = [], []
    for k, (a, s) in enumerate(zip(args, obj.arg_shapes)):
        a = np.ascontiguousarray(a, dtype=s.dtype)
        assert a.size == s.size, (a.shape, s.dims)      # (stored scalars may be 1-element arrays)
        ins.append(os.path.join(directory, f"in{k}.bin"))
        a.tofile(ins[-1])
    outs = [os.path.join(directory, f"out{k}.bin") for k in range(len(obj.result_shapes))]
    done = subprocess.run([exe, *ins, *outs], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
    return [np.fromfile(p, dtype=s.dtype).reshape(s.dims) for p, s in zip(outs, obj.result_shapes)]


def undefined_symbols(object_path: str) -> set[str]:
    """The object's undefined symbols, less the GOT's base (the linker defines it)."""
    done = subprocess.run(["nm", "-u", object_path], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.strip()} - \
        {"_GLOBAL_OFFSET_TABLE_"}


def system_library_symbols() -> set[str]:
    """What libc, libm and libpthread define (their dynamic symbol tables, as cc links them)."""
    names: set[str] = set()
    for lib in ("libc.so.6", "libm.so.6", "libpthread.so.0"):
        path = subprocess.run(["cc", f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(path):
            continue
        done = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True)
        names |= {line.split()[-1].split("@")[0] for line in done.stdout.splitlines() if line.strip()}
    return names
