"""Objects with unknown sizes (``f32[?,64]``, ``f32[?m,?n]``) linked into a C program and run at
several sizes in one process (so that the per-thread arena is grown and reused), each result
checked against the caller's-arena entry point (``NAME_arena`` with ``NAME_scratch_bytes``)."""

from __future__ import annotations

import subprocess

import numpy as np

import nbxla.aot
from nbxla.codegen.aot import C_TYPES
from tests.aot.aot_util import C_FILE_HELPERS

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "@NAME@.h"

@FILE_HELPERS@

/* usage: main DIR CASES; case i: DIR/i.sizes (int64 each), DIR/i.argK in, DIR/i.resK out, DIR/i.rc */
int main(int argc, char **argv) {
    (void)argc;
    int cases = atoi(argv[2]);
    char path[4096];
    for (int c = 0; c < cases; c++) {
        snprintf(path, sizeof path, "%s/%d.sizes", argv[1], c);
        int64_t *s = load(path, @NS@ * sizeof(int64_t));
@LOADS@
        int rc = @NAME@(@SIZES@, @ARGS@@SEP@@RESULTS@);
        if (!rc) {
            void *arena = aligned_alloc(64, @NAME@_scratch_bytes(@SIZES@));
            int rc2 = @NAME@_arena(@SIZES@, @ARGS@@SEP@@AGAIN@, arena);
            free(arena);
            if (rc2) rc = 20 + rc2;
@COMPARE@
        }
        snprintf(path, sizeof path, "%s/%d.rc", argv[1], c);
        save(path, &rc, sizeof rc);
        if (!rc) {
@SAVES@
        }
    }
    @NAME@_release();
    return 0;
}
""".replace("@FILE_HELPERS@", C_FILE_HELPERS)


class UnknownSizeProgram:
    """``fn`` compiled for ``specs`` with ``?`` dimensions and linked into a test program."""

    def __init__(self, fn, specs, out, name: str):
        self.fn, self.out, self.name = fn, out, name
        self.obj = nbxla.aot.compile(fn, specs, str(out), name)
        self.args, self.results = self.obj.arg_shapes, self.obj.result_shapes
        self.symbols = []
        for s in self.args:
            for d in s.dims:
                if not isinstance(d, int) and d.name not in self.symbols:
                    self.symbols.append(d.name)
        sizes = ", ".join(f"s[{k}]" for k in range(len(self.symbols)))
        loads, results, again, compare, saves = [], [], [], [], []
        for k, s in enumerate(self.args):
            loads.append(f'        snprintf(path, sizeof path, "%s/%d.arg{k}", argv[1], c);\n'
                         f"        {C_TYPES[s.element_type]} *a{k} = load(path, {name.upper()}_ARG{k}_SIZE({sizes}) "
                         f"* sizeof({C_TYPES[s.element_type]}));")
        for k, s in enumerate(self.results):
            t = C_TYPES[s.element_type]
            n = f"{name.upper()}_RESULT{k}_SIZE({sizes}) * sizeof({t})"
            loads.append(f"        {t} *r{k} = calloc(1, {n} + 1), *q{k} = calloc(1, {n} + 1);")
            results.append(f"r{k}")
            again.append(f"q{k}")
            compare.append(f"            if (!rc && memcmp(r{k}, q{k}, {n})) rc = 3;")
            saves.append(f'            snprintf(path, sizeof path, "%s/%d.res{k}", argv[1], c);\n'
                         f"            save(path, r{k}, {n});")
        text = _MAIN
        for key, value in (("@LOADS@", "\n".join(loads)), ("@ARGS@", ", ".join(f"a{k}" for k in range(len(self.args)))),
                           ("@SEP@", ", " if self.args and results else ""), ("@RESULTS@", ", ".join(results)),
                           ("@AGAIN@", ", ".join(again)), ("@COMPARE@", "\n".join(compare)),
                           ("@SAVES@", "\n".join(saves)), ("@SIZES@", sizes), ("@NS@", str(len(self.symbols))),
                           ("@NAME@", name)):
            text = text.replace(key, value)
        (out / "main.c").write_text(text)
        self.exe = out / "main"
        subprocess.run(["cc", "-O1", "-I", str(out), str(out / "main.c"), self.obj.object_path, "-o", str(self.exe),
                        "-lm", "-lpthread"], check=True, capture_output=True)

    def run(self, cases: list[tuple[dict, list]]) -> list[tuple[int, list | None]]:
        """Each case (sizes by symbol, argument arrays) in one process: (return code, results)."""
        data = self.out / "cases"
        data.mkdir(exist_ok=True)
        for c, (sizes, args) in enumerate(cases):
            np.array([sizes[n] for n in self.symbols], np.int64).tofile(data / f"{c}.sizes")
            for k, (a, s) in enumerate(zip(args, self.args)):
                np.ascontiguousarray(a, s.dtype).tofile(data / f"{c}.arg{k}")
        subprocess.run([str(self.exe), str(data), str(len(cases))], check=True, capture_output=True)
        found = []
        for c, (sizes, _) in enumerate(cases):
            rc = int(np.fromfile(data / f"{c}.rc", np.int32)[0])
            if rc:
                found.append((rc, None))
                continue
            results = []
            for k, s in enumerate(self.results):
                dims = tuple(d if isinstance(d, int) else d.bind(sizes) for d in s.dims)
                results.append(np.fromfile(data / f"{c}.res{k}", s.dtype).reshape(dims))
            found.append((0, results))
        return found
