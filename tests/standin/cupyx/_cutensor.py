"""Stand-in for ``cupyx._cutensor`` (``_cutensor.pyx`` v14.2.0): ``contraction`` and what it
decides before it launches, recorded instead of run.

Models ``_get_cutensor_dtype`` (224-246), ``_contraction_compute_descs`` and
``create_contraction``'s choice of the compute descriptor (663-735: ``compute_desc == 0``
takes the table's entry for the operands' data types, 32F for float32 and complex64, and an
unsupported combination raises ``ValueError``), ``contraction`` (745-816, its signature and
``__doc__`` line verbatim from the wheel) and ``check_availability`` (75-84: compute capability
60 or more). ``RECORDER.calls`` gets a ``Contraction(dtypes, compute_desc_given, compute_desc,
device, thread)`` for each contraction: the argument as passed and the descriptor CuPy would
have created the operator with. Differences: nothing computes (``C`` is returned as it is),
modes are not checked against the shapes, and the plan, workspace and handle steps are left
out. CuPy 13.6 (``cupyx/cutensor.pyx``) chooses the same descriptors.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from cupy_backends._standin_recorder import CallRecorder
from cupy_backends.cuda.api import runtime
from cupy_backends.cuda.libs import cutensor


class Contraction(NamedTuple):
    dtypes: tuple[str, str, str]
    compute_desc_given: int
    compute_desc: int
    device: int
    thread: int


RECORDER = CallRecorder()

_DTYPES = {
    "float16": cutensor.R_16F,
    "float32": cutensor.R_32F,
    "float64": cutensor.R_64F,
    "complex64": cutensor.C_32F,
    "complex128": cutensor.C_64F,
}

_contraction_compute_descs = {
    # [cutensor_dtype_A][*_B][*_C]
    cutensor.R_16F: {cutensor.R_16F: {cutensor.R_16F: cutensor.COMPUTE_DESC_32F}},
    cutensor.R_32F: {cutensor.R_32F: {cutensor.R_32F: cutensor.COMPUTE_DESC_32F}},
    cutensor.R_64F: {
        cutensor.R_64F: {cutensor.R_64F: cutensor.COMPUTE_DESC_64F},
        cutensor.C_64F: {cutensor.C_64F: cutensor.COMPUTE_DESC_64F},
    },
    cutensor.C_32F: {cutensor.C_32F: {cutensor.C_32F: cutensor.COMPUTE_DESC_32F}},
    cutensor.C_64F: {
        cutensor.R_64F: {cutensor.C_64F: cutensor.COMPUTE_DESC_64F},
        cutensor.C_64F: {cutensor.C_64F: cutensor.COMPUTE_DESC_64F},
    },
}


def check_availability(name: str) -> bool:
    major = runtime.deviceGetAttribute(75, runtime.getDevice())
    minor = runtime.deviceGetAttribute(76, runtime.getDevice())
    return name in ("contraction", "reduction", "elementwise") and major * 10 + minor >= 60


def _get_cutensor_dtype(dtype: Any) -> int:
    try:
        return _DTYPES[str(dtype)]
    except KeyError:
        raise TypeError(f"Type is not supported: {dtype}") from None


def contraction(
    alpha: Any,
    A: Any,
    mode_A: Any,
    B: Any,
    mode_B: Any,
    beta: Any,
    C: Any,
    mode_C: Any,
    op_A: int = cutensor.OP_IDENTITY,
    op_B: int = cutensor.OP_IDENTITY,
    op_C: int = cutensor.OP_IDENTITY,
    algo: int = cutensor.ALGO_DEFAULT,
    jit_mode: int = cutensor.JIT_MODE_NONE,
    compute_desc: int = 0,
    ws_pref: int = cutensor.WORKSPACE_RECOMMENDED,
) -> Any:
    compute_desc = int(compute_desc)  # CuPy's `int compute_desc` argument
    given = compute_desc
    types = (_get_cutensor_dtype(A.dtype), _get_cutensor_dtype(B.dtype), _get_cutensor_dtype(C.dtype))
    table = _contraction_compute_descs
    if not (types[0] in table and types[1] in table[types[0]] and types[2] in table[types[0]][types[1]]):
        raise ValueError(
            "This cutensor dtype combination is not supported in contraction ({}, {}, {})".format(*types)
        )
    if compute_desc == 0:
        compute_desc = table[types[0]][types[1]][types[2]]
    device = runtime.getDevice()
    RECORDER.record(
        Contraction((str(A.dtype), str(B.dtype), str(C.dtype)), given, compute_desc, device, threading.get_ident())
    )
    return C


contraction.__doc__ = (
    "contraction(alpha, _ndarray_base A, mode_A, _ndarray_base B, mode_B, beta, _ndarray_base C, mode_C, "
    "int op_A=cutensor.OP_IDENTITY, int op_B=cutensor.OP_IDENTITY, int op_C=cutensor.OP_IDENTITY, "
    "int algo=cutensor.ALGO_DEFAULT, int jit_mode=cutensor.JIT_MODE_NONE, int compute_desc=0, "
    "int ws_pref=cutensor.WORKSPACE_RECOMMENDED)\n"
    "General tensor contraction"
)
