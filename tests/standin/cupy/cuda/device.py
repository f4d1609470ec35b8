"""Stand-in for ``cupy.cuda.device`` (``device.pyx``).

cuBLAS, cuSOLVER and cuSPARSE handles live in a ``threading.local`` as ``{device_id: Handle}``
dicts, one handle per (Python thread, device), created on first use by looking up
``cublas.create`` / ``cusolver.create`` / ``cusparse.create`` by name at that moment (with the device made
current around the call), and destroyed with the thread's locals.

Like the Cython original, ``Device`` is a closed type (its attributes cannot be
replaced), and the module's own callers use "C-level" references bound at import,
so replacing ``get_cublas_handle`` here does not reach ``cupy.matmul``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from cupy_backends.cuda.api import runtime as _runtime_module

# "cimport runtime": bound now, not looked up at call time.
_getDevice = _runtime_module.getDevice
_setDevice = _runtime_module.setDevice
_deviceGetAttribute = _runtime_module.deviceGetAttribute
_deviceSynchronize = _runtime_module.deviceSynchronize

_thread_local = threading.local()
_devices: dict[int, Device] = {}


class _ThreadLocalStack:
    @staticmethod
    def get() -> list[int]:
        stack = getattr(_thread_local, "_device_stack", None)
        if stack is None:
            stack = _thread_local._device_stack = []
        return stack


def get_device_id() -> int:
    return _getDevice()


def _get_device() -> Device:
    dev_id = _getDevice()
    ret = _devices.get(dev_id)
    if ret is None:
        ret = _devices[dev_id] = Device()
    return ret


class Handle:
    """Owns a library handle; destroys it when dropped (with its thread's locals)."""

    __slots__ = ("_destroy_func", "handle")

    def __init__(self, handle: int, destroy_func: Callable[[int], Any] | None) -> None:
        self.handle = handle
        self._destroy_func = destroy_func

    def __del__(self) -> None:
        if self._destroy_func is not None and not sys.is_finalizing():
            self._destroy_func(self.handle)


def get_cublas_handle() -> int:
    return _get_device().cublas_handle


def get_cusolver_handle() -> int:
    return _get_device().cusolver_handle


def get_cusparse_handle() -> int:
    return _get_device().cusparse_handle


def get_compute_capability() -> str:
    return Device().compute_capability


class _ClosedType(type):
    """Class attributes cannot be set, as for a Cython extension type."""

    def __setattr__(cls, name: str, value: Any) -> None:
        raise TypeError(f"cannot set {name!r} attribute of immutable type 'cupy.cuda.device.{cls.__name__}'")

    def __delattr__(cls, name: str) -> None:
        raise TypeError(f"cannot delete {name!r} attribute of immutable type 'cupy.cuda.device.{cls.__name__}'")


class Device(metaclass=_ClosedType):
    """A CUDA device; ``with Device(i):`` makes ``i`` current in this thread for the block."""

    __slots__ = ("id",)

    def __init__(self, device: int | Device | None = None) -> None:
        self.id = _getDevice() if device is None else int(device)

    def __int__(self) -> int:
        return self.id

    def __index__(self) -> int:
        return self.id

    def __enter__(self) -> Device:
        current = _getDevice()
        _ThreadLocalStack.get().append(current)
        if self.id != current:
            _setDevice(self.id)
        return self

    def __exit__(self, *args: object) -> None:
        _setDevice(_ThreadLocalStack.get().pop())

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and self.id == other.id

    def __hash__(self) -> int:
        return hash((Device, self.id))

    def use(self) -> Device:
        _setDevice(self.id)
        return self

    def synchronize(self) -> None:
        prev = _getDevice()
        try:
            _setDevice(self.id)
            _deviceSynchronize()
        finally:
            _setDevice(prev)

    @property
    def compute_capability(self) -> str:
        major = _deviceGetAttribute(75, self.id)
        minor = _deviceGetAttribute(76, self.id)
        return f"{major}{minor}"

    def _get_handle(self, name: str, create_func: Callable[[], int], destroy_func: Callable[[int], Any]) -> int:
        handles = getattr(_thread_local, name, None)
        if handles is None:
            handles = {}
            setattr(_thread_local, name, handles)
        entry = handles.get(self.id)
        if entry is not None:
            return entry.handle
        prev = _getDevice()
        try:
            _setDevice(self.id)
            handle = create_func()
            handles[self.id] = Handle(handle, destroy_func)
            return handle
        finally:
            _setDevice(prev)

    @property
    def cublas_handle(self) -> int:
        """This thread's cuBLAS handle for this device (the same for every ``Device`` instance)."""
        from cupy_backends.cuda.libs import cublas

        return self._get_handle("cublas_handles", cublas.create, cublas.destroy)

    @property
    def cusolver_handle(self) -> int:
        """This thread's cuSOLVER handle for this device."""
        from cupy_backends.cuda.libs import cusolver

        return self._get_handle("cusolver_handles", cusolver.create, cusolver.destroy)

    @property
    def cusparse_handle(self) -> int:
        """This thread's cuSPARSE handle for this device."""
        from cupy_backends.cuda.libs import cusparse

        return self._get_handle("cusparse_handles", cusparse.create, cusparse.destroy)


# "cpdef" functions called from Cython code elsewhere (``from cupy.cuda cimport device``):
# those callers reach these, not whatever the module attribute is later set to.
_c_get_cublas_handle = get_cublas_handle
_c_get_cusolver_handle = get_cusolver_handle
_c_get_compute_capability = get_compute_capability
_c_get_device_id = get_device_id
