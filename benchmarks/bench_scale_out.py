"""What carrying the flags adds to one remote call: backends.integrations.ray against a plain Ray
task, backends.integrations.dask.submit against a plain ``client.submit``, measured in one run.

Each call is a round trip of a function that returns its argument: ``ray.get(f.remote(i))`` on a
local Ray cluster (one CPU), ``client.submit(f, i, pure=False).result()`` on a one-worker, one-thread
``distributed.LocalCluster`` (a worker process). Calls of the plain (A) and the carrying (B) kind
alternate one by one, each timed alone, so that drift in the machine's speed reaches both alike;
the table gives the median per call of each, the added time (B - A) and the ratio B / A of those
medians, with the lowest and highest ratio of one pair (a pair: the medians of ``calls`` calls of
each); a second row per engine times the plain call as both A and B, so how far its ratio strays
from 1.000 shows what the machine's noise alone does to a ratio. What B adds: taking
``backends.snapshot()`` in the caller and sending it with the call (for a Ray task, a Ray function
exported for those flags, so nothing is sent per call; for a Ray actor's method, encoded as plain
data in a first argument; for Dask, pickled), and entering it as a scope in the worker; the first
rows time that work alone, in this process, where no engine's noise hides it.

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


class Echo:
    """An actor whose method returns its argument."""

    def echo(self, x: Any) -> Any:
        return x


def alternate(
    plain: Callable[[int], object], carrying: Callable[[int], object], calls: int, pairs: int
) -> dict[str, float]:
    """Medians (µs per call) of A and B over all their calls, the added time B - A and the ratio
    B / A of those medians, and the lowest and highest ratio of one pair (the spread). A pair is
    ``calls`` calls of each, A and B one after the other, the first of each two alternating, each
    call timed alone: a median per call is not moved by the machine's occasional stalls, which a
    batch's mean takes in."""
    for call in (plain, carrying):  # warm up: workers started, functions shipped
        for i in range(max(5, calls // 4)):
            call(i)
    a_all: list[float] = []
    b_all: list[float] = []
    ratios = []
    for _ in range(pairs):
        a_times, b_times = [], []
        for i in range(calls):
            for call, times in ((plain, a_times), (carrying, b_times))[:: 1 if i % 2 == 0 else -1]:
                start = time.perf_counter()
                call(i)
                times.append(time.perf_counter() - start)
        ratios.append(statistics.median(b_times) / statistics.median(a_times))
        a_all += a_times
        b_all += b_times
    a, b = statistics.median(a_all), statistics.median(b_all)
    return {"A": a * 1e6, "B": b * 1e6, "added": (b - a) * 1e6, "ratio": b / a, "low": min(ratios), "high": max(ratios)}


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
            plain_actor, carrying_actor = ray.remote(Echo).remote(), backends_ray.remote(Echo).remote()
            actor = alternate(
                lambda i: ray.get(plain_actor.echo.remote(i)), lambda i: ray.get(carrying_actor.echo.remote(i)),
                calls, pairs,
            )  # fmt: skip
    finally:
        ray.shutdown()
    return "\n".join((_row("Ray task: plain (A), backends_ray (B)", result),
                      _row("Ray task: plain (A), plain again (B): noise", floor),
                      _row("Ray actor call: plain (A), backends_ray (B)", actor)))  # fmt: skip


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
    print(f"per remote round trip; medians of {pairs} pairs of {calls} calls each, A and B alternating call by call"
          + (" (--quick: rough figures)" if quick else ""))  # fmt: skip
    print(*bench_in_process(200 if quick else 5_000), sep="\n")
    print(bench_ray(calls, pairs))
    print(bench_dask(calls, pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
