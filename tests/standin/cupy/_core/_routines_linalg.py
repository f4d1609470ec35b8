"""Stand-in for ``cupy._core._routines_linalg``: CuPy 14's GEMM dispatch, without the arithmetic.

``dot`` (also ``@`` and ``matmul`` on 1-D/2-D operands) goes through ``tensordot_core``:
on CUDA at compute capability >= 50 it calls ``tensordot_core_v11``, which passes an
explicit cuBLAS compute type from the process-wide ``get_compute_type`` to
``cublas.gemmEx``; below 50 (``STANDIN_CUPY_CC``) or on a HIP build
(``STANDIN_CUPY_HIP``) it takes the pre-CUDA-11 path (``sgemmEx``, ``dgemm``,
``cgemm``, ``zgemm``; fp16/bf16 through ``gemmEx`` with the legacy ``CUDA_R_32F``
compute type on HIP or at compute capability >= 70, else ``sgemmEx``).
``set_compute_type`` refuses TF32 and BF16 below compute capability 80 (it warns and
stores DEFAULT), so ``CUPY_TF32=1`` gives no TF32 compute type there, as in CuPy.
``matmul`` on 3-D and higher operands calls ``cublas.gemmStridedBatchedEx`` (compute
type = the CUDA data type; the handle's math mode decides), or ``{s,d,c,z}gemmBatched``
when a batch dimension broadcasts.
Integer operands (and bfloat16 in the batched path) use CuPy's own kernels: no cuBLAS.

Every function imports ``cupy_backends.cuda.libs.cublas`` inside itself and looks its
functions up by name at call time, as CuPy does. The handle comes from
``cupy.cuda.device.get_cublas_handle`` and the compute type from ``get_compute_type``
through references bound at import (Cython's ``cimport``): replacing those module
attributes does not change what a GEMM uses, as in CuPy.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

from cupy_backends.cuda.api import runtime

from cupy._core._dtype import CHAR, get_dtype, is_inexact, promote_types, to_cuda_dtype
from cupy._core.core import ndarray
from cupy.cuda import device as _device

COMPUTE_TYPE_TBD = 0
COMPUTE_TYPE_DEFAULT = 1
COMPUTE_TYPE_PEDANTIC = 2
COMPUTE_TYPE_FP16 = 3
COMPUTE_TYPE_FP32 = 4
COMPUTE_TYPE_FP64 = 5
COMPUTE_TYPE_BF16 = 6
COMPUTE_TYPE_TF32 = 7

compute_type_str = {
    0: "COMPUTE_TYPE_TBD",
    1: "COMPUTE_TYPE_DEFAULT",
    2: "COMPUTE_TYPE_PEDANTIC",
    3: "COMPUTE_TYPE_FP16",
    4: "COMPUTE_TYPE_FP32",
    5: "COMPUTE_TYPE_FP64",
    6: "COMPUTE_TYPE_BF16",
    7: "COMPUTE_TYPE_TF32",
}

# One process-wide setting per dtype group: bfloat16, float16, float32/complex64, float64/complex128.
_compute_types = [COMPUTE_TYPE_TBD] * 4

_get_cublas_handle = _device._c_get_cublas_handle
_get_compute_capability = _device._c_get_compute_capability


def to_compute_type_index(dtype: Any) -> int:
    char = CHAR[get_dtype(dtype)]
    if char == "E":
        return 0
    if char == "e":
        return 1
    if char in "fF":
        return 2
    if char in "dD":
        return 3
    raise TypeError(f"dtype is not supported: {dtype}")


def set_compute_type(dtype: Any, compute_type: int) -> None:
    """As CuPy's: BF16 and TF32 are stored only at compute capability >= 80 (of the
    current device); below, CuPy warns and stores DEFAULT."""
    if compute_type in (COMPUTE_TYPE_BF16, COMPUTE_TYPE_TF32):
        if int(_get_compute_capability()) < 80:
            warnings.warn(
                "COMPUTE_TYPE_BF16 and COMPUTE_TYPE_TF32 are only available on GPUs with compute capability "
                "8.0 or higher. COMPUTE_TYPE_DEFAULT will be used instead.",
                stacklevel=2,
            )
            compute_type = COMPUTE_TYPE_DEFAULT
    elif compute_type not in compute_type_str:
        raise ValueError(f"Unknown compute type: {compute_type}")
    _compute_types[to_compute_type_index(dtype)] = compute_type


def compute_type_to_str(compute_type: int) -> Any:
    return compute_type_str.get(compute_type, compute_type)


def get_compute_type(dtype: Any) -> int:
    """The process-wide compute type for ``dtype``; TBD resolves on first use, as in CuPy:
    TF32 for float32/complex64 when ``int(os.getenv('CUPY_TF32', '0')) > 0``, else DEFAULT."""
    index = to_compute_type_index(dtype)
    if _compute_types[index] == COMPUTE_TYPE_TBD:
        compute_type = COMPUTE_TYPE_DEFAULT
        if CHAR[get_dtype(dtype)] in "fF" and int(os.getenv("CUPY_TF32", "0")) > 0:
            compute_type = COMPUTE_TYPE_TF32
        set_compute_type(dtype, compute_type)
    return _compute_types[index]


_c_get_compute_type = get_compute_type  # what tensordot_core_v11 calls


def _fp16_tensor_core_opt_in() -> bool:
    return os.environ.get("STANDIN_CUPY_FP16_MATH_MODE", "0") not in ("", "0")


_ONE = 0x10  # fake host pointers to alpha and beta
_ZERO = 0x20


def dot(a: ndarray, b: ndarray, out: ndarray | None = None) -> ndarray:
    if a.ndim == 0 or b.ndim == 0:
        return ndarray(a.shape or b.shape, promote_types(a.dtype, b.dtype))
    a_is_vec, b_is_vec = a.ndim == 1, b.ndim == 1
    a_shape = (1, a.size) if a_is_vec else a.shape
    b_shape = (b.size, 1) if b_is_vec else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ValueError("Axis dimension mismatch")
    k = a_shape[-1]
    if k != 0:
        m = math.prod(b_shape) // k
        n = math.prod(a_shape) // k
    else:
        m = n = 0
    ret_shape: list[int] = []
    if not a_is_vec:
        ret_shape += a_shape[:-1]
    if not b_is_vec:
        ret_shape += (*b_shape[:-2], b_shape[-1])
    if out is not None and k != 0 and out.size != n * m:
        raise ValueError("Output array has an invalid size")
    return tensordot_core(a, b, out, n, m, k, tuple(ret_shape))


def tensordot_core(a: ndarray, b: ndarray, out: ndarray | None, n: int, m: int, k: int, ret_shape: Any) -> ndarray:
    from cupy_backends.cuda.libs import cublas

    compute_capability = int(_get_compute_capability())
    dtype = promote_types(a.dtype, b.dtype)
    if out is None:
        out = ndarray(ret_shape, dtype)
    if not a.size or not b.size or (m == 1 and n == 1) or not is_inexact(dtype):
        return out  # fill, a reduction kernel, or the integer GEMM kernel: no cuBLAS

    # C-contiguous operands seen as Fortran-order (k, n) and (k, m): C^T = B^T A^T.
    transa, lda = 0, k
    transb, ldb = 0, m
    a_ptr, b_ptr, c_ptr = a.data.ptr, b.data.ptr, out.data.ptr
    c_cuda_dtype = to_cuda_dtype(dtype, is_half_allowed=True)

    half = c_cuda_dtype in (runtime.CUDA_R_16F, runtime.CUDA_R_16BF)
    hip = runtime._is_hip_environment
    if not hip and compute_capability >= 50 and not (half and _fp16_tensor_core_opt_in()):
        tensordot_core_v11(transb, transa, m, n, k, b, ldb, a, lda, out, m)
        return out

    handle = _get_cublas_handle()
    if half:
        # (the stand-in's switch stands for compute capability >= 70 on this pre-CUDA-11 path)
        use_tensor_core = (not hip and (compute_capability >= 70 or _fp16_tensor_core_opt_in())) or hip
        if use_tensor_core:
            can_opt_in_tensorcore = not hip
            if can_opt_in_tensorcore:
                cublas.setMathMode(handle, cublas.CUBLAS_TENSOR_OP_MATH)
                algo = cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP
            else:
                algo = cublas.CUBLAS_GEMM_DEFAULT
            cublas.gemmEx(
                handle, transb, transa, m, n, k,
                _ONE, b_ptr, c_cuda_dtype, ldb,
                a_ptr, c_cuda_dtype, lda, _ZERO,
                c_ptr, c_cuda_dtype, m, runtime.CUDA_R_32F,
                algo,
            )  # fmt: skip
            if can_opt_in_tensorcore:
                cublas.setMathMode(handle, cublas.CUBLAS_DEFAULT_MATH)
        else:
            cublas.sgemmEx(
                handle, transb, transa, m, n, k,
                _ONE, b_ptr, c_cuda_dtype, ldb,
                a_ptr, c_cuda_dtype, lda, _ZERO,
                c_ptr, c_cuda_dtype, m,
            )  # fmt: skip
    elif c_cuda_dtype == runtime.CUDA_R_32F:
        cublas.sgemmEx(
            handle, transb, transa, m, n, k,
            _ONE, b_ptr, c_cuda_dtype, ldb,
            a_ptr, c_cuda_dtype, lda, _ZERO,
            c_ptr, c_cuda_dtype, m,
        )  # fmt: skip
    elif c_cuda_dtype == runtime.CUDA_R_64F:
        cublas.dgemm(handle, transb, transa, m, n, k, _ONE, b_ptr, ldb, a_ptr, lda, _ZERO, c_ptr, m)
    elif c_cuda_dtype == runtime.CUDA_C_32F:
        cublas.cgemm(handle, transb, transa, m, n, k, _ONE, b_ptr, ldb, a_ptr, lda, _ZERO, c_ptr, m)
    else:
        cublas.zgemm(handle, transb, transa, m, n, k, _ONE, b_ptr, ldb, a_ptr, lda, _ZERO, c_ptr, m)
    return out


def tensordot_core_v11(
    transa: int, transb: int, m: int, n: int, k: int,
    a: ndarray, lda: int, b: ndarray, ldb: int, c: ndarray, ldc: int,
) -> None:  # fmt: skip
    from cupy_backends.cuda.libs import cublas

    a_cuda_dtype = to_cuda_dtype(a.dtype, is_half_allowed=True)
    b_cuda_dtype = to_cuda_dtype(b.dtype, is_half_allowed=True)
    c_cuda_dtype = to_cuda_dtype(c.dtype, is_half_allowed=True)

    compute_capability = int(_get_compute_capability())
    compute_type = _c_get_compute_type(c.dtype)

    if c_cuda_dtype in (runtime.CUDA_R_16F, runtime.CUDA_R_16BF, runtime.CUDA_R_32F, runtime.CUDA_C_32F):
        if compute_type == COMPUTE_TYPE_PEDANTIC:
            cublas_compute_type = cublas.CUBLAS_COMPUTE_32F_PEDANTIC
        elif compute_type == COMPUTE_TYPE_TF32 and c_cuda_dtype in (runtime.CUDA_R_32F, runtime.CUDA_C_32F):
            cublas_compute_type = cublas.CUBLAS_COMPUTE_32F_FAST_TF32
        else:
            cublas_compute_type = cublas.CUBLAS_COMPUTE_32F
    elif c_cuda_dtype in (runtime.CUDA_R_64F, runtime.CUDA_C_64F):
        if compute_type == COMPUTE_TYPE_PEDANTIC:
            cublas_compute_type = cublas.CUBLAS_COMPUTE_64F_PEDANTIC
        else:
            cublas_compute_type = cublas.CUBLAS_COMPUTE_64F
    else:
        raise ValueError(f"Invalid dtype: {c.dtype}")

    algo = cublas.CUBLAS_GEMM_DEFAULT
    if compute_capability >= 80 or (compute_capability >= 70 and c.dtype == "float16"):
        algo = cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP

    handle = _get_cublas_handle()
    cublas.gemmEx(
        handle, transa, transb, m, n, k, _ONE,
        a.data.ptr, a_cuda_dtype, lda, b.data.ptr, b_cuda_dtype, ldb,
        _ZERO, c.data.ptr, c_cuda_dtype, ldc, cublas_compute_type,
        algo,
    )  # fmt: skip


def matmul(a: ndarray, b: ndarray, out: ndarray | None = None) -> ndarray:
    from cupy_backends.cuda.libs import cublas

    orig_a_ndim, orig_b_ndim = a.ndim, b.ndim
    if orig_a_ndim == 0 or orig_b_ndim == 0:
        raise ValueError("Scalar operands are not allowed, use '*' instead")
    ndim = max(orig_a_ndim, orig_b_ndim)
    if ndim <= 2:
        return dot(a, b, out)

    a_shape = [1, a.size] if orig_a_ndim == 1 else list(a.shape)
    b_shape = [b.size, 1] if orig_b_ndim == 1 else list(b.shape)
    ldc = 1 if orig_b_ndim == 1 else b_shape[-1]
    a_shape = [1] * (ndim - len(a_shape)) + a_shape
    b_shape = [1] * (ndim - len(b_shape)) + b_shape

    ret_dtype = promote_types(a.dtype, b.dtype)
    dtype = "float32" if ret_dtype == "float16" else ret_dtype

    batch_count = 1
    out_shape: list[int] = []
    use_broadcast = False
    for a_sh, b_sh in zip(a_shape[:-2], b_shape[:-2], strict=True):
        if a_sh != b_sh and a_sh != 1 and b_sh != 1:
            raise ValueError("operands could not be broadcast together with remapped shapes")
        c_sh = 0 if a_sh == 0 or b_sh == 0 else max(a_sh, b_sh)
        batch_count *= c_sh
        out_shape.append(c_sh)
        if (a_sh == 1 and c_sh > 1) or (b_sh == 1 and c_sh > 1):
            use_broadcast = True
    if orig_a_ndim != 1:
        out_shape.append(a_shape[-2])
    if orig_b_ndim != 1:
        out_shape.append(b_shape[-1])

    # (A B)^T = B^T A^T
    ka, n = b_shape[-2], b_shape[-1]
    m, kb = a_shape[-2], a_shape[-1]
    lda, ldb = n, kb
    if ka != kb:
        a_text, b_text = ",".join(map(str, a.shape)), ",".join(map(str, b.shape))
        raise ValueError(f"shapes ({a_text}) and ({b_text}) not aligned")
    if out is not None and out.shape != tuple(out_shape):
        raise ValueError("Output array has an invalid size")
    if out is None:
        out = ndarray(out_shape, ret_dtype)
    if a.size == 0 or b.size == 0 or CHAR[dtype] not in "efdFD":
        return out  # zeros, or CuPy's own batched kernel: no cuBLAS

    handle = _get_cublas_handle()
    cuda_dtype = to_cuda_dtype(dtype)
    algo = cublas.CUBLAS_GEMM_DEFAULT
    ap, bp, cp = b.data.ptr, a.data.ptr, out.data.ptr  # swapped, as above
    if not use_broadcast:
        stride_a, stride_b, stride_c = ka * n, m * kb, m * n
        cublas.gemmStridedBatchedEx(
            handle, 0, 0, n, m, ka, _ONE,
            ap, cuda_dtype, lda, stride_a,
            bp, cuda_dtype, ldb, stride_b,
            _ZERO,
            cp, cuda_dtype, ldc, stride_c,
            batch_count, cuda_dtype, algo,
        )  # fmt: skip
    else:
        batched = {
            "float32": cublas.sgemmBatched,
            "float64": cublas.dgemmBatched,
            "complex64": cublas.cgemmBatched,
            "complex128": cublas.zgemmBatched,
        }[dtype]
        batched(handle, 0, 0, n, m, ka, _ONE, ap, lda, bp, ldb, _ZERO, cp, ldc, batch_count)
    return out


def tensordot(a: ndarray, b: ndarray, axes: int = 2) -> ndarray:
    """``cupy.tensordot`` for an integer ``axes``: contracts a's last and b's first ``axes``
    dimensions with one ``tensordot_core`` GEMM, as CuPy does."""
    if a.shape[a.ndim - axes :] != b.shape[:axes]:
        raise ValueError("Axis dimension mismatch")
    k = math.prod(b.shape[:axes])
    n = math.prod(a.shape[: a.ndim - axes])
    m = math.prod(b.shape[axes:])
    ret_shape = (*a.shape[: a.ndim - axes], *b.shape[axes:])
    return tensordot_core(a, b, None, n, m, k, ret_shape)
