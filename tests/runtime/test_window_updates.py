"""Window updates in the JIT's entry (runtime/window_updates.py): a fusion rooted at a
``dynamic-update-slice`` writes only the window -- into its operand's buffer where the buffer
plan frees that buffer, else into a copy of the operand.  Every program runs against the
reference evaluator; the execution stage says which way each update ran.

Sizes: 16x16 f64 programs keep their temporaries out of the arena (below SMALL_ARENA), 128x128
ones place them in it; both run each case."""

from __future__ import annotations

import numpy as np
import pytest

import nbxla
from nbxla.compiler import compile_module
from nbxla.hlo.evaluator import evaluate
from nbxla.hlo.parser import parse_hlo
from nbxla.runtime.cache import CompilationCache

from tests.runtime.test_cpu_control_flow import check

SIZES = (16, 128)
IN_PLACE = "writes only the window, in its operand's buffer"
COPIED = "writes only the window, into a copy of its operand"

# t = a @ b (a BLAS output: memory the run makes), then t with rows [row, row+3) replaced by
# 2 * t[src:src+3] + u, then products of the results (a dot does not fuse: the update stays a
# fusion of its own).  {tail}: the rest of the entry, reading %r (and maybe %t).
PROGRAM = """
HloModule t
ENTRY main {{
  a = f64[{n},{n}] parameter(0)
  b = f64[{n},{n}] parameter(1)
  u = f64[{k},{n}] parameter(2)
  t = f64[{n},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  two = f64[] constant(2)
  twos = f64[{k},{n}] broadcast(two), dimensions={{}}
  s = f64[{k},{n}] slice({source}), slice={{[{src}:{srck}], [0:{n}]}}
  v = f64[{k},{n}] multiply(s, twos)
  w = f64[{k},{n}] add(v, u)
  i = s64[] constant({row})
  z = s64[] constant(0)
  r = f64[{n},{n}] dynamic-update-slice({target}, w, i, z)
{tail}
}}"""


def program(n: int, tail: str, target: str = "t", source: str | None = None, src: int = 0, row: int = 4,
            k: int = 3) -> str:
    return PROGRAM.format(n=n, tail=tail, target=target, source=source or target, src=src, srck=src + k, row=row, k=k)


