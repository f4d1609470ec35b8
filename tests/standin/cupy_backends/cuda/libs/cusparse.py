"""Stand-in for ``cupy_backends.cuda.libs.cusparse``: fake handles and descriptors; the
generic SpMV/SpMM calls are recorded.

Signatures and constants are the cupy-cuda12x 14.2.0 wheel's (``cusparse.pyx``'s
embedded signatures): ``spMV(handle, opA, alpha, matA, vecX, beta, vecY, computeType,
alg, externalBuffer)``, ``spMM(handle, opA, opB, alpha, matA, matB, beta, matC,
computeType, alg, externalBuffer)`` and their ``_bufferSize`` forms.

``RECORDER.calls`` holds a ``SparseCall(function, op_a, thread, alg, buffer)`` for every
``spMV``, ``spMV_bufferSize``, ``spMM`` and ``spMM_bufferSize`` (``alg`` as passed; ``buffer``
the launch's ``externalBuffer``, ``None`` for a query); ``RECORDER.reset()`` empties it.
Handles never repeat in a process; using a destroyed handle raises ``ValueError``.

Descriptors remember their format: ``spMatGetFormat(desc)`` answers ``CUSPARSE_FORMAT_CSR``
(1), ``CSC`` (2) or ``COO`` (3) for what ``createCsr``/``createCsc``/``createCoo`` made, as
cuSPARSE does on the host. The algorithm constants are the wheel's names and values
(``CUSPARSE_CSRMV_ALG2 = 3``, ``CUSPARSE_COOMM_ALG2 = 2``, ...; it has no name for
cusparse.h's ``SPMV_COO_ALG2 = 4`` or ``SPMM_CSR_ALG3 = 12``). The size queries answer a
made-up size per algorithm (``BUFFER_SIZES``: 0 for the defaults, more for the others; the
real sizes depend on the matrix), so a test can tell which query sized a buffer.

On a HIP build (``STANDIN_CUPY_HIP=1``) the module also has hipSPARSE's legacy
``{s,d,c,z}csrmv``, ``csrmm`` and ``csrmm2`` (transposition second, after the handle, as in
CuPy's ``cusparse.pyx``), each recorded as a ``SparseCall`` with ``alg`` ``None``; the CUDA 12
build has none of them, as the real wheel.
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
CUSPARSE_FORMAT_CSR = 1
CUSPARSE_FORMAT_CSC = 2
CUSPARSE_FORMAT_COO = 3
CUSPARSE_FORMAT_COO_AOS = 4
CUSPARSE_MV_ALG_DEFAULT = 0
CUSPARSE_COOMV_ALG = 1
CUSPARSE_CSRMV_ALG1 = 2
CUSPARSE_CSRMV_ALG2 = 3
CUSPARSE_MM_ALG_DEFAULT = 0
CUSPARSE_COOMM_ALG1 = 1
CUSPARSE_COOMM_ALG2 = 2
CUSPARSE_COOMM_ALG3 = 3
CUSPARSE_CSRMM_ALG1 = 4

#: (routine, alg) -> the size the stand-in's query answers (made up; see the docstring)
BUFFER_SIZES = {("spMV", 0): 0, ("spMV", 3): 64, ("spMV", 4): 96, ("spMM", 0): 0, ("spMM", 2): 128, ("spMM", 12): 256}


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
    alg: int | None = None
    buffer: int | None = None


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


_formats: dict[int, int] = {}  # sparse matrix descriptor -> its cusparseFormat_t


def _descriptor(*args: Any) -> int:
    return next(_descriptors)


def _sparse(format: int) -> Any:
    def create(*args: Any) -> int:
        desc = next(_descriptors)
        _formats[desc] = format
        return desc

    return create


createMatDescr = createDnVec = createDnMat = _descriptor
createCsr = _sparse(CUSPARSE_FORMAT_CSR)
createCsc = _sparse(CUSPARSE_FORMAT_CSC)
createCoo = _sparse(CUSPARSE_FORMAT_COO)


def spMatGetFormat(desc: int) -> int:
    try:
        return _formats[desc]
    except KeyError:
        raise CuSparseError(3) from None  # CUSPARSE_STATUS_INVALID_VALUE


def _destroy(desc: int) -> None:
    pass


destroyMatDescr = destroySpMat = destroyDnVec = destroyDnMat = _destroy


def _call(function: str, handle: int, op_a: int, alg: int | None = None, buffer: int | None = None) -> None:
    with _lock:
        _check(handle)
    RECORDER.record(SparseCall(function, op_a, threading.get_ident(), alg, buffer))


def spMV_bufferSize(handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg):
    _call("spMV_bufferSize", handle, opA, alg)
    return BUFFER_SIZES.get(("spMV", alg), 32)


def spMV(handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, externalBuffer):
    _call("spMV", handle, opA, alg, externalBuffer)


def spMM_bufferSize(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg):
    _call("spMM_bufferSize", handle, opA, alg)
    return BUFFER_SIZES.get(("spMM", alg), 32)


def spMM(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, externalBuffer):
    _call("spMM", handle, opA, alg, externalBuffer)


if _runtime.is_hip:  # hipSPARSE's legacy API, which CuPy's HIP build still binds

    def _legacy(name: str) -> Any:
        def call(handle: int, transA: int, *args: Any) -> None:
            _call(name, handle, transA)

        call.__name__ = call.__qualname__ = name
        return call

    for _prefix in "sdcz":
        for _name in ("csrmv", "csrmm", "csrmm2"):
            globals()[_prefix + _name] = _legacy(_prefix + _name)
