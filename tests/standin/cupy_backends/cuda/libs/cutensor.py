"""Stand-in for ``cupy_backends.cuda.libs.cutensor``: the constants CuPy's cuTENSOR wrapper uses.

Values are CuPy 14.2's (``cutensor.pxd``, the same in 13.6): the ``cudaDataType`` codes
(``R_32F = 0``, ``C_32F = 4``, ...), the operators, and the ``cutensorComputeDescriptor_t``
stand-ins CuPy maps to cuTENSOR's descriptor pointers (``COMPUTE_DESC_32F = 4``,
``COMPUTE_DESC_TF32 = 4096``, ...). Nothing here launches; ``cupyx._cutensor.contraction``
records what it would have run. ``STANDIN_CUPY_MISSING_LIBS=cutensor`` makes the import fail,
as CuPy's does without libcutensor (the default wheel installs no cuTENSOR).
"""

from __future__ import annotations

from cupy_backends.cuda.libs._check import require as _require

_require("cutensor")

# cudaDataType_t
R_16F = 2
C_16F = 6
R_16BF = 14
C_16BF = 15
R_32F = 0
C_32F = 4
R_64F = 1
C_64F = 5

# cutensorOperator_t
OP_IDENTITY = 1
OP_ADD = 3
OP_MUL = 5

# cutensorAlgo_t, cutensorJitMode_t, cutensorWorksizePreference_t
ALGO_DEFAULT = -1
JIT_MODE_NONE = 0
WORKSPACE_RECOMMENDED = 2

# cutensorComputeDescriptor_t alternatives (CuPy maps each to cuTENSOR's CUTENSOR_COMPUTE_DESC_*)
COMPUTE_DESC_16F = 1
COMPUTE_DESC_16BF = 1024
COMPUTE_DESC_TF32 = 4096
COMPUTE_DESC_3xTF32 = 8192
COMPUTE_DESC_32F = 4
COMPUTE_DESC_64F = 16
