"""Stand-in for ``cupy.cuda.stream`` (``stream.pyx`` v14.2.0: ``_ThreadLocal`` lines 14-71,
``get_current_stream`` 88-98, ``_BaseStream`` 194-265, ``Stream`` 459-515 and 647-648).

The current stream is per Python thread and per device, as in CuPy: ``with stream:`` pushes
it (restored on exit) and ``stream.use()`` sets it. The default is ``Stream.null`` (ptr 0),
or ``Stream.ptds`` (ptr 2, ``runtime.streamPerThread``) where
``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1`` (read at import, as ``cupy_backends`` does). A
plain ``Stream()`` gets a fake non-zero handle from ``runtime.streamCreateWithPriority``
on the current device.
"""

from __future__ import annotations

import threading
from typing import Any

from cupy_backends.cuda import stream as _backends_stream
from cupy_backends.cuda.api import runtime

_ptds = _backends_stream._ptds  # backends_stream.is_ptds_enabled()
_thread_local = threading.local()


class _ThreadLocal:
    def __init__(self) -> None:
        num_devices = runtime.getDeviceCount()
        self.current_stream: list[Any] = []
        self.current_device_id_stack: list[int] = []
        self.current_stream_stack: list[list[Any]] = []
        for _ in range(num_devices):
            default_stream = _get_default_stream()
            self.current_stream.append(default_stream)
            self.current_stream_stack.append([default_stream])

    @staticmethod
    def get() -> _ThreadLocal:
        try:
            tls = _thread_local.tls
        except AttributeError:
            tls = _thread_local.tls = _ThreadLocal()
        return tls

    def push_stream(self, stream: Any, device_id: int) -> None:
        assert device_id >= 0
        self.current_stream_stack[device_id].append(stream)
        # record device_id to prevent from popping the wrong stream at exit
        self.current_device_id_stack.append(device_id)
        self.set_current_stream(stream)

    def pop_stream(self) -> None:
        device_id = self.current_device_id_stack.pop()
        self.current_stream_stack[device_id].pop()
        self.set_current_stream(self.current_stream_stack[device_id][-1])

    def set_current_stream(self, stream: Any) -> None:
        device_id = stream.device_id
        if device_id == -1:
            device_id = runtime.getDevice()
        self.current_stream[device_id] = stream

    def get_current_stream(self, device_id: int = -1) -> Any:
        if device_id == -1:
            device_id = runtime.getDevice()
        return self.current_stream[device_id]


def _get_default_stream() -> Stream:
    return Stream.ptds if _ptds else Stream.null


def get_current_stream(device_id: int = -1) -> Any:
    """Gets the current CUDA stream for the specified CUDA device (this thread's)."""
    return _ThreadLocal.get().get_current_stream(device_id)


def _get_current_stream_ptr() -> int:
    return get_current_stream().ptr


def _check_stream_device_match(device_id: int) -> int:
    curr_dev = runtime.getDevice()
    if device_id == -1:
        device_id = curr_dev
    if device_id != curr_dev:
        raise RuntimeError(
            f"The device that the stream is created on ({device_id})"
            f" does not match with the current device ({curr_dev})"
        )
    return device_id


class _BaseStream:
    """CUDA stream: ``ptr`` (the raw handle) and ``device_id`` (-1 for the singletons)."""

    def __init__(self, ptr: int, device_id: int) -> None:
        self.ptr = ptr
        self.device_id = device_id

    def __eq__(self, other: object) -> bool:
        # the ptr may be shared between several instances (Stream.null and Stream(null=True))
        if isinstance(other, _BaseStream):
            return self.ptr == other.ptr
        return False

    def __hash__(self) -> int:
        return self.ptr

    def __enter__(self) -> _BaseStream:
        device_id = _check_stream_device_match(self.device_id)
        _ThreadLocal.get().push_stream(self, device_id)
        return self

    def __exit__(self, *args: object) -> None:
        _ThreadLocal.get().pop_stream()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.ptr} (device {self.device_id})>"

    def use(self) -> _BaseStream:
        """Makes this stream current."""
        _check_stream_device_match(self.device_id)
        _ThreadLocal.get().set_current_stream(self)
        return self

    def synchronize(self) -> None:
        pass


class Stream(_BaseStream):
    """``Stream(null=False, non_blocking=False, ptds=False, priority=None)``."""

    null: Stream = None  # type: ignore[assignment]  # set below, as in CuPy
    ptds: Stream = None  # type: ignore[assignment]

    def __init__(
        self, null: bool = False, non_blocking: bool = False, ptds: bool = False, priority: Any = None
    ) -> None:
        if null:
            ptr = 0
            device_id = -1
        elif ptds:
            ptr = runtime.streamPerThread
            device_id = -1
        else:
            if priority is None:
                priority = 0  # default
            flag = runtime.streamNonBlocking if non_blocking else runtime.streamDefault
            ptr = runtime.streamCreateWithPriority(flag, priority)
            device_id = runtime.getDevice()
        super().__init__(ptr, device_id)


Stream.null = Stream(null=True)
Stream.ptds = Stream(ptds=True)
