"""Stand-in for ``cupy.cuda.common``: ``_is_fp16_supported`` (``common.pyx``, v14.2.0)."""

from __future__ import annotations

from cupy_backends.cuda.api import runtime

from cupy.cuda import device

_has_fp16 = -1


def _is_fp16_supported() -> int:
    """1 on HIP or at compute capability >= 53 (of the current device, asked once per process)."""
    global _has_fp16
    if _has_fp16 != -1:
        return _has_fp16
    if runtime._is_hip_environment:
        _has_fp16 = 1
    elif int(device._c_get_compute_capability()) < 53:
        _has_fp16 = 0
    else:
        _has_fp16 = 1
    return _has_fp16
