"""``backends`` beside what users would otherwise use: torch.backends, numpy.errstate, decimal, JAX.

Measures in one process, on this machine: a flag read, a scope built, entered and exited, a call
through a decorated function (where the scope has a decorator form), the cost per scope entry
with 1, 2, 8 and 32 threads entering scopes at once, and the memory per live scope with 10,000
asyncio tasks each waiting inside its own scope. Each timing is the median of several rounds,
each round being ``bench_core.median_ns`` (a median of timeit repeats); the spread is the lowest
and highest round. Rounds run interleaved across rows, so a slow patch of the machine touches
all rows alike. Ratios are to ours ("x ours": how many times our figure; ours is 1.00x).

Libraries that are not installed are skipped with a note, never faked; ``BENCH_SKIP=torch,jax``
skips installed ones too (to check the script as CI sees it).

    python benchmarks/compare.py           # full run: writes docs/benchmarks.md and docs/benchmarks.png
    python benchmarks/compare.py --quick   # few iterations, prints only (a smoke test for CI)
    python benchmarks/compare.py --quick --output DIR   # also writes DIR/benchmarks.md and .png

The exit status is 0 whether or not the targets are met; it is a report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import datetime
import decimal
import gc
import importlib
import importlib.util
import os
import platform
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_core import median_ns  # noqa: E402

import backends  # noqa: E402

DOCS = HERE.parent / "docs"
OURS = "ours"


def _load(name: str) -> tuple[Any, str]:
    """The module, or None and why it is skipped."""
    skipped = {s.strip() for s in os.environ.get("BENCH_SKIP", "").split(",") if s.strip()}
    if name in skipped:
        return None, "skipped (BENCH_SKIP)"
    if importlib.util.find_spec(name) is None:
        return None, "skipped (not installed)"
    if name == "jax":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        return importlib.import_module(name), ""
    except Exception as exc:  # a broken install is reported, not hidden
        return None, f"skipped (import failed: {type(exc).__name__})"


class Row:
    """One line of the table: a measurement with its median and spread, or a note."""

    def __init__(self, group: str, name: str, unit: str = "ns", note: str = "") -> None:
        self.group, self.name, self.unit, self.note = group, name, unit, note
        self.values: list[float] = []

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def cells(self, ours: Row | None) -> tuple[str, str, str, str]:
        if not self.values:
            return (self.name, self.note, "", "")
        lo, hi = min(self.values), max(self.values)
        ratio = ""
        if ours is not None and ours.median:
            ratio = f"{self.median / ours.median:.2f}x"  # type: ignore[operator]
        return (self.name, f"{self.median:,.0f} {self.unit}", f"{lo:,.0f} - {hi:,.0f}", ratio)


def _decorate(factory: Callable[[], Any], fn: Callable[[], Any]) -> Callable[[], Any] | None:
    """``fn`` decorated with the scope that ``factory`` builds, or None if that scope is no decorator.

    Tried, not assumed: the scope must be callable on a function and the result must run it."""
    sentinel = object()

    def probe() -> object:
        return sentinel

    try:
        cm = factory()
        if not callable(cm) or cm(probe)() is not sentinel:
            return None
        return factory()(fn)  # type: ignore[no-any-return]
    except Exception:
        return None


# decimal.localcontext(prec=5) is Python 3.11+; on 3.10 the same scope takes a Context built first.
DECIMAL_SCOPE = (
    "decimal.localcontext(prec=5)" if sys.version_info >= (3, 11) else "decimal.localcontext(decimal.Context(prec=5))"
)


def decimal_scope() -> Any:
    if sys.version_info >= (3, 11):
        return decimal.localcontext(prec=5)
    return decimal.localcontext(decimal.Context(prec=5))

def time_rows(quick: bool, torch: Any, np: Any, jax: Any, notes: dict[str, str]) -> list[Row]:
    """Reads, scopes and decorated calls: timeit medians over interleaved rounds."""
    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench", default=0)
    ns: dict[str, object] = {"backends": backends, "var": var, "decimal": decimal}

    def plain() -> None:
        return None

    ns["plain"] = plain

    @backends.cudnn.flags(deterministic=True)
    def ours_decorated() -> None:
        return None

    ns["ours_decorated"] = ours_decorated

    # (group, name, stmt or None, note when None)
    specs: list[tuple[str, str, str | None, str]] = []

    def add(group: str, name: str, stmt: str | None, note: str = "") -> None:
        specs.append((group, name, stmt, note))

    add("read", f"read backends.cudnn.deterministic ({OURS})", "backends.cudnn.deterministic")
    add("read", "read torch.backends.cudnn.deterministic",
        "torch.backends.cudnn.deterministic" if torch else None, notes["torch"])
    add("read", "read torch.backends.cuda.matmul.allow_tf32",
        "torch.backends.cuda.matmul.allow_tf32" if torch else None, notes["torch"])
    add("read", "read numpy.geterr()", "np.geterr()" if np else None, notes["numpy"])
    add("read", "read decimal.getcontext().prec", "decimal.getcontext().prec")
    add("read", "read bare ContextVar.get()", "var.get()")

    add("scope", f"scope backends.cudnn.flags(deterministic=True) ({OURS})",
        "with backends.cudnn.flags(deterministic=True):\n    pass")
    add("scope", "scope torch.backends.cudnn.flags(deterministic=True)",
        "with torch.backends.cudnn.flags(deterministic=True):\n    pass" if torch else None, notes["torch"])
    add("scope", 'scope numpy.errstate(all="ignore")',
        'with np.errstate(all="ignore"):\n    pass' if np else None, notes["numpy"])
    add("scope", "scope decimal.localcontext(prec=5)", f"with {DECIMAL_SCOPE}:\n    pass")
    add("scope", 'scope jax.default_matmul_precision("float32")',
        'with jax.default_matmul_precision("float32"):\n    pass' if jax else None, notes["jax"])
    add("scope", "scope bare ContextVar.set()+reset()", "var.reset(var.set(1))")

    add("call", f"call through @backends.cudnn.flags(deterministic=True) ({OURS})", "ours_decorated()")
    candidates: list[tuple[str, Any, Callable[[], Any], str]] = [
        ("torch", torch, lambda: torch.backends.cudnn.flags(deterministic=True),
         "call through @torch.backends.cudnn.flags(deterministic=True)"),
        ("numpy", np, lambda: np.errstate(all="ignore"), 'call through @numpy.errstate(all="ignore")'),
        ("decimal", decimal, decimal_scope, "call through @decimal.localcontext(prec=5)"),
        ("jax", jax, lambda: jax.default_matmul_precision("float32"),
         'call through @jax.default_matmul_precision("float32")'),
    ]
    for lib, module, factory, name in candidates:
        if module is None:
            add("call", name, None, notes[lib])
        elif (fn := _decorate(factory, plain)) is None:
            add("call", name, None, "no decorator form")
        else:
            key = f"{lib}_decorated"
            ns[key] = fn
            add("call", name, f"{key}()")
    add("call", "call plain function (reference)", "plain()")

    ns.update(torch=torch, np=np, jax=jax)
    rows = [Row(group, name, note=note) for group, name, _, note in specs]
    rounds = 3 if quick else 15
    for _ in range(rounds):
        for row, (_, _, stmt, _) in zip(rows, specs, strict=True):
            if stmt is not None:
                # median_ns's short setting per round; the rounds give the median and the spread
                row.values.append(median_ns(stmt, ns, quick=True))
    return rows


def _threads_once(n_threads: int, entries: int, body: Callable[[int], None]) -> float:
    """ns per entry: wall time from a common start to the last thread's end, over all entries."""
    barrier = threading.Barrier(n_threads + 1)

    def work() -> None:
        barrier.wait()
        body(entries)

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return (time.perf_counter() - start) / (n_threads * entries) * 1e9


