"""The cost of the sync layer when nothing changed, with the stand-in CuPy (no GPU needed).

Prints medians in ns and ratios to a bare ``ContextVar.get()`` measured in the same run:

* ``backends.sync()`` when this thread already pushed the current flags (target <= 150 ns);
* the cuBLAS wrapper's own work before a GEMM when nothing changed (``cublas.prepare``);
* a stand-in ``cupy.matmul`` with and without the wrappers (the stand-in's GEMM costs
  almost nothing, so this is the wrappers' overhead in absolute terms).

    python benchmarks/bench_sync.py [--quick]
"""

from __future__ import annotations

import argparse
import contextvars
import itertools
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "standin")]

from bench_core import median_ns  # noqa: E402

import backends  # noqa: E402
from backends.sync import cublas as cublas_target  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a CI smoke test)")
    quick = parser.parse_args(argv).quick

    import cupy
    from cupy_backends.cuda.libs import cublas

    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench", default=0)
    a = cupy.ndarray((64, 64), "float32")
    cupy.matmul(a, a)  # creates this thread's handle; the first launch syncs
    # CuPy's get_device_id is C (cudaGetDevice); the stand-in's checks environment variables
    # on every call. Measure sync() with a C-speed stand-in for it, and show both.
    ns_raw = median_ns("get()", {"get": cupy.cuda.device.get_device_id}, quick)
    fast_query = itertools.repeat(cupy.cuda.device.get_device_id()).__next__
    cupy.cuda.device.get_device_id = fast_query
    backends.sync.__globals__["_device_query"] = fast_query  # what the hook on cupy.cuda.device saw
    backends.sync()
    handle = cupy.cuda.device.get_cublas_handle()
    namespace = {"var": var, "sync": backends.sync, "prepare": cublas_target.prepare, "handle": handle,
                 "matmul": cupy.matmul, "a": a}

    def ns(stmt: str) -> float:
        return median_ns(stmt, namespace, quick)

    get = ns("var.get()")
    sync = ns("sync()")
    prepare = ns("prepare(handle)")
    wrapped = ns("matmul(a, a)")
    originals = {n: getattr(cublas, n) for n in dir(cublas) if hasattr(getattr(cublas, n), "__backends_wrapped__")}
    for name, function in originals.items():
        setattr(cublas, name, function.__backends_wrapped__)
    bare = ns("matmul(a, a)")
    for name, function in originals.items():
        setattr(cublas, name, function)

    print(f"backends {backends.__version__} sync layer, stand-in CuPy; medians of timeit repeats")
    rows = [
        ("bare ContextVar.get()", get, "1.0x", "(baseline)", ""),
        ("(stand-in get_device_id, not used below)", ns_raw, "", "", ""),
        ("backends.sync(), nothing changed", sync, f"{sync / get:.1f}x ContextVar.get()", "<= 150 ns",
         "met" if sync <= 150 else "MISSED"),
        ("cuBLAS wrapper check, nothing changed", prepare, f"{prepare / get:.1f}x ContextVar.get()", "", ""),
        ("stand-in cupy.matmul 64x64, unwrapped", bare, "1.0x", "(baseline)", ""),
        ("stand-in cupy.matmul 64x64, wrapped", wrapped, f"+{wrapped - bare:.0f} ns per GEMM", "", ""),
    ]
    for label, value, ratio, target, verdict in rows:
        print(f"{label:40s} {value:8.0f} ns  {ratio:28s} {target:12s} {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
