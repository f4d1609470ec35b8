"""The cost of the sync layer when nothing changed, with the stand-in CuPy (no GPU needed).

Prints medians in ns and ratios to a bare ``ContextVar.get()`` measured in the same run:

* ``backends.sync()`` when this thread already pushed the current flags (target <= 150 ns);
* the cuBLAS wrapper's own work before a GEMM when nothing changed (``cublas.prepare``);
* a stand-in ``cupy.matmul`` of 64x64 arrays with and without the wrappers, measured in
  alternating pairs of short runs (unwrapped then wrapped, wrapped then unwrapped, ...), so
  that drift in the machine's speed cancels out of each pair's difference. Unwrapping sets
  each wrapped function of ``cupy_backends.cuda.libs.cublas`` back to its
  ``__backends_wrapped__``; the wrappers are put back after each unwrapped run. The added
  time per GEMM is the mean of the median difference over each order
  (``bench_core.paired_difference``). The stand-in's GEMM only records the call, yet costs
  tens of microseconds (it reads environment variables), so the difference is small beside
  the noise: read it as a rough figure.

CuPy's ``cupy.cuda.device.get_device_id`` is C (``cudaGetDevice``); the stand-in's reads
environment variables on every call, so it is replaced by a C-speed callable
(``itertools.repeat(device).__next__``) before anything is measured; its own cost is shown on
a separate row. ``benchmarks/compare.py`` uses the helpers here for its sync rows.

    python benchmarks/bench_sync.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import itertools
import statistics
import sys
import timeit
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
STANDIN = HERE.parent / "tests" / "standin"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_core import median_ns, paired_difference  # noqa: E402

import backends  # noqa: E402
from backends.sync import cublas as cublas_target  # noqa: E402


class StandIn(NamedTuple):
    """The stand-in CuPy, loaded and ready: this thread's cuBLAS handle exists."""

    cupy: Any
    cublas: Any  #: cupy_backends.cuda.libs.cublas, whose functions the sync layer wraps
    a: Any  #: a 64x64 float32 array
    handle: Any  #: this thread's cuBLAS handle
    raw_query_ns: float  #: the stand-in's own get_device_id, before it was replaced


def load_standin(quick: bool = True) -> StandIn:
    """Import the stand-in CuPy (``tests/standin`` first on ``sys.path``), launch one GEMM (which
    makes this thread's handle), and replace ``cupy.cuda.device.get_device_id`` by a C-speed
    callable returning the same device, where CuPy's hook and ``backends.sync()`` see it."""
    if sys.path[:1] != [str(STANDIN)]:
        sys.path.insert(0, str(STANDIN))
    import cupy
    from cupy_backends.cuda.libs import cublas

    a = cupy.ndarray((64, 64), "float32")
    cupy.matmul(a, a)  # creates this thread's handle; the first launch syncs
    raw = median_ns("get()", {"get": cupy.cuda.device.get_device_id}, quick)
    fast_query = itertools.repeat(cupy.cuda.device.get_device_id()).__next__
    cupy.cuda.device.get_device_id = fast_query
    sync_module = sys.modules.get("backends.sync")
    if sync_module is not None and hasattr(sync_module, "_device_query"):
        sync_module._device_query = fast_query  # what the hook on cupy.cuda.device saw
    backends.sync()
    return StandIn(cupy, cublas, a, cupy.cuda.device.get_cublas_handle(), raw)


@contextlib.contextmanager
def unwrapped(cublas: Any) -> Iterator[int]:
    """Inside: every wrapped function of ``cublas`` is its original again (its
    ``__backends_wrapped__``); on the way out the wrappers are put back. Yields how many."""
    wrapped = {name: fn for name in dir(cublas) if hasattr(fn := getattr(cublas, name), "__backends_wrapped__")}
    for name, fn in wrapped.items():
        setattr(cublas, name, fn.__backends_wrapped__)
    try:
        yield len(wrapped)
    finally:
        for name, fn in wrapped.items():
            setattr(cublas, name, fn)


def gemm_pairs(standin: StandIn, pairs: int, number: int) -> tuple[list[float], list[float]]:
    """ns per stand-in ``cupy.matmul(a, a)``, unwrapped and wrapped, in ``pairs`` back-to-back
    pairs of runs (unwrapped first at even indexes, wrapped first at odd ones): the two lists,
    pair by pair, for ``bench_core.paired_difference``. Each run is the median of 3 timeit
    repeats of ``number`` calls; before each pair the stand-in's launch recorder is emptied."""
    timer = timeit.Timer("matmul(a, a)", globals={"matmul": standin.cupy.matmul, "a": standin.a})
    recorder = getattr(standin.cublas, "RECORDER", None)

    def once() -> float:
        return statistics.median(timer.repeat(repeat=3, number=number)) / number * 1e9

    def bare() -> float:
        with unwrapped(standin.cublas):
            return once()

    plain: list[float] = []
    wrapped: list[float] = []
    bare()  # warm up both
    once()
    for index in range(pairs):
        if recorder is not None:
            recorder.reset()  # the stand-in records every launch; keep the list short
        if index % 2:
            wrapped.append(once())
            plain.append(bare())
        else:
            plain.append(bare())
            wrapped.append(once())
    return plain, wrapped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a CI smoke test)")
    quick = parser.parse_args(argv).quick

    standin = load_standin(quick)
    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench", default=0)
    namespace = {"var": var, "sync": backends.sync, "prepare": cublas_target.prepare, "handle": standin.handle}

    def ns(stmt: str) -> float:
        return median_ns(stmt, namespace, quick)

    get = ns("var.get()")
    sync = ns("sync()")
    prepare = ns("prepare(handle)")
    pairs, number = (6, 20) if quick else (120, 50)
    bare_runs, wrapped_runs = gemm_pairs(standin, pairs, number)
    bare, wrapped = statistics.median(bare_runs), statistics.median(wrapped_runs)
    added = paired_difference(bare_runs, wrapped_runs)

    print(f"backends {backends.__version__} sync layer, stand-in CuPy; medians of timeit repeats; "
          f"GEMMs: medians of {pairs} alternating pairs of runs" + (" (--quick: rough figures)" if quick else ""))
    print("(the stand-in's get_device_id is replaced by a C-speed one, as CuPy's is C; see the docstring)")
    rows = [
        ("bare ContextVar.get()", get, "1.0x", "(baseline)", ""),
        ("(stand-in get_device_id, not used below)", standin.raw_query_ns, "", "", ""),
        ("backends.sync(), nothing changed", sync, f"{sync / get:.1f}x ContextVar.get()", "<= 150 ns",
         "met" if sync <= 150 else "MISSED"),
        ("cuBLAS wrapper check, nothing changed", prepare, f"{prepare / get:.1f}x ContextVar.get()", "<= 100 ns",
         "met" if prepare <= 100 else "MISSED"),
        ("stand-in cupy.matmul 64x64, unwrapped", bare, "1.0x", "(baseline)", ""),
        ("stand-in cupy.matmul 64x64, wrapped", wrapped, f"{wrapped / bare:.3f}x unwrapped", "", ""),
        ("  added by the wrappers (paired)", added, f"{added:+.0f} ns per GEMM", "(reported)", ""),
    ]
    for label, value, ratio, target, verdict in rows:
        print(f"{label:40s} {value:8.0f} ns  {ratio:28s} {target:12s} {verdict}".rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