def thread_rows(quick: bool) -> list[Row]:
    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench_threads", default=0)

    def ours(n: int) -> None:
        flags = backends.cudnn.flags
        for _ in range(n):
            with flags(deterministic=True):
                pass

    def bare(n: int) -> None:
        for _ in range(n):
            var.reset(var.set(1))

    counts = (1, 2, 8) if quick else (1, 2, 8, 32)
    entries = 500 if quick else 20_000
    rounds = 3 if quick else 7
    rows: list[Row] = []
    for label in (f"({OURS})", "bare ContextVar.set()+reset()"):
        for n in counts:
            rows.append(Row("threads", f"threads={n}: per scope entry {label}"))
    for _ in range(rounds):
        i = 0
        for _label, body in ((OURS, ours), ("bare", bare)):
            for n in counts:
                rows[i].values.append(_threads_once(n, entries, body))
                i += 1
    return rows


async def _live_tasks(n: int, body: Callable[[asyncio.Event], Any]) -> int:
    """Bytes traced while ``n`` tasks wait inside ``body``, over the bytes before they exist."""
    event = asyncio.Event()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    tasks = [asyncio.ensure_future(body(event)) for _ in range(n)]
    for _ in range(3):
        await asyncio.sleep(0)  # every task has started and is parked on the event
    gc.collect()
    during = tracemalloc.get_traced_memory()[0]
    event.set()
    await asyncio.gather(*tasks)
    del tasks
    return during - before


