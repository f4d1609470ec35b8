"""Stand-in for ``cupy_backends.cuda.libs``: submodules load lazily on first access, as in CuPy.

``STANDIN_CUPY_MISSING_LIBS=cublas,cusolver,cusparse,cutensor`` makes those libraries "not installed":
their first import raises ``ImportError``, as CuPy's loader does when the CUDA
library cannot be found.
"""

from __future__ import annotations

import importlib as _importlib

_submodules = ("cublas", "cusolver", "cusparse", "cutensor")


def __getattr__(name: str) -> object:
    if name in _submodules:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
