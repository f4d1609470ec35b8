"""Stand-in for ``cupyx.scipy.sparse.linalg._iterative`` (``_iterative.py`` v14.2.0):
``_make_fast_matvec`` (lines 455-486) line for line. It sizes one cuSPARSE buffer for a CSR
``A`` (``spMV_bufferSize``, with vector descriptors it then drops) and returns the ``matvec``
that CG, GMRES and CGS call every iteration, each call launching ``spMV`` with new vector
descriptors and that one buffer; ``_make_system`` (not modelled) makes one for ``A`` and one
for the preconditioner ``M``."""

from __future__ import annotations

from typing import Any

import cupy
import numpy
from cupy._core import _dtype
from cupy.cuda import device

from cupyx.scipy.sparse import _csr


def _make_fast_matvec(A: Any) -> Any:
    from cupy_backends.cuda.libs import cusparse as _cusparse

    from cupyx import cusparse

    if _csr._is_csr(A) and cusparse.check_availability("spmv"):
        handle = device.get_cusparse_handle()
        op_a = _cusparse.CUSPARSE_OPERATION_NON_TRANSPOSE
        alpha = numpy.array(1.0, A.dtype)
        beta = numpy.array(0.0, A.dtype)
        cuda_dtype = _dtype.to_cuda_dtype(A.dtype)
        alg = _cusparse.CUSPARSE_MV_ALG_DEFAULT
        x = cupy.empty((A.shape[0],), dtype=A.dtype)
        y = cupy.empty((A.shape[0],), dtype=A.dtype)
        desc_A = cusparse.SpMatDescriptor.create(A)
        desc_x = cusparse.DnVecDescriptor.create(x)
        desc_y = cusparse.DnVecDescriptor.create(y)
        buff_size = _cusparse.spMV_bufferSize(
            handle, op_a, alpha.ctypes.data, desc_A.desc, desc_x.desc, beta.ctypes.data, desc_y.desc, cuda_dtype, alg
        )
        buff = cupy.empty(buff_size, cupy.int8)
        del x, desc_x, y, desc_y

        def matvec(x: Any) -> Any:
            y = cupy.empty_like(x)
            desc_x = cusparse.DnVecDescriptor.create(x)
            desc_y = cusparse.DnVecDescriptor.create(y)
            _cusparse.spMV(
                handle, op_a, alpha.ctypes.data, desc_A.desc, desc_x.desc, beta.ctypes.data, desc_y.desc, cuda_dtype,
                alg, buff.data.ptr,
            )  # fmt: skip
            return y

        return matvec
    return None
