"""Stand-in for ``cupyx.cusparse`` (``cusparse.py`` v14.2.0): ``spmv`` (lines 1729-1795)
and ``spmm`` (1802-1894) with their descriptors (1615-1726), ``check_availability``
(189-311), and the format conversions the sparse matrices use.

``spmv``/``spmm`` call ``cupy_backends.cuda.libs.cusparse.spMV``/``spMM`` (and the
``_bufferSize`` queries) through the module ``_cusparse`` at call time, with the handle
from ``cupy.cuda.device.get_cusparse_handle()``. A CSC matrix is taken as the transpose
of a CSR one (``a = a.T; transa = not transa``), as in CuPy. ``check_availability``
answers from CuPy's CUDA table for the stand-in's cuSPARSE 12.5.9: the legacy
``csrmv``/``csrmm2`` are gone (removed in CUDA 11), the generic ``spmv``/``spmm`` are
there. On a HIP build it answers from CuPy's hipSPARSE table (the entries used here) for
the stand-in driver's HIP version: ``csrmv``, ``csrmm``, ``csrmm2``, ``spmv``, ``spmm`` are
all there, and ``csrmv`` (333-366), ``csrmm2`` (436-491) call the legacy
``_cusparse.{s,d,c,z}csrmv``/``csrmm2`` through ``_call_cusparse`` (177-188), as CuPy does.

The conversions (``coosort``, ``coo2csr``, ``coo2csc``, ``csr2coo``, ``csc2coo``,
``csr2cscEx2``, ``csc2csrEx2``) are cuSPARSE's structural ones: the stand-in computes them
in Python from the index values (without values, the results have none) and records nothing.
"""

from __future__ import annotations

import itertools
from typing import Any

import cupy as _cupy
import numpy as _numpy
from cupy._core import _dtype
from cupy.cuda import device as _device
from cupy_backends.cuda.api import driver as _driver
from cupy_backends.cuda.api import runtime as _runtime
from cupy_backends.cuda.libs import cusparse as _cusparse

import cupyx.scipy.sparse

_ONE = 0x10  # fake host pointers to alpha and beta, for the legacy (HIP) products
_ZERO = 0x20


def _host_scalar(value: Any, dtype: Any) -> Any:
    """``numpy.array(value, dtype)``, as CuPy passes alpha and beta (its ``.ctypes.data``), known
    to the stand-in's cuSPARSE so that it can record beta."""
    scalar = _numpy.array(value, dtype)
    _cusparse.HOST_SCALARS[scalar.ctypes.data] = scalar
    return scalar


def _is_csr_type(x: Any) -> bool:
    return isinstance(x, cupyx.scipy.sparse._csr._csr_base)


def _is_csc_type(x: Any) -> bool:
    return isinstance(x, cupyx.scipy.sparse._csc._csc_base)


def _is_csr_or_coo_type(x: Any) -> bool:
    return isinstance(x, (cupyx.scipy.sparse._csr._csr_base, cupyx.scipy.sparse._coo._coo_base))


class MatDescriptor:
    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor

    @classmethod
    def create(cls) -> MatDescriptor:
        return MatDescriptor(_cusparse.createMatDescr())


def _cast_common_type(*xs: Any) -> list[Any]:
    dtypes = [x.dtype for x in xs if x is not None]
    dtype = dtypes[0]
    for other in dtypes[1:]:
        dtype = _dtype.promote_types(dtype, other)
    return [x.astype(dtype) if x is not None and x.dtype != dtype else x for x in xs]


def _transpose_flag(trans: bool) -> int:
    if trans:
        return _cusparse.CUSPARSE_OPERATION_TRANSPOSE
    else:
        return _cusparse.CUSPARSE_OPERATION_NON_TRANSPOSE


# (version added, version removed) of CuPy's CUDA table, the entries the stand-in uses
_available_cusparse_version = {
    "csrmv": (8000, 11000),
    "csrmm": (8000, 11000),
    "csrmm2": (8000, 11000),
    "spmv": (10200, None),  # (Windows: 11000)
    "spmm": (10301, None),
    "csrsort": (8000, None),
    "cscsort": (8000, None),
    "coosort": (8000, None),
    "coo2csr": (8000, None),
    "csr2coo": (8000, None),
    "csr2csc": (8000, 11000),
    "csc2csr": (8000, 11000),
    "csr2cscEx2": (10200, None),
    "csc2csrEx2": (10200, None),
    "spgemm": (11100, None),
}


