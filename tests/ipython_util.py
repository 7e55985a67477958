"""A real IPython shell for the notebook tests, with nbxla loaded and a fresh namespace."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.testing.globalipapp import start_ipython
from IPython.utils.capture import capture_output

from nbxla.runtime.cache import DEFAULT_CACHE


@pytest.fixture
def shell():
    start_ipython()                      # returns the shell only on its first call
    ip = InteractiveShell.instance()
    ip.reset(new_session=False)
    ip.run_line_magic("load_ext", "nbxla")
    ip.user_ns["np"] = np
    DEFAULT_CACHE.clear()
    yield ip
    ip.reset(new_session=False)
    DEFAULT_CACHE.clear()


def run(ip, source: str):
    """Run a cell as a kernel does; returns (ExecutionResult, everything it printed or displayed).

    Displayed objects contribute their ``text/plain``, as terminal IPython would show them.
    """
    with capture_output() as out:
        result = ip.run_cell(source, store_history=True)
    shown = "".join(o.data.get("text/plain", "") + "\n" for o in out.outputs)
    return result, out.stdout + out.stderr + shown


def user_names(ip) -> dict:
    """The user's own names and their values (for "nothing changed" checks)."""
    hidden = set(ip.user_ns_hidden) | {"_", "__", "___", "In", "Out", "_oh", "_ih", "_ii", "_iii",
                                       "_i", "_dh", "exit", "quit", "get_ipython"}
    return {k: v for k, v in ip.user_ns.items() if k not in hidden and not k.startswith("_")}
