"""Stand-in for ``cupy._statistics.histogram`` (``histogram.py`` v14.2.0: the kernels at
lines 21-64 and 508-517, ``histogram`` 180-289, ``histogramdd`` 292-446, ``histogram2d``
449-505, ``bincount`` 520-585).

The four kernels are module globals, called positionally as CuPy calls them and looked up
at each call; ``histogramdd`` calls ``cupy.bincount`` through the ``cupy`` module, and
the CUB branches call ``cub.cub_histogram`` through the ``cub`` module. What only shapes
the data (bin edges from ``linspace``, ``searchsorted``, ``ravel_multi_index``, the
monotonicity and range checks) is reduced to arrays of the right shape and dtype.
"""

from __future__ import annotations

import math
import operator
import warnings
from typing import Any

import cupy
from cupy import _core
from cupy._core import _accelerator
from cupy.cuda import common, cub, runtime

# rename builtin range for use in functions that take a range argument
_range = range

_histogram_kernel = _core.ElementwiseKernel(
    "S x, raw T bins, int32 n_bins",
    "raw U y",
    """
    if (x < bins[0] or bins[n_bins - 1] < x) {
        return;
    }
    int high = n_bins - 1;
    int low = 0;

    while (high - low > 1) {
        int mid = (high + low) / 2;
        if (bins[mid] <= x) {
            low = mid;
        } else {
            high = mid;
        }
    }
    atomicAdd(&y[low], U(1));
    """,
    "cupy_histogram_kernel",
)

_weighted_histogram_kernel = _core.ElementwiseKernel(
    "S x, raw T bins, int32 n_bins, raw W weights",
    "raw Y y",
    """
    if (x < bins[0] or bins[n_bins - 1] < x) {
        return;
    }
    int high = n_bins - 1;
    int low = 0;

    while (high - low > 1) {
        int mid = (high + low) / 2;
        if (bins[mid] <= x) {
            low = mid;
        } else {
            high = mid;
        }
    }
    atomicAdd(&y[low], (Y)weights[i]);
    """,
    "cupy_weighted_histogram_kernel",
)


def _ravel_and_check_weights(a: Any, weights: Any) -> tuple[Any, Any]:
    """Check a and weights have matching shapes, and ravel both"""
    if a.dtype == cupy.bool_:
        warnings.warn(
            f"Converting input from {a.dtype} to {cupy.uint8} for compatibility.", RuntimeWarning, stacklevel=3
        )
        a = a.astype(cupy.uint8)
    if weights is not None:
        if not isinstance(weights, cupy.ndarray):
            raise ValueError("weights must be a cupy.ndarray")
        if weights.shape != a.shape:
            raise ValueError("weights should have the same shape as a.")
        weights = weights.ravel()
    a = a.ravel()
    return a, weights


def _bin_type(a: Any) -> Any:
    # cupy.result_type(first_edge, last_edge, a), float for integers (the edges are a's own
    # min and max, or Python floats: NumPy 2 keeps a's float dtype)
    return a.dtype if a.dtype.kind == "f" else cupy.float64


def _get_bin_edges(a: Any, bins: Any, range: Any) -> Any:
    """The bin edges: ``bins`` itself when it is an array (CuPy checks it increases: not
    modelled), else ``bins + 1`` edges (CuPy: ``cupy.linspace`` over the range)."""
    if isinstance(bins, str):
        raise NotImplementedError("only integer and array bins are implemented")
    if isinstance(bins, cupy.ndarray):
        if bins.ndim != 1:
            raise ValueError("`bins` must be 1d, when an array")
        return bins
    try:
        n_equal_bins = operator.index(bins)
    except TypeError:
        raise TypeError("`bins` must be an integer, a string, or an array") from None
    if n_equal_bins < 1:
        raise ValueError("`bins` must be positive, when an integer")
    if range is not None and range[0] > range[1]:
        raise ValueError("max must be larger than min in range parameter.")
    return cupy.ndarray((n_equal_bins + 1,), _bin_type(a))


