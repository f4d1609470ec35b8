"""CUDA and cuDNN through CuPy (and NVIDIA's cuDNN frontend package, if installed)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import threading
import warnings
from types import ModuleType

# catch_warnings() changes process-wide filters: one import at a time.
_import_lock = threading.Lock()


@functools.cache
def _quiet_import(name: str) -> ModuleType | None:
    """Import ``name`` once or return ``None``; a broken install counts as absent
    (and is not imported again on every query)."""
    with _import_lock:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return importlib.import_module(name)
        except Exception:
            return None


def cupy() -> ModuleType | None:
    """The ``cupy`` module if it imports, else ``None`` (imports it on first call)."""
    return _quiet_import("cupy")


def is_built() -> bool:
    """Whether CuPy is installed (torch: whether it was built with CUDA). Never raises."""
    try:
        return importlib.util.find_spec("cupy") is not None
    except Exception:
        return False


def is_available() -> bool:
    """Whether CuPy imports and sees at least one usable CUDA device
    (``cupy.cuda.is_available()``). Never raises."""
    if not is_built():
        return False
    module = cupy()
    try:
        return bool(module is not None and module.cuda.is_available())
    except Exception:
        return False


def cudnn_version() -> int | None:
    """cuDNN's version as an ``int`` (e.g. ``90100``), or ``None`` where cuDNN cannot be
    loaded: CuPy 13's ``cupy_backends.cuda.libs.cudnn``, else the cuDNN frontend's
    ``cudnn.backend_version()``. Never raises."""
    if not is_available():
        return None
    for module_name, function in (("cupy_backends.cuda.libs.cudnn", "getVersion"), ("cudnn", "backend_version")):
        if importlib.util.find_spec(module_name.partition(".")[0]) is None:
            continue
        module = _quiet_import(module_name)
        try:
            if module is not None:
                return int(getattr(module, function)())
        except Exception:
            continue
    return None


def cudnn_is_available() -> bool:
    """Whether a cuDNN library can be loaded and a CUDA device is usable. Never raises."""
    return cudnn_version() is not None
