"""What carrying the flags adds to one remote call: backends.integrations.ray against a plain Ray
task, backends.integrations.dask.submit against a plain ``client.submit``, measured in one run.

Each call is a round trip of a function that returns its argument: ``ray.get(f.remote(i))`` on a
local Ray cluster (one CPU), ``client.submit(f, i, pure=False).result()`` on a one-worker, one-thread
``distributed.LocalCluster`` (a worker process). The plain call (A) and the carrying one (B) are
timed in back-to-back batches, alternating which goes first, so that drift in the machine's speed
cancels out of each pair; the table gives the median per call of each, the added time (B - A,
median of the pairs) and the ratio B / A, with the lowest and highest pair's ratio; a second row
per engine times the plain call as both A and B, so how far its ratio strays from 1.000 shows what
the machine's noise alone does to a ratio. What B adds:
taking ``backends.snapshot()`` in the caller, sending it with the call (encoded as plain data for
Ray, pickled by Dask), and entering it as a scope in the worker; the first rows time that work
alone, in this process, where no engine's noise hides it.

    python benchmarks/bench_scale_out.py [--quick]

Needs ``pip install 'scoped-backends[ray,dask]'``; an engine that is not installed is said so and
skipped. The exit status is 0; it is a report, not a test.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import backends


def echo(x: Any) -> Any:
    return x


def _batch(call: Callable[[int], object], calls: int) -> float:
    """Seconds per call over ``calls`` sequential round trips."""
    start = time.perf_counter()
    for i in range(calls):
        call(i)
    return (time.perf_counter() - start) / calls


def alternate(
    plain: Callable[[int], object], carrying: Callable[[int], object], calls: int, pairs: int
) -> dict[str, float]:
    """Medians (µs per call) of A and B, of their per-pair difference, the ratio B / A, and the
    lowest and highest ratio of one pair (the spread)."""
    for call in (plain, carrying):  # warm up: workers started, functions shipped
        _batch(call, max(5, calls // 4))
    a_times, b_times, added, ratios = [], [], [], []
    for pair in range(pairs):
        order = (plain, carrying) if pair % 2 == 0 else (carrying, plain)
        first, second = (_batch(call, calls) for call in order)
        a, b = (first, second) if pair % 2 == 0 else (second, first)
        a_times.append(a)
        b_times.append(b)
        added.append(b - a)
        ratios.append(b / a)
    a, b = statistics.median(a_times), statistics.median(b_times)
    return {
        "A": a * 1e6, "B": b * 1e6, "added": statistics.median(added) * 1e6, "ratio": b / a,
        "low": min(ratios), "high": max(ratios),
    }  # fmt: skip


def _row(name: str, result: dict[str, float]) -> str:
    return (f"{name:<46} A {result['A']:9.1f} us   B {result['B']:9.1f} us   "
            f"added {result['added']:+8.1f} us   ratio B/A {result['ratio']:.3f} "
            f"(pairs {result['low']:.3f} - {result['high']:.3f})")  # fmt: skip


def bench_in_process(number: int) -> list[str]:
    """The integrations' own work per call, without the engines, under a few overrides: the snapshot
    taken in the caller, encoded as Ray's integration sends it, decoded (which checks it), and
    entered and exited as a scope. Once as call after call carries the same flags (what each end
    has cached), once with flags never carried before (a new scope each call: nothing cached)."""
    import timeit

    from backends._engine.carry import decode, encode

    def carried() -> None:
        with decode(encode(backends.snapshot())):
            pass

    fresh = iter(range(1, 1 << 30))

    def carried_new() -> None:
        with backends.flags({"cudnn.benchmark_limit": next(fresh)}), decode(encode(backends.snapshot())):
            pass

    def built_alone() -> None:  # what carried_new adds for its new scope: subtracted below
        with backends.flags({"cudnn.benchmark_limit": next(fresh)}):
            pass

    rows = []
    with backends.cudnn.flags(deterministic=True), backends.cuda.matmul.tf32(True):  # a caller's few overrides
        same = min(timeit.repeat(carried, number=number, repeat=7)) / number
        new = min(timeit.repeat(carried_new, number=number, repeat=7)) / number
        scope = min(timeit.repeat(built_alone, number=number, repeat=7)) / number
    rows.append(f"{'in process: snapshot, encode, decode, enter, exit':<52} {same * 1e6:9.2f} us per call (best of 7)")
    rows.append(f"{'  the same, flags never carried before':<52} {(new - scope) * 1e6:9.2f} us per call (best of 7)")
    return rows


def bench_ray(calls: int, pairs: int) -> str:
    try:
        import ray

        from backends.integrations import ray as backends_ray
    except ImportError:
        return "Ray: not installed (pip install 'scoped-backends[ray]'), skipped"
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        plain = ray.remote(echo)
        carrying = backends_ray.remote(echo)
        with backends.cudnn.flags(deterministic=True):  # a scope in the caller, as a user would have
            result = alternate(lambda i: ray.get(plain.remote(i)), lambda i: ray.get(carrying.remote(i)), calls, pairs)
            # The same plain task as A and as B: how far from 1.000 a ratio strays with nothing added.
            floor = alternate(lambda i: ray.get(plain.remote(i)), lambda i: ray.get(plain.remote(i)), calls, pairs)
    finally:
        ray.shutdown()
    return "\n".join((_row("Ray task: plain (A), backends_ray (B)", result),
                      _row("Ray task: plain (A), plain again (B): noise", floor)))  # fmt: skip


def bench_dask(calls: int, pairs: int) -> str:
    try:
        from distributed import Client, LocalCluster

        from backends.integrations import dask as backends_dask
    except ImportError:
        return "Dask: not installed (pip install 'scoped-backends[dask]'), skipped"
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    with cluster, Client(cluster) as client, backends.cudnn.flags(deterministic=True):
        result = alternate(
            lambda i: client.submit(echo, i, pure=False).result(),
            lambda i: backends_dask.submit(client, echo, i, pure=False).result(),
            calls, pairs,
        )  # fmt: skip
        floor = alternate(*[lambda i: client.submit(echo, i, pure=False).result()] * 2, calls, pairs)
    return "\n".join((_row("Dask submit: plain (A), backends_dask (B)", result),
                      _row("Dask submit: plain (A), plain again (B): noise", floor)))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few calls (a CI smoke test; figures are rough)")
    quick = parser.parse_args(argv).quick
    calls, pairs = (20, 3) if quick else (100, 11)
    engine = "compiled accelerator" if backends._engine.ACCELERATED else "pure Python"
    print(f"backends {backends.__version__} ({engine}), Python {platform.python_version()}, {platform.machine()}")
    print(f"per remote round trip; medians of {pairs} alternating pairs of {calls} sequential calls"
          + (" (--quick: rough figures)" if quick else ""))  # fmt: skip
    print(*bench_in_process(200 if quick else 5_000), sep="\n")
    print(bench_ray(calls, pairs))
    print(bench_dask(calls, pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