def histogram(x: Any, bins: Any = 10, range: Any = None, density: bool = False, weights: Any = None) -> Any:
    """Computes the histogram of a set of data (CuPy 13.6: ``weights`` before ``density``)."""
    if x.dtype.kind == "c":
        raise NotImplementedError("complex number is not supported")
    if not isinstance(x, cupy.ndarray):
        raise ValueError("x must be a cupy.ndarray")

    x, weights = _ravel_and_check_weights(x, weights)
    bin_edges = _get_bin_edges(x, bins, range)

    if weights is None:
        y = cupy.zeros(bin_edges.size - 1, dtype=cupy.int64)
        for accelerator in _accelerator.get_routine_accelerators():
            # CUB uses int for bin counts
            if accelerator == _accelerator.ACCELERATOR_CUB and x.size <= 0x7FFFFFFF and bin_edges.size <= 0x7FFFFFFF:
                if x.dtype.kind in "iu":  # numpy.issubdtype(x.dtype, numpy.integer)
                    bin_type: Any = cupy.float64
                else:
                    bin_type = _core._dtype.promote_types(bin_edges.dtype, x.dtype)
                    if bin_type == cupy.float16 and not common._is_fp16_supported():
                        bin_type = cupy.float32
                    x = x.astype(bin_type, copy=False)
                acc_bin_edge = bin_edges.astype(bin_type, copy=True)
                # (CuPy then moves the last edge up one step, CUB's bins being half-open:
                # a write to acc_bin_edge[-1] that the stand-in leaves out)
                if runtime.is_hip:
                    y = y.astype(cupy.uint64, copy=False)
                out = cub.cub_histogram(x, y, acc_bin_edge)
                if out is None:
                    # fallback to CuPy impl
                    continue
                else:
                    y = out
                if runtime.is_hip:
                    y = y.astype(cupy.int64, copy=False)
                break
        else:
            _histogram_kernel(x, bin_edges, bin_edges.size, y)
    else:
        # (CuPy refuses weights that cannot be cast to float64 or complex128: none here)
        if weights.dtype.kind == "c":
            y = cupy.zeros(bin_edges.size - 1, dtype=cupy.complex128)
            _weighted_histogram_kernel(x, bin_edges, bin_edges.size, weights.real, y.real)
            _weighted_histogram_kernel(x, bin_edges, bin_edges.size, weights.imag, y.imag)
        else:
            if weights.dtype.kind in "bui":
                y = cupy.zeros(bin_edges.size - 1, dtype=int)
            else:
                y = cupy.zeros(bin_edges.size - 1, dtype=cupy.float64)
            _weighted_histogram_kernel(x, bin_edges, bin_edges.size, weights, y)

    if density:
        db = cupy.ndarray((bin_edges.size - 1,), cupy.float64)  # cupy.diff(bin_edges)
        return y / db / y.sum(), bin_edges
    return y, bin_edges


def histogramdd(sample: Any, bins: Any = 10, range: Any = None, weights: Any = None, density: bool = False) -> Any:
    """Compute the multidimensional histogram of some data (through ``cupy.bincount``)."""
    if isinstance(sample, cupy.ndarray):
        # Sample is an ND-array.
        if sample.ndim == 1:
            sample = sample[:, cupy.newaxis]
        nsamples, ndim = sample.shape
    else:
        sample = cupy.stack(sample, axis=-1)
        nsamples, ndim = sample.shape

    nbin = ndim * [0]
    edges: list[Any] = ndim * [None]
    dedges: list[Any] = ndim * [None]
    if weights is not None:
        weights = cupy.asarray(weights)

    try:
        nbins = len(bins)
        if nbins != ndim:
            raise ValueError("The dimension of bins must be equal to the dimension of the  sample x.")
    except TypeError:
        # bins is an integer
        bins = ndim * [bins]

    # normalize the range argument
    if range is None:
        range = (None,) * ndim
    elif len(range) != ndim:
        raise ValueError("range argument must have one entry per dimension")

    # Create edge arrays
    for i in _range(ndim):
        if isinstance(bins[i], cupy.ndarray):
            if bins[i].ndim != 1:
                raise ValueError(f"`bins[{i}]` must be a scalar or 1d array")
            edges[i] = bins[i]  # (CuPy checks that it increases: not modelled)
        else:
            if bins[i] < 1:
                raise ValueError(f"`bins[{i}]` must be positive, when an integer")
            num = int(bins[i] + 1)
            edges[i] = cupy.ndarray((num,), cupy.float64)  # cupy.linspace(smin, smax, num)
        nbin[i] = len(edges[i]) + 1  # includes an outlier on each end
        dedges[i] = cupy.ndarray((len(edges[i]) - 1,), edges[i].dtype)  # cupy.diff(edges[i])

    # Compute the bin number each sample falls into: cupy.searchsorted(edges[i], sample[:, i],
    # side='right'), values on the rightmost edge moved one bin left (a masked write, left
    # out), then xy = cupy.ravel_multi_index(ncount, nbin).
    xy = cupy.ndarray((nsamples,), cupy.int64)

    # Compute the number of repetitions in xy and assign it to the flattened histmat.
    hist = cupy.bincount(xy, weights, minlength=math.prod(nbin))

    # Shape into a proper matrix
    hist = hist.reshape(nbin)

    # This preserves the (bad) behavior observed in NumPy gh-7845, for now.
    hist = hist.astype(float)

    # Remove outliers (indices 0 and -1 for each dimension).
    core = ndim * (slice(1, -1),)
    hist = hist[core]

    if density:
        # calculate the probability density function
        s = hist.sum()
        for i in _range(ndim):
            shape = [1] * ndim
            shape[i] = nbin[i] - 2
            hist = hist / dedges[i].reshape(shape)
        hist = hist / s
    return hist, edges


