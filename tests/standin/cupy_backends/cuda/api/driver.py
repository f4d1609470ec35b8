"""Stand-in for ``cupy_backends.cuda.api.driver``: only ``get_build_version()``, which CuPy's
sparse code reads (``cupyx/cusparse.py`` ``check_availability`` and ``_csc.py``'s ROCm branch).

It answers what the build was made with: ``CUDA_VERSION`` 12090 (CUDA 12.9, the
cupy-cuda12x wheel's), or on a HIP build (``STANDIN_CUPY_HIP=1``) ``HIP_VERSION`` 60241134
(ROCm 6.2, ``major * 10**7 + minor * 10**5 + patch``, as CuPy reports it).
"""

from __future__ import annotations

from cupy_backends.cuda.api import runtime as _runtime


def get_build_version() -> int:
    return 60241134 if _runtime.is_hip else 12090