# CuPy's hipSPARSE table, the same entries
_available_hipsparse_version = {
    "csrmv": (305, None),
    "csrmm": (305, None),
    "csrmm2": (305, None),
    "spmv": (402, None),
    "spmm": (402, None),
    "csrsort": (305, None),
    "cscsort": (305, None),
    "coosort": (305, None),
    "coo2csr": (305, None),
    "csr2coo": (305, None),
    "csr2csc": (305, None),
    "csc2csr": (305, None),
    "csr2cscEx2": (float("inf"), None),
    "csc2csrEx2": (float("inf"), None),
    "spgemm": (float("inf"), None),
}


def check_availability(name: str) -> bool:
    if not _runtime.is_hip:
        available_version = _available_cusparse_version
        version = _cusparse.get_build_version()
    else:
        available_version = _available_hipsparse_version
        version = _driver.get_build_version()  # = HIP_VERSION
    if name not in available_version:
        raise ValueError(f"No available version information specified for {name}")
    version_added, version_removed = available_version[name]
    if version_added is not None and version < version_added:
        return False
    return not (version_removed is not None and version >= version_removed)


def _dtype_to_IndexType(dtype: Any) -> int:
    if dtype == "uint16":
        return _cusparse.CUSPARSE_INDEX_16U
    elif dtype == "int32":
        return _cusparse.CUSPARSE_INDEX_32I
    elif dtype == "int64":
        return _cusparse.CUSPARSE_INDEX_64I
    else:
        raise TypeError


class BaseDescriptor:
    def __init__(self, descriptor: int, get: Any = None, destroyer: Any = None) -> None:
        self.desc = descriptor
        self.get = get
        self.destroy = destroyer


class SpMatDescriptor(BaseDescriptor):
    @classmethod
    def create(cls, a: Any) -> SpMatDescriptor:
        if not cupyx.scipy.sparse.issparse(a):
            raise TypeError("expected sparse matrix")
        rows, cols = a.shape
        idx_base = _cusparse.CUSPARSE_INDEX_BASE_ZERO
        cuda_dtype = _dtype.to_cuda_dtype(a.dtype)
        if a.format == "csr":
            desc = _cusparse.createCsr(
                rows, cols, a.nnz, a.indptr.data.ptr, a.indices.data.ptr, a.data.data.ptr,
                _dtype_to_IndexType(a.indptr.dtype), _dtype_to_IndexType(a.indices.dtype), idx_base, cuda_dtype,
            )  # fmt: skip
        elif a.format == "coo":
            desc = _cusparse.createCoo(
                rows, cols, a.nnz, a.row.data.ptr, a.col.data.ptr, a.data.data.ptr,
                _dtype_to_IndexType(a.row.dtype), idx_base, cuda_dtype,
            )  # fmt: skip
        elif a.format == "csc":
            desc = _cusparse.createCsc(
                rows, cols, a.nnz, a.indptr.data.ptr, a.indices.data.ptr, a.data.data.ptr,
                _dtype_to_IndexType(a.indptr.dtype), _dtype_to_IndexType(a.indices.dtype), idx_base, cuda_dtype,
            )  # fmt: skip
        else:
            raise ValueError(f"csr, csc and coo format are supported (actual: {a.format}).")
        return SpMatDescriptor(desc, None, _cusparse.destroySpMat)


class DnVecDescriptor(BaseDescriptor):
    @classmethod
    def create(cls, x: Any) -> DnVecDescriptor:
        cuda_dtype = _dtype.to_cuda_dtype(x.dtype)
        desc = _cusparse.createDnVec(x.size, x.data.ptr, cuda_dtype)
        return DnVecDescriptor(desc, None, _cusparse.destroyDnVec)


