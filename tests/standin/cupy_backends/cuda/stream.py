"""Stand-in for ``cupy_backends.cuda.stream`` (``stream.pyx`` v14.2.0, the same in 13.6): the
stream CuPy's library routines launch on.

CuPy's ``cupy.cuda.stream`` hands every change of the current stream to this module
(``set_current_stream_ptr``), and each routine of ``cublas.pyx`` gives its handle
``get_current_stream_ptr()`` first (``_setStream``): the thread's current stream on the current
device, where the null stream (0) is ``runtime.streamPerThread`` (2) under
``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1`` (read at import). Here that value is computed from
the stand-in's ``cupy.cuda.stream`` (``_get_current_stream_ptr``), which is the same value.

The real module exports ``get_default_stream_ptr`` (a ``cpdef``) and, through Cython's
``__pyx_capi__``, its C functions as capsules; ``get_current_stream_ptr``'s is named
``"intptr_t (void)"``. The stand-in's ``__pyx_capi__`` is empty, unless
``STANDIN_CUPY_STREAM_CAPI=1`` (read at import): then it holds a capsule of that name for a
C function (a ``ctypes`` callback) that returns ``_get_current_stream_ptr()`` and counts its
calls in ``_capi_calls``. An exception in it is reported as unraisable and 0 returned, as CuPy
13.6's ``noexcept`` function does (CuPy 14.2's returns -1 with the exception set).
"""

from __future__ import annotations

import os as _os
import sys as _sys
from typing import Any

from cupy_backends.cuda.api import runtime as _runtime

#: is_ptds_enabled(), a cdef function in CuPy (the stand-in's cupy.cuda.stream reads it here)
_ptds = bool(int(_os.environ.get("CUPY_CUDA_PER_THREAD_DEFAULT_STREAM", "0")) != 0)


def get_default_stream_ptr() -> int:
    """Get the CUDA default stream pointer (``streamPerThread`` or ``streamLegacy``)."""
    return _runtime.streamPerThread if _ptds else _runtime.streamLegacy


def _get_current_stream_ptr() -> int:
    """``get_current_stream_ptr()``, a ``cdef`` function in CuPy."""
    streams = _sys.modules.get("cupy.cuda.stream")
    ptr: int = 0 if streams is None else streams.get_current_stream().ptr
    return _runtime.streamPerThread if ptr == 0 and _ptds else ptr


#: calls of the exported C function (stand-in only: which stream query the sync layer takes)
_capi_calls = 0


def _exported() -> int:
    global _capi_calls
    _capi_calls += 1
    return _get_current_stream_ptr()


def _capsules() -> dict[str, Any]:
    import ctypes

    function = ctypes.CFUNCTYPE(ctypes.c_ssize_t)(_exported)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    name = ctypes.create_string_buffer(b"intptr_t (void)")  # a capsule keeps a pointer to its name
    _keep.extend([function, name])
    return {"get_current_stream_ptr": new(ctypes.cast(function, ctypes.c_void_p), name, None)}


_keep: list[Any] = []  # what the capsules point into
__pyx_capi__: dict[str, Any] = _capsules() if _os.environ.get("STANDIN_CUPY_STREAM_CAPI") == "1" else {}
