"""Stand-in for ``cupyx``: the ``scatter_*`` functions; ``cupyx.cusparse`` loads on first
access and the ``cupyx.scipy`` subpackages on import, as in CuPy."""

from __future__ import annotations

from cupyx import scipy
from cupyx._scatter import scatter_add, scatter_max, scatter_min


def __getattr__(key: str) -> object:
    if key == "cusparse":
        import cupyx.cusparse

        return cupyx.cusparse
    raise AttributeError(f"module '{__name__}' has no attribute '{key}'")


__all__ = ["scatter_add", "scatter_max", "scatter_min", "scipy"]