class DnMatDescriptor(BaseDescriptor):
    @classmethod
    def create(cls, a: Any) -> DnMatDescriptor:
        if a.ndim != 2:
            raise ValueError("expected 2-D matrix")
        # (CuPy also requires a Fortran-ordered array; stand-in arrays have no strides)
        rows, cols = a.shape
        ld = rows
        cuda_dtype = _dtype.to_cuda_dtype(a.dtype)
        desc = _cusparse.createDnMat(rows, cols, ld, a.data.ptr, cuda_dtype, _cusparse.CUSPARSE_ORDER_COL)
        return DnMatDescriptor(desc, None, _cusparse.destroyDnMat)


def spmv(a: Any, x: Any, y: Any = None, alpha: Any = 1, beta: Any = 0, transa: bool = False) -> Any:
    """Multiplication of sparse matrix and dense vector: ``y = alpha * op(A) x + beta * y``."""
    if not check_availability("spmv"):
        raise RuntimeError("spmv is not available.")

    if _is_csc_type(a):
        aT = a.T
        if not _is_csr_type(aT):
            raise TypeError(f"aT must be csr_matrix (actual: {type(aT)})")
        a = aT
        transa = not transa
    if not _is_csr_or_coo_type(a):
        raise TypeError(f"unsupported type (actual: {type(a)})")
    a_shape = a.shape if not transa else a.shape[::-1]
    if a_shape[1] != len(x):
        raise ValueError("dimension mismatch")
    if not a.has_canonical_format:
        raise ValueError("expected canonical format")

    m, n = a_shape  # noqa: RUF059
    a, x, y = _cast_common_type(a, x, y)
    if y is None:
        y = _cupy.zeros(m, a.dtype)
    elif len(y) != m:
        raise ValueError("dimension mismatch")
    if a.nnz == 0:
        y.fill(0)
        return y

    desc_a = SpMatDescriptor.create(a)
    desc_x = DnVecDescriptor.create(x)
    desc_y = DnVecDescriptor.create(y)

    handle = _device.get_cusparse_handle()
    op_a = _transpose_flag(transa)
    cuda_dtype = _dtype.to_cuda_dtype(a.dtype)
    alpha = _host_scalar(alpha, a.dtype).ctypes
    beta = _host_scalar(beta, a.dtype).ctypes
    alg = _cusparse.CUSPARSE_MV_ALG_DEFAULT
    buff_size = _cusparse.spMV_bufferSize(
        handle, op_a, alpha.data, desc_a.desc, desc_x.desc, beta.data, desc_y.desc, cuda_dtype, alg
    )
    buff = _cupy.empty(buff_size, _cupy.int8)
    _cusparse.spMV(handle, op_a, alpha.data, desc_a.desc, desc_x.desc, beta.data, desc_y.desc, cuda_dtype, alg,
                   buff.data.ptr)  # fmt: skip
    y.values = None
    return y


def spmm(
    a: Any, b: Any, c: Any = None, alpha: Any = 1, beta: Any = 0, transa: bool = False, transb: bool = False
) -> Any:
    """Multiplication of sparse matrix and dense matrix: ``C = alpha * op(A) op(B) + beta * C``."""
    if not check_availability("spmm"):
        raise RuntimeError("spmm is not available.")

    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("expected 2-D matrices")
    # (CuPy also requires Fortran-ordered b and c; stand-in arrays have no strides)

    if _is_csc_type(a):
        aT = a.T
        if not _is_csr_type(aT):
            raise TypeError(f"aT must be csr_matrix (actual: {type(aT)})")
        a = aT
        transa = not transa
    if not _is_csr_or_coo_type(a):
        raise TypeError(f"unsupported type (actual: {type(a)})")
    a_shape = a.shape if not transa else a.shape[::-1]
    b_shape = b.shape if not transb else b.shape[::-1]
    if a_shape[1] != b_shape[0]:
        raise ValueError("dimension mismatch")
    if not a.has_canonical_format:
        raise ValueError("expected canonical format for a")

    m, k = a_shape  # noqa: RUF059
    _, n = b_shape
    a, b, c = _cast_common_type(a, b, c)
    if c is None:
        c = _cupy.zeros((m, n), a.dtype, "F")
    elif c.shape[0] != m or c.shape[1] != n:
        raise ValueError("dimension mismatch")
    if a.nnz == 0:
        c.fill(0)
        return c
    # (CuPy splits more than 65535 * 16 dense columns for cuSPARSE < 12.7.20: not modelled)

    desc_a = SpMatDescriptor.create(a)
    desc_b = DnMatDescriptor.create(b)
    desc_c = DnMatDescriptor.create(c)

    handle = _device.get_cusparse_handle()
    op_a = _transpose_flag(transa)
    op_b = _transpose_flag(transb)
    cuda_dtype = _dtype.to_cuda_dtype(a.dtype)
    alpha = _host_scalar(alpha, a.dtype).ctypes
    beta = _host_scalar(beta, a.dtype).ctypes
    alg = _cusparse.CUSPARSE_MM_ALG_DEFAULT
    buff_size = _cusparse.spMM_bufferSize(
        handle, op_a, op_b, alpha.data, desc_a.desc, desc_b.desc, beta.data, desc_c.desc, cuda_dtype, alg
    )
    buff = _cupy.empty(buff_size, _cupy.int8)
    _cusparse.spMM(
        handle, op_a, op_b, alpha.data, desc_a.desc, desc_b.desc, beta.data, desc_c.desc, cuda_dtype, alg,
        buff.data.ptr,
    )  # fmt: skip
    c.values = None
    return c


