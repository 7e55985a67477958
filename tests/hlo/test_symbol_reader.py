"""``symbol_reader``: the symbols' values read off the arguments as ``bind_symbols`` reads them,
with the parameters examined once; an argument that does not fit gets ``bind_symbols``' error."""

import numpy as np
import pytest

from nbxla.errors import HloShapeError
from nbxla.hlo.parser import parse_hlo
from nbxla.hlo.symbolic import bind_symbols, symbol_reader

TEXT = """HloModule m

ENTRY %main (x: f32[b,4], y: f32[2*b,n], s: f32[]) -> f32[b,4] {
  %x = f32[b,4]{1,0} parameter(0)
  %y = f32[2*b,n]{1,0} parameter(1)
  %s = f32[] parameter(2)
  ROOT %neg = f32[b,4]{1,0} negate(f32[b,4]{1,0} %x)
}
"""


def test_reads_what_bind_symbols_reads():
    module = parse_hlo(TEXT)
    read = symbol_reader(module)
    for b, n in [(2, 3), (7, 1), (40, 9)]:
        args = [np.zeros((b, 4), np.float32), np.zeros((2 * b, n), np.float32), np.float32(1)]
        assert read(args) == bind_symbols(module, args) == {"b": b, "n": n}


@pytest.mark.parametrize("y_shape, says", [((7, 3), "not a multiple of 2"), ((6, 3), "b = 3 here but 2"),
                                           ((4,), "parameter %y")])
def test_an_argument_that_does_not_fit_gets_bind_symbols_error(y_shape, says):
    read = symbol_reader(parse_hlo(TEXT))
    with pytest.raises(HloShapeError, match=says):
        read([np.zeros((2, 4), np.float32), np.zeros(y_shape, np.float32), np.float32(1)])
