"""Stand-in for ``cupy.cuda``."""

from __future__ import annotations

import importlib as _importlib

from cupy_backends.cuda.api import runtime

import cupy as _cupy
from cupy.cuda import device, stream


def __getattr__(key: str) -> object:
    if key in ("cublas", "cusolver", "cusparse"):
        module = _importlib.import_module(f"cupy_backends.cuda.libs.{key}")
        setattr(_cupy.cuda, key, module)
        return module
    if key == "cufft":
        return _importlib.import_module("cupy.cuda.cufft")
    raise AttributeError(f"module '{__name__}' has no attribute '{key}'")


def is_available() -> bool:
    """True when a driver and at least one device are present (``STANDIN_CUPY_NO_GPU=1``: False).

    Unlike CuPy, the answer is not cached, so a test can change the environment."""
    try:
        return runtime.getDeviceCount() > 0
    except Exception:
        return False


def get_local_runtime_version() -> int:
    return runtime.runtimeGetVersion()


from cupy.cuda.device import Device, get_cublas_handle, get_device_id  # noqa: E402
from cupy.cuda.stream import Stream, get_current_stream  # noqa: E402

__all__ = [
    "Device",
    "Stream",
    "device",
    "get_cublas_handle",
    "get_current_stream",
    "get_device_id",
    "is_available",
    "runtime",
    "stream",
]