def memory_rows(quick: bool, np: Any, notes: dict[str, str]) -> list[Row]:
    n = 1_000 if quick else 10_000
    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench_mem", default=0)

    async def no_scope(event: asyncio.Event) -> None:
        await event.wait()

    async def ours(event: asyncio.Event) -> None:
        with backends.cudnn.flags(deterministic=True):
            await event.wait()

    async def errstate(event: asyncio.Event) -> None:
        with np.errstate(all="ignore"):
            await event.wait()

    async def localcontext(event: asyncio.Event) -> None:
        with decimal_scope():
            await event.wait()

    async def bare(event: asyncio.Event) -> None:
        token = var.set(1)
        try:
            await event.wait()
        finally:
            var.reset(token)

    bodies: list[tuple[str, Any, str]] = [
        (f"memory per live scope, backends.cudnn.flags ({OURS})", ours, ""),
        ('memory per live scope, numpy.errstate(all="ignore")', errstate if np else None, notes["numpy"]),
        ("memory per live scope, decimal.localcontext(prec=5)", localcontext, ""),
        ("memory per live scope, bare ContextVar.set()", bare, ""),
    ]
    rows = [Row("memory", name, unit="B", note=note) for name, _, note in bodies]

    async def measure() -> None:
        await _live_tasks(n, no_scope)  # warm-up, discarded: first-time allocations of the loop and tasks
        for _, body, _ in bodies:
            if body is not None:
                await _live_tasks(n, body)
        for _ in range(3 if quick else 5):
            baseline = await _live_tasks(n, no_scope)
            for row, (_, body, _) in zip(rows, bodies, strict=True):
                if body is not None:
                    row.values.append((await _live_tasks(n, body) - baseline) / n)

    tracemalloc.start()
    try:
        asyncio.run(measure())
    finally:
        tracemalloc.stop()
    for row in rows:
        row.name = row.name.replace("memory per live scope", f"memory per live scope ({n:,} tasks)")
    return rows


HEADER = ("measurement", "median", "spread (min - max)", "x ours")


def render(rows: list[Row]) -> list[str]:
    """The table as aligned text, for the terminal."""
    table = cells(rows)
    widths = [max(len(r[i]) for r in [HEADER, *table]) for i in range(4)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [HEADER, *table]]


def markdown(rows: list[Row]) -> list[str]:
    """The table as a Markdown table, for docs/benchmarks.md."""
    lines = ["| " + " | ".join(HEADER) + " |", "|---|--:|--:|--:|"]
    return lines + ["| " + " | ".join(row) + " |" for row in cells(rows)]


