"""Stand-in for ``cupy._core._accelerator`` (``_accelerator.pyx``, v14.2.0, whole file).

The three accelerator lists are read from ``CUPY_ACCELERATORS`` when the module is imported
(default ``"cub"``, none on a HIP build), as in CuPy. CuPy's lists are ``cdef`` globals that
its Cython callers read directly; here ``_routine_accelerators`` is a module attribute that
``scan_core`` reads at call time, and ``set_routine_accelerators`` rebinds it.
"""

from __future__ import annotations

import os
from typing import Any

from cupy_backends.cuda.api import runtime

ACCELERATOR_CUB = 1
ACCELERATOR_CUTENSOR = 2
ACCELERATOR_CUTENSORNET = 3

_elementwise_accelerators: list[int] = []
_reduction_accelerators: list[int] = []
_routine_accelerators: list[int] = []


def _get_accelerator(accelerator: Any) -> int:
    if isinstance(accelerator, int):
        return accelerator
    if accelerator == "cub":
        return ACCELERATOR_CUB
    if accelerator == "cutensor":
        return ACCELERATOR_CUTENSOR
    if accelerator == "cutensornet":
        return ACCELERATOR_CUTENSORNET
    raise ValueError(f"Unknown accelerator: {accelerator}")


def set_elementwise_accelerators(accelerators: Any) -> None:
    global _elementwise_accelerators
    _elementwise_accelerators = [_get_accelerator(b) for b in accelerators]


def set_reduction_accelerators(accelerators: Any) -> None:
    global _reduction_accelerators
    _reduction_accelerators = [_get_accelerator(b) for b in accelerators]


def set_routine_accelerators(accelerators: Any) -> None:
    global _routine_accelerators
    _routine_accelerators = [_get_accelerator(b) for b in accelerators]


def get_elementwise_accelerators() -> list[int]:
    return _elementwise_accelerators


def get_reduction_accelerators() -> list[int]:
    return _reduction_accelerators


def get_routine_accelerators() -> list[int]:
    return _routine_accelerators


def _set_default_accelerators() -> None:
    accelerator_names = os.getenv("CUPY_ACCELERATORS", "" if runtime._is_hip_environment else "cub")
    accelerators = [b for b in accelerator_names.split(",") if b]
    set_elementwise_accelerators(accelerators)
    set_reduction_accelerators(accelerators)
    set_routine_accelerators(accelerators)


_set_default_accelerators()
