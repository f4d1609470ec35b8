"""Stand-in for ``cupy._math.misc``: the ufuncs ``maximum`` and ``minimum`` (``misc.py``
v14.2.0, ``create_ufunc(..., scatter_op='max'/'min')``)."""

from __future__ import annotations

import numpy

from cupy._core._kernel import ufunc

maximum = ufunc("cupy_maximum", 2, numpy.maximum, "max")
minimum = ufunc("cupy_minimum", 2, numpy.minimum, "min")
