"""NVIDIA's cuDNN frontend on a real GPU: under ``cudnn.flags(deterministic=True)`` a
convolution graph gives bitwise-equal results, run after run.

The graph is a weight gradient (``conv_wgrad``: the convolution whose reduction over the
batch and the image is where cuDNN has non-deterministic, atomics-based engines), in fp16
with float32 compute, channels-last, written with the frontend's ``pygraph`` API as it is
in 1.23 (pybind) and in the newest releases (pure Python): ``tensor``, ``conv_wgrad``,
``build([heur_mode.A, heur_mode.FALLBACK])``, ``execute({tensor: device pointer}, workspace,
handle=...)``. scripts/gpu_check.sh runs this file with the newest frontend and again with
1.23, where backends runs ``build(modes)`` step by step so that its plan filter applies.

Skipped (saying why) without the ``nvidia-cudnn-frontend`` package or a loadable cuDNN,
unless ``GPU_CHECK_FRONTEND`` names the release that must be found (then it fails).
scripts/gpu_check.sh sets it for every release its wheel folder holds.
"""

from __future__ import annotations

import importlib
import inspect
import types
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import backends
from tests.gpu.harness import FRONTEND_EXPECTED, say

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cupy: Any = pytest.importorskip("cupy")

N, C, K, H, W = 16, 64, 64, 32, 32  # image N x C x H x W, filter K x C x 3 x 3, padding 1
RUNS = 5
# FRONTEND_EXPECTED (GPU_CHECK_FRONTEND): set by scripts/gpu_check.sh to the release it installed;
# then this test fails, not skips, when it cannot use that release.


