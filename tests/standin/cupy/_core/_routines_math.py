"""Stand-in for ``cupy._core._routines_math``: ``scan_core`` behind ``cupy.cumsum`` and
``cupy.cumprod`` (``_routines_math.pyx`` v14.2.0 lines 702-751), CuPy's own 1-D ``scan``
(436-496) and batched scan (657-699), and the ufuncs ``add``, ``subtract``, ``multiply``.

``SCANS.calls`` holds a ``Scan(path, op, dtype, thread)`` per scan that runs: ``path`` is
``"cub"`` (``cupy.cuda.cub.cub_scan``), ``"native"`` (``scan``) or ``"batch"`` (an explicit
``axis``), ``op`` is ``"cumsum"`` or ``"cumprod"``, ``dtype`` the dtype scanned. Scans of
arrays with values compute them.

As in CuPy, ``cub`` is the module bound by ``from cupy.cuda import cub`` and
``cub.cub_scan`` is looked up at each scan; ``scan`` and ``_proc_as_batch`` are reached
directly (``cdef`` functions in CuPy).
"""

from __future__ import annotations

import enum
import itertools
import operator
import threading
from typing import Any, NamedTuple

import numpy
from cupy_backends._standin_recorder import CallRecorder

from cupy._core import _accelerator, core
from cupy._core._dtype import get_dtype
from cupy._core._kernel import ufunc
from cupy.cuda import cub


class Scan(NamedTuple):
    path: str
    op: str
    dtype: str
    thread: int


SCANS: CallRecorder[Scan] = CallRecorder()


class scan_op(enum.IntEnum):  # CuPy: ``cpdef enum scan_op`` (_routines_math.pxd)
    SCAN_SUM = 0
    SCAN_PROD = 1


def _run_scan(path: str, a: core.ndarray, op: scan_op, out: core.ndarray) -> None:
    """Record the scan of ``a`` into ``out``; where the 1-D ``a`` has values, compute them."""
    name = "cumsum" if op == scan_op.SCAN_SUM else "cumprod"
    SCANS.record(Scan(path, name, out.dtype, threading.get_ident()))
    if a.values is None or a.ndim != 1:
        out.values = None
        return
    step = operator.add if op == scan_op.SCAN_SUM else operator.mul
    kind = out.dtype.kind
    out.values = list(itertools.accumulate((core._cast(v, kind) for v in a.values), step))


def elementwise_copy(a: core.ndarray, out: core.ndarray) -> None:
    out.values = None if a.values is None else a.astype(out.dtype).values


def scan(
    a: core.ndarray, op: scan_op, dtype: Any = None, out: core.ndarray | None = None,
    incomplete: bool = False, chunk_size: int = 512,
) -> core.ndarray:  # fmt: skip
    """CuPy's own prefix scan of a 1-D array (a fixed tree of blocks; no atomics)."""
    if a.ndim != 1:
        raise TypeError("Input array should be 1D array.")
    if out is None:
        if dtype is None:
            dtype = a.dtype
        if not incomplete:
            out = core.ndarray(a.shape, dtype)
    else:
        if a.size != out.size:
            raise ValueError("Provided out is the wrong size")
        dtype = out.dtype
    if out is None:  # incomplete: CuPy returns the per-block partial sums; not modelled
        raise NotImplementedError("the stand-in does not model scan(incomplete=True)")
    _run_scan("native", a, op, out)
    return out


def _batch_scan_op(a: core.ndarray, op: scan_op, out: core.ndarray) -> core.ndarray:
    _run_scan("batch", a, op, out)
    return out


def _proc_as_batch(x: core.ndarray, axis: int, op: scan_op) -> core.ndarray:
    if x.shape[axis] == 0:
        return core.ndarray(x.shape, x.dtype)  # cupy.empty_like(x)
    # CuPy rolls ``axis`` last, reshapes to (-1, n) and scans each row in place
    rows = core.ndarray((x.size // x.shape[axis], x.shape[axis]), x.dtype)
    _batch_scan_op(rows, op, rows)
    if x.values is None:
        return core.ndarray(x.shape, x.dtype)
    step = numpy.add if op == scan_op.SCAN_SUM else numpy.multiply
    return core._from_grid(step.accumulate(core._grid(x), axis=axis), x.dtype)


def scan_core(
    a: core.ndarray, axis: Any, op: scan_op, dtype: Any = None, out: core.ndarray | None = None
) -> core.ndarray:
    if out is None:
        if dtype is None:
            kind = a.dtype.kind
            if kind == "b" or kind == "i":
                dtype = get_dtype("int64")
            elif kind == "u":
                dtype = get_dtype("uint64")
            else:
                dtype = a.dtype
        result = None
    else:
        # (CuPy copies a non-contiguous out first; stand-in arrays are contiguous)
        result = out
        elementwise_copy(a, result)

    if axis is None:
        for accelerator in _accelerator._routine_accelerators:
            if accelerator == _accelerator.ACCELERATOR_CUB:
                if result is None:
                    result = a.astype(dtype, order="C").ravel()
                # result will be None if the scan is not compatible with CUB
                if op == scan_op.SCAN_SUM:  # noqa: SIM108
                    cub_op = cub.CUPY_CUB_CUMSUM
                else:
                    cub_op = cub.CUPY_CUB_CUMPROD
                res = cub.cub_scan(result, cub_op)
                if res is not None:
                    break
        else:
            if result is None:
                result = scan(a.ravel(), op, dtype=dtype)
            else:
                scan(result, op, dtype=dtype, out=result)
    else:
        if result is None:
            result = a.astype(dtype, order="C")
        if not -a.ndim <= axis < a.ndim:
            raise numpy.exceptions.AxisError(axis, a.ndim)
        axis %= a.ndim
        result = _proc_as_batch(result, axis, op)
    # This is for when the original out param was not contiguous
    if out is not None and out.data != result.data:
        elementwise_copy(result.reshape(out.shape), out)
    else:
        out = result
    return out


# CuPy: ``create_arithmetic``/``create_ufunc`` with a ``scatter_op`` (_routines_math.pyx)
_add = add = ufunc("cupy_add", 2, lambda x, y: x + y, "add")
_subtract = subtract = ufunc("cupy_subtract", 2, lambda x, y: x - y, "sub")
_multiply = multiply = ufunc("cupy_multiply", 2, lambda x, y: x * y, None)
