"""cuTENSOR: the compute descriptor of float32 contractions (``cuda.matmul.allow_tf32``).

With ``CUPY_ACCELERATORS`` containing ``cutensor``, ``cupy.einsum`` contracts each pair of
float32 / float64 / complex operands with ``cupyx.cutensor.contraction(1.0, a, sub_a, b,
sub_b, 0.0, out, sub_out)`` instead of a batched ``matmul``, and never passes
``compute_desc``. CuPy then picks the descriptor for the data types in
``create_contraction``: ``COMPUTE_DESC_32F`` for float32 and complex64, so no TF32 whatever
the cuBLAS math mode (cupyx/_cutensor.pyx v14.2.0 lines 663-735; cupyx/cutensor.pyx v13.6.0
lines 655-727, the same). ``create_contraction`` is a ``cpdef`` that ``contraction`` calls
from C, and the table it reads is a ``cdef dict``: neither can be reached from Python. What
can is ``contraction`` itself, which einsum looks up as an attribute of the ``cupyx.cutensor``
module at each call (14.2: ``from cupyx import cutensor`` inside the function, the shim module
``cupyx/cutensor.py``; 13.6: the same import at the top of ``cupy/linalg/_einsum.py``, the
extension module itself). So the wrapper of ``cupyx.cutensor.contraction`` passes, for
operands that are all float32 or all complex64 (the two cuTENSOR pairs with a TF32
descriptor: cutensor.h ``cutensorCreateContraction``, "Ampere+"):

- ``COMPUTE_DESC_TF32`` (4096) where the launching context has ``allow_tf32`` and the current
  device has compute capability 8.0 or more;
- otherwise the descriptor as given (``0``, CuPy's default: 32F), and an explicit
  ``COMPUTE_DESC_TF32`` becomes ``COMPUTE_DESC_32F``, as an explicit TF32 compute type does
  in cuBLAS: a context that said no gets no TF32.

Other descriptors (``3XTF32``, ``16F``, ``16BF``, ``64F``) and other data types pass as given.
The descriptor is a per-call argument, part of CuPy's key for its cached operation
descriptors, so this is thread-safe and each context gets its own cached operator.

Not reached: cuTENSOR reductions (``sum``/``prod`` with the ``cutensor`` accelerator, through
``_try_reduction_routine`` from Cython), which are not products and which ``allow_tf32`` does not
concern (torch's does not concern sums either); and einsum through cuQuantum's cuTensorNet
(``cutensornet`` accelerator), whose options CuPy builds without a compute type.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._engine.state import read
from . import device_has_tf32
from .wrapping import replace

MODULE = "cupyx.cutensor"

COMPUTE_DESC_DEFAULT = 0  # CuPy's "choose for the data types" (32F for float32 and complex64)
COMPUTE_DESC_32F = 4
COMPUTE_DESC_TF32 = 4096
#: the descriptors exchanged; any other passes as given
_EXCHANGED = (COMPUTE_DESC_DEFAULT, COMPUTE_DESC_32F, COMPUTE_DESC_TF32)
#: contraction(alpha, A, mode_A, B, mode_B, beta, C, mode_C, op_A, op_B, op_C, algo, jit_mode,
#: compute_desc, ws_pref): the positions of A, B, C and compute_desc (14.2 and 13.6 alike)
_OPERANDS = ((1, "A"), (3, "B"), (6, "C"))
COMPUTE_DESC_AT = 13
_TF32_DTYPES = ("float32", "complex64")

_runtime: Any = None  # cupy_backends.cuda.api.runtime
#: device -> whether it has TF32 (compute capability >= 8.0)
_has_tf32: dict[int, bool] = {}


def _tf32_possible() -> bool:
    """Whether the current device has TF32 (compute capability >= 8.0); False where the device
    cannot be asked (CuPy's own call then raises its own error)."""
    try:
        device = _runtime.getDevice()
        has = _has_tf32.get(device)
        if has is None:
            has = _has_tf32[device] = device_has_tf32(_runtime, device)
        return has
    except Exception:
        return False


def descriptor(dtypes: set[str], given: Any) -> Any:
    """The compute descriptor a contraction of operands of ``dtypes`` gets, for ``given``
    (what the caller passed), in the current context."""
    if len(dtypes) != 1 or not dtypes <= set(_TF32_DTYPES) or given not in _EXCHANGED:
        return given
    if read("cuda.matmul.allow_tf32") and _tf32_possible():
        return COMPUTE_DESC_TF32
    return COMPUTE_DESC_32F if given == COMPUTE_DESC_TF32 else given


def _wrap(cupy_contraction: Callable[..., Any]) -> Callable[..., Any]:
    def contraction(*args: Any, **kwargs: Any) -> Any:
        operands = [args[at] if len(args) > at else kwargs.get(name) for at, name in _OPERANDS]
        dtypes = {str(getattr(operand, "dtype", "")) for operand in operands}
        if len(args) > COMPUTE_DESC_AT:
            wanted = descriptor(dtypes, args[COMPUTE_DESC_AT])
            if wanted != args[COMPUTE_DESC_AT]:
                args = (*args[:COMPUTE_DESC_AT], wanted, *args[COMPUTE_DESC_AT + 1 :])
        else:
            given = kwargs.get("compute_desc", COMPUTE_DESC_DEFAULT)
            wanted = descriptor(dtypes, given)
            if wanted != given:
                kwargs["compute_desc"] = wanted
        return cupy_contraction(*args, **kwargs)

    return contraction


def install(module: ModuleType) -> None:
    """Wrap ``contraction`` of ``module`` (``cupyx.cutensor``: CuPy 14's shim of
    ``cupyx._cutensor``, CuPy 13's extension module)."""
    global _runtime
    _runtime = importlib.import_module("cupy_backends.cuda.api.runtime")
    _has_tf32.clear()
    replace(module, "contraction", _wrap)
