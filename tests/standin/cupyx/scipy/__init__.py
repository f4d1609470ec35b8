"""Stand-in for ``cupyx.scipy`` (``cupyx.scipy.fft`` and ``cupyx.scipy.linalg`` are imported on demand, as in CuPy)."""
