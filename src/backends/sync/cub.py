"""CUB scans: float ``cumsum``/``cumprod`` take CuPy's own scan where ``algorithms.deterministic`` is on.

With ``axis=None`` CuPy tries its accelerators (CUB by default) through
``cupy.cuda.cub.cub_scan``, looked up when the scan runs, and falls back to its own
scan when that returns ``None``. CUB's ``DeviceScan`` is not deterministic for float
addition or multiplication: its decoupled look-back changes how partial results group
from run to run. CuPy's own scan is a fixed block tree without atomics, so the wrapper
declines float and complex scans there, and CuPy takes that path. Integer scans, and
scans with an ``axis`` (which never use CUB), are untouched.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._engine.state import read
from .nondeterministic import kind
from .wrapping import replace

MODULE = "cupy.cuda.cub"


def install(module: ModuleType) -> None:
    """Wrap ``cub_scan`` of ``module`` (``cupy.cuda.cub``)."""
    scans = (module.CUPY_CUB_CUMSUM, module.CUPY_CUB_CUMPROD)

    def declining(cub_scan: Any) -> Any:
        def scan(array: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
            if read("algorithms.deterministic") and op in scans and kind(array) in ("f", "c"):
                return None  # "not possible with CUB": CuPy runs its own scan
            return cub_scan(array, op, *args, **kwargs)

        return scan

    replace(module, "cub_scan", declining)
