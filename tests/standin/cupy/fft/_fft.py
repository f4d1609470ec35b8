"""Stand-in for ``cupy.fft._fft``.

As in CuPy, ``get_plan_cache`` is imported by name at module top and looked up as a
module global by every transform when it needs a plan, so replacing
``cupy.fft._fft.get_plan_cache`` reaches every ``cupy.fft`` and ``cupyx.scipy.fft``
transform. 1-D transforms key their plan ``(out_size, fft_type, batch, devices)``
(a ``Plan1d``); transforms over 2 or 3 leading or trailing axes use one ``PlanNd``.
"""

from __future__ import annotations

import math
from typing import Any

from cupy._core.core import ndarray as _ndarray
from cupy.fft import config
from cupy.fft._cache import get_plan_cache


def _output_dtype(dtype: str, value_type: str) -> str:
    if value_type != "R2C":
        if dtype in ("float16", "float32", "complex64"):
            return "complex64"
        return "complex128"
    if dtype in ("complex64", "complex128"):
        return "float32" if dtype == "complex64" else "float64"
    if dtype in ("float16", "float32"):
        return "float32"
    return "float64"


def _convert_fft_type(dtype: str, value_type: str) -> int:
    from cupy.cuda import cufft

    types = {
        ("C2C", "complex64"): cufft.CUFFT_C2C,
        ("R2C", "float32"): cufft.CUFFT_R2C,
        ("C2R", "complex64"): cufft.CUFFT_C2R,
        ("C2C", "complex128"): cufft.CUFFT_Z2Z,
        ("R2C", "float64"): cufft.CUFFT_D2Z,
        ("C2R", "complex128"): cufft.CUFFT_Z2D,
    }
    try:
        return types[value_type, dtype]
    except KeyError:
        raise ValueError from None


def _cook(a: _ndarray, s: Any, axes: tuple[int, ...], value_type: str) -> _ndarray:
    a = a.astype(_output_dtype(a.dtype, value_type), copy=False)
    if s is None:
        return a
    shape = list(a.shape)
    for size, axis in zip(s, axes, strict=False):
        if size is not None:
            shape[axis] = size // 2 + 1 if value_type == "C2R" and axis == axes[-1] else size
    return a if tuple(shape) == a.shape else _ndarray(shape, a.dtype)


def _exec_fft(
    a: _ndarray, direction: int, value_type: str, norm: Any, axis: int, overwrite_x: bool,
    out_size: int | None = None, out: _ndarray | None = None, plan: Any = None,
) -> _ndarray:  # fmt: skip
    from cupy.cuda import cufft

    fft_type = _convert_fft_type(a.dtype, value_type)
    axis %= a.ndim
    if axis != a.ndim - 1:  # swapaxes(axis, -1)
        shape = list(a.shape)
        shape[axis], shape[-1] = shape[-1], shape[axis]
        a = _ndarray(shape, a.dtype)
    n = a.shape[-1]
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    if out_size is None:
        out_size = n
    batch = a.size // n

    curr_plan = cufft.get_current_plan()
    if curr_plan is not None:
        if plan is not None:
            raise RuntimeError("Use the cuFFT plan either as a context manager or as an argument.")
        plan = curr_plan
    if plan is None:
        devices = config.devices
        keys = (out_size, fft_type, batch, devices)
        cache = get_plan_cache()
        cached_plan = cache.get(keys)
        if cached_plan is not None:
            plan = cached_plan
        else:
            plan = cufft.Plan1d(out_size, fft_type, batch, devices=devices)
            cache[keys] = plan

    if overwrite_x and value_type == "C2C":
        out = a
    elif out is None:
        out = plan.get_output_array(a)
    if batch != 0:
        plan.fft(a, out, direction)
    if axis != a.ndim - 1:
        shape = list(out.shape)
        shape[axis], shape[-1] = shape[-1], shape[axis]
        out = _ndarray(shape, out.dtype)
    return out


def _fft(
    a: _ndarray, s: Any, axes: Any, norm: Any, direction: int,
    value_type: str = "C2C", overwrite_x: bool = False, plan: Any = None,
) -> _ndarray:  # fmt: skip
    if not isinstance(a, _ndarray):
        raise TypeError("The input array a must be a cupy.ndarray")
    if axes is None:
        axes = tuple(range(a.ndim)) if s is None else tuple(range(a.ndim - len(s), a.ndim))
    axes = tuple(axis % a.ndim for axis in axes)
    a = _cook(a, s, axes, value_type)
    if value_type == "C2C":
        for axis in reversed(axes):
            a = _exec_fft(a, direction, value_type, norm, axis, overwrite_x, plan=plan)
        return a
    if value_type == "R2C":
        a = _exec_fft(a, direction, value_type, norm, axes[-1], overwrite_x, plan=plan)
        for axis in reversed(axes[:-1]):
            a = _exec_fft(a, direction, "C2C", norm, axis, overwrite_x)
        return a
    # C2R
    for axis in reversed(axes[:-1]):
        a = _exec_fft(a, direction, "C2C", norm, axis, overwrite_x)
    last = s[-1] if s is not None and s[-1] is not None else 2 * (a.shape[axes[-1]] - 1)
    return _exec_fft(a, direction, value_type, norm, axes[-1], overwrite_x, out_size=last, plan=plan)