def cells(rows: list[Row]) -> list[tuple[str, str, str, str]]:
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    table: list[tuple[str, str, str, str]] = []
    for group_rows in groups.values():
        # within a thread group each row compares to ours at the same thread count
        for row in group_rows:
            if row.group == "threads":
                prefix = row.name.partition(":")[0]
                ours = next(r for r in group_rows if r.name.startswith(prefix + ":") and OURS in r.name)
            else:
                ours = next((r for r in group_rows if f"({OURS})" in r.name), None)
            table.append(row.cells(ours))
    return table


def targets(rows: list[Row]) -> list[tuple[str, str, bool | None]]:
    """(target, measured figure, met); met is None when a library it needs is missing."""
    med = {row.name: row.median for row in rows}

    def find(prefix: str) -> float | None:
        return next((v for k, v in med.items() if k.startswith(prefix)), None)

    ours_scope = find("scope backends.cudnn.flags")
    ours_read = find("read backends.cudnn.deterministic")
    out: list[tuple[str, str, bool | None]] = []
    for name, prefix, check, limit in (
        ("our build+enter+exit <= 0.15x torch.backends.cudnn.flags", "scope torch.", "le", 0.15),
        ("our build+enter+exit below numpy.errstate", "scope numpy.", "lt", 1.0),
        ("our build+enter+exit below decimal.localcontext", "scope decimal.", "lt", 1.0),
    ):
        theirs = find(prefix)
        if theirs is None or ours_scope is None:
            out.append((name, "not measured (library skipped)", None))
        else:
            r = ours_scope / theirs
            out.append((name, f"{r:.3f}x ({ours_scope:,.0f} ns vs {theirs:,.0f} ns)",
                        r <= limit if check == "le" else r < limit))
    theirs = find("read torch.backends.cudnn.deterministic")
    if theirs is None or ours_read is None:
        out.append(("our read <= 0.5x torch.backends.cudnn.deterministic", "not measured (library skipped)", None))
    else:
        r = ours_read / theirs
        out.append(("our read <= 0.5x torch.backends.cudnn.deterministic",
                    f"{r:.3f}x ({ours_read:,.0f} ns vs {theirs:,.0f} ns)", r <= 0.5))
    mem = next((v for k, v in med.items() if k.startswith("memory per live scope") and OURS in k), None)
    out.append(("memory per live scope < 1 KiB", f"{mem:,.0f} B" if mem is not None else "not measured",
                None if mem is None else mem < 1024))
    one, eight = find("threads=1: per scope entry (ours)"), find("threads=8: per scope entry (ours)")
    if one and eight:
        out.append(("per-entry time with 8 threads <= 1.5x 1 thread",
                    f"{eight / one:.2f}x ({eight:,.0f} ns vs {one:,.0f} ns)", eight / one <= 1.5))
    return out


def versions(modules: dict[str, Any]) -> str:
    parts = [f"backends {backends.__version__}",
             f"Python {platform.python_version()} ({platform.python_implementation()})"]
    for name, module in modules.items():
        parts.append(f"{name} {module.__version__}" if module is not None else f"{name} not measured")
    return ", ".join(parts)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    return f"{platform.system()} {platform.release()} {platform.machine()}, {cpu}, {os.cpu_count()} CPUs"


