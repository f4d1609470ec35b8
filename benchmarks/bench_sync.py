"""The cost of the sync layer when nothing changed, with the stand-in and the real CuPy (no GPU needed).

Prints medians in ns and ratios to a bare ``ContextVar.get()`` measured in the same run:

* ``backends.sync()`` when this thread already pushed the current flags (target <= 150 ns);
* the cuBLAS wrapper's own work before a GEMM when nothing changed (``cublas.prepare``);
* a stand-in ``cupy.matmul`` of 64x64 arrays with and without the wrappers, measured in
  alternating pairs of short runs (unwrapped then wrapped, wrapped then unwrapped, ...), so
  that drift in the machine's speed cancels out of each pair's difference; each run's time is
  the CPU time of the measuring thread (``CLOCK``), not wall time. Unwrapping sets
  each wrapped function of ``cupy_backends.cuda.libs.cublas`` back to its
  ``__backends_wrapped__``; the wrappers are put back after each unwrapped run. The added
  time per GEMM is the mean of the median difference over each order
  (``bench_core.paired_difference``), and the ratio (target <= 1.02x) is the unwrapped median
  plus that difference, over the unwrapped median. The stand-in's GEMM only records the call,
  yet costs tens of microseconds (it reads environment variables), so the difference is small
  beside the noise: read it as a rough figure.

CuPy's ``cupy.cuda.device.get_device_id``, ``cupy.cuda.runtime.getDevice`` and
``cupy.cuda.stream.get_current_stream`` are C (``cudaGetDevice``, a ``cpdef``); the stand-in's are
Python, and its device queries read environment variables on every call, so they are replaced
by C-speed callables returning what they returned (``itertools.repeat(value).__next__``: this
thread's device, its current stream) before anything is measured (the wrappers' stream query and
the stand-in's routines call them); the stand-in's own ``get_device_id`` is shown on a separate
row.
``benchmarks/compare.py`` uses the helpers here for its sync rows.

Where the real CuPy is importable (``from cupy_backends.cuda.libs import cublas``: a
cupy-cuda12x or -cuda13x wheel with its cuBLAS wheel; no GPU needed), a child process measures
what a wrapper adds to one call of a real cuBLAS routine of CuPy's module, wrapped and
unwrapped in alternating runs: ``sdot`` (any routine but a GEMM; target <= 100 ns) and a float32
``gemmEx`` inside ``backends.cuda.matmul.tf32(True)`` (target <= 150 ns), and, reported only, a
``gemmEx`` outside any scope and in ``algorithms.flags(deterministic=True)``. CuPy's routines
raise without a driver before they touch the handle, so the wrapper made by the installed
cuBLAS target (``backends.sync.cublas.wrapper``) is measured around a no-op Python function in
their place, with a handle the target already knows (so each call takes the path of a handle
in use: nothing to push). CuPy's current-stream query needs a device: it is stubbed, two ways.
``capi``: the C function the compiled wrappers call (``cupy_backends.cuda.stream``'s
``get_current_stream_ptr``, exported in its ``__pyx_capi__``) is replaced by a C function of
the same signature, CPython's ``PyThread_get_thread_ident`` (on a GPU, CuPy's own adds a
``threading.local`` read, ``cudaGetDevice`` and a list index); ``python``: ``cupy.cuda.stream``
is a Python module whose ``get_current_stream()`` returns a stream object, as the first
measurement of this cost (issue 31) stubbed it, and the wrappers are made without the C
function. The pure engine (``BACKENDS_PURE_PYTHON=1``) always takes the Python query.

    python benchmarks/bench_sync.py [--quick] [--no-real]
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
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

#: The clock of the paired runs: the measuring thread's CPU time. On a shared machine, wall time
#: also counts the turns other processes take while a run is under way (one run in four, at a
#: load of 10 on 2 cores, comes out several times too slow); CPU time counts the run's own work.
CLOCK = time.thread_time


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
    cupy.cuda.runtime.getDevice = itertools.repeat(cupy.cuda.runtime.getDevice()).__next__  # as CuPy's: C
    current_stream = itertools.repeat(cupy.cuda.stream.get_current_stream()).__next__  # (a cpdef in CuPy)
    cupy.cuda.stream.get_current_stream = cupy.cuda.get_current_stream = current_stream
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
    timer = timeit.Timer("matmul(a, a)", globals={"matmul": standin.cupy.matmul, "a": standin.a}, timer=CLOCK)
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


# -- the real CuPy's cuBLAS module (a child process: the stand-in is imported in this one) ----------

#: (label, routine, scope, target in ns or None): what the real-module child measures
REAL_CASES = (
    ("routine (sdot), no scope", "sdot", "none", 100),
    ("GEMM (gemmEx float32), tf32(True)", "gemmEx", "tf32", 150),
    ("GEMM (gemmEx float32), no scope", "gemmEx", "none", None),
    ("GEMM (gemmEx float32), deterministic", "gemmEx", "deterministic", None),
)
#: positional arguments as CuPy passes them: sdot(handle, n, x, incx, y, incy, result) and
#: gemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
#: ldc, computeType, algo): float32 (CUDA_R_32F = 0), CUBLAS_COMPUTE_32F (68), as CuPy's matmul
POINTER = 0x7F00_0000_0000
REAL_ARGS = {
    "sdot": (64, POINTER, 1, POINTER + 256, 1, POINTER + 512),
    "gemmEx": (0, 0, 64, 64, 64, POINTER, POINTER + 4096, 0, 64, POINTER + 8192, 0, 64, POINTER + 64, POINTER + 12288,
               0, 64, 68, -1),
}  # fmt: skip
FAKE_HANDLES = {"none": 0x5EED_0000, "tf32": 0x5EED_1000, "deterministic": 0x5EED_2000}


def _noop(*args: Any) -> None:
    """In place of CuPy's routine (which raises without a driver before it uses the handle)."""
    return None


