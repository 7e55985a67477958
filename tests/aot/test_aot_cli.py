"""``python -m nbxla aot``: FILE.py:FUNC or FILE.hlo -> DIR/NAME.o + DIR/NAME.h (+ stages), and
clear errors (exit 2) for what cannot be compiled ahead of time."""

from __future__ import annotations

import subprocess
import textwrap

import numpy as np

from nbxla.__main__ import main

from .aot_util import needs_cc, write_main, run
from .test_aot_programs import WHILE_HLO

pytestmark = needs_cc

SOURCE = textwrap.dedent("""
    import numpy as np

    def predict(x, w, b):
        z = x @ w + b
        return np.argmax(z, axis=1), z.max(axis=1)
""")


def test_cli_compiles_a_python_function_and_the_c_program_runs(tmp_path, capsys):
    src = tmp_path / "model.py"
    src.write_text(SOURCE)
    out = tmp_path / "build"
    rc = main(["aot", f"{src}:predict", "--arg", "f32[8,16]", "--arg", "f32[16,4]", "--arg", "f32[4]",
               "-o", str(out), "--name", "predict", "--emit-llvm", "--emit-asm", "--emit-c"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "int predict(f32[8,16], f32[16,4], f32[4] -> s64[8], f32[8])" in printed
    for suffix in ("o", "h", "ll", "s", "driver.c"):
        assert (out / f"predict.{suffix}").is_file(), suffix
    header = (out / "predict.h").read_text()
    assert "int predict(const float *arg0, const float *arg1, const float *arg2, int64_t *result0, " \
           "float *result1);" in header
    assert "def predict(x, w, b):" in header and "PREDICT_ARENA_BYTES" in header
    assert "define" in (out / "predict.ll").read_text()

    from nbxla.aot import AotObject, parse_spec
    obj = AotObject("predict", str(out / "predict.o"), str(out / "predict.h"),
                    [parse_spec(s) for s in ("f32[8,16]", "f32[16,4]", "f32[4]")],
                    [parse_spec(s) for s in ("s64[8]", "f32[8]")], 0, [])
    write_main(obj, str(tmp_path / "main.c"))
    exe = tmp_path / "prog"
    subprocess.run(["cc", f"-I{out}", str(tmp_path / "main.c"), str(out / "predict.o"), "-o", str(exe), "-lm",
                    "-lpthread"], check=True)
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 16), (16, 4), (4,)))
    got = run(obj, str(exe), [x, w, b], tmp_path)
    z = x @ w + b
    np.testing.assert_array_equal(got[0], np.argmax(z, axis=1))
    np.testing.assert_allclose(got[1], z.max(axis=1), rtol=1e-5)


def test_cli_compiles_an_hlo_module(tmp_path, capsys):
    path = tmp_path / "loop.hlo"
    path.write_text(WHILE_HLO)
    assert main(["aot", str(path), "-o", str(tmp_path)]) == 0
    assert (tmp_path / "power_loop.o").is_file()
    assert "int power_loop(f64[8,8], f64[8] -> s32[], f64[8], f64[8])" in capsys.readouterr().out


def test_cli_errors_say_what_to_do(tmp_path, capsys):
    src = tmp_path / "model.py"
    src.write_text(SOURCE)
    assert main(["aot", f"{src}:predict", "--arg", "float[8,16]", "-o", str(tmp_path)]) == 2
    assert "not an array type in HLO's spelling" in capsys.readouterr().err
    assert main(["aot", f"{src}:predict", "-o", str(tmp_path)]) == 2
    assert "give the argument types" in capsys.readouterr().err
    assert main(["aot", f"{src}:missing", "--arg", "f32[2]", "-o", str(tmp_path)]) == 2
    assert "has no function missing" in capsys.readouterr().err
    assert main(["aot", f"{src}:predict", "--arg", "f32[8,16]", "--arg", "f32[16,4]", "--arg", "f32[4]",
                 "--name", "not-an-identifier", "-o", str(tmp_path)]) == 2
    assert "is not a C identifier" in capsys.readouterr().err
    assert main(["aot", f"{src}:predict", "--arg", "f32[8,16]", "--arg", "f32[16,4]", "--arg", "f32[4]",
                 "--name", "random", "-o", str(tmp_path)]) == 2
    assert "'random' is taken by the C library" in capsys.readouterr().err
