"""Stand-in for CuPy 13's deprecated ``cupy.cudnn`` alias: the real module (``cupy/cudnn.py``), whole."""

import warnings

from cupyx.cudnn import *  # NOQA

warnings.warn(  # noqa: B028 - as CuPy's: no stacklevel, so default filters hide it outside __main__
    'cupy.cudnn is deprecated. Use cupyx.cudnn instead',
    DeprecationWarning)
