"""Stand-in for ``cupyx.scipy`` (``fft``, ``linalg``, ``ndimage`` and ``sparse`` are imported
on demand, as in CuPy)."""
