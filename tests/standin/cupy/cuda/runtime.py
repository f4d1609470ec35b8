from cupy_backends.cuda.api.runtime import *  # noqa: F403
from cupy_backends.cuda.api.runtime import CUDARuntimeError, _is_hip_environment, is_hip  # noqa: F401
