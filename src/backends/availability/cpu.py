"""NumPy's BLAS and OpenMP runtimes, as loaded in this process (via threadpoolctl).

The ``*_is_available()`` answers are cached (see ``_cache``) with the number of modules in
``sys.modules`` when they were computed: a native library (NumPy's BLAS, an OpenMP runtime,
oneDNN) is loaded by importing a module, so an answer is computed again only after something new
was imported (and in a child made by ``os.fork()``). Otherwise a query costs a ``len()`` and a
comparison (about 0.1 us) instead of a walk over every loaded library. A library loaded without an
import (``ctypes.CDLL``) is seen at the next import. ``threadpools()`` is not cached: it reports

the current thread counts.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

from ._cache import Remembered

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
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


#: The token of every CPU answer: how many modules are imported (a partial of a C function, as
#: this is most of what a cached query costs).
_imported_modules = functools.partial(len, sys.modules)


def _mkl_now() -> bool:
    pools = threadpools()
    if pools:
        return any(p.get("internal_api") == "mkl" for p in pools)
    return "mkl" in _numpy_build_blas()


def _openmp_now() -> bool:
    return any(p.get("user_api") == "openmp" for p in threadpools())


def _mkldnn_now() -> bool:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libdnnl" in line or "libmkldnn" in line for line in maps)
    except OSError:
        return False


_mkl = Remembered(_mkl_now, _imported_modules)
_openmp = Remembered(_openmp_now, _imported_modules)
_mkldnn = Remembered(_mkldnn_now, _imported_modules)


def mkl_is_available() -> bool:
    """Whether NumPy's loaded BLAS is Intel MKL. Never raises; cached."""
    return _mkl()


def openmp_is_available() -> bool:
    """Whether an OpenMP runtime is loaded with NumPy (libgomp, libiomp, LLVM's libomp). Never raises; cached."""
    return _openmp()


def mkldnn_is_available() -> bool:
    """Whether oneDNN (formerly MKL-DNN) is loaded in this process. NumPy never uses it,
    so this is ``False`` unless another library loaded it. Never raises; cached."""
    return _mkldnn()