def _nd_plan_is_possible(axes_sorted: tuple[int, ...], ndim: int) -> bool:
    return (
        0 < len(axes_sorted) <= 3
        and (0 in axes_sorted or (ndim - 1) in axes_sorted)
        and all(axes_sorted[i + 1] - axes_sorted[i] == 1 for i in range(len(axes_sorted) - 1))
    )


def _get_cufft_plan_nd(
    shape: tuple[int, ...], fft_type: int, axes: tuple[int, ...], order: str = "C",
    out_size: int | None = None, to_cache: bool = True,
) -> Any:  # fmt: skip
    from cupy.cuda import cufft

    plan_dimensions = tuple(shape[axis] for axis in axes)
    nbatch = math.prod(shape) // math.prod(plan_dimensions) if plan_dimensions else 1
    keys = (plan_dimensions, None, 1, 0, None, 1, 0, fft_type, nbatch, order, axes[-1], out_size)
    cache = get_plan_cache()
    cached_plan = cache.get(keys)
    if cached_plan is not None:
        return cached_plan
    plan = cufft.PlanNd(*keys)
    if to_cache:
        cache[keys] = plan
    return plan


def _fftn(
    a: _ndarray, s: Any, axes: Any, norm: Any, direction: int,
    value_type: str = "C2C", order: str = "A", plan: Any = None, overwrite_x: bool = False,
) -> _ndarray:  # fmt: skip
    from cupy.cuda import cufft

    a = _cook(a, s, axes, value_type)
    fft_type = _convert_fft_type(a.dtype, value_type)
    out_size = None
    if value_type == "C2R":
        out_size = s[-1] if s is not None and s[-1] is not None else 2 * (a.shape[axes[-1]] - 1)
    elif value_type == "R2C":
        out_size = a.shape[axes[-1]] // 2 + 1
    if plan is None:
        plan = cufft.get_current_plan()
    if plan is None:
        plan = _get_cufft_plan_nd(a.shape, fft_type, axes=axes, order="C", out_size=out_size)
    out = a if overwrite_x and value_type == "C2C" else plan.get_output_array(a, order="C")
    if out.size != 0:
        plan.fft(a, out, direction)
    return out


def _default_fft_func(a: _ndarray, s: Any = None, axes: Any = None, plan: Any = None, value_type: str = "C2C") -> Any:
    if axes is None:
        axes = tuple(range(a.ndim)) if s is None else tuple(range(a.ndim - len(s), a.ndim))
    axes_sorted = tuple(sorted(axis % a.ndim for axis in axes))
    if len(axes_sorted) > 1 and _nd_plan_is_possible(axes_sorted, a.ndim):
        return _fftn
    return _fft


def _n_dim(a: _ndarray, s: Any, axes: Any, norm: Any, direction: int, value_type: str = "C2C") -> _ndarray:
    func = _default_fft_func(a, s, axes, value_type=value_type)
    if axes is None:
        axes = tuple(range(a.ndim)) if s is None else tuple(range(a.ndim - len(s), a.ndim))
    axes = tuple(axis % a.ndim for axis in axes)
    return func(a, s, axes, norm, direction, value_type=value_type)


def fft(a: _ndarray, n: int | None = None, axis: int = -1, norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _fft(a, (n,), (axis,), norm, cufft.CUFFT_FORWARD)


def ifft(a: _ndarray, n: int | None = None, axis: int = -1, norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _fft(a, (n,), (axis,), norm, cufft.CUFFT_INVERSE)


def fft2(a: _ndarray, s: Any = None, axes: Any = (-2, -1), norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _n_dim(a, s, axes, norm, cufft.CUFFT_FORWARD)


def ifft2(a: _ndarray, s: Any = None, axes: Any = (-2, -1), norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _n_dim(a, s, axes, norm, cufft.CUFFT_INVERSE)


def fftn(a: _ndarray, s: Any = None, axes: Any = None, norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _n_dim(a, s, axes, norm, cufft.CUFFT_FORWARD)


def ifftn(a: _ndarray, s: Any = None, axes: Any = None, norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _n_dim(a, s, axes, norm, cufft.CUFFT_INVERSE)


def rfft(a: _ndarray, n: int | None = None, axis: int = -1, norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _fft(a, (n,), (axis,), norm, cufft.CUFFT_FORWARD, "R2C")


def irfft(a: _ndarray, n: int | None = None, axis: int = -1, norm: Any = None) -> _ndarray:
    from cupy.cuda import cufft

    return _fft(a, (n,), (axis,), norm, cufft.CUFFT_INVERSE, "C2R")
