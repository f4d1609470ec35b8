"""CUDA and cuDNN through CuPy (and NVIDIA's cuDNN frontend package, if installed).

Every answer is cached (see ``_cache``) with the ``cupy`` entry of ``sys.modules`` it was
computed for: the module, or ``None`` while CuPy is not imported. A query reads that entry and
answers from the cache while it is the same object (about 0.1 us); it computes again when it
changed:

- CuPy imported (by a query, which imports it, or by anyone) and answered: cached for the life of
  the process. CuPy fixes ``cupy.cuda.is_available()`` at its first call anyway.
- CuPy not imported (not installed, or a broken install whose import failed, or only
  ``is_built()`` asked so far): cached as well, so a machine without CuPy pays for the
  ``sys.path`` search once, not on every call; a later successful ``import cupy`` puts a module
  in ``sys.modules`` and the next query sees it. (Installing CuPy into a running process is seen
  once something imports it.)
- In a child made by ``os.fork()``: nothing is cached, the child's first query asks CuPy again.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import threading
import warnings
from types import ModuleType

from ._cache import Remembered

# catch_warnings() changes process-wide filters: one import at a time.
_import_lock = threading.Lock()


def _new_import_lock() -> None:
    # A lock another thread of the parent held at the moment of os.fork() stays held in the child.
    global _import_lock
    _import_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_import_lock)


def _quiet_import(name: str) -> ModuleType | None:
    """Import ``name`` or return ``None``; a broken install counts as absent. (The callers' answers
    are cached, so a broken install is not imported again on every query.)"""
    with _import_lock:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # import_module, not sys.modules: while another thread is importing CuPy, its
                # half-initialised module is already in sys.modules; import_module waits for it.
                return importlib.import_module(name)
        except Exception:
            return None


#: The token of every CUDA answer: what ``import cupy`` would find in ``sys.modules`` now (a
#: partial of a C function, not a Python function: this is most of what a cached query costs).
_cupy_entry = functools.partial(sys.modules.get, "cupy")


def _is_built_now() -> bool:
    if isinstance(sys.modules.get("cupy"), ModuleType):
        return True  # imported already (even a module without a __spec__, which find_spec rejects)
    try:
        return importlib.util.find_spec("cupy") is not None
    except Exception:
        return False


def _cupy_now() -> ModuleType | None:
    return _quiet_import("cupy") if _is_built_now() else None


def _is_available_now() -> bool:
    module = _cupy_now()
    try:
        return bool(module is not None and module.cuda.is_available())
    except Exception:
        return False


def _cudnn_version_now() -> int | None:
    if not _is_available():
        return None
    for module_name, function in (("cupy_backends.cuda.libs.cudnn", "getVersion"), ("cudnn", "backend_version")):
        try:
            if importlib.util.find_spec(module_name.partition(".")[0]) is None:
                continue
        except Exception:
            continue
        module = _quiet_import(module_name)
        try:
            if module is not None:
                return int(getattr(module, function)())
        except Exception:
            continue
    return None


_cupy = Remembered(_cupy_now, _cupy_entry)
_is_built = Remembered(_is_built_now, _cupy_entry)
_is_available = Remembered(_is_available_now, _cupy_entry)
_cudnn_version = Remembered(_cudnn_version_now, _cupy_entry)


def cupy() -> ModuleType | None:
    """The ``cupy`` module if it imports, else ``None`` (imports it on first call; cached)."""
    return _cupy()


def is_built() -> bool:
    """Whether CuPy is installed (torch: whether it was built with CUDA). Never raises; cached."""
    return _is_built()


def is_available() -> bool:
    """Whether CuPy imports and sees at least one usable CUDA device
    (``cupy.cuda.is_available()``). Never raises; cached."""
    return _is_available()


def cudnn_version() -> int | None:
    """cuDNN's version as an ``int`` (e.g. ``90100``), or ``None`` where cuDNN cannot be
    loaded: CuPy 13's ``cupy_backends.cuda.libs.cudnn``, else the cuDNN frontend's
    ``cudnn.backend_version()``. Never raises; cached."""
    return _cudnn_version()


def cudnn_is_available() -> bool:
    """Whether a cuDNN library can be loaded and a CUDA device is usable. Never raises; cached."""
    return _cudnn_version() is not None