def inputs(n: int, k: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return [rng.random((n, n)) - 0.5, rng.random((n, n)) - 0.5, rng.random((k, n))]


PRODUCT = "  ROOT e = f64[{n},{n}] dot(r, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"


def compiled(text: str):
    module = parse_hlo(text)
    c = compile_module(module, "cpu")
    update = [line for line in c.stage("execution").splitlines() if "dynamic_update_slice" in line]
    assert len(update) == 1, c.stage("execution")
    return module, c, update[0]


@pytest.mark.parametrize("n", SIZES)
def test_dead_operand_is_updated_in_place(n):
    module, c, how = compiled(program(n, "  ROOT e = f64[%d,%d] dot(r, b), lhs_contracting_dims={1}, "
                                         "rhs_contracting_dims={0}" % (n, n)))
    assert IN_PLACE in how
    check(c.executable, module, inputs(n))


@pytest.mark.parametrize("n", SIZES)
def test_operand_read_after_the_update_is_copied(n):
    """%t is read by a product that also needs the update (so it runs after it): writing the
    window into t's buffer would change that product (the evaluator says by how much)."""
    tail = ("  e = f64[{n},{n}] dot(r, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            "  f = f64[{n},{n}] dot(t, r), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            "  ROOT g = f64[{n},{n}] add(e, f)").format(n=n)
    module, c, how = compiled(program(n, tail))
    assert COPIED in how
    check(c.executable, module, inputs(n))


@pytest.mark.parametrize("n", SIZES)
def test_independent_reader_runs_before_the_update(n):
    """A product of %t that does not need the update is scheduled before it
    (passes/update_order.py): the update then writes into t's buffer."""
    tail = ("  e = f64[{n},{n}] dot(r, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            "  f = f64[{n},{n}] dot(t, a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            "  ROOT g = f64[{n},{n}] add(e, f)").format(n=n)
    module, c, how = compiled(program(n, tail))
    assert IN_PLACE in how
    check(c.executable, module, inputs(n))


@pytest.mark.parametrize("n", SIZES)
def test_operand_that_is_also_a_result_is_copied(n):
    module, c, how = compiled(program(n, "  ROOT out = (f64[%d,%d], f64[%d,%d]) tuple(r, t)" % (n, n, n, n)))
    assert COPIED in how
    got = check(c.executable, module, inputs(n))
    assert not np.shares_memory(got[0], got[1])


@pytest.mark.parametrize("n", SIZES)
def test_updated_result_has_memory_of_its_own(n):
    """The update is a result, written into t's buffer: that buffer is fresh memory, not the
    arena's (the next call's arena would overwrite what the caller holds)."""
    tail = ("  e = f64[{n},{n}] dot(r, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            "  ROOT out = (f64[{n},{n}], f64[{n},{n}]) tuple(r, e)").format(n=n)
    module, c, how = compiled(program(n, tail))
    assert IN_PLACE in how
    args = inputs(n)
    first = check(c.executable, module, args)
    kept = [x.copy() for x in first]
    check(c.executable, module, [x * 2 for x in args])
    for x, y in zip(first, kept):
        np.testing.assert_array_equal(x, y)
    assert not np.shares_memory(first[0], first[1])


@pytest.mark.parametrize("n", SIZES)
def test_parameter_is_never_written(n):
    """Parameters are the caller's (nothing is donated): the update of parameter %a runs into a
    copy, and %a keeps its values."""
    module, c, how = compiled(program(n, "  ROOT e = f64[%d,%d] dot(r, b), lhs_contracting_dims={1}, "
                                         "rhs_contracting_dims={0}" % (n, n), target="a"))
    assert COPIED in how
    args = inputs(n)
    before = [x.copy() for x in args]
    check(c.executable, module, args)
    for x, y in zip(args, before):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("src", [3, 5])
def test_update_reading_the_operand_at_overlapping_rows(n, src):
    """Rows [4, 7) get 2 * t[src:src+3] + u, read from the buffer being written (src 3: row 4
    is written before it is read for row 5; src 5: row 5 is read for row 4 and written later):
    every row must see the operand's old values."""
    module, c, how = compiled(program(n, "  ROOT e = f64[%d,%d] dot(r, b), lhs_contracting_dims={1}, "
                                         "rhs_contracting_dims={0}" % (n, n), src=src))
    assert IN_PLACE in how
    check(c.executable, module, inputs(n))


CHAIN = """
HloModule t
ENTRY main {{
  a = f64[{n},{n}] parameter(0)
  b = f64[{n},{n}] parameter(1)
  t = f64[{n},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  one = f64[] constant(1)
  i = s64[] constant(2)
  z = s64[] constant(0)
  s1 = f64[3,{n}] slice(t), slice={{[5:8], [0:{n}]}}
  ones = f64[3,{n}] broadcast(one), dimensions={{}}
  w1 = f64[3,{n}] add(s1, ones)
  r1 = f64[{n},{n}] dynamic-update-slice(t, w1, i, z)
  p = f64[{n},{n}] dot(r1, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  s2 = f64[{n},2] slice(p), slice={{[0:{n}], [0:2]}}
  s3 = f64[{n},2] slice(r1), slice={{[0:{n}], [1:3]}}
  w2 = f64[{n},2] multiply(s2, s3)
  j = s64[] constant(3)
  r2 = f64[{n},{n}] dynamic-update-slice(r1, w2, z, j)
  ROOT e = f64[{n},{n}] dot(r2, a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}"""


@pytest.mark.parametrize("n", SIZES)
def test_chain_of_updates_in_one_buffer(n):
    """t updated twice, the second update reading the first's result through a product and at
    shifted columns: both run in t's buffer, one after the other."""
    module = parse_hlo(CHAIN.format(n=n))
    c = compile_module(module, "cpu")
    updates = [line for line in c.stage("execution").splitlines() if "dynamic_update_slice" in line]
    assert len(updates) == 2 and all(IN_PLACE in line for line in updates), c.stage("execution")
    check(c.executable, module, inputs(n)[:2])


def test_numpy_updates_match_numpy():
    """Through the frontend: slices assigned in place after a product, the update reading the
    array itself at shifted rows and the column written last (NumPy is the oracle)."""
    def f(a, b):
        t = a @ b
        t[1:4, :] = np.exp(t[0:3, :]) + t[2:5, :]
        t[:, 2] = t[:, 1] * 2.0
        return t @ b, t.sum()

    rng = np.random.default_rng(1)
    for n in SIZES:
        a, b = rng.random((n, n)) - 0.5, rng.random((n, n)) - 0.5
        jf = nbxla.jit(f, cache=CompilationCache())
        got, want = jf(a, b), f(a, b)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        assert "writes only the window" in jf.last_compilation.stage("execution")


@pytest.mark.parametrize("n", SIZES)
def test_a_window_over_half_the_array_is_copied_only_by_the_elemental_kernel(n):
    """COPY_WINDOW_FRACTION, both sides, for an operand that cannot be reused (a parameter): a
    window of half the rows runs as copy + window; one more row, as the elemental kernel
    (copying first would make a second pass over nearly everything).  A dead temporary's
    update runs in place whatever its window."""
    half = n // 2
    for k, target, want in ((half, "a", COPIED), (half + 1, "a", None), (n - 4, "t", IN_PLACE)):
        module, c, how = compiled(program(n, PRODUCT.format(n=n), target=target, row=1, k=k))
        if want is None:
            assert "writes only the window" not in how and "native kernel" in how
        else:
            assert want in how
        args = inputs(n, k)
        before = [x.copy() for x in args]
        check(c.executable, module, args)
        for x, y in zip(args, before):
            np.testing.assert_array_equal(x, y)


def test_no_plan_copies():
    """An executable made without a buffer plan copies every updated operand (nothing says
    which buffers are free)."""
    from nbxla.passes import optimize
    from nbxla.runtime.cpu_executable import CpuExecutable
    n = 16
    module = parse_hlo(program(n, "  ROOT e = f64[%d,%d] dot(r, b), lhs_contracting_dims={1}, "
                                  "rhs_contracting_dims={0}" % (n, n)))
    optimized = optimize(module).module
    cpu = CpuExecutable(optimized)
    assert COPIED in cpu.describe()
    got = cpu.run(inputs(n))
    np.testing.assert_allclose(got[0], evaluate(module, inputs(n)), rtol=1e-12)
