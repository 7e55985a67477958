"""The stand-in array of auto mode: its methods come from the frontend's registry, and the session
keeps what it knows of one in a state record (no private fields reached from outside)."""

import numpy as np

from nbxla.cluster.lazy import TRACED_METHODS, LazyArray, LazyState
from nbxla.frontend.methods import array_method_names
from nbxla.frontend.tracer import Tracer


def test_stand_ins_record_every_method_the_tracer_lowers():
    assert set(TRACED_METHODS) == set(array_method_names()) - {"nonzero"}
    for name in TRACED_METHODS:
        assert callable(getattr(Tracer, name, None)), name


def test_a_new_registered_method_reaches_stand_ins_without_a_second_list():
    from nbxla.frontend.registry import METHODS
    METHODS["nbxla_probe_method"] = np.sum
    try:
        assert "nbxla_probe_method" in array_method_names()
    finally:
        del METHODS["nbxla_probe_method"]


def test_state_record_follows_the_value():
    """Pending: a node of the graph and no value; after the graph break, the value."""
    from nbxla.cluster.session import Session
    session = Session("state")
    a = np.arange(1 << 18, dtype=np.float64)
    y = session.wrap(a) * 2.0 + 1.0
    assert isinstance(y, LazyArray) and y.state.session is session
    assert y.state.value is None and y.state.tracer is not None and session.pending(y)
    np.testing.assert_array_equal(np.asarray(y), a * 2.0 + 1.0)
    assert isinstance(y.state.value, np.ndarray) and not session.pending(y)
    assert LazyArray.__slots__ == ("state", "__weakref__") and "session" in LazyState.__slots__


def test_assigning_shape_reshapes_in_place_as_numpy_does():
    """``a.shape = n`` on a stand-in (npbench's mandelbrot flattens its grids this way)."""
    import nbxla

    def flatten_then_filter(x, y):
        grid = x[:, None] * 2.0 + y[None, :]
        rows = grid.copy()
        grid.shape = rows.shape = grid.size
        keep = grid > 1.0
        return grid[keep].sum() + rows.sum(), grid.shape

    rng = np.random.default_rng(3)
    x, y = rng.random(300), rng.random(200)
    want = flatten_then_filter(x, y)
    got = nbxla.jit(flatten_then_filter, mode="auto")(x, y)
    assert got[1] == want[1] == (60000,)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)


def test_assigning_shape_where_numpy_needs_a_copy_fails_as_numpy_fails():
    import nbxla

    def transposed_flat(x):
        t = (x * 2.0).T
        t.shape = t.size
        return t

    x = np.ones((300, 200))
    try:
        transposed_flat(x)
    except AttributeError as e:
        want = str(e)
    try:
        nbxla.jit(transposed_flat, mode="auto")(x)
    except AttributeError as e:
        assert str(e) == want
    else:
        raise AssertionError("an in-place reshape that needs a copy must fail as in NumPy")
