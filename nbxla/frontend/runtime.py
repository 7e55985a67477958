"""The namespace converted code calls (``__nbxla_ag__``): what ``autograph.py`` emits calls to."""

from .control import (UNDEFINED, and_, aug, bound_state, call, get_state, getitem, if_exp,  # noqa: F401
                      or_,
                      if_stmt, not_, setitem, setitem_aug, setitem_in_place, static_test)
from .promotion import ld  # noqa: F401
from .loops import for_items, for_range, in_range, range_bounds, traced_items, while_loop  # noqa: F401
