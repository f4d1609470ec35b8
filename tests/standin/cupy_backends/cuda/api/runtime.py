"""Stand-in for ``cupy_backends.cuda.api.runtime``.

The current device is per Python thread (as the CUDA runtime's is per host thread),
0 by default. ``STANDIN_CUPY_NO_GPU=1`` simulates a machine without a driver and
``STANDIN_CUPY_DEVICES=n`` sets the device count (default 2); both are read at call time.
``STANDIN_CUPY_HIP=1`` makes this a ROCm/HIP build (``is_hip``, and the
``_is_hip_environment`` that CuPy's Cython code reads): read at import, as CuPy fixes
it when it is built.
"""

from __future__ import annotations

import itertools
import os
import threading

_is_hip_environment = os.environ.get("STANDIN_CUPY_HIP", "0") not in ("", "0")  # for runtime being cimport'd
is_hip = _is_hip_environment  # for runtime being import'd

# cudaDataType_t (library_types.h), as in _runtime_enum.pxd
CUDA_R_32F = 0
CUDA_R_64F = 1
CUDA_R_16F = 2
CUDA_R_8I = 3
CUDA_C_32F = 4
CUDA_C_64F = 5
CUDA_C_16F = 6
CUDA_C_8I = 7
CUDA_R_8U = 8
CUDA_C_8U = 9
CUDA_R_16BF = 14

_errorInvalidValue = 1
_errorInsufficientDriver = 35
_errorNoDevice = 100
_errorInvalidDevice = 101

# streams (driver_types.h): the legacy and per-thread default streams are these handles
streamDefault = 0
streamNonBlocking = 1
streamLegacy = 1
streamPerThread = 2

_deviceAttributeComputeCapabilityMajor = 75
_deviceAttributeComputeCapabilityMinor = 76

_ERRORS = {
    _errorInvalidValue: ("cudaErrorInvalidValue", "invalid argument"),
    _errorInsufficientDriver: (
        "cudaErrorInsufficientDriver",
        "CUDA driver version is insufficient for CUDA runtime version",
    ),
    _errorNoDevice: ("cudaErrorNoDevice", "no CUDA-capable device is detected"),
    _errorInvalidDevice: ("cudaErrorInvalidDevice", "invalid device ordinal"),
}

_RUNTIME_VERSION = 12080
_DRIVER_VERSION = 12080


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        name, message = _ERRORS.get(status, ("cudaErrorUnknown", "unknown error"))
        super().__init__(f"{name}: {message}")

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.status,))


_local = threading.local()


def _no_gpu() -> bool:
    return os.environ.get("STANDIN_CUPY_NO_GPU", "0") not in ("", "0")


def _check() -> None:
    if _no_gpu():
        raise CUDARuntimeError(_errorInsufficientDriver)


def getDeviceCount() -> int:
    _check()
    return int(os.environ.get("STANDIN_CUPY_DEVICES", "2"))


def getDevice() -> int:
    _check()
    return getattr(_local, "device", 0)


def setDevice(device: int) -> None:
    _check()
    device = int(device)
    if not 0 <= device < getDeviceCount():
        raise CUDARuntimeError(_errorInvalidDevice)
    _local.device = device


def deviceSynchronize() -> None:
    _check()


def deviceGetAttribute(attrib: int, device: int) -> int:
    _check()
    if not 0 <= device < getDeviceCount():
        raise CUDARuntimeError(_errorInvalidDevice)
    cc = os.environ.get("STANDIN_CUPY_CC", "90")
    if attrib == _deviceAttributeComputeCapabilityMajor:
        return int(cc[:-1])
    if attrib == _deviceAttributeComputeCapabilityMinor:
        return int(cc[-1])
    raise CUDARuntimeError(_errorInvalidValue)


_streams = itertools.count(0x5000, 0x10)


def streamCreateWithPriority(flag: int, priority: int) -> int:
    """A fake stream handle, never 0, 1 or 2 (the default streams)."""
    _check()
    return next(_streams)


def streamDestroy(stream: int) -> None:
    pass


def runtimeGetVersion() -> int:
    """The CUDA version CuPy was built with: known without a driver, as in CuPy."""
    return _RUNTIME_VERSION


def driverGetVersion() -> int:
    """0 without a driver, as ``cudaDriverGetVersion`` reports."""
    return 0 if _no_gpu() else _DRIVER_VERSION