def _call_cusparse(name: str, dtype: Any, *args: Any) -> Any:
    prefix = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}.get(str(dtype))
    if prefix is None:
        raise TypeError
    return getattr(_cusparse, prefix + name)(*args)


def csrmv(a: Any, x: Any, y: Any = None, alpha: Any = 1, beta: Any = 0, transa: bool = False) -> Any:
    """Matrix-vector product for a CSR-matrix and a dense vector (the legacy API: ROCm)."""
    if not check_availability("csrmv"):
        raise RuntimeError("csrmv is not available.")
    a_shape = a.shape if not transa else a.shape[::-1]
    if a_shape[1] != len(x):
        raise ValueError("dimension mismatch")
    handle = _device.get_cusparse_handle()
    m, n = a_shape  # noqa: RUF059
    a, x, y = _cast_common_type(a, x, y)
    dtype = a.dtype
    if y is None:
        y = _cupy.zeros(m, dtype)
    _call_cusparse(
        "csrmv", dtype, handle, _transpose_flag(transa), a.shape[0], a.shape[1], a.nnz, _ONE,
        _cusparse.createMatDescr(), a.data.data.ptr, a.indptr.data.ptr, a.indices.data.ptr, x.data.ptr, _ZERO,
        y.data.ptr,
    )  # fmt: skip
    y.values = None
    return y


def csrmm2(a: Any, b: Any, c: Any = None, alpha: Any = 1.0, beta: Any = 0.0, transa: bool = False,
           transb: bool = False) -> Any:  # fmt: skip
    """Matrix-matrix product for a CSR-matrix and a dense matrix (the legacy API: ROCm)."""
    if not check_availability("csrmm2"):
        raise RuntimeError("csrmm2 is not available.")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("expected 2-D matrices")
    if not a.has_canonical_format:
        raise ValueError("expected canonical format for a")
    assert not (transa and transb)
    a_shape = a.shape if not transa else a.shape[::-1]
    b_shape = b.shape if not transb else b.shape[::-1]
    if a_shape[1] != b_shape[0]:
        raise ValueError("dimension mismatch")
    handle = _device.get_cusparse_handle()
    m, k = a_shape  # noqa: RUF059
    n = b_shape[1]
    a, b, c = _cast_common_type(a, b, c)
    if c is None:
        c = _cupy.zeros((m, n), a.dtype, "F")
    _call_cusparse(
        "csrmm2", a.dtype, handle, _transpose_flag(transa), _transpose_flag(transb), a.shape[0], n, a.shape[1],
        a.nnz, _ONE, _cusparse.createMatDescr(), a.data.data.ptr, a.indptr.data.ptr, a.indices.data.ptr,
        b.data.ptr, b.shape[0], _ZERO, c.data.ptr, c.shape[0],
    )  # fmt: skip
    c.values = None
    return c


# ------------------------------------------------------------ conversions (computed from values)
def _values(*arrays: Any) -> list[list[Any]] | None:
    """The arrays' values, or None if one of them has none."""
    if any(a.values is None for a in arrays):
        return None
    return [a.values for a in arrays]


