"""Stand-in for ``cupy._core._kernel``: ``ElementwiseKernel`` (launches recorded, nothing
computed) and the ``ufunc`` class (``.at`` as CuPy's, ``kernel.pyx`` ``def at``).

``KERNELS.calls`` holds a ``Launch(name, dtypes, thread)`` per kernel launch: the kernel's
``name`` and the dtypes of its array arguments, inputs then outputs (outputs the call
allocated included). ``cupy.cuda.cub.cub_histogram`` records there too (name
``"cub_histogram"``), and so do the masked reductions of ``cupyx.scipy.ndimage``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from cupy_backends._standin_recorder import CallRecorder

from cupy._core import core
from cupy._core._dtype import _DTYPES, get_dtype


class Launch(NamedTuple):
    name: str
    dtypes: tuple[str, ...]
    thread: int


KERNELS: CallRecorder[Launch] = CallRecorder()


def record_launch(name: str, *arrays: Any) -> None:
    """Record a launch of ``name`` on the arrays among ``arrays``."""
    dtypes = tuple(a.dtype for a in arrays if isinstance(a, core._ndarray_base))
    KERNELS.record(Launch(name, dtypes, threading.get_ident()))


class _Param(NamedTuple):
    raw: bool
    type: str  # a dtype name, or a type placeholder such as "T"
    name: str


def _parse(params: str) -> list[_Param]:
    """``'raw T x, int32 n'`` as CuPy reads it: ``[raw] type name`` separated by commas."""
    parsed = []
    for param in params.split(","):
        words = param.split()
        if not words:
            continue
        raw = words[0] == "raw"
        type_name, name = words[1:] if raw else words
        parsed.append(_Param(raw, type_name, name))
    return parsed


class ElementwiseKernel:
    """``ElementwiseKernel(in_params, out_params, operation, name='kernel', ...)``. A call
    records a ``Launch`` and returns the output argument (a tuple for several outputs),
    allocating outputs not passed, as CuPy does; their values are unknown afterwards."""

    def __init__(
        self, in_params: str, out_params: str, operation: str, name: str = "kernel",
        reduce_dims: bool = True, preamble: str = "", no_return: bool = False, return_tuple: bool = False,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        self.in_params = _parse(in_params)
        self.out_params = _parse(out_params)
        self.nin = len(self.in_params)
        self.nout = len(self.out_params)
        self.nargs = self.nin + self.nout
        self.operation = operation
        self.name = name
        self.no_return = no_return
        self.return_tuple = return_tuple

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        size = kwargs.pop("size", -1)
        kwargs.pop("stream", None)
        block_size = kwargs.pop("block_size", 128)
        if kwargs:
            raise TypeError(f"Wrong arguments {kwargs}")
        if block_size <= 0:
            raise ValueError("block_size must be greater than zero")
        if len(args) not in (self.nin, self.nargs):
            raise TypeError(
                f"Wrong number of arguments for {self.name!r}. It must be either {self.nin} or "
                f"{self.nargs} (with outputs), but given {len(args)}."
            )
        # type placeholders ("T") take the dtype of the first array bound to them
        types: dict[str, str] = {}
        for param, arg in zip(self.in_params + self.out_params, args, strict=False):
            if isinstance(arg, core._ndarray_base) and param.type not in _DTYPES:
                types.setdefault(param.type, arg.dtype)
        shapes = [
            a.shape
            for p, a in zip(self.in_params, args, strict=False)
            if not p.raw and isinstance(a, core._ndarray_base)
        ]
        if size != -1:
            shape: tuple[int, ...] = (size,)
        elif shapes:
            import numpy

            shape = numpy.broadcast_shapes(*shapes)
        else:
            raise ValueError("Loop size is undecided.")
        outs = list(args[self.nin :])
        for param in self.out_params[len(outs) :]:
            outs.append(core.ndarray(shape, get_dtype(types.get(param.type, param.type))))
        for out in outs:
            out.values = None  # the kernel wrote it; the stand-in does not compute
        if self.no_return:
            ret = None
        elif not self.return_tuple and self.nout == 1:
            ret = outs[0]
        else:
            ret = tuple(outs)
        if 0 in shape:
            return ret  # nothing to launch, as in CuPy
        record_launch(self.name, *args[: self.nin], *outs)
        return ret


class ufunc:
    """A CuPy universal function: ``name`` and ``__name__`` are ``"cupy_<op>"``, as in CuPy."""

    def __init__(self, name: str, nin: int, func: Callable[..., Any], scatter_op: str | None) -> None:
        self.name = self.__name__ = name
        self.nin = nin
        self.nout = 1
        self._func = func
        self._scatter_op = scatter_op

    def __repr__(self) -> str:
        return f"<ufunc '{self.name}'>"

    def __call__(self, *args: Any, out: Any = None, dtype: Any = None, **kwargs: Any) -> Any:
        """Elementwise on values where there are values (nothing is recorded)."""
        if len(args) != self.nin:
            raise TypeError(f"Wrong number of arguments for {self.name!r}")
        if not any(isinstance(a, core._ndarray_base) for a in args):
            args = (core.array(args[0]), *args[1:])
        result = core._binary(args[0], args[1], self._func)
        if dtype is not None:
            result = result.astype(dtype, copy=False)
        if out is not None:
            out.values = None if result.values is None else [v for v in result.astype(out.dtype).values]
            return out
        return result

    def at(self, a: Any, indices: Any, b: Any = None) -> None:
        """Apply in place operation on the operand ``a`` for elements specified by ``indices``."""
        if self._scatter_op is not None:
            a._scatter_op(indices, b, self._scatter_op)
        else:
            raise NotImplementedError(f"`{self.name}.at` is not supported yet")
