"""The cases in this folder run only under the null CUDA (``tests/test_null_cuda.py`` starts them,
or ``python -m tests.nullcuda``): CuPy's runtime module is routed to it here, before the cases
import CuPy. Elsewhere they skip (``cases_cupy.py``) and nothing here is done."""

from __future__ import annotations

import os

from tests import nullcuda

ROUTING: nullcuda.Routing | None = nullcuda.activate() if os.environ.get("NULLCUDA_SHIM") else None
