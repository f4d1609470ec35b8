"""Stand-in for ``cupyx.scipy`` (``cupyx.scipy.fft`` is imported on demand, as in CuPy)."""
