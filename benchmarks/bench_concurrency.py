"""The task-step sync's added cost per asyncio task step, with the stand-in CuPy (no GPU needed).

One task awaits ``asyncio.sleep(0)`` N times, on one event loop, alternately without and with
``backends.asyncio.install()`` (the task factory whose tasks call ``backends.sync()`` before
each step). The added cost per step is the difference of the two medians divided by N, printed
beside the plain ``await asyncio.sleep(0)`` round trip measured in the same run
(target <= 300 ns). As a cross-check, the factory's wrapper is also timed on its own: one
``send()`` through it against one ``send()`` to the bare coroutine (timeit medians).

The task runs inside a ``tf32(True)`` scope and has launched a GEMM, so CuPy (the stand-in) is
loaded and ``sync()`` takes its "nothing changed" path: CuPy's device query and one identity
comparison. CuPy's ``get_device_id`` is C (``cudaGetDevice``); the stand-in's reads environment
variables on every call, so it is replaced by a C-speed stand-in for it (``itertools.repeat``)
as in ``bench_sync.py``, and its own cost is shown on a separate row.

    python benchmarks/bench_concurrency.py [--quick]

The exit status is 0 whether or not the target is met; it is a report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import platform
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "standin")]

from bench_core import median_ns  # noqa: E402

import backends  # noqa: E402
from backends.integrations.asyncio import synced as synced_coroutine  # noqa: E402

TARGET_NS = 300


async def _sleeps(steps: int, a: Any) -> float:
    """Seconds for ``steps`` round trips of ``await asyncio.sleep(0)`` in this task."""
    with backends.cuda.matmul.tf32(True):
        a @ a  # the handle exists and has this task's mode; sync() then finds nothing changed
        await asyncio.sleep(0)
        start = time.perf_counter()
        for _ in range(steps):
            await asyncio.sleep(0)
        return time.perf_counter() - start


async def _alternate(steps: int, pairs: int, a: Any) -> tuple[list[float], list[float]]:
    """Per-step ns of a task on the plain loop and on the install()ed loop, in ``pairs``
    back-to-back pairs of short runs (which of the two goes first alternates), so that
    drift in the machine's speed cancels out of each pair's difference."""
    plain: list[float] = []
    synced: list[float] = []

    async def run(install: bool) -> float:
        if install:
            backends.asyncio.install()
        try:
            return await asyncio.create_task(_sleeps(steps, a)) / steps * 1e9
        finally:
            backends.asyncio.uninstall()

    for install in (False, True):  # warm up both
        await run(install)
    for index in range(pairs):
        first = index % 2 == 1
        one, two = await run(first), await run(not first)
        plain.append(two if first else one)
        synced.append(one if first else two)
    return plain, synced


@types.coroutine
def _suspend_forever() -> Any:
    while True:
        yield


async def _forever() -> None:
    await _suspend_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a CI smoke test; figures are rough)")
    quick = parser.parse_args(argv).quick
    steps, pairs = (500, 10) if quick else (2_000, 300)

    import cupy

    a = cupy.ndarray((64, 64), "float32")
    cupy.matmul(a, a)  # creates this thread's handle
    ns_raw = median_ns("get()", {"get": cupy.cuda.device.get_device_id}, quick)
    fast_query = itertools.repeat(cupy.cuda.device.get_device_id()).__next__
    cupy.cuda.device.get_device_id = fast_query
    backends.sync.__globals__["_device_query"] = fast_query  # what the hook on cupy.cuda.device saw
    backends.sync()

    plain, synced = asyncio.run(_alternate(steps, pairs, a))
    plain_ns, synced_ns = statistics.median(plain), statistics.median(synced)
    added = statistics.median(s - p for p, s in zip(plain, synced, strict=True))

    # The wrapper alone: one step of a suspended coroutine, bare and through the synced driver.
    bare, wrapped = _forever(), synced_coroutine(_forever())
    bare.send(None)
    wrapped.send(None)
    with backends.cuda.matmul.tf32(True):
        backends.sync()
        bare_send = median_ns("send(None)", {"send": bare.send}, quick)
        wrapped_send = median_ns("send(None)", {"send": wrapped.send}, quick)
        sync_alone = median_ns("sync()", {"sync": backends.sync}, quick)
    bare.close()
    wrapped.close()

    print(f"backends {backends.__version__} task-step sync, CPython {platform.python_version()}, stand-in CuPy; "
          f"medians of {pairs} pairs of runs of {steps} steps" + (" (--quick: rough figures)" if quick else ""))
    print("(the stand-in's get_device_id is replaced by a C-speed one, as CuPy's is C; see the docstring)")
    rows = [
        ("await asyncio.sleep(0), plain loop", plain_ns, "1.0x", "(baseline)", ""),
        ("await asyncio.sleep(0), install()ed loop", synced_ns, f"{synced_ns / plain_ns:.2f}x plain", "", ""),
        ("task-step sync, added per step", added,
         f"{100 * added / plain_ns:+.1f}% of a sleep(0) round trip", f"<= {TARGET_NS} ns",
         "met" if added <= TARGET_NS else "MISSED"),
        ("  (difference of the two medians)", synced_ns - plain_ns, "", "", ""),
        ("coroutine.send(None), bare", bare_send, "1.0x", "(baseline)", ""),
        ("synced(coroutine).send(None)", wrapped_send, f"+{wrapped_send - bare_send:.0f} ns per step", "", ""),
        ("backends.sync(), nothing changed", sync_alone, "", "", ""),
        ("(stand-in get_device_id, not used above)", ns_raw, "", "", ""),
    ]
    for label, value, ratio, target, verdict in rows:
        print(f"{label:42s} {value:8.0f} ns  {ratio:36s} {target:10s} {verdict}".rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
