"""Stand-in for ``cupy_backends.cuda.libs.cusolver`` (dense API): fake handles that record calls.

Positional signatures are CuPy 14's (``cusolver.pyx``). Handles never repeat in a
process; using a destroyed handle raises ``ValueError``.

``RECORDER`` holds ``calls`` (a ``SolverCall(function, handle, thread)`` per solver
call, buffer-size queries included), ``created`` (``Created(handle, device, thread)``)
and ``destroyed`` (handles); ``RECORDER.reset()`` empties them.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from cupy_backends.cuda.api import runtime as _runtime
from cupy_backends.cuda.libs._check import require as _require

_require("cusolver")


class CUSOLVERError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"CUSOLVER_STATUS_{status}")

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.status,))


class SolverCall(NamedTuple):
    function: str
    handle: int
    thread: int


class Created(NamedTuple):
    handle: int
    device: int
    thread: int


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: list[SolverCall] = []
        self.created: list[Created] = []
        self.destroyed: list[int] = []

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.created.clear()
            self.destroyed.clear()


RECORDER = Recorder()

_lock = threading.RLock()  # reentrant: a Handle dropped by the GC mid-call destroys itself
_live_handles: set[int] = set()
_last_handle = 0


def _check(handle: int) -> None:
    if handle not in _live_handles:
        raise ValueError(f"invalid cuSOLVER handle {handle!r} (destroyed or never created)")


def _call(function: str, handle: int) -> None:
    with _lock:
        _check(handle)
    with RECORDER.lock:
        RECORDER.calls.append(SolverCall(function, handle, threading.get_ident()))


def create() -> int:
    global _last_handle
    if _runtime._no_gpu():
        raise CUSOLVERError(1)
    device = _runtime.getDevice()
    with _lock:
        _last_handle = handle = max(_last_handle + 1, time.monotonic_ns())
        _live_handles.add(handle)
    with RECORDER.lock:
        RECORDER.created.append(Created(handle, device, threading.get_ident()))
    return handle


def destroy(handle: int) -> None:
    with _lock:
        _check(handle)
        _live_handles.discard(handle)
    with RECORDER.lock:
        RECORDER.destroyed.append(handle)


def setStream(handle: int, stream: int) -> None:
    with _lock:
        _check(handle)


def spotrf_bufferSize(handle, uplo, n, A, lda):
    _call("spotrf_bufferSize", handle)
    return max(1, n * n)


def dpotrf_bufferSize(handle, uplo, n, A, lda):
    _call("dpotrf_bufferSize", handle)
    return max(1, n * n)


def cpotrf_bufferSize(handle, uplo, n, A, lda):
    _call("cpotrf_bufferSize", handle)
    return max(1, n * n)


def zpotrf_bufferSize(handle, uplo, n, A, lda):
    _call("zpotrf_bufferSize", handle)
    return max(1, n * n)


def spotrf(handle, uplo, n, A, lda, work, lwork, devInfo):
    _call("spotrf", handle)


def dpotrf(handle, uplo, n, A, lda, work, lwork, devInfo):
    _call("dpotrf", handle)


def cpotrf(handle, uplo, n, A, lda, work, lwork, devInfo):
    _call("cpotrf", handle)


def zpotrf(handle, uplo, n, A, lda, work, lwork, devInfo):
    _call("zpotrf", handle)
