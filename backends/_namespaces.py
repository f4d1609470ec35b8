"""The public namespaces, spelled as in ``torch.backends``.

Flag attributes and ``flags()`` come from the flag table (``_engine/table.py``);
what is written here is only what is not a flag: availability queries, presets
and torch's function-shaped spellings.
"""

from __future__ import annotations

from typing import Any

from ._engine.namespace import Namespace
from ._engine.scope import Scope
from ._engine.state import assign, read
from .availability import cpu
from .availability import cuda as cuda_info

_NO_CUDA = "CUDA is not available (backends.cuda.is_available() is False)"


class CudnnConv(Namespace):
    """``backends.cudnn.conv``: torch 2.9's ``fp32_precision`` view of ``cudnn.allow_tf32``."""

    prefix = "cudnn.conv"


class Cudnn(Namespace):
    """``backends.cudnn``: cuDNN flags, as ``torch.backends.cudnn``."""

    prefix = "cudnn"
    conv = CudnnConv()

    def tf32(self, enabled: bool) -> Scope:
        """``cudnn.flags(allow_tf32=enabled)``. Raises ``TypeError`` unless ``enabled`` is a bool."""
        return self.flags(allow_tf32=self.members["allow_tf32"].check(enabled))

    @staticmethod
    def is_available() -> bool:
        """Whether a cuDNN library loads and a CUDA device is usable (``False`` without CuPy). Never raises."""
        return cuda_info.cudnn_is_available()

    @staticmethod
    def version() -> int | None:
        """cuDNN's version as an ``int`` (torch's format, e.g. ``90100``), or ``None``. Never raises."""
        return cuda_info.cudnn_version()


class Matmul(Namespace):
    """``backends.cuda.matmul``: cuBLAS GEMM flags, as ``torch.backends.cuda.matmul``."""

    prefix = "cuda.matmul"

    def tf32(self, enabled: bool) -> Scope:
        """``cuda.matmul.flags(allow_tf32=enabled)``. Raises ``TypeError`` unless ``enabled`` is a bool."""
        return self.flags(allow_tf32=self.members["allow_tf32"].check(enabled))


class PlanCache(Namespace):
    """``backends.cuda.cufft_plan_cache``: CuPy's per-thread, per-device cuFFT plan cache,
    shaped like torch's. ``max_size`` is a flag and works without CUDA; ``size``,
    ``clear()`` and ``[device]`` raise ``RuntimeError`` without CUDA."""

    prefix = "cuda.cufft_plan_cache"

    @property
    def size(self) -> int:
        """Plans in the current thread's cache on the current device (read-only)."""
        raise RuntimeError(f"cufft_plan_cache.size: {_NO_CUDA}")

    def clear(self) -> None:
        """Drop every plan in the current thread's cache on the current device."""
        raise RuntimeError(f"cufft_plan_cache.clear(): {_NO_CUDA}")

    def __getitem__(self, device: int) -> Any:
        raise RuntimeError(f"cufft_plan_cache[{device!r}]: {_NO_CUDA}")


class Cuda(Namespace):
    """``backends.cuda``: CUDA flags, as ``torch.backends.cuda``."""

    prefix = "cuda"
    matmul = Matmul()
    cufft_plan_cache = PlanCache()

    @staticmethod
    def preferred_linalg_library(backend: str | None = None) -> str:
        """torch's shape: with no argument, the effective ``cuda.preferred_linalg_library``;
        with one (``"default"``, ``"cusolver"`` or ``"magma"``), assign it (as attribute
        assignment does) and return it. Raises ``TypeError``/``ValueError`` for bad input."""
        if backend is not None:
            assign("cuda.preferred_linalg_library", backend)
        return read("cuda.preferred_linalg_library")  # type: ignore[return-value]

    @staticmethod
    def is_built() -> bool:
        """Whether CuPy is installed (torch: whether torch was built with CUDA). Never raises."""
        return cuda_info.is_built()

    @staticmethod
    def is_available() -> bool:
        """Whether CuPy sees a usable CUDA device. Never raises."""
        return cuda_info.is_available()


class Mps(Namespace):
    """``backends.mps``: Apple's Metal. CuPy and NumPy have no Metal backend, so both answer ``False``."""

    prefix = "mps"

    @staticmethod
    def is_built() -> bool:
        return False

    @staticmethod
    def is_available() -> bool:
        return False


class Mkl(Namespace):
    """``backends.mkl``: whether NumPy's loaded BLAS is Intel MKL."""

    prefix = "mkl"

    @staticmethod
    def is_available() -> bool:
        return cpu.mkl_is_available()


class Mkldnn(Namespace):
    """``backends.mkldnn``: whether oneDNN is loaded in this process (NumPy does not use it)."""

    prefix = "mkldnn"

    @staticmethod
    def is_available() -> bool:
        return cpu.mkldnn_is_available()


class Openmp(Namespace):
    """``backends.openmp``: whether an OpenMP runtime is loaded with NumPy."""

    prefix = "openmp"

    @staticmethod
    def is_available() -> bool:
        return cpu.openmp_is_available()


cudnn = Cudnn()
cuda = Cuda()
mps = Mps()
mkl = Mkl()
mkldnn = Mkldnn()
openmp = Openmp()
