"""The sync layer: push the effective flags into CuPy right before each launch.

Each target is one small module that knows one CUDA library and nothing else:

========== ================================== ==========================================
target     CuPy module it wraps               flags
========== ================================== ==========================================
cublas     cupy_backends.cuda.libs.cublas     cuda.matmul.* (math mode, compute type)
cufft      cupy.fft._fft                      cuda.cufft_plan_cache.max_size
cusolver   cupy_backends.cuda.libs.cusolver   cuda.preferred_linalg_library
cudnn      cupyx.cudnn (CuPy 13)              cudnn.*
========== ================================== ==========================================

A target is installed by a post-import hook when its CuPy module is imported, so
``import backends`` never imports CuPy, and the order of ``import backends`` and
``import cupy`` does not matter. Without CuPy, a driver or the CUDA libraries, the
CuPy module never finishes importing and nothing is wrapped.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

from .._engine import state
from .._engine.state import current
from . import hooks

#: CuPy module -> the target module (in this package) that wraps it
TARGETS = {
    "cupy_backends.cuda.libs.cublas": "cublas",
    "cupy.fft._fft": "cufft",
    "cupy_backends.cuda.libs.cusolver": "cusolver",
    "cupyx.cudnn": "cudnn",
}

#: target name -> its module, once its CuPy module is imported and wrapped
installed: dict[str, Any] = {}
_last = threading.local()  # (frame, version, device) last pushed by sync() in this thread


def _installer(target: str) -> hooks.Hook:
    def install(module: Any) -> None:
        implementation = importlib.import_module(f"{__name__}.{target}")
        implementation.install(module)
        installed[target] = implementation

    return install


def install_hooks() -> None:
    """Watch for CuPy's modules (idempotent: hooks are registered once)."""
    if not getattr(install_hooks, "done", False):
        install_hooks.done = True  # type: ignore[attr-defined]
        for module, target in TARGETS.items():
            hooks.when_imported(module, _installer(target))


def invalidate() -> None:
    """Forget what this thread's last ``sync()`` pushed (something else changed a handle)."""
    _last.key = None


def sync() -> None:
    """Push the effective flags into the current thread's CuPy handles and plan cache
    on the current device, now. A no-op without CuPy, a driver or a GPU.

    Costs one identity comparison when nothing changed since this thread's last sync.
    """
    if not installed:
        return
    device_module = sys.modules.get("cupy.cuda.device")
    try:
        device = device_module.get_device_id() if device_module is not None else None
    except Exception:  # no driver or no device: nothing to push into
        return
    key = getattr(_last, "key", None)
    frame, version = current(), state.version
    if key is not None and key[0] is frame and key[1] == version and key[2] == device:
        return
    if "cublas" in installed and device_module is not None:
        installed["cublas"].sync(device_module)
    for name in ("cufft", "cusolver"):
        if name in installed:
            installed[name].sync()
    _last.key = (frame, version, device)