def histogram2d(x: Any, y: Any, bins: Any = 10, range: Any = None, weights: Any = None, density: Any = None) -> Any:
    """Compute the bi-dimensional histogram of two data samples (``histogramdd``)."""
    try:
        n = len(bins)
    except TypeError:
        n = 1

    if n != 1 and n != 2:
        if isinstance(bins, cupy.ndarray):
            xedges = yedges = bins
            bins = [xedges, yedges]
        else:
            raise ValueError("array-like bins not supported in CuPy")

    hist, edges = histogramdd([x, y], bins, range, weights, density)
    return hist, edges[0], edges[1]


_bincount_kernel = _core.ElementwiseKernel("S x", "raw U bin", "atomicAdd(&bin[x], U(1))", "cupy_bincount_kernel")

_bincount_with_weight_kernel = _core.ElementwiseKernel(
    "S x, T w", "raw U bin", "atomicAdd(&bin[x], w)", "cupy_bincount_with_weight_kernel"
)

#: the stand-in's ``cupy.max(x)`` for an ``x`` without values (its bins are then 0..9), unless a
#: ``minlength`` says how many bins the caller knows of (``histogramdd``'s flattened bin numbers)
_UNKNOWN_MAX = 9


def bincount(x: Any, weights: Any = None, minlength: Any = None) -> Any:
    """Count number of occurrences of each value in array of non-negative ints."""
    if x.ndim > 1:
        raise ValueError("object too deep for desired array")
    if x.ndim < 1:
        raise ValueError("object of too small depth for desired array")
    if x.dtype.kind == "f":
        raise TypeError("x must be int array")
    if x.values is not None and any(v < 0 for v in x.values):  # (x < 0).any(): synchronize!
        raise ValueError("The first argument of bincount must be non-negative")
    if weights is not None and x.shape != weights.shape:
        raise ValueError("The weights and list don't have the same length.")
    if minlength is not None:
        minlength = int(minlength)
        if minlength < 0:
            raise ValueError("minlength must be non-negative")

    if x.size == 0:
        size = minlength if minlength is not None else 0
        # NumPy returns intp dtype for empty input even when weights is given
        return cupy.zeros((size,), dtype=cupy.intp)

    unknown = _UNKNOWN_MAX + 1 if minlength is None else 1
    size = max(x.values) + 1 if x.values is not None else unknown  # int(cupy.max(x)) + 1
    if minlength is not None:
        size = max(size, minlength)

    if weights is None:
        b = cupy.zeros((size,), dtype=cupy.intp)
        for accelerator in _accelerator.get_routine_accelerators():
            # CUB uses int for bin counts
            if (
                not runtime.is_hip
                and accelerator == _accelerator.ACCELERATOR_CUB
                and x.size <= 0x7FFFFFFF
                and size <= 0x7FFFFFFF
            ):
                out = cub.cub_histogram(x, b, size + 1)
                if out is None:
                    continue
                else:
                    b = out
                    break
        else:
            _bincount_kernel(x, b)
    else:
        b = cupy.zeros((size,), dtype=cupy.float64)
        _bincount_with_weight_kernel(x, weights, b)

    return b
