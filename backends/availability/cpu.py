"""NumPy's BLAS and OpenMP runtimes, as loaded in this process (via threadpoolctl)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any


def _numpy_loaded() -> bool:
    """Import NumPy (so its BLAS is loaded) if it is installed."""
    if "numpy" in sys.modules:
        return True
    try:
        if importlib.util.find_spec("numpy") is None:
            return False
        import numpy  # noqa: F401

        return True
    except Exception:
        return False


def threadpools() -> list[dict[str, Any]]:
    """threadpoolctl's description of the native thread pools NumPy loaded, or ``[]``
    where NumPy or threadpoolctl is not installed. Never raises."""
    if not _numpy_loaded():
        return []
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

        return list(threadpool_info())
    except Exception:
        return []


def _numpy_build_blas() -> str:
    # Without threadpoolctl, fall back to the BLAS NumPy was built against.
    try:
        import numpy

        config = numpy.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"]["name"]).lower()
    except Exception:
        return ""


def mkl_is_available() -> bool:
    """Whether NumPy's loaded BLAS is Intel MKL. Never raises."""
    pools = threadpools()
    if pools:
        return any(p.get("internal_api") == "mkl" for p in pools)
    return "mkl" in _numpy_build_blas()


def openmp_is_available() -> bool:
    """Whether an OpenMP runtime is loaded with NumPy (libgomp, libiomp, LLVM's libomp). Never raises."""
    return any(p.get("user_api") == "openmp" for p in threadpools())


def mkldnn_is_available() -> bool:
    """Whether oneDNN (formerly MKL-DNN) is loaded in this process. NumPy never uses it,
    so this is ``False`` unless another library loaded it. Never raises."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libdnnl" in line or "libmkldnn" in line for line in maps)
    except OSError:
        return False
