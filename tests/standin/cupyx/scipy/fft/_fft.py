"""Stand-in for ``cupyx.scipy.fft._fft``: every transform goes through ``cupy.fft._fft``."""

from __future__ import annotations

from typing import Any

from cupy._core.core import ndarray
from cupy.fft._fft import _default_fft_func, _fft


def _n_dim(x: ndarray, s: Any, axes: Any, norm: Any, direction: int, value_type: str, plan: Any) -> ndarray:
    func = _default_fft_func(x, s, axes, plan, value_type)
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = tuple(axis % x.ndim for axis in axes)
    return func(x, s, axes, norm, direction, value_type=value_type, plan=plan)


def fft(x: ndarray, n: int | None = None, axis: int = -1, norm: Any = None, overwrite_x: bool = False, *,
        plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _fft(x, (n,), (axis,), norm, cufft.CUFFT_FORWARD, overwrite_x=overwrite_x, plan=plan)


def ifft(x: ndarray, n: int | None = None, axis: int = -1, norm: Any = None, overwrite_x: bool = False, *,
         plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _fft(x, (n,), (axis,), norm, cufft.CUFFT_INVERSE, overwrite_x=overwrite_x, plan=plan)


def rfft(x: ndarray, n: int | None = None, axis: int = -1, norm: Any = None, overwrite_x: bool = False, *,
         plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _fft(x, (n,), (axis,), norm, cufft.CUFFT_FORWARD, "R2C", overwrite_x=overwrite_x, plan=plan)


def irfft(x: ndarray, n: int | None = None, axis: int = -1, norm: Any = None, overwrite_x: bool = False, *,
          plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _fft(x, (n,), (axis,), norm, cufft.CUFFT_INVERSE, "C2R", overwrite_x=overwrite_x, plan=plan)


def fft2(x: ndarray, s: Any = None, axes: Any = (-2, -1), norm: Any = None, overwrite_x: bool = False, *,
         plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _n_dim(x, s, axes, norm, cufft.CUFFT_FORWARD, "C2C", plan)


def ifft2(x: ndarray, s: Any = None, axes: Any = (-2, -1), norm: Any = None, overwrite_x: bool = False, *,
          plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _n_dim(x, s, axes, norm, cufft.CUFFT_INVERSE, "C2C", plan)


def fftn(x: ndarray, s: Any = None, axes: Any = None, norm: Any = None, overwrite_x: bool = False, *,
         plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _n_dim(x, s, axes, norm, cufft.CUFFT_FORWARD, "C2C", plan)


def ifftn(x: ndarray, s: Any = None, axes: Any = None, norm: Any = None, overwrite_x: bool = False, *,
          plan: Any = None) -> ndarray:  # fmt: skip
    from cupy.cuda import cufft

    return _n_dim(x, s, axes, norm, cufft.CUFFT_INVERSE, "C2C", plan)