def _unusable(reason: str) -> None:
    if FRONTEND_EXPECTED:
        pytest.fail(f"GPU_CHECK_FRONTEND={FRONTEND_EXPECTED} was installed, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cudnn() -> Any:
    """NVIDIA's cuDNN frontend, wrapped by backends, with cuDNN loaded."""
    from cupy_backends.cuda.libs import cublas  # noqa: F401  (loads libcublas, which cuDNN's engines use)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module("cudnn")
    except Exception as error:  # not installed, or its libraries do not load
        _unusable(f"the cuDNN frontend does not import (pip install nvidia-cudnn-frontend): {error!r}")
    from backends.sync import cudnn_frontend, installed

    if not cudnn_frontend.is_frontend(module):
        _unusable(f"the module called cudnn ({getattr(module, '__file__', '?')}) is not NVIDIA's cuDNN frontend")
    version = str(getattr(module, "__version__", "?"))
    if FRONTEND_EXPECTED and version != FRONTEND_EXPECTED:
        pytest.fail(f"expected cuDNN frontend {FRONTEND_EXPECTED}, imported {version} from {module.__file__}")
    try:
        backend = int(module.backend_version())
    except Exception as error:
        major = cupy.cuda.runtime.runtimeGetVersion() // 1000  # the CUDA this CuPy was built for
        _unusable(f"cuDNN itself does not load (pip install nvidia-cudnn-cu{major}): {error!r}")
    assert installed.get("cudnn_frontend") is cudnn_frontend, "backends did not wrap the frontend"
    assert hasattr(module.pygraph.build, "__backends_wrapped__")
    in_python = isinstance(inspect.getattr_static(module.pygraph, "build").__backends_wrapped__, types.FunctionType)
    say(
        f"cuDNN frontend {version}, cuDNN {backend}: pygraph is "
        + (
            "a Python class (build(modes) calls the wrapped create_execution_plans)"
            if in_python
            else "a pybind11 class (backends runs build(modes) step by step)"
        ),
        frontend=version,
        cudnn=backend,
        pygraph="python" if in_python else "pybind11",
    )
    return module


@pytest.fixture(scope="module")
def handle(cudnn: Any) -> Iterator[Any]:
    made = cudnn.create_handle()
    yield made
    cudnn.destroy_handle(made)


def _channels_last(n: int, c: int, h: int, w: int) -> list[int]:
    return [c * h * w, 1, w * c, c]  # strides of a logical NCHW tensor stored NHWC


def build_wgrad(cudnn: Any, handle: Any) -> tuple[Any, tuple[Any, Any, Any]]:
    """The graph dW = conv_wgrad(X, dY), built under the flags in force now."""
    half = cudnn.data_type.HALF
    graph = cudnn.pygraph(
        io_data_type=half,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    X = graph.tensor(name="X", dim=[N, C, H, W], stride=_channels_last(N, C, H, W), data_type=half)
    DY = graph.tensor(name="DY", dim=[N, K, H, W], stride=_channels_last(N, K, H, W), data_type=half)
    DW = graph.conv_wgrad(image=X, loss=DY, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    DW.set_output(True).set_dim([K, C, 3, 3]).set_stride(_channels_last(K, C, 3, 3)).set_data_type(half)
    graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return graph, (X, DY, DW)


def run_wgrad(graph: Any, tensors: tuple[Any, Any, Any], handle: Any, x: Any, dy: Any) -> Any:
    X, DY, DW = tensors
    dw = cupy.full((K, 3, 3, C), cupy.nan, dtype=cupy.float16)  # NHWC storage of K x C x 3 x 3
    workspace = cupy.empty(max(int(graph.get_workspace_size()), 1), dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()  # the frontend's handle runs on the default stream, as CuPy here
    graph.execute({X: x.data.ptr, DY: dy.data.ptr, DW: dw.data.ptr}, workspace.data.ptr, handle=handle)
    cupy.cuda.Device().synchronize()
    return dw


def reference_wgrad(x: Any, dy: Any) -> Any:
    """dW[k, c, r, s] = sum over n, h, w of X[n, c, h + r - 1, w + s - 1] * dY[n, k, h, w], in float64."""
    xs = cupy.pad(x.astype(cupy.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))  # NHWC, padded
    d = dy.astype(cupy.float64)
    out = cupy.empty((K, 3, 3, C), dtype=cupy.float64)
    for r in range(3):
        for s in range(3):
            out[:, r, s, :] = cupy.einsum("nhwc,nhwk->kc", xs[:, r : r + H, s : s + W, :], d)
    return out


def test_frontend_convolution_is_bitwise_reproducible_under_deterministic(cudnn: Any, handle: Any) -> None:
    rng = cupy.random.default_rng(4)
    x = rng.standard_normal((N, H, W, C), dtype=cupy.float32).astype(cupy.float16)  # NHWC storage
    dy = rng.standard_normal((N, H, W, K), dtype=cupy.float32).astype(cupy.float16)
    reference = reference_wgrad(x, dy)
    scale = float(cupy.sqrt(cupy.sum(reference * reference)))

    found: dict[bool, tuple[bool, float]] = {}
    for deterministic in (True, False):
        with backends.cudnn.flags(deterministic=deterministic):
            graph, tensors = build_wgrad(cudnn, handle)
            runs = [run_wgrad(graph, tensors, handle, x, dy) for _ in range(RUNS)]
        first = runs[0].view(cupy.uint16)
        equal = all(bool(cupy.array_equal(dw.view(cupy.uint16), first)) for dw in runs[1:])
        difference = runs[0].astype(cupy.float64) - reference
        error = float(cupy.sqrt(cupy.sum(difference * difference))) / scale
        found[deterministic] = (equal, error)
        say(
            f"conv_wgrad fp16 {N}x{C}x{H}x{W} -> {K}x{C}x3x3 under cudnn.deterministic={deterministic}: "
            f"{RUNS} runs bitwise equal: {equal}; error vs float64 {error:.2e}; "
            f"{int(graph.get_execution_plan_count())} execution plans ranked",
            frontend=str(getattr(cudnn, "__version__", "?")),
            deterministic=deterministic,
            bitwise_equal=equal,
            error=error,
            execution_plans=int(graph.get_execution_plan_count()),
        )
    equal, error = found[True]
    assert equal, "under cudnn.deterministic=True the convolution's result changed between runs"
    assert error < 1e-2