def plot(rows: list[Row], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 1, figsize=(9, 7))
    for ax, group, title in ((axes[0], "scope", "build + enter + exit of a scope"), (axes[1], "read", "a flag read")):
        chosen = [r for r in rows if r.group == group and r.values]
        names = [r.name.removeprefix(group + " ") for r in chosen]
        med = [r.median for r in chosen]
        err = [[m - min(r.values) for r, m in zip(chosen, med, strict=True)],
               [max(r.values) - m for r, m in zip(chosen, med, strict=True)]]
        colors = ["tab:orange" if OURS in r.name else "tab:blue" for r in chosen]
        ax.barh(names, med, xerr=err, color=colors, capsize=3)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor log labels overlap
        ax.set_xlabel("ns (median of rounds; bars: min - max), log scale")
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def write_docs(out: Path, table: list[str], verdicts: list[tuple[str, str, bool | None]], header: str,
               notes: list[str], png: bool, seconds: float) -> None:
    missed = [(t, m) for t, m, ok in verdicts if ok is False]
    lines = [
        "# Benchmarks beside torch.backends, numpy.errstate, decimal and JAX",
        "",
        f"Generated by `python benchmarks/compare.py` (a full run, {seconds:.0f} s); rerun it to refresh this page.",
        "Every figure comes from one process on one machine. Times are medians of rounds, each round the",
        "median of timeit repeats (timeit's loop overhead included); the spread is the lowest and highest",
        "round. \"x ours\" is the row's median over ours in the same group (for threads, at the same",
        "thread count). Thread rows: N threads released together by a `threading.Barrier`, each",
        "entering a scope a fixed number of times; the figure is the wall time from the release to the",
        "last thread's end divided by all entries, so it is the cost per entry of the whole process. Under",
        "the GIL threads take turns, so this stays flat unless something on the path contends (a lock);",
        "per-thread times would grow with N by construction. Memory rows: traced bytes (`tracemalloc`)",
        "while the tasks wait on an `asyncio.Event` inside their scope, minus the same number of tasks",
        "waiting on an Event without one, divided by the number of tasks.",
        "",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine()}",
        f"- Versions: {header}",
        *[f"- {note}" for note in notes],
        "",
        *table,
        "",
    ]
    if png:
        lines += ["![build+enter+exit and read times, log scale](benchmarks.png)", ""]
    lines += ["## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    for t, m, ok in verdicts:
        lines.append(f"| {t} | {m} | {'met' if ok else 'MISSED' if ok is False else 'not measured'} |")
    lines.append("")
    if missed:
        lines.append("Missed in this run: " + "; ".join(f"{t}: measured {m}" for t, m in missed) + ". "
                     "The benchmark was not changed to meet them; the figures above are what this machine measured.")
    else:
        lines.append("Every target with a measurement was met in this run.")
    lines.append("")
    (out / "benchmarks.md").write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few iterations, prints only (a CI smoke test)")
    parser.add_argument("--output", type=Path, default=None,
                        help="folder for benchmarks.md and benchmarks.png "
                             "(default: docs/ in a full run, none with --quick)")
    args = parser.parse_args(argv)
    quick: bool = args.quick
    out: Path | None = args.output if args.output is not None else (None if quick else DOCS)
    started = time.perf_counter()

    notes: dict[str, str] = {}
    mods: dict[str, Any] = {}
    for name in ("torch", "numpy", "jax"):
        mods[name], notes[name] = _load(name)
    torch, np, jax = mods["torch"], mods["numpy"], mods["jax"]

    rows = time_rows(quick, torch, np, jax, notes)
    rows += thread_rows(quick)
    rows += memory_rows(quick, np, notes)
    table = render(rows)
    verdicts = targets(rows)
    header = versions(mods)
    skipped = [f"{name}: {note}" for name, note in notes.items() if note]

    print(f"backends compared, {header}; {machine()}" + (" (--quick: rough figures)" if quick else ""))
    for line in skipped:
        print(f"note: {line}")
    print("\n".join(table))
    print()
    for t, m, ok in verdicts:
        print(f"target: {t}: {m}  {'met' if ok else 'MISSED' if ok is False else 'not measured'}")
    seconds = time.perf_counter() - started
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table = markdown(rows)
        png = plot(rows, out / "benchmarks.png")
        if not png:
            print("note: matplotlib not installed, no chart written")
        write_docs(out, table, verdicts, header, skipped, png, seconds)
        print(f"wrote {out / 'benchmarks.md'}" + (f" and {out / 'benchmarks.png'}" if png else ""))
    print(f"run time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