def _stub_streams(thread_stream: int) -> Any:
    """A Python module in place of ``cupy.cuda.stream``: ``get_current_stream()`` returns a stream
    whose ``ptr`` is ``thread_stream`` (as the first measurement of this cost stubbed it)."""
    import types

    class StubStream:
        __slots__ = ("ptr",)

        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

    stream = StubStream(thread_stream)
    stub = types.ModuleType("cupy.cuda.stream")
    stub.get_current_stream = lambda device_id=-1: stream  # type: ignore[attr-defined]
    return stub


class _StubExport:
    """In place of ``cupy_backends.cuda.stream`` for the wrappers' look-up of its exported C
    ``get_current_stream_ptr``: a capsule of that signature around a C function that returns this
    thread's id (CPython's ``PyThread_get_thread_ident``)."""

    def __init__(self) -> None:
        import ctypes

        address = ctypes.cast(ctypes.pythonapi.PyThread_get_thread_ident, ctypes.c_void_p)
        new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
            ("PyCapsule_New", ctypes.pythonapi)
        )
        self.__pyx_capi__ = {"get_current_stream_ptr": new(address, _SIGNATURE, None)}


_SIGNATURE = b"intptr_t (void)"  # (the capsule keeps a pointer to its name: a module constant outlives it)


def real_child(quick: bool) -> dict[str, Any]:
    """Measure the real cuBLAS module's wrappers (run in a child process); the figures as a dict."""
    import importlib.metadata
    import threading

    try:
        from cupy_backends.cuda import stream as backends_stream  # the real one: imported before the target
    except ImportError as error:
        return {"unavailable": f"cupy_backends does not import: {error}"}
    if "standin" in str(getattr(backends_stream, "__file__", "")):
        return {"unavailable": "cupy_backends is the stand-in"}
    thread_stream = threading.get_ident()
    sys.modules["cupy.cuda.stream"] = _stub_streams(thread_stream)  # (nothing of CuPy's imports it here)
    capi = dict(getattr(backends_stream, "__pyx_capi__", {}))
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError as error:
        return {"unavailable": f"cupy_backends.cuda.libs.cublas does not import: {error}"}
    target = sys.modules.get("backends.sync.cublas")
    if target is None or not hasattr(cublas.sdot, "__backends_wrapped__"):
        return {"unavailable": "the cuBLAS target did not wrap CuPy's module"}
    dists = importlib.metadata.packages_distributions().get("cupy_backends", ["cupy"])
    figures: dict[str, Any] = {
        "cupy": " ".join(f"{name} {importlib.metadata.version(name)}" for name in dists),
        "engine": "compiled" if target.prepare is not target._prepare else "pure Python",
        "exports_stream_ptr": "get_current_stream_ptr" in capi,
        "cases": {},
    }
    for scope, handle in FAKE_HANDLES.items():  # known to the target: each call finds nothing to push
        target._has_tf32[handle] = True  # (a device with TF32)
        target._mode_on[handle] = target.TF32_TENSOR_OP_MATH if scope == "tf32" else target.DEFAULT_MATH
        target._workspace[handle] = None
    scopes = {
        "none": contextlib.nullcontext(),
        "tf32": backends.cuda.matmul.tf32(True),
        "deterministic": backends.algorithms.flags(deterministic=True),
    }
    make = getattr(target, "wrapper", None)

    def wrapped_noop(name: str, stub: str) -> Any:
        if make is None:  # before the compiled wrappers (for a comparison with an older tree)
            type_at, compute_at = target._GEMMS.get(name, (None, None))
            return target._wrap(_noop, type_at, compute_at, name), None
        saved = target._stream_ptr_capi, target._stream_ptr
        # capi: the C function stubbed where both engines find CuPy's (the pure wrappers call it through
        # ctypes, as they call CuPy's); python: the wrappers ask cupy.cuda.stream, the Python stub
        target._stream_ptr_capi, target._stream_ptr = (
            target._exported_stream_ptr(_StubExport()) if stub == "capi" else (None, None)
        )
        return make(_noop, name), saved

    rounds, number = (5, 2_000) if quick else (41, 20_000)
    for stub in ("capi", "python"):
        for label, name, scope, limit in REAL_CASES:
            args = (FAKE_HANDLES[scope], *REAL_ARGS[name])
            function, saved = wrapped_noop(name, stub)
            with scopes[scope]:
                function(*args)  # the handle's first launch: its stream, its record for this scope
                plain_timer = timeit.Timer("f(*args)", globals={"f": _noop, "args": args}, timer=CLOCK)
                wrapped_timer = timeit.Timer("f(*args)", globals={"f": function, "args": args}, timer=CLOCK)
                plain: list[float] = []
                wrapped: list[float] = []
                for index in range(rounds):  # alternating: plain first at even rounds, wrapped first at odd
                    pair = (plain_timer, plain), (wrapped_timer, wrapped)
                    for timer, runs in pair if index % 2 == 0 else pair[::-1]:
                        runs.append(timer.timeit(number) / number * 1e9)
            if make is not None:
                target._stream_ptr_capi, target._stream_ptr = saved
            differences = sorted(w - p for p, w in zip(plain, wrapped, strict=True))
            quartile = max(len(differences) // 4, 0)
            figures["cases"][f"{stub}: {label}"] = {
                "plain": statistics.median(plain), "wrapped": statistics.median(wrapped),
                "added": paired_difference(plain, wrapped), "limit": limit,
                "spread": [differences[quartile], differences[-1 - quartile]],
            }  # fmt: skip
    figures["rounds"], figures["number"] = rounds, number
    return figures


def real_figures(quick: bool) -> dict[str, Any]:
    """``real_child``'s figures, from a child process of this interpreter without the stand-in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("STANDIN_CUPY_")}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != STANDIN]
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), *paths])
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--real-child", *(["--quick"] if quick else [])],
        capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        return {"unavailable": f"the child failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def print_real(figures: dict[str, Any]) -> None:
    if "unavailable" in figures:
        print(f"real CuPy cuBLAS wrappers: not measured ({figures['unavailable']})")
        return
    print(f"real CuPy cuBLAS wrappers ({figures['cupy']}, {figures['engine']} engine; CuPy exports "
          f"get_current_stream_ptr: {figures['exports_stream_ptr']}): a no-op in place of CuPy's routine, "
          f"a handle in use; {figures['rounds']} alternating pairs of runs of {figures['number']} calls "
          "(the thread's CPU time), medians; spread: quartiles of the pair differences")  # fmt: skip
    print("(the current-stream query is stubbed: capi = a C function in place of CuPy's exported "
          "get_current_stream_ptr; python = cupy.cuda.stream a Python stub; see the docstring)")
    for label, case in figures["cases"].items():
        limit, added = case["limit"], case["added"]
        target = f"<= {limit} ns" if limit is not None else "(reported)"
        verdict = ("met" if added <= limit else "MISSED") if limit is not None and label.startswith("capi") else ""
        if limit is not None and not label.startswith("capi"):
            target = "(reported)"
        low, high = case["spread"]
        print(f"{label:48s} unwrapped {case['plain']:6.0f} ns  wrapped {case['wrapped']:6.0f} ns  "
              f"{case['wrapped'] / case['plain']:5.2f}x  added {added:+5.0f} ns ({low:+.0f}..{high:+.0f})  "
              f"{target:12s} {verdict}".rstrip())  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a CI smoke test)")
    parser.add_argument("--no-real", action="store_true", help="skip the real CuPy's cuBLAS module")
    parser.add_argument("--real-child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    quick = options.quick
    if options.real_child:
        print(json.dumps(real_child(quick)))
        return 0
    real = {"unavailable": "--no-real"} if options.no_real else real_figures(quick)

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
          f"GEMMs: medians of {pairs} alternating pairs of runs (the thread's CPU time)"
          + (" (--quick: rough figures)" if quick else ""))
    print("(the stand-in's get_device_id, runtime.getDevice and get_current_stream are replaced by C-speed ones, "
          "as CuPy's are C; see the docstring)")
    ratio = (bare + added) / bare  # the paired difference over the unwrapped median: drift cancels out of it
    rows = [
        ("bare ContextVar.get()", get, "1.0x", "(baseline)", ""),
        ("(stand-in get_device_id, not used below)", standin.raw_query_ns, "", "", ""),
        ("backends.sync(), nothing changed", sync, f"{sync / get:.1f}x ContextVar.get()", "<= 150 ns",
         "met" if sync <= 150 else "MISSED"),
        ("cuBLAS wrapper check, nothing changed", prepare, f"{prepare / get:.1f}x ContextVar.get()", "<= 100 ns",
         "met" if prepare <= 100 else "MISSED"),
        ("stand-in cupy.matmul 64x64, unwrapped", bare, "1.0x", "(baseline)", ""),
        ("stand-in cupy.matmul 64x64, wrapped", wrapped, f"{ratio:.3f}x unwrapped (paired)", "<= 1.02x",
         "met" if ratio <= 1.02 else "MISSED"),
        ("  added by the wrappers (paired)", added, f"{added:+.0f} ns per GEMM", "(reported)", ""),
    ]
    for label, value, relation, target, verdict in rows:
        print(f"{label:40s} {value:8.0f} ns  {relation:28s} {target:12s} {verdict}".rstrip())
    print_real(real)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