def _indptr(major: Any, n_major: int, dtype: Any) -> Any:
    """CSR/CSC ``indptr`` from sorted major indices (``xcoo2csr``)."""
    if major.values is None:
        return _cupy.ndarray((n_major + 1,), dtype)
    counts = [0] * (n_major + 1)
    for i in major.values:
        counts[i + 1] += 1
    return _cupy.array(list(itertools.accumulate(counts)), dtype)


def _expand(indptr: Any, nnz: int, dtype: Any) -> Any:
    """The major index of each stored entry (``xcsr2coo``)."""
    if indptr.values is None:
        return _cupy.ndarray((nnz,), dtype)
    bounds = indptr.values
    return _cupy.array([i for i in range(len(bounds) - 1) for _ in range(bounds[i], bounds[i + 1])], dtype)


def coosort(x: Any, sort_by: str = "r") -> None:
    """Sorts indices of COO-matrix in place (by row, or by column)."""
    nnz = x.nnz
    if nnz == 0:
        return
    if sort_by == "r" and x.has_canonical_format:
        return
    if sort_by not in ("r", "c"):
        raise ValueError("sort_by must be either 'r' or 'c'")
    values = _values(x.row, x.col)
    if values is None:
        x.row.values = x.col.values = x.data.values = None
    else:
        rows, cols = values
        keys = list(zip(rows, cols, strict=True)) if sort_by == "r" else list(zip(cols, rows, strict=True))
        order = sorted(range(nnz), key=keys.__getitem__)
        x.row.values = [rows[i] for i in order]
        x.col.values = [cols[i] for i in order]
        if x.data.values is not None:
            x.data.values = [x.data.values[i] for i in order]
    if sort_by == "c":  # coo canonical order is row-major
        x.has_canonical_format = False


def coo2csr(x: Any) -> Any:
    m = int(x.shape[0])
    indptr = _indptr(x.row, m, x.row.dtype)
    return cupyx.scipy.sparse.csr_matrix._from_parts(x.data, x.col, indptr, x.shape)


def coo2csc(x: Any) -> Any:
    n = int(x.shape[1])
    indptr = _indptr(x.col, n, x.col.dtype)
    return cupyx.scipy.sparse.csc_matrix._from_parts(x.data, x.row, indptr, x.shape)


def csr2coo(x: Any, data: Any, indices: Any) -> Any:
    """Converts a CSR-matrix to COO format (canonical when the CSR matrix is known to be)."""
    row = _expand(x.indptr, x.nnz, x.indptr.dtype)
    return cupyx.scipy.sparse.coo_matrix._from_parts(
        data, row, indices, x.shape, has_canonical_format=bool(getattr(x, "_has_canonical_format", False))
    )


def csc2coo(x: Any, data: Any, indices: Any) -> Any:
    col = _expand(x.indptr, x.nnz, x.indptr.dtype)
    A = cupyx.scipy.sparse.coo_matrix._from_parts(data, indices, col, x.shape)
    A.has_canonical_format = False
    return A


def _transpose_compressed(x: Any, output_cls: Any, out_dim: int) -> Any:
    """CSR <-> CSC of the same matrix (``csr2cscEx2``)."""
    major = _expand(x.indptr, x.nnz, x.indptr.dtype)
    coo = cupyx.scipy.sparse.coo_matrix._from_parts(
        x.data.copy(), major, x.indices.copy(), (len(x.indptr) - 1, out_dim)
    )
    coosort(coo, "c")  # by minor index, then major (in place, as cuSPARSE's: on copies)
    return output_cls._from_parts(coo.data, coo.row, _indptr(coo.col, out_dim, coo.col.dtype), x.shape)


def csr2cscEx2(x: Any) -> Any:
    return _transpose_compressed(x, cupyx.scipy.sparse.csc_matrix, int(x.shape[1]))


def csc2csrEx2(x: Any) -> Any:
    return _transpose_compressed(x, cupyx.scipy.sparse.csr_matrix, int(x.shape[0]))


# ROCm: CuPy's hipSPARSE table has the legacy csr2csc (and not csr2cscEx2); the stand-in makes
# the same structural conversion for both.
csr2csc = csr2cscEx2
csc2csr = csc2csrEx2
