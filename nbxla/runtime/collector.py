"""Python's cycle collector during a compilation: the objects that existed before it are left
out of its collections.

Why: a compilation allocates tens of thousands of objects (HLO graphs, IR builders, llvmlite
values) that live until it ends, so it triggers collections of the young generations and, every
tenth of those, a full one, which walks every tracked object of the process: NumPy's, nbxla's
and the user's modules included.  In a fresh process the full collection in npbench crc16's
first call took 13-50 ms of its ~130-160 ms (load 2-3), to free nothing (what a compilation
drops, reference counting frees).  With the older objects frozen (``gc.freeze``: moved to a
generation no collection walks) the collections walk only the compilation's own objects, and
still free its cycles: crc16's collections then took ~2 ms.  Afterwards ``gc.unfreeze``
returns them to the oldest generation, as they were; nothing is collected by either step.

The freeze is process-wide, so it is only taken when nothing is frozen: a program that froze
objects itself (before forking workers, say) keeps them frozen, and a compilation running
while another thread's holds the freeze leaves it to that one.  (Objects another thread
freezes during a compilation are unfrozen with the rest at its end.)
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

_lock = threading.Lock()
_holding = False            # a compilation of this process froze the older objects


@contextmanager
def older_objects_frozen():
    """Inside the block, collections leave out the objects tracked before it (see the module
    docstring); a no-op while anything is frozen already or the collector is off."""
    global _holding
    with _lock:
        take = not _holding and gc.isenabled() and gc.get_freeze_count() == 0
        if take:
            gc.freeze()
            _holding = True
    try:
        yield
    finally:
        if take:
            with _lock:
                gc.unfreeze()
                _holding = False
