"""Micro-benchmarks of the hot paths of ``backends`` beside the primitives they are built on.

Prints, for this machine and in one run, the median cost of a flag read, a scope built, entered
and exited, a reused scope, a call through a decorated function and ``import backends``, each with
its ratio to a bare ``ContextVar`` operation (or plain call) measured in the same run, and the
speed targets with "met" or "MISSED". Ratios matter more than absolute numbers: they travel
between machines. Timings include timeit's loop overhead (shown as its own row), so they err high.

    python benchmarks/bench_core.py           # full run (about half a minute)
    python benchmarks/bench_core.py --quick   # few iterations: a smoke test for CI

The exit status is 0 whether or not the targets are met; it is a report, not a test.
"""

from __future__ import annotations

import argparse
import contextvars
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import timeit

import backends

_IMPORT_PROBE = (
    "import sys, time\n"
    "t = time.perf_counter()\n"
    "import backends\n"
    "t = time.perf_counter() - t\n"
    "print(t, 'numpy' in sys.modules, 'cupy' in sys.modules)\n"
)


def median_ns(stmt: str, namespace: dict[str, object], quick: bool) -> float:
    """Median per-loop time of ``stmt`` in ns over several timeit repeats."""
    timer = timeit.Timer(stmt, globals=namespace)
    if quick:
        number, repeat = 2_000, 3
    else:
        number, repeat = timer.autorange()[0], 9  # autorange: loops for about 0.2 s per repeat
    return statistics.median(t / number for t in timer.repeat(repeat=repeat, number=number)) * 1e9


def paired_difference(base: list[float], other: list[float]) -> float:
    """``other - base`` from back-to-back pairs of runs in which ``base`` ran first at even
    indexes and second at odd ones: the mean of the median difference over each order, so that
    an effect of going first or second (caches, the clock) cancels instead of deciding which
    side of a two-humped distribution the overall median lands on."""
    diffs = [o - b for b, o in zip(base, other, strict=True)]
    firsts, seconds = diffs[0::2], diffs[1::2]
    if not seconds:
        return statistics.median(firsts)
    return (statistics.median(firsts) + statistics.median(seconds)) / 2


def import_time(quick: bool) -> tuple[float, bool, bool]:
    """Median seconds of ``import backends`` in fresh interpreters, and whether any of those
    imports pulled in NumPy or CuPy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_")}
    runs = []
    for _ in range(3 if quick else 11):
        out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True,
                             check=True, env=env).stdout.split()
        runs.append((float(out[0]), out[1] == "True", out[2] == "True"))
    return (statistics.median(r[0] for r in runs), any(r[1] for r in runs), any(r[2] for r in runs))


def plain() -> None:
    return None


@backends.cudnn.flags(deterministic=True)
def decorated() -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a CI smoke test; figures are rough)")
    quick = parser.parse_args(argv).quick

    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench", default=0)
    namespace: dict[str, object] = {
        "backends": backends, "var": var, "plain": plain, "decorated": decorated,
        "reused": backends.cudnn.flags(deterministic=True),
    }
    numpy = None
    if importlib.util.find_spec("numpy") is not None:
        import numpy

        namespace["errstate"] = numpy.errstate

    def ns(stmt: str) -> float:
        return median_ns(stmt, namespace, quick)

    loop = ns("pass")
    get = ns("var.get()")
    set_reset = ns("var.reset(var.set(1))")
    call = ns("plain()")
    read = ns("backends.cudnn.deterministic")
    build = ns("with backends.cudnn.flags(deterministic=True):\n    pass")
    reuse = ns("with reused:\n    pass")
    through = ns("decorated()")
    errstate = ns('with errstate(all="ignore"):\n    pass') if numpy is not None else None
    seconds, pulled_numpy, pulled_cupy = import_time(quick)

    def verdict(*conditions: bool) -> str:
        return "met" if all(conditions) else "MISSED"

    rows: list[tuple[str, str, str, str, str]] = [
        ("timeit loop overhead (included below)", f"{loop:.0f} ns", "", "", ""),
        ("bare ContextVar.get()", f"{get:.0f} ns", "1.0x", "(baseline)", ""),
        ("bare ContextVar set()+reset()", f"{set_reset:.0f} ns", "1.0x", "(baseline)", ""),
        ("plain function call", f"{call:.0f} ns", "1.0x", "(baseline)", ""),
        ("read backends.cudnn.deterministic", f"{read:.0f} ns", f"{read / get:.1f}x ContextVar.get()",
         "<= 150 ns and <= 6x ContextVar.get()", verdict(read <= 150, read <= 6 * get)),
        ("with cudnn.flags(deterministic=True): pass", f"{build:.0f} ns",
         f"{build / set_reset:.1f}x set()+reset()" + (f", {build / errstate:.2f}x errstate" if errstate else ""),
         "<= 1.0 us and faster than numpy.errstate",
         verdict(build <= 1000, errstate is None or build < errstate)),
        ("with <reused scope>: pass", f"{reuse:.0f} ns", f"{reuse / set_reset:.1f}x set()+reset()",
         "<= 0.5 us", verdict(reuse <= 500)),
        ("call through @cudnn.flags(...) function", f"{through:.0f} ns", f"{through / call:.1f}x plain call",
         "(no target)", ""),
        ('with numpy.errstate(all="ignore"): pass',
         f"{errstate:.0f} ns" if errstate else "NumPy not installed",
         f"{errstate / set_reset:.1f}x set()+reset()" if errstate else "", "(reference)", ""),
        ("import backends (fresh interpreter)", f"{seconds * 1e3:.1f} ms",
         f"numpy imported: {'yes' if pulled_numpy else 'no'}, cupy imported: {'yes' if pulled_cupy else 'no'}",
         "<= 30 ms, imports neither", verdict(seconds <= 0.030, not pulled_numpy, not pulled_cupy)),
    ]
    print(f"backends {backends.__version__} micro-benchmarks, CPython {platform.python_version()} on "
          f"{platform.system()} {platform.machine()}; medians of timeit repeats"
          + (" (--quick: rough figures)" if quick else ""))
    header = ("measurement", "median", "ratio", "target", "verdict")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
