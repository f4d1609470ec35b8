"""Stand-in for ``cupy_backends.cuda.libs.cublas``: fake handles that record every launch.

Constants are CuPy 14's (``cublas.pxd``). The functions are CuPy 14.2's, built from the
wheel's embedded signatures (``cublas_signatures.txt``, copied verbatim): the same
names, parameter names and order, and the same ``__doc__`` (Cython's
``embedsignature`` line); unlike CuPy's Cython builtins they also have an
``inspect.signature``. Every function that takes a handle other than the handle,
stream, pointer-mode and math-mode management (95 in 14.2: GEMMs, ``?trsm``,
``?syrk``, ``?gemv``, ``?getrfBatched``, ``?geam``, ``?dot``, ``?nrm2``, ...) is a
*routine*: it records a launch and does nothing else (``?getrsBatched`` returns 0,
as CuPy's ``cpdef int`` does).

A handle is an int that no ``create()`` in this process ever returns again (even
after this module is re-imported); its math mode starts at ``CUBLAS_DEFAULT_MATH``.
Using a destroyed (or never created) handle raises ``ValueError``.

On a HIP build (``STANDIN_CUPY_HIP=1``, see ``cupy_backends.cuda.api.runtime``),
``setMathMode`` and ``getMathMode`` raise ``CUBLASError(7)``
(``HIPBLAS_STATUS_NOT_SUPPORTED``), as CuPy's hipBLAS shim answers them
(``cupy_backends/hip/cupy_hipblas.h``) and ``check_status`` raises.

``RECORDER`` holds, in call order:

- ``launches``: a ``Launch(function, handle, math_mode, compute_type, thread, stream)``
  for every routine: the handle's math mode at the call, the ``computeType`` argument
  (``None`` for functions without one), ``threading.get_ident()`` and the stream CuPy sets
  on the handle first (the thread's current stream, as ``_setStream`` does);
- ``math_mode_calls``: a ``MathModeCall(handle, mode, thread)`` for every successful
  ``setMathMode``;
- ``created``: a ``Created(handle, device, thread)`` for every ``create()``;
- ``destroyed``: the handles passed to ``destroy()``.

``RECORDER.reset()`` empties them all (handles and their math modes are kept).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from cupy_backends.cuda import stream as _stream_module  # (cimported by CuPy's cublas.pyx)
from cupy_backends.cuda.api import runtime as _runtime
from cupy_backends.cuda.libs._check import require as _require

_require("cublas")

# Enums, as in cublas.pxd
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
CUBLAS_OP_C = 2

CUBLAS_POINTER_MODE_HOST = 0
CUBLAS_POINTER_MODE_DEVICE = 1

CUBLAS_SIDE_LEFT = 0
CUBLAS_SIDE_RIGHT = 1

CUBLAS_FILL_MODE_LOWER = 0
CUBLAS_FILL_MODE_UPPER = 1

CUBLAS_DIAG_NON_UNIT = 0
CUBLAS_DIAG_UNIT = 1

CUBLAS_GEMM_DEFAULT = -1
CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
CUBLAS_GEMM_DFALT = -1
CUBLAS_GEMM_DFALT_TENSOR_OP = 99

CUBLAS_DEFAULT_MATH = 0
CUBLAS_TENSOR_OP_MATH = 1

CUBLAS_COMPUTE_16F = 64
CUBLAS_COMPUTE_16F_PEDANTIC = 65
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_PEDANTIC = 69
CUBLAS_COMPUTE_32F_FAST_16F = 74
CUBLAS_COMPUTE_32F_FAST_16BF = 75
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_COMPUTE_64F = 70
CUBLAS_COMPUTE_64F_PEDANTIC = 71
CUBLAS_COMPUTE_32I = 72
CUBLAS_COMPUTE_32I_PEDANTIC = 73

_STATUS = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}


_HIP_STATUS = {
    0: "HIPBLAS_STATUS_SUCCESS",
    1: "HIPBLAS_STATUS_NOT_INITIALIZED",
    2: "HIPBLAS_STATUS_ALLOC_FAILED",
    3: "HIPBLAS_STATUS_INVALID_VALUE",
    4: "HIPBLAS_STATUS_MAPPING_ERROR",
    5: "HIPBLAS_STATUS_EXECUTION_FAILED",
    6: "HIPBLAS_STATUS_INTERNAL_ERROR",
    7: "HIPBLAS_STATUS_NOT_SUPPORTED",
    8: "HIPBLAS_STATUS_ARCH_MISMATCH",
    9: "HIPBLAS_STATUS_HANDLE_IS_NULLPTR",
}
_HIP_NOT_SUPPORTED = 7


class CUBLASError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        names = _HIP_STATUS if _runtime._is_hip_environment else _STATUS
        super().__init__(names.get(status, f"CUBLAS_STATUS_{status}"))

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.status,))


class Launch(NamedTuple):
    function: str
    handle: int
    math_mode: int
    compute_type: int | None
    thread: int
    stream: int = 0  # the stream CuPy's _setStream(handle) gave the handle right before the call


class MathModeCall(NamedTuple):
    handle: int
    mode: int
    thread: int


class Created(NamedTuple):
    handle: int
    device: int
    thread: int


class Recorder:
    """What the fake cuBLAS saw; every list is appended to under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.launches: list[Launch] = []
        self.math_mode_calls: list[MathModeCall] = []
        self.created: list[Created] = []
        self.destroyed: list[int] = []

    def reset(self) -> None:
        with self.lock:
            self.launches.clear()
            self.math_mode_calls.clear()
            self.created.clear()
            self.destroyed.clear()


