"""Stand-in for ``cupy.linalg._einsum`` (v14.2.0): ``einsum`` of two operands with explicit
output subscripts (``"ij,jk->ik"``, ``"bij,bjk->bik"``), and the pairwise step that chooses
between cuTENSOR and ``matmul``.

``_reduced_binary_einsum`` follows lines 330-414: batch modes (in both operands and the
output), contracted modes (in both, not in the output), then, for each routine accelerator
(``_accelerator.get_routine_accelerators()``, read at call time), the cuTENSOR branch:
``import cupy_backends.cuda.libs.cutensor`` and ``from cupyx import cutensor`` inside the
function (an ``ImportError`` skips it), operands of one dtype among float32, float64,
complex64, complex128, and ``cutensor.contraction(1.0, arr0, sub0, arr1, sub1, 0.0, arr_out,
sub_out)``, without ``compute_desc``. Otherwise both operands are flattened to 3-D (batch,
free, contracted) and multiplied with ``cupy.matmul`` (a ``gemmStridedBatchedEx`` in the
stand-in's cuBLAS). CuPy 13.6 is the same, with the cuTENSOR module imported once at the top
of ``_einsum.py`` and ``cutensor.check_availability('contraction')`` asked first.

Differences: no parsing beyond two operands with ``->``, no ellipsis, no repeated subscripts
in one operand, no path optimisation and no cuTensorNet branch (``cutensornet`` is skipped);
the result has the output's shape and no values.
"""

from __future__ import annotations

from typing import Any

import cupy
from cupy._core import _accelerator
from cupy._core.core import ndarray


def _reduced_binary_einsum(
    arr0: ndarray, sub0: list[str], arr1: ndarray, sub1: list[str], sub_others: list[str]
) -> tuple[ndarray, list[str]]:
    extent = dict(zip(sub0, arr0.shape, strict=True)) | dict(zip(sub1, arr1.shape, strict=True))
    set_others = set(sub_others)
    shared = set(sub0) & set(sub1)
    batch_dims = [s for s in sub0 if s in shared and s in set_others]
    contract_dims = [s for s in sub0 if s in shared and s not in set_others]
    free0 = [s for s in sub0 if s not in shared]
    free1 = [s for s in sub1 if s not in shared]
    sub_out = batch_dims + free0 + free1

    for accelerator in _accelerator.get_routine_accelerators():
        if accelerator != _accelerator.ACCELERATOR_CUTENSOR:
            continue
        try:
            import cupy_backends.cuda.libs.cutensor  # noqa: F401
            from cupyx import cutensor
        except ImportError:
            continue
        else:
            if arr0.dtype != arr1.dtype or arr0.dtype not in ("float32", "float64", "complex64", "complex128"):
                continue
            if len(sub_out) == len(sub_others):
                sub_out = sub_others
            arr_out = cupy.empty([extent[s] for s in sub_out], arr0.dtype)
            arr_out = cutensor.contraction(1.0, arr0, sub0, arr1, sub1, 0.0, arr_out, sub_out)
            return arr_out, sub_out

    def size(modes: list[str]) -> int:
        total = 1
        for mode in modes:
            total *= extent[mode]
        return total

    tmp0 = arr0.reshape(size(batch_dims), size(free0), size(contract_dims))
    tmp1 = arr1.reshape(size(batch_dims), size(contract_dims), size(free1))
    arr_out = cupy.matmul(tmp0, tmp1).reshape([extent[s] for s in sub_out])
    return arr_out, sub_out


def einsum(*operands: Any, **kwargs: Any) -> ndarray:
    subscripts, arr0, arr1 = operands
    inputs, output = subscripts.replace(" ", "").split("->")
    sub0, sub1 = (list(s) for s in inputs.split(","))
    arr_out, sub_out = _reduced_binary_einsum(arr0, sub0, arr1, sub1, list(output))
    if sub_out != list(output):  # CuPy transposes (the stand-in's arrays have no strides: a new one)
        arr_out = ndarray(tuple(arr_out.shape[sub_out.index(s)] for s in output), arr_out.dtype)
    return arr_out
