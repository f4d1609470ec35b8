"""torch on a real GPU: a float32 ``torch.matmul`` in ``backends.cuda.matmul.tf32(True)`` and
``tf32(False)`` scopes, in two asyncio tasks that interleave at every ``await`` (with
``backends.asyncio.install()``), shows TF32's error beside IEEE float32's in the same run: the
torch sync target pushes each task's flag into torch's ``cuda.matmul.fp32_precision`` before its
steps. Needs torch with CUDA (the GPU image's torch); skips, saying so, elsewhere.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import backends
from tests.gpu.harness import say


@pytest.fixture
def torch() -> Any:
    """torch, imported when the test runs, not at collection: the dry run (scripts/gpu_check.sh
    --dry-run) collects this file where torch is not installed and skips the test before its
    first CUDA call, as every other GPU test."""
    return pytest.importorskip("torch", reason="torch is not installed on this machine")


MIN_RATIO = 50.0  # TF32 keeps 10 mantissa bits, IEEE float32 23: errors some 1000x apart on a 1024-long sum
STEPS = 4


def _relative_error(torch: Any, a: Any, b: Any, reference: Any) -> float:
    product = torch.matmul(a, b)
    return float(((product.double() - reference).abs().max() / reference.abs().max()).item())


def test_tf32_and_ieee_per_asyncio_task(torch: Any) -> None:
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no CUDA device here")
    capability = torch.cuda.get_device_capability()
    if capability < (8, 0):
        pytest.skip(f"TF32 needs compute capability 8.0 or newer, this GPU has {capability}")
    generator = torch.Generator(device="cuda").manual_seed(35)
    a = torch.randn(1024, 1024, device="cuda", generator=generator)
    b = torch.randn(1024, 1024, device="cuda", generator=generator)
    reference = torch.matmul(a.double(), b.double())
    errors: dict[bool, list[float]] = {True: [], False: []}
    precision: dict[bool, set[str]] = {True: set(), False: set()}

    async def task(tf32: bool, started: asyncio.Event, other: asyncio.Event) -> None:
        with backends.cuda.matmul.tf32(tf32):
            started.set()
            await other.wait()
            for _ in range(STEPS):
                precision[tf32].add(torch.backends.cuda.matmul.fp32_precision)
                errors[tf32].append(_relative_error(torch, a, b, reference))
                torch.cuda.synchronize()
                await asyncio.sleep(0)

    async def main() -> None:
        backends.asyncio.install()
        on, off = asyncio.Event(), asyncio.Event()
        await asyncio.gather(task(True, on, off), task(False, off, on))

    asyncio.run(main())
    outside = _relative_error(torch, a, b, reference)
    tf32_error, ieee_error = max(errors[True]), max(errors[False])
    ratio = min(errors[True]) / ieee_error
    say(
        f"torch {torch.__version__}: float32 matmul 1024x1024, max relative error TF32 {tf32_error:.2e}, "
        f"IEEE {ieee_error:.2e} (ratio of the smallest TF32 to the largest IEEE: {ratio:.0f}), outside {outside:.2e}",
        torch=torch.__version__, tf32_error=tf32_error, ieee_error=ieee_error, ratio=ratio, outside_error=outside,
    )
    assert precision == {True: {"tf32"}, False: {"ieee"}}
    assert ratio >= MIN_RATIO
    assert torch.backends.cuda.matmul.fp32_precision == "none"  # torch's own value back
