"""Stand-in for ``cupy.fft``."""

import sys as _sys

from cupy.fft._config import config
from cupy.fft._fft import fft, fft2, fftn, ifft, ifft2, ifftn, irfft, rfft

__all__ = ["config", "fft", "fft2", "fftn", "ifft", "ifft2", "ifftn", "irfft", "rfft"]

# As in CuPy: ``cupy.fft.config`` is an object that also answers ``import cupy.fft.config``.
_sys.modules[__name__ + ".config"] = config  # type: ignore[assignment]
