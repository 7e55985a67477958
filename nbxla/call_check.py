"""``nbxla.jit(fn, verify=True)`` (or ``NBXLA_FLAGS=--verify``): the first call of each compiled
signature also runs the plain function, with NumPy, on copies of the arguments, and the two
must agree -- results and the arrays passed in, after the call (dtype, shape, values within
``testing.compare_arrays``' per-dtype tolerance).  A difference is a bug in nbxla: it raises a
``VerificationError`` naming what differs.  Later calls of a checked signature cost nothing more.

The plain function works on ``SharedCopies`` (views of one argument stay views of one copy);
when the check fails, the caller's arrays are left as NumPy left the copies.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from .errors import NbxlaError, UncheckedWarning, VerificationError
from .frontend.trace import tree_flatten, tree_unflatten
from .testing import SharedCopies, differences


def checked_call(name: str, compiled: Callable[[list], object], plain: Callable[[object], object],
                 leaves: list, treedef, leaf_names: list[str]):
    """``compiled(leaves)`` (which writes into the array leaves as NumPy would), checked against
    ``plain(tree)``, the plain function called on the tree of copied leaves; returns the
    compiled result, or raises ``VerificationError``."""
    copies = SharedCopies()
    eager_leaves = [copies(x) if type(x) is np.ndarray else x for x in leaves]
    result = compiled(leaves)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")          # (the compiled run warned, if at all)
            want = plain(tree_unflatten(treedef, eager_leaves))
    except VerificationError:       # (a jit function it calls, checked: that one's report)
        raise
    except NbxlaError as e:         # nbxla's own features that run only traced (a gradient
        # tape): the plain function is no NumPy program, so there is nothing to check against
        message = str(e).strip().splitlines()
        warnings.warn(f"nbxla.jit(verify=True): {name} cannot be checked against NumPy: its "
                      f"plain function runs only under nbxla ({type(e).__name__}: "
                      f"{message[0] if message else ''})", UncheckedWarning, stacklevel=4)
        return result
    except Exception as e:
        _as_numpy_left_them(leaves, eager_leaves)
        raise _error(name, [f"NumPy raises {type(e).__name__}: {e} (the compiled program does "
                            "not)"]) from e
    got_leaves, got_tree = tree_flatten(result)
    want_leaves, want_tree = tree_flatten(want)
    if got_tree != want_tree:
        _as_numpy_left_them(leaves, eager_leaves)
        raise _error(name, [f"the result is {_shape_of(result)} where NumPy gives {_shape_of(want)}"])
    pairs, failures = [], []
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        label = "output" if len(got_leaves) == 1 else f"output {k}"
        if _is_value(g) and _is_value(w):
            pairs.append((label, g, w))
        elif not _equal(g, w):
            failures.append(f"{label}: {g!r} where NumPy gives {w!r}")
    pairs += [(f"argument `{leaf_names[i]}` after the call" if i < len(leaf_names) else
               f"argument leaf {i} after the call", x, eager_leaves[i])
              for i, x in enumerate(leaves) if type(x) is np.ndarray]
    failures += differences(pairs)[1]
    if failures:
        _as_numpy_left_them(leaves, eager_leaves)
        raise _error(name, failures)
    return result


def _as_numpy_left_them(leaves: list, eager_leaves: list) -> None:
    """A failed check loses nothing: the caller's arrays get the values NumPy gave the copies
    (not the compiled run's, which differ)."""
    for x, copy in zip(leaves, eager_leaves):
        if type(x) is np.ndarray and x.flags.writeable:
            np.copyto(x, copy)


def _is_value(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic, bool, int, float, complex))


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:               # (objects that do not compare: not the same)
        return False


def _shape_of(tree) -> str:
    return type(tree).__name__ if not isinstance(tree, (tuple, list)) else \
        f"a {type(tree).__name__} of {len(tree)}"


def _error(name: str, failures: list[str]) -> VerificationError:
    return VerificationError(
        f"nbxla.jit(verify=True): the compiled {name} differs from the plain function run "
        "by NumPy on its first call with these argument types:\n  " + "\n  ".join(failures) +
        "\nThis is a bug in nbxla: please report it (the function and its arguments' shapes "
        "and dtypes); meanwhile call the function without nbxla.jit, or with "
        "mode=\"auto\", which checks its compiled parts and runs those that differ with NumPy.")
