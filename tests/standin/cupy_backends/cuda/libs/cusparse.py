"""Stand-in for ``cupy_backends.cuda.libs.cusparse``: fake handles and descriptors; the
generic SpMV/SpMM calls are recorded.

Signatures and constants are the cupy-cuda12x 14.2.0 wheel's (``cusparse.pyx``'s
embedded signatures): ``spMV(handle, opA, alpha, matA, vecX, beta, vecY, computeType,
alg, externalBuffer)``, ``spMM(handle, opA, opB, alpha, matA, matB, beta, matC,
computeType, alg, externalBuffer)`` and their ``_bufferSize`` forms.

``RECORDER.calls`` holds a ``SparseCall(function, op_a, thread)`` for every ``spMV``,
``spMV_bufferSize``, ``spMM`` and ``spMM_bufferSize``; ``RECORDER.reset()`` empties it.
Handles never repeat in a process; using a destroyed handle raises ``ValueError``.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, NamedTuple

from cupy_backends._standin_recorder import CallRecorder
from cupy_backends.cuda.api import runtime as _runtime
from cupy_backends.cuda.libs._check import require as _require

_require("cusparse")

CUSPARSE_OPERATION_NON_TRANSPOSE = 0
CUSPARSE_OPERATION_TRANSPOSE = 1
CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE = 2
CUSPARSE_INDEX_BASE_ZERO = 0
CUSPARSE_INDEX_16U = 1
CUSPARSE_INDEX_32I = 2
CUSPARSE_INDEX_64I = 3
CUSPARSE_ORDER_COL = 1
CUSPARSE_ORDER_ROW = 2
CUSPARSE_MV_ALG_DEFAULT = 0
CUSPARSE_MM_ALG_DEFAULT = 0


class CuSparseError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"CUSPARSE_STATUS_{status}")

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.status,))


class SparseCall(NamedTuple):
    function: str
    op_a: int
    thread: int


RECORDER: CallRecorder[SparseCall] = CallRecorder()

_lock = threading.RLock()
_live_handles: set[int] = set()
_last_handle = 0
_descriptors = itertools.count(0x6000, 0x10)


def get_build_version() -> int:
    return 12509  # the cupy-cuda12x 14.2.0 wheel's: the generic API, no csrmv/csrmm2


def is_cuda_python_build() -> bool:
    return False


def create() -> int:
    global _last_handle
    if _runtime._no_gpu():
        raise CuSparseError(1)
    with _lock:
        _last_handle = handle = max(_last_handle + 1, time.monotonic_ns())
        _live_handles.add(handle)
    return handle


def destroy(handle: int) -> None:
    with _lock:
        _check(handle)
        _live_handles.discard(handle)


def _check(handle: int) -> None:
    if handle not in _live_handles:
        raise ValueError(f"invalid cuSPARSE handle {handle!r} (destroyed or never created)")


def setStream(handle: int, stream: int) -> None:
    with _lock:
        _check(handle)


def getVersion(handle: int) -> int:
    with _lock:
        _check(handle)
    return get_build_version()


def _descriptor(*args: Any) -> int:
    return next(_descriptors)


createMatDescr = createCsr = createCsc = createCoo = createDnVec = createDnMat = _descriptor


def _destroy(desc: int) -> None:
    pass


destroyMatDescr = destroySpMat = destroyDnVec = destroyDnMat = _destroy


def _call(function: str, handle: int, op_a: int) -> None:
    with _lock:
        _check(handle)
    RECORDER.record(SparseCall(function, op_a, threading.get_ident()))


def spMV_bufferSize(handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg):
    _call("spMV_bufferSize", handle, opA)
    return 0


def spMV(handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, externalBuffer):
    _call("spMV", handle, opA)


def spMM_bufferSize(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg):
    _call("spMM_bufferSize", handle, opA)
    return 0


def spMM(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, externalBuffer):
    _call("spMM", handle, opA)
