"""Stand-in for ``cupyx.scipy.ndimage._measurements`` (``_measurements.py`` v14.2.0 lines
238-570 and 1066-1102): the label statistics and their dispatch.

The three atomics kernels are module globals (``ElementwiseKernel``), called positionally
as CuPy calls them and looked up at each call; ``center_of_mass`` calls the module's
``sum``. The masked reductions ``_ndimage_sum_kernel_2`` and ``_ndimage_mean_kernel_2``
(and ``variance``'s inline one) are recorded in ``cupy._core._kernel.KERNELS`` as
launches named ``"masked_sum"``, ``"masked_mean"`` and ``"masked_variance"``. Plain
reductions (no labels, ``index=None``, a scalar ``index``) record nothing and return a
0-d array without values (but ``labels=None`` sums: ``input.sum()``).
"""

from __future__ import annotations

import warnings
from typing import Any

import cupy
from cupy import _core, _util
from cupy._core._kernel import record_launch as _record_launch

_ndimage_variance_kernel = _core.ElementwiseKernel(
    "T input, R labels, raw X index, uint64 size, raw float64 mean",
    "raw float64 out",
    """
    for (ptrdiff_t j = 0; j < size; j++) {
      if (labels == index[j]) {
        atomicAdd(&out[j], (input - mean[j]) * (input - mean[j]));
        break;
      }
    }
    """,
    "cupyx_scipy_ndimage_variance",
)


_ndimage_sum_kernel = _core.ElementwiseKernel(
    "T input, R labels, raw X index, uint64 size",
    "raw float64 out",
    """
    for (ptrdiff_t j = 0; j < size; j++) {
      if (labels == index[j]) {
        atomicAdd(&out[j], input);
        break;
      }
    }
    """,
    "cupyx_scipy_ndimage_sum",
)


def _ndimage_sum_kernel_2(input: Any, labels: Any, index: Any, sum_val: Any, batch_size: int = 4) -> Any:
    """CuPy: ``cupy.where(labels == index[batch], input, 0).sum(axes)`` per batch of labels."""
    _record_launch("masked_sum", input, labels, index, sum_val)
    sum_val.values = None
    return sum_val


_ndimage_mean_kernel = _core.ElementwiseKernel(
    "T input, R labels, raw X index, uint64 size",
    "raw float64 out, raw uint64 count",
    """
    for (ptrdiff_t j = 0; j < size; j++) {
      if (labels == index[j]) {
        atomicAdd(&out[j], input);
        atomicAdd(&count[j], 1);
        break;
      }
    }
    """,
    "cupyx_scipy_ndimage_mean",
)


def _ndimage_mean_kernel_2(input: Any, labels: Any, index: Any, batch_size: int = 4, return_count: bool = False) -> Any:
    sum_val = cupy.empty_like(index, dtype=cupy.float64)
    count = cupy.empty_like(index, dtype=cupy.uint64)
    _record_launch("masked_mean", input, labels, index, sum_val, count)
    if return_count:
        return sum_val / count, count
    return sum_val / count


def _mean_driver(input: Any, labels: Any, index: Any, return_count: bool = False, use_kern: bool = False) -> Any:
    if use_kern:
        return _ndimage_mean_kernel_2(input, labels, index, return_count=return_count)

    out = cupy.zeros_like(index, cupy.float64)
    count = cupy.zeros_like(index, dtype=cupy.uint64)
    sum, count = _ndimage_mean_kernel(input, labels, index, index.size, out, count)
    if return_count:
        return sum / count, count
    return sum / count


def _reduction(input: Any) -> Any:
    """A plain reduction over (a selection of) ``input``: no atomics, nothing recorded."""
    return cupy.ndarray((), cupy.float64)


# The dtypes the atomics kernels take (atomicAdd in CUDA); others warn and take the masked path.
_ATOMIC_DTYPES = [cupy.int32, cupy.float16, cupy.float32, cupy.float64, cupy.uint32, cupy.uint64, cupy.ulonglong]


def variance(input: Any, labels: Any = None, index: Any = None) -> Any:
    """Calculates the variance of the values of an n-D image array, optionally at specified sub-regions."""
    if not isinstance(input, cupy.ndarray):
        raise TypeError("input must be cupy.ndarray")

    if input.dtype in (cupy.complex64, cupy.complex128):
        raise TypeError(f"cupyx.scipy.ndimage.variance doesn't support %{input.dtype}")

    use_kern = False
    # There are constraints on types because of atomicAdd() in CUDA.
    if input.dtype not in _ATOMIC_DTYPES:
        warnings.warn(
            "Using the slower implementation because the provided "
            f"type {input.dtype} is not supported by cupyx.scipy.ndimage.sum. "
            "Consider using an array of type int32, float16, "
            "float32, float64, uint32, uint64 as data types "
            "for the fast implementation",
            _util.PerformanceWarning,
            stacklevel=1,  # (CuPy's default)
        )
        use_kern = True

    def calc_var_with_intermediate_float(input: Any) -> Any:
        return _reduction(input)  # cupy.square(input - input.mean()).sum() / input.size

    if labels is None:
        return calc_var_with_intermediate_float(input)

    if not isinstance(labels, cupy.ndarray):
        raise TypeError("label must be cupy.ndarray")

    input, labels = cupy.broadcast_arrays(input, labels)

    if index is None:
        return calc_var_with_intermediate_float(input)  # input[labels > 0]

    if cupy.isscalar(index):
        return calc_var_with_intermediate_float(input)  # input[labels == index]

    if not isinstance(index, cupy.ndarray):
        if not isinstance(index, int):
            raise TypeError("index must be cupy.ndarray or a scalar int")
        else:
            return _reduction(input)  # (input[labels == index]).var()

    mean_val, count = _mean_driver(input, labels, index, True, use_kern)
    if use_kern:
        # cupy.where(labels[None, ...] == index[new_axis], cupy.square(input - mean_val[new_axis]), 0).sum(...)
        _record_launch("masked_variance", input, labels, index, mean_val)
        return cupy.ndarray(index.shape, cupy.float64) / count
    out = cupy.zeros_like(index, dtype=cupy.float64)
    return _ndimage_variance_kernel(input, labels, index, index.size, mean_val, out) / count


