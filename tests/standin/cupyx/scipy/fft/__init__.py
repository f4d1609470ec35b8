"""Stand-in for ``cupyx.scipy.fft``."""

from cupyx.scipy.fft._fft import fft, fft2, fftn, ifft, ifft2, ifftn, irfft, rfft

__all__ = ["fft", "fft2", "fftn", "ifft", "ifft2", "ifftn", "irfft", "rfft"]
