"""Stand-in for ``cupy.linalg._solve``: ``solve``'s batched path (``cupy.cublas.batched_gesv``).

CuPy solves a stack of matrices no larger than ``get_batched_gesv_limit()`` (256) with
cuBLAS's batched LU (``_solve.py``: ``a.ndim > 2 and a.shape[-1] <= limit``), and
everything else with cuSOLVER's ``gesv`` through ``cupyx.lapack``, which the stand-in
does not model (``NotImplementedError``).
"""

from __future__ import annotations

from cupy._core.core import ndarray


def solve(a: ndarray, b: ndarray) -> ndarray:
    from cupy.cublas import batched_gesv, get_batched_gesv_limit

    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError("a must be a (stack of) square matrices")
    if a.ndim > 2 and a.shape[-1] <= get_batched_gesv_limit():
        return batched_gesv(a, b)
    raise NotImplementedError("the stand-in models only solve's batched cuBLAS path")