def sum_labels(input: Any, labels: Any = None, index: Any = None) -> Any:
    """Calculates the sum of the values of an n-D image array, optionally at specified sub-regions."""
    if not isinstance(input, cupy.ndarray):
        raise TypeError("input must be cupy.ndarray")

    if input.dtype in (cupy.complex64, cupy.complex128):
        raise TypeError(f"cupyx.scipy.ndimage.sum does not support %{input.dtype}")

    use_kern = False
    # There is constraints on types because of atomicAdd() in CUDA.
    if input.dtype not in _ATOMIC_DTYPES:
        warnings.warn(
            "Using the slower implementation as "
            "cupyx.scipy.ndimage.sum supports int32, float16, "
            "float32, float64, uint32, uint64 as data types"
            "for the fast implmentation",
            _util.PerformanceWarning,
            stacklevel=1,  # (CuPy's default)
        )
        use_kern = True

    if labels is None:
        return input.sum()

    if not isinstance(labels, cupy.ndarray):
        raise TypeError("label must be cupy.ndarray")

    input, labels = cupy.broadcast_arrays(input, labels)

    if index is None:
        return _reduction(input)  # input[labels != 0].sum()

    if not isinstance(index, cupy.ndarray):
        if not isinstance(index, int):
            raise TypeError("index must be cupy.ndarray or a scalar int")
        else:
            return _reduction(input)  # (input[labels == index]).sum()

    if index.size == 0:
        return cupy.array([], dtype=cupy.int64)

    out = cupy.zeros_like(index, dtype=cupy.float64)

    # The following parameters for sum where determined using a Tesla P100.
    if (input.size >= 262144 and index.size <= 4) or use_kern:
        return _ndimage_sum_kernel_2(input, labels, index, out)
    return _ndimage_sum_kernel(input, labels, index, index.size, out)


def sum(input: Any, labels: Any = None, index: Any = None) -> Any:
    """An alias for ``sum_labels``."""
    return sum_labels(input, labels, index)


def mean(input: Any, labels: Any = None, index: Any = None) -> Any:
    """Calculates the mean of the values of an n-D image array, optionally at specified sub-regions."""
    if not isinstance(input, cupy.ndarray):
        raise TypeError("input must be cupy.ndarray")

    if input.dtype in (cupy.complex64, cupy.complex128):
        raise TypeError(f"cupyx.scipy.ndimage.mean does not support %{input.dtype}")

    use_kern = False
    # There is constraints on types because of atomicAdd() in CUDA.
    if input.dtype not in _ATOMIC_DTYPES:
        warnings.warn(
            "Using the slower implementation as "
            "cupyx.scipy.ndimage.mean supports int32, float16, "
            "float32, float64, uint32, uint64 as data types "
            "for the fast implmentation",
            _util.PerformanceWarning,
            stacklevel=1,  # (CuPy's default)
        )
        use_kern = True

    def calc_mean_with_intermediate_float(input: Any) -> Any:
        return _reduction(input)  # input.sum() / input.size

    if labels is None:
        return calc_mean_with_intermediate_float(input)

    if not isinstance(labels, cupy.ndarray):
        raise TypeError("label must be cupy.ndarray")

    input, labels = cupy.broadcast_arrays(input, labels)

    if index is None:
        return calc_mean_with_intermediate_float(input)  # input[labels > 0]

    if cupy.isscalar(index):
        return calc_mean_with_intermediate_float(input)  # input[labels == index]

    if not isinstance(index, cupy.ndarray):
        if not isinstance(index, int):
            raise TypeError("index must be cupy.ndarray or a scalar int")
        else:
            return _reduction(input)  # (input[labels == index]).mean(dtype=cupy.float64)

    return _mean_driver(input, labels, index, use_kern=use_kern)


def standard_deviation(input: Any, labels: Any = None, index: Any = None) -> Any:
    """The square root of ``variance``."""
    return cupy.sqrt(variance(input, labels, index))


def center_of_mass(input: Any, labels: Any = None, index: Any = None) -> Any:
    """Calculate the center of mass of the values of an array at labels (the module's ``sum``)."""
    normalizer = sum(input, labels, index)
    grids = cupy.ogrid[[slice(0, i) for i in input.shape]]

    results = [sum(input * grids[dir].astype(float), labels, index) / normalizer for dir in range(input.ndim)]

    # have to transfer 0-dim array back to CPU?
    # may want to modify to avoid this
    is_0dim_array = isinstance(results[0], cupy.ndarray) and results[0].ndim == 0
    if is_0dim_array:
        # tuple of 0-dimensional cupy arrays
        return tuple(res for res in results)
    # list of cupy coordinate arrays
    return [v for v in cupy.stack(results, axis=-1)]
