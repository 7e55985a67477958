"""AOT with an unknown dimension (``--arg f32[?,64]``): one object whose function takes the size
first, linked into a C program with ``cc`` and run at several sizes against NumPy; sizes outside
the compiled range return 2; the header declares the size parameter and the sizes as macros."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nbxla.aot
from nbxla.errors import AotError

needs_cc = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("ld") is None,
                              reason="AOT needs a C compiler (cc) and ld")

W = np.random.default_rng(0).random((64, 32)).astype(np.float32)

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "layer.h"

/* usage: main B x.bin w.bin out0.bin out1.bin; exit status: layer()'s return code */
int main(int argc, char **argv) {
    int64_t b = atoll(argv[1]);
    size_t nx = b > 0 ? (size_t)LAYER_ARG0_SIZE(b) : 1, nw = LAYER_ARG1_SIZE(b);
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
    size_t n0 = b > 0 ? (size_t)LAYER_RESULT0_SIZE(b) : 1, n1 = LAYER_RESULT1_SIZE(b);
    float *r0 = malloc(n0 * sizeof(float)), *r1 = malloc(n1 * sizeof(float));
    FILE *f = fopen(argv[2], "rb"); if (b > 0 && fread(x, sizeof(float), nx, f) != nx) return 9; fclose(f);
    f = fopen(argv[3], "rb"); if (fread(w, sizeof(float), nw, f) != nw) return 9; fclose(f);
    int rc = layer(b, x, w, r0, r1);
    if (rc) return rc;
    f = fopen(argv[4], "wb"); fwrite(r0, sizeof(float), n0, f); fclose(f);
    f = fopen(argv[5], "wb"); fwrite(r1, sizeof(float), n1, f); fclose(f);
    return 0;
}
"""


def layer(x, w):
    h = np.tanh(x @ w)
    return h * 2 - 1, h.sum(axis=0)             # (a column sum over the unknown size)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot_unknown")
    obj = nbxla.aot.compile(layer, ["f32[?,64]", "f32[64,32]"], str(out), "layer")
    (out / "main.c").write_text(_MAIN)
    exe = out / "main"
    subprocess.run(["cc", "-O2", "-I", str(out), str(out / "main.c"), obj.object_path, "-o", str(exe),
                    "-lm", "-lpthread"], check=True, capture_output=True)
    return obj, out, exe


def _run(out, exe, x):
    b = x.shape[0]
    x.tofile(out / "x.bin")
    W.tofile(out / "w.bin")
    done = subprocess.run([str(exe), str(b), str(out / "x.bin"), str(out / "w.bin"), str(out / "r0.bin"),
                           str(out / "r1.bin")], capture_output=True)
    if done.returncode:
        return done.returncode, None
    return 0, (np.fromfile(out / "r0.bin", np.float32).reshape(b, 32), np.fromfile(out / "r1.bin", np.float32))


@needs_cc
@pytest.mark.parametrize("b", [1, 2, 3, 8, 17, 35, 100, 1031, 5000])
def test_one_object_runs_at_every_size(program, b):
    obj, out, exe = program
    x = np.random.default_rng(b).random((b, 64)).astype(np.float32)
    rc, got = _run(out, exe, x)
    assert rc == 0
    want = layer(x, W)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-4)


@needs_cc
def test_sizes_outside_the_range_return_2(program):
    obj, out, exe = program
    assert _run(out, exe, np.ones((0, 64), np.float32))[0] == 2      # size 0 is specialised


@needs_cc
def test_the_header_declares_the_size_parameter(program):
    obj, out, exe = program
    text = open(obj.header_path).read()
    assert "int layer(int64_t b, const float *arg0, const float *arg1, float *result0, float *result1);" in text
    assert "#define LAYER_ARG0_SIZE(b) (((int64_t)64 * (b)))" in text
    assert "signature: (f32[b,64], f32[64,32]) -> (f32[b,32], f32[32])" in text
    # (size 1 is served: the program traced at 1 is the same program)
    assert "#define LAYER_MIN_B 1" in text and "#define LAYER_MAX_B" in text


@needs_cc
def test_the_cli_takes_question_marks(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("import numpy as np\n\ndef scale(x):\n    return np.exp(x) * 2\n")
    done = subprocess.run([sys.executable, "-m", "nbxla", "aot", f"{source}:scale", "--arg", "f32[?,784]",
                           "-o", str(tmp_path / "build")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "int scale(int64_t b, const float *arg0, float *result0);" in (tmp_path / "build" / "scale.h").read_text()


@needs_cc
def test_the_cli_takes_named_unknown_sizes(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("import numpy as np\n\ndef add(x, y):\n    return np.exp(x) + y\n")
    done = subprocess.run([sys.executable, "-m", "nbxla", "aot", f"{source}:add", "--arg", "f32[?m,?n]",
                           "--arg", "f32[?m,?n]", "-o", str(tmp_path / "build")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "int add(int64_t m, int64_t n, const float *arg0, const float *arg1, float *result0);" in \
        (tmp_path / "build" / "add.h").read_text()


def test_a_function_whose_size_cannot_stay_unknown_is_refused_with_the_reason(tmp_path):
    def branchy(x):
        if x.shape[0] > 10:
            return x * 2
        return x * 3
    with pytest.raises(AotError, match=r"x.shape\[0\] \(\?b\) cannot stay unknown.*compares a size"):
        nbxla.aot.compile(branchy, ["f32[?,8]"], str(tmp_path), "branchy")
