"""Stand-in for ``cupyx``."""

from cupyx import scipy

__all__ = ["scipy"]
