"""Very long lines in a %%xla cell (issue 28): what plain Python runs, the cell runs; what
Python's parser cannot take is a clear CellSyntaxError; messages quote a long line shortly."""

from __future__ import annotations

import numpy as np

from tests.ipython_util import run, shell  # noqa: F401  (the fixture)


def test_a_literal_of_12000_numbers_on_one_line(shell):
    numbers = ", ".join(f"{i}.5" for i in range(12_000))          # a 97 000-character line
    shell.user_ns["y"] = np.ones(3)
    result, out = run(shell, f"%%xla\nx = np.array([{numbers}])\ns = x.sum() + y.sum()\n")
    assert result.error_in_exec is None, out
    assert shell.user_ns["s"] == np.array([i + 0.5 for i in range(12_000)]).sum() + 3


def test_a_chain_of_2400_additions_runs_as_in_python(shell):
    # Python compiles it; converting its syntax tree recursed past Python's stack limit.
    shell.user_ns["y"] = np.arange(3.0)
    result, out = run(shell, "%%xla\nz = " + " + ".join(["y"] * 2400) + "\n")
    assert result.error_in_exec is None, out
    np.testing.assert_array_equal(shell.user_ns["z"], np.arange(3.0) * 2400)


def test_a_chain_python_cannot_parse_is_a_clear_syntax_error(shell):
    shell.user_ns["y"] = np.arange(3.0)
    result, out = run(shell, "%%xla\nw = 1\nz = " + " + ".join(["y"] * 4000) + "\n")
    assert type(result.error_in_exec).__name__ == "CellSyntaxError"
    assert "line 3 nests too deeply" in out and "split it into several statements" in out
    assert "RecursionError" not in out


def test_an_error_on_a_long_line_quotes_it_shortly(shell):
    shell.user_ns["y"] = np.ones(3)
    ones = ", ".join(["1"] * 30_000)
    line = f"z = y[np.array([{ones}])].sum() + y[(y * 3).astype(int)]"      # a traced index: 3
    result, out = run(shell, f"%%xla\n{line}\n")
    assert isinstance(result.error_in_exec, IndexError)
    assert "out of bounds" in out and f"({len(line)} characters)" in out and len(out) < 2_000
