"""cuTENSOR on a real GPU: ``cupy.einsum`` with the ``cutensor`` routine accelerator contracts
through ``cupyx.cutensor.contraction``, whose compute descriptor follows
``cuda.matmul.allow_tf32`` (TF32 on: an error two orders of magnitude above IEEE float32).

Needs cuTENSOR (``cutensor-cu13`` or ``-cu12``, matching CuPy's CUDA). The project's GPU machine (an
H200) has none, and the wheel (210 MB for cutensor-cu13 2.8.1) does not fit the 64 MiB copied
there, so on it this test skips, saying so (``GPU_CHECK_CUTENSOR_MISSING``, set by
scripts/gpu_check.sh). Where the script found or installed cuTENSOR (``GPU_CHECK_CUTENSOR``), it
fails instead of skipping.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import backends
from tests.gpu.harness import CUTENSOR_EXPECTED, CUTENSOR_MISSING, say

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    cupy: Any = pytest.importorskip("cupy")

IEEE_MAX = 1e-5
MIN_RATIO = 100.0


@pytest.fixture
def cutensor_einsum() -> Iterator[list[int]]:
    """cuTENSOR as einsum's routine accelerator for the test (CuPy's setting is per process), and
    a list that counts the contractions einsum hands to ``cupyx.cutensor.contraction``."""
    try:
        # the `from` form loads libcutensor through cuda-pathfinder; einsum's dotted import then finds it
        from cupy_backends.cuda.libs import cutensor as library

        version = int(library.get_version())
        import cupy_backends.cuda.libs.cutensor  # noqa: F401
        from cupyx import cutensor
    except Exception as error:
        if CUTENSOR_EXPECTED:
            pytest.fail(f"GPU_CHECK_CUTENSOR={CUTENSOR_EXPECTED}, but cuTENSOR does not load: {error!r}")
        pytest.skip(CUTENSOR_MISSING or f"cuTENSOR does not load (pip install cutensor-cu13 or -cu12): {error!r}")
    from cupy._core import _accelerator

    calls: list[int] = []
    wrapped = cutensor.contraction

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return wrapped(*args, **kwargs)

    saved = list(_accelerator.get_routine_accelerators())
    _accelerator.set_routine_accelerators(["cutensor"])
    cutensor.contraction = counted
    say(f"cuTENSOR {version}", cutensor=version)
    try:
        yield calls
    finally:
        cutensor.contraction = wrapped
        _accelerator.set_routine_accelerators(saved)


def rel_error(result: Any, reference: Any) -> float:
    difference = result.astype(cupy.float64) - reference
    return float(cupy.sqrt(cupy.sum(difference * difference)) / cupy.sqrt(cupy.sum(reference * reference)))


def test_einsum_through_cutensor_follows_allow_tf32(cutensor_einsum: list[int]) -> None:
    rng = cupy.random.default_rng(9)
    a = rng.standard_normal((16, 512, 512), dtype=cupy.float32)
    b = rng.standard_normal((16, 512, 512), dtype=cupy.float32)
    reference = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    errors = {}
    for tf32 in (False, True):
        with backends.cuda.matmul.tf32(tf32):
            errors[tf32] = rel_error(cupy.einsum("bij,bjk->bik", a, b), reference)
    ratio = errors[True] / errors[False]
    say(
        f"cupy.einsum('bij,bjk->bik') through cuTENSOR (16x512x512): error IEEE {errors[False]:.2e}, "
        f"TF32 {errors[True]:.2e}, ratio {ratio:.0f}x; {len(cutensor_einsum)} contractions",
        error_ieee=errors[False],
        error_tf32=errors[True],
        ratio=ratio,
        contractions=len(cutensor_einsum),
    )
    assert len(cutensor_einsum) == 2, "einsum did not contract through cupyx.cutensor.contraction"
    assert errors[False] < IEEE_MAX
    assert ratio > MIN_RATIO