RECORDER = Recorder()

_lock = threading.RLock()  # reentrant: a Handle dropped by the GC mid-call destroys itself
_math_modes: dict[int, int] = {}  # live handle -> math mode
_devices: dict[int, int] = {}  # handle -> the device current at create()
_last_handle = 0


def _new_handle() -> int:
    # Monotonic nanoseconds: a later import of this module starts above every handle
    # an earlier one gave out (a create() takes far longer than a nanosecond).
    global _last_handle
    _last_handle = max(_last_handle + 1, time.monotonic_ns())
    return _last_handle


def _live(handle: int) -> int:
    mode = _math_modes.get(handle)
    if mode is None:
        raise ValueError(f"invalid cuBLAS handle {handle!r} (destroyed or never created)")
    return mode


def _handle_device(handle: int) -> int:
    """The device that was current when ``handle`` was created (stand-in only; private, as it
    is no cuBLAS function)."""
    return _devices[handle]


###############################################################################
# Context
###############################################################################


def check_status(status: int) -> None:
    if status != 0:
        raise CUBLASError(status)


def create() -> int:
    if _runtime._no_gpu():
        raise CUBLASError(1)
    device = _runtime.getDevice()
    with _lock:
        handle = _new_handle()
        _math_modes[handle] = CUBLAS_DEFAULT_MATH
        _devices[handle] = device
    with RECORDER.lock:
        RECORDER.created.append(Created(handle, device, threading.get_ident()))
    return handle


def destroy(handle: int) -> None:
    with _lock:
        _live(handle)
        del _math_modes[handle]
    with RECORDER.lock:
        RECORDER.destroyed.append(handle)


def getVersion(handle: int) -> int:
    _live(handle)
    return 120804


def getPointerMode(handle: int) -> int:
    _live(handle)
    return CUBLAS_POINTER_MODE_HOST


def setPointerMode(handle: int, mode: int) -> None:
    _live(handle)


def setStream(handle: int, stream: int) -> None:
    _live(handle)


def getStream(handle: int) -> int:
    _live(handle)
    return 0


###############################################################################
# Math Mode
###############################################################################


def setMathMode(handle: int, mode: int) -> None:
    mode = int(mode)
    with _lock:
        _live(handle)
        if _runtime._is_hip_environment:
            check_status(_HIP_NOT_SUPPORTED)
        _math_modes[handle] = mode
        with RECORDER.lock:
            RECORDER.math_mode_calls.append(MathModeCall(handle, mode, threading.get_ident()))


def getMathMode(handle: int) -> int:
    with _lock:
        mode = _live(handle)
    if _runtime._is_hip_environment:
        check_status(_HIP_NOT_SUPPORTED)
    return mode


###############################################################################
# Routines: every other function that takes a handle
###############################################################################


def _launch(function: str, handle: int, compute_type: int | None = None) -> None:
    if compute_type is not None:
        compute_type = int(compute_type)
    # cupy_backends.cuda.stream.get_current_stream_ptr(), which every routine of CuPy's
    # cublas.pyx passes to setStream first (_setStream, v14.2.0 line 666)
    stream = _stream_module._get_current_stream_ptr()
    with _lock:
        mode = _live(handle)
        with RECORDER.lock:
            RECORDER.launches.append(Launch(function, handle, mode, compute_type, threading.get_ident(), stream))


def _routine(line: str) -> Callable[..., Any]:
    """A routine with the name, parameters and ``__doc__`` of one embedded-signature line."""
    name, rest = line.split("(", 1)
    parameters, _, returns = rest.partition(")")
    signature = inspect.Signature(
        [inspect.Parameter(p.split()[-1], inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in parameters.split(", ")]
    )
    result = 0 if returns.strip() == "-> int" else None

    def routine(*args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind(*args, **kwargs).arguments  # a TypeError for a wrong call, as in CuPy
        _launch(name, arguments["handle"], arguments.get("computeType"))
        return result

    routine.__name__ = routine.__qualname__ = name
    routine.__doc__ = line
    routine.__signature__ = signature  # type: ignore[attr-defined]
    return routine


def _build() -> None:
    lines = Path(__file__).with_name("cublas_signatures.txt").read_text().splitlines()
    for line in lines:
        if not line or line.startswith("#"):
            continue
        name = line.split("(", 1)[0]
        existing = globals().get(name)
        if existing is not None:  # written out above: only the docstring comes from the wheel
            existing.__doc__ = line
        else:
            globals()[name] = _routine(line)


_build()
