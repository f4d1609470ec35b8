"""What the GPU really does under the flags: TF32 error, math modes, plan cache size."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

import pytest

import backends

cupy: Any = pytest.importorskip("cupy")


def _relative_error(tf32: bool) -> float:
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((2048, 2048), dtype=cupy.float32)
    b = rng.standard_normal((2048, 2048), dtype=cupy.float32)
    reference = a.astype(cupy.float64) @ b.astype(cupy.float64)
    with backends.cuda.matmul.tf32(tf32):
        result = a @ b
    return float(cupy.linalg.norm(result - reference) / cupy.linalg.norm(reference))


def test_tf32_changes_float32_matmul_error_by_orders_of_magnitude() -> None:
    ieee, tf32 = _relative_error(False), _relative_error(True)
    print(f"\nrelative error of a 2048x2048 float32 matmul: IEEE {ieee:.2e}, TF32 {tf32:.2e}")
    assert ieee < 1e-5
    assert 1e-4 < tf32 < 1e-2


def test_two_interleaved_tasks_on_one_thread_each_get_their_precision() -> None:
    rng = cupy.random.default_rng(1)
    a = rng.standard_normal((2048, 2048), dtype=cupy.float32)
    b = rng.standard_normal((2048, 2048), dtype=cupy.float32)
    reference = a.astype(cupy.float64) @ b.astype(cupy.float64)
    norm = float(cupy.linalg.norm(reference))

    async def task(tf32: bool) -> list[float]:
        errors = []
        with backends.cuda.matmul.tf32(tf32):
            for _ in range(3):
                await asyncio.sleep(0)  # the other task launches in between
                errors.append(float(cupy.linalg.norm(a @ b - reference)) / norm)
        return errors

    async def main() -> list[list[float]]:
        return list(await asyncio.gather(task(False), task(True)))

    ieee, tf32 = asyncio.run(main())
    print(f"\ninterleaved tasks: IEEE {ieee}, TF32 {tf32}")
    assert max(ieee) < 1e-5
    assert min(tf32) > 1e-4


def test_each_threads_handle_has_its_flags_math_mode() -> None:
    from cupy_backends.cuda.libs import cublas

    barrier = threading.Barrier(4)
    seen: dict[int, tuple[bool, int]] = {}

    def worker(index: int) -> None:
        tf32 = index % 2 == 0
        with backends.cuda.matmul.flags(allow_tf32=tf32, allow_fp16_reduced_precision_reduction=index < 2):
            backends.sync()
            barrier.wait()
            seen[index] = (tf32, cublas.getMathMode(cupy.cuda.device.get_cublas_handle()))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, (tf32, mode) in seen.items():
        assert mode & 0xF == (3 if tf32 else 0), (index, mode)
        assert bool(mode & 16) == (index >= 2), (index, mode)


def test_plan_cache_capacity_follows_max_size_per_thread() -> None:
    sizes: dict[int, int] = {}

    def worker(max_size: int) -> None:
        with backends.flags({"cuda.cufft_plan_cache.max_size": max_size}):
            for n in range(8, 8 + 6):
                cupy.fft.fft(cupy.ones(n, dtype=cupy.complex64))
            sizes[max_size] = backends.cuda.cufft_plan_cache.size

    threads = [threading.Thread(target=worker, args=(m,)) for m in (2, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sizes == {2: 2, 4: 4}


def test_sync_overhead_on_a_small_matmul_is_reported() -> None:
    """Prints the overhead; the figure is judged by the reader (no timed assertion)."""
    from cupy_backends.cuda.libs import cublas

    a = cupy.ones((64, 64), dtype=cupy.float32)
    wrapped = {
        name: getattr(cublas, name) for name in dir(cublas) if hasattr(getattr(cublas, name), "__backends_wrapped__")
    }

    def median_us(runs: int = 2000) -> float:
        samples = []
        for _ in range(15):
            cupy.cuda.Device().synchronize()
            start = time.perf_counter()
            for _ in range(runs):
                cupy.matmul(a, a)
            cupy.cuda.Device().synchronize()
            samples.append((time.perf_counter() - start) / runs * 1e6)
        return statistics.median(samples)

    with_sync = median_us()
    try:
        for name, function in wrapped.items():
            setattr(cublas, name, function.__backends_wrapped__)
        without = median_us()
    finally:
        for name, function in wrapped.items():
            setattr(cublas, name, function)
    overhead = (with_sync - without) / without * 100
    print(
        f"\n64x64 cupy.matmul: {without:.2f} us bare, {with_sync:.2f} us with the sync layer "
        f"({overhead:+.1f}%; target <= 2%)"
    )
    assert with_sync > 0
