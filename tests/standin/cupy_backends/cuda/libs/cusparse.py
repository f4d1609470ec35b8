"""Stand-in for ``cupy_backends.cuda.libs.cusparse``: fake handles and descriptors; the
generic SpMV/SpMM calls are recorded.

Signatures and constants are the cupy-cuda12x 14.2.0 wheel's (``cusparse.pyx``'s
embedded signatures): ``spMV(handle, opA, alpha, matA, vecX, beta, vecY, computeType,
alg, externalBuffer)``, ``spMM(handle, opA, opB, alpha, matA, matB, beta, matC,
computeType, alg, externalBuffer)`` and their ``_bufferSize`` forms.

``RECORDER.calls`` holds a ``SparseCall(function, op_a, thread, alg, buffer, buffer_size,
beta)`` for every ``spMV``, ``spMV_bufferSize``, ``spMM`` and ``spMM_bufferSize`` (``alg`` as
passed; ``buffer`` the launch's ``externalBuffer``, ``None`` for a query; ``buffer_size`` the
size in bytes of the stand-in array at that pointer, ``None`` if there is none; ``beta`` a
launch's beta, where the stand-in's ``cupyx.cusparse`` passed it: ``HOST_SCALARS``);
``RECORDER.reset()`` empties it. Handles never repeat in a process; using a destroyed handle raises ``ValueError``.

Descriptors remember what they were made with: ``spMatGetFormat(desc)`` answers
``CUSPARSE_FORMAT_CSR`` (1), ``CSC`` (2) or ``COO`` (3), ``csrGet`` / ``cooGet`` answer
``CsrAttributes`` / ``CooAttributes`` (rows, cols, nnz, pointers, types), as cuSPARSE does on
the host. The algorithm constants are the wheel's names and values (``CUSPARSE_CSRMV_ALG2 =
3``, ``CUSPARSE_COOMM_ALG2 = 2``, ...; it has no name for cusparse.h's ``SPMV_COO_ALG2 = 4``
or ``SPMM_CSR_ALG3 = 12``). The size queries answer a made-up size per algorithm
(``BUFFER_SIZES``, different for each; the real sizes depend on the matrix), so a test can
tell which query sized a buffer, and whether a launch's buffer fits its algorithm.

``SPMM_CSR_ALG3`` (12) refuses, in the query and in the launch, with ``CuSparseError(10)``
(``CUSPARSE_STATUS_NOT_SUPPORTED``), the operands cuSPARSE 12.5's own messages name
(``libcusparse.so.12``: "_SPMM_CSR_ALG3 is not supported when opA != OPERATION_NON_TRANSPOSE or
opB == OPERATION_CONJUGATE_TRANSPOSE", "_SPMM_CSR_ALG3 data type combination not supported,
matA: {}, ..."): a transposed ``matA``, a conjugate-transposed ``matB``, and a sparse value
type or compute type in ``ALG3_REFUSED_TYPES`` (NVIDIA documents ComplexF16 and ComplexBf16;
which other combinations it refuses is not documented, so a test adds to the set).
``CuSparseError``'s message is CuPy's, ``cusparseGetErrorName: cusparseGetErrorString``.

On a HIP build (``STANDIN_CUPY_HIP=1``) the module also has hipSPARSE's legacy
``{s,d,c,z}csrmv``, ``csrmm`` and ``csrmm2`` (transposition second, after the handle, as in
CuPy's ``cusparse.pyx``), each recorded as a ``SparseCall`` with ``alg`` ``None``; the CUDA 12
build has none of them, as the real wheel.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
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

#: (routine, alg) -> the size the stand-in's query answers (made up, each different: the
#: default SpMV's is larger than CSR_ALG2's and smaller than COO_ALG2's; see the docstring)
BUFFER_SIZES = {
    ("spMV", 0): 80, ("spMV", 3): 64, ("spMV", 4): 128,
    ("spMM", 0): 160, ("spMM", 2): 96, ("spMM", 12): 256,
}  # fmt: skip
_SPMM_CSR_ALG3 = 12
_CUDA_C_16F, _CUDA_C_16BF = 6, 15  # cudaDataType_t
#: value / compute types _SPMM_CSR_ALG3 refuses here (a test may add one)
_ALG3_REFUSED_TYPES = {_CUDA_C_16F, _CUDA_C_16BF}

# cusparseGetErrorName / cusparseGetErrorString (cuSPARSE 12.5) of the statuses the stand-in raises
_STATUS = {
    1: ("CUSPARSE_STATUS_NOT_INITIALIZED", "initialization error"),
    3: ("CUSPARSE_STATUS_INVALID_VALUE", "invalid value"),
    10: ("CUSPARSE_STATUS_NOT_SUPPORTED", "operation not supported"),
}


class CuSparseError(RuntimeError):
    def __init__(self, status: int) -> None:
        self.status = status
        name, message = _STATUS.get(status, (f"CUSPARSE_STATUS_{status}", "unknown error"))
        super().__init__(f"{name}: {message}")

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.status,))


class SparseCall(NamedTuple):
    function: str
    op_a: int
    thread: int
    alg: int | None = None
    buffer: int | None = None
    buffer_size: int | None = None
    beta: Any = None


class CsrAttributes(NamedTuple):  # CuPy: a cdef class with these public fields
    rows: int
    cols: int
    nnz: int
    rowOffsets: int
    colIdx: int
    values: int
    rowOffsetType: int
    colIdxType: int
    idxBase: int
    valueType: int


class CooAttributes(NamedTuple):
    rows: int
    cols: int
    nnz: int
    rowIdx: int
    colIdx: int
    values: int
    idxType: int
    idxBase: int
    valueType: int


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
_attributes: dict[int, Any] = {}  # sparse matrix descriptor -> what csrGet / cooGet answer


def _descriptor(*args: Any) -> int:
    return next(_descriptors)


def createCsr(rows, cols, nnz, csrRowOffsets, csrColind, csrValues, csrRowOffsetsType, csrColIndType, idxBase,
              valueType):  # fmt: skip
    desc = next(_descriptors)
    _formats[desc] = CUSPARSE_FORMAT_CSR
    _attributes[desc] = CsrAttributes(
        rows, cols, nnz, csrRowOffsets, csrColind, csrValues, csrRowOffsetsType, csrColIndType, idxBase, valueType
    )
    return desc


def createCsc(rows, cols, nnz, cscColOffsets, cscRowInd, cscValues, cscColOffsetsType, cscRowIndType, idxBase,
              valueType):  # fmt: skip
    desc = next(_descriptors)
    _formats[desc] = CUSPARSE_FORMAT_CSC
    return desc


def createCoo(rows, cols, nnz, cooRowInd, cooColInd, cooValues, cooIdxType, idxBase, valueType):
    desc = next(_descriptors)
    _formats[desc] = CUSPARSE_FORMAT_COO
    _attributes[desc] = CooAttributes(
        rows, cols, nnz, cooRowInd, cooColInd, cooValues, cooIdxType, idxBase, valueType
    )
    return desc


createMatDescr = createDnVec = createDnMat = _descriptor


def spMatGetFormat(desc: int) -> int:
    try:
        return _formats[desc]
    except KeyError:
        raise CuSparseError(3) from None  # CUSPARSE_STATUS_INVALID_VALUE


def _get(desc: int, format: int) -> Any:
    if _formats.get(desc) != format:
        raise CuSparseError(3)  # cuSPARSE checks the descriptor's format
    return _attributes[desc]


def csrGet(desc: int) -> CsrAttributes:
    return _get(desc, CUSPARSE_FORMAT_CSR)  # type: ignore[no-any-return]


def cooGet(desc: int) -> CooAttributes:
    return _get(desc, CUSPARSE_FORMAT_COO)  # type: ignore[no-any-return]


def _destroy(desc: int) -> None:
    pass


destroyMatDescr = destroySpMat = destroyDnVec = destroyDnMat = _destroy


#: host pointer -> the NumPy scalar array there, for the alpha and beta the stand-in's
#: ``cupyx.cusparse`` passes (not CuPy's: lets the recorder read beta without reading memory)
HOST_SCALARS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def _call(
    function: str, handle: int, op_a: int, alg: int | None = None, buffer: int | None = None, query: bool = False,
    beta: int | None = None,
) -> None:  # fmt: skip
    with _lock:
        _check(handle)
    from cupy._core import core  # (CuPy's arrays: imported at call time, cupy imports this package)

    size = None if query or buffer is None else core._allocation_size(buffer)
    scalar = HOST_SCALARS.get(beta) if beta is not None else None
    value = None if scalar is None else scalar.item()
    RECORDER.record(SparseCall(function, op_a, threading.get_ident(), alg, buffer, size, value))


def _alg3_operands(opA: int, opB: int, matA: int, computeType: int) -> None:
    """cuSPARSE 12.5's checks of _SPMM_CSR_ALG3's operands (its messages, in the docstring)."""
    value_type = getattr(_attributes.get(matA), "valueType", None)
    if (
        opA != CUSPARSE_OPERATION_NON_TRANSPOSE
        or opB == CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE
        or value_type in _ALG3_REFUSED_TYPES
        or computeType in _ALG3_REFUSED_TYPES
    ):
        raise CuSparseError(10)  # CUSPARSE_STATUS_NOT_SUPPORTED


def spMV_bufferSize(handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg):
    _call("spMV_bufferSize", handle, opA, alg, query=True)
    return BUFFER_SIZES.get(("spMV", alg), 32)


def spMV(handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, externalBuffer):
    _call("spMV", handle, opA, alg, externalBuffer, beta=beta)


def spMM_bufferSize(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg):
    if alg == _SPMM_CSR_ALG3:
        _alg3_operands(opA, opB, matA, computeType)
    _call("spMM_bufferSize", handle, opA, alg, query=True)
    return BUFFER_SIZES.get(("spMM", alg), 32)


def spMM(handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, externalBuffer):
    if alg == _SPMM_CSR_ALG3:
        _alg3_operands(opA, opB, matA, computeType)
    _call("spMM", handle, opA, alg, externalBuffer, beta=beta)


if _runtime.is_hip:  # hipSPARSE's legacy API, which CuPy's HIP build still binds

    def _legacy(name: str) -> Any:
        def call(handle: int, transA: int, *args: Any) -> None:
            _call(name, handle, transA)

        call.__name__ = call.__qualname__ = name
        return call

    for _prefix in "sdcz":
        for _name in ("csrmv", "csrmm", "csrmm2"):
            globals()[_prefix + _name] = _legacy(_prefix + _name)
