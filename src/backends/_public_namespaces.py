"""The public namespaces, spelled as in ``torch.backends``.

Flag attributes and ``flags()`` come from the flag table (``_engine/table.py``);
what is written here is only what is not a flag: availability queries, presets
and torch's function-shaped spellings.
"""

from __future__ import annotations

from ._engine.lazy import Lazy
from ._engine.namespace import Namespace
from ._engine.scope import Scope
from ._engine.state import assign, read
from ._engine.wording import show

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see _engine/record.py)
if TYPE_CHECKING:
    from typing import Any, SupportsIndex

    from .availability import cpu
    from .availability import cuda as cuda_info
else:  # imported at the first availability question (importlib.util, threadpoolctl probes, ...)
    cpu = Lazy("backends.availability.cpu", globals(), "cpu")
    cuda_info = Lazy("backends.availability.cuda", globals(), "cuda_info")

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


def _plan_cache(device: int | None, what: str) -> Any:
    """CuPy's plan cache of the current thread on ``device`` (``None``: the current device)."""
    if not cuda_info.is_available():
        raise RuntimeError(f"{what}: {_NO_CUDA}")
    import cupy

    from .sync.cufft import current_cache

    if device is None:
        return current_cache()
    if not issubclass(type(device), int) or type(device) is bool:
        raise TypeError(f"cufft_plan_cache[device]: device must be an int, got {show(device)}")
    device = int.__index__(device)  # a plain int, whatever a subclass overrides
    count = cupy.cuda.runtime.getDeviceCount()
    if not 0 <= device < count:
        raise IndexError(f"cufft_plan_cache[{device!r}]: no such CUDA device (this machine has {count})")
    with cupy.cuda.Device(device):
        return current_cache()


class PlanCacheView:
    """One device's cuFFT plan cache in the current thread (``cufft_plan_cache[device]``).
    ``max_size`` is the flag (the same for every device); ``size`` and ``clear()`` act
    on this device's cache."""

    def __init__(self, device: int) -> None:
        self.device = device

    @property
    def max_size(self) -> int:
        """The ``cuda.cufft_plan_cache.max_size`` flag (plans, an ``int >= -1``: ``0`` turns
        caching off and ``-1`` lifts the limit, as CuPy's ``PlanCache.set_size`` takes them);
        assigning it sets the flag for every device, with attribute-assignment rules
        (``TypeError``, ``ValueError`` for bad values). Where the flag is not set, CuPy's own
        size stands (contract section 8)."""
        return read("cuda.cufft_plan_cache.max_size")  # type: ignore[return-value]

    @max_size.setter
    def max_size(self, value: SupportsIndex) -> None:
        __tracebackhide__ = True  # see _engine/state.py's assign_checked
        assign("cuda.cufft_plan_cache.max_size", value)

    @property
    def size(self) -> int:
        """Plans (an ``int``) cached for this device in the current thread
        (CuPy's ``PlanCache.get_curr_size()``). ``RuntimeError`` without CUDA."""
        return int(_plan_cache(self.device, f"cufft_plan_cache[{self.device}].size").get_curr_size())

    def clear(self) -> None:
        """Drop this device's plans in the current thread. ``RuntimeError`` without CUDA."""
        _plan_cache(self.device, f"cufft_plan_cache[{self.device}].clear()").clear()

    def __repr__(self) -> str:
        return f"<cuFFT plan cache of device {self.device} in this thread>"


class PlanCache(Namespace):
    """``backends.cuda.cufft_plan_cache``: CuPy's per-thread, per-device cuFFT plan cache,
    shaped like torch's. ``max_size`` is a flag and works without CUDA; ``size``
    (read-only), ``clear()`` and ``[device]`` (``IndexError`` for a device that does not
    exist) raise ``RuntimeError`` without CUDA."""

    prefix = "cuda.cufft_plan_cache"

    @property
    def size(self) -> int:
        """Plans (an ``int``) in the current thread's cache on the current device, as
        torch's ``cufft_plan_cache.size`` (CuPy's ``PlanCache.get_curr_size()``). Read-only:
        assigning raises ``AttributeError``; ``RuntimeError`` without CUDA."""
        return int(_plan_cache(None, "cufft_plan_cache.size").get_curr_size())

    def clear(self) -> None:
        """Drop every plan in the current thread's cache on the current device (torch's
        ``cufft_plan_cache.clear()``). ``RuntimeError`` without CUDA."""
        _plan_cache(None, "cufft_plan_cache.clear()").clear()

    def __dir__(self) -> list[str]:
        # Without CUDA, reading `size` raises RuntimeError (section 8), which help() and
        # inspect.getmembers(), reading every name dir() gives, take for a broken module.
        names = super().__dir__()
        return names if cuda_info.is_available() else [n for n in names if n != "size"]

    def __getitem__(self, device: int) -> PlanCacheView:
        """One device's view. Raises ``TypeError`` unless ``device`` is an int, ``IndexError``
        for a device that does not exist, ``RuntimeError`` without CUDA."""
        if not issubclass(type(device), int) or type(device) is bool:
            if not cuda_info.is_available():
                raise RuntimeError(f"cufft_plan_cache[device]: {_NO_CUDA}")
            raise TypeError(f"cufft_plan_cache[device]: device must be an int, got {show(device)}")
        device = int.__index__(device)
        _plan_cache(device, f"cufft_plan_cache[{device}]")  # checks CUDA and the device
        return PlanCacheView(device)


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
        __tracebackhide__ = True  # see _engine/state.py's assign_checked
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


class Algorithms(Namespace):
    """``backends.algorithms``: torch's ``use_deterministic_algorithms`` switch as two scoped
    flags, for CuPy. Where ``deterministic`` is on, CuPy operations whose results can vary from
    run to run raise ``RuntimeError`` before launching (with ``warn_only``, warn
    ``backends.NondeterministicAlgorithmWarning``), and float ``cumsum``/``cumprod`` take CuPy's
    own deterministic scan."""

    prefix = "algorithms"


class Mps(Namespace):
    """``backends.mps``: Apple's Metal. CuPy and NumPy have no Metal backend, so both answer ``False``."""

    prefix = "mps"

    @staticmethod
    def is_built() -> bool:
        """Always ``False`` (torch's ``mps.is_built()``). Never raises."""
        return False

    @staticmethod
    def is_available() -> bool:
        """Always ``False`` (torch's ``mps.is_available()``). Never raises."""
        return False


class Mkl(Namespace):
    """``backends.mkl``: whether NumPy's loaded BLAS is Intel MKL."""

    prefix = "mkl"

    @staticmethod
    def is_available() -> bool:
        """Whether NumPy's loaded BLAS is MKL (torch's ``mkl.is_available()``). Never raises."""
        return cpu.mkl_is_available()


class Mkldnn(Namespace):
    """``backends.mkldnn``: whether oneDNN is loaded in this process (NumPy does not use it)."""

    prefix = "mkldnn"

    @staticmethod
    def is_available() -> bool:
        """Whether oneDNN is loaded in this process (torch's ``mkldnn.is_available()``). Never raises."""
        return cpu.mkldnn_is_available()


class Openmp(Namespace):
    """``backends.openmp``: whether an OpenMP runtime is loaded with NumPy."""

    prefix = "openmp"

    @staticmethod
    def is_available() -> bool:
        """Whether an OpenMP runtime is loaded with NumPy (torch's ``openmp.is_available()``).
        Never raises."""
        return cpu.openmp_is_available()


cudnn = Cudnn()
cuda = Cuda()
algorithms = Algorithms()
mps = Mps()
mkl = Mkl()
mkldnn = Mkldnn()
openmp = Openmp()
