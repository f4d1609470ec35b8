"""``backends`` beside what users would otherwise use: torch.backends, numpy.errstate, decimal, JAX.

Measures in one process, on this machine: a flag read, a scope built, entered and exited, a
reused scope entered and exited, a call through a decorated function (where the scope has a
decorator form), the cost per scope entry with 1, 2, 8 and 32 threads entering scopes at once,
the memory per live scope with 10,000 asyncio tasks each waiting inside its own scope, the
sync layer with the stand-in CuPy of ``tests/standin`` (an asyncio task step with and without
``backends.asyncio.install()``, the cuBLAS wrapper's check, and a stand-in GEMM with and
without the wrappers), and ``import backends`` in fresh interpreters. Each timing is the median
of several rounds, each round being ``bench_core.median_ns`` (a median of timeit repeats) or a
median of alternating pairs of runs; the spread is the lowest and highest round. Rounds run
interleaved across rows, so a slow patch of the machine touches all rows alike. Ratios are to
ours ("x ours": how many times our figure; ours is 1.00x). Then every target is printed with our
figure, the reference figure, their ratio, the limit and "met", "MISSED" or "not measured".

The header says which engine path ``backends`` uses: "compiled" where
``backends._engine.ACCELERATED`` is true, else "pure Python". ``BACKENDS_PURE_PYTHON=1`` is
read by the engine itself; this script only reports it (and passes it on to the
fresh interpreters that time the import).

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
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_core import median_ns, paired_difference  # noqa: E402

import backends  # noqa: E402

DOCS = ROOT / "docs"
OURS = "ours"
PURE_VARIABLE = "BACKENDS_PURE_PYTHON"


def engine() -> str:
    """Which engine path ``backends`` uses, "compiled" or "pure Python", from
    ``backends._engine.ACCELERATED`` (the engine reads ``BACKENDS_PURE_PYTHON`` itself; here it is
    only reported)."""
    accelerated = getattr(importlib.import_module("backends._engine"), "ACCELERATED", False)
    text = "compiled" if accelerated else "pure Python"
    if (value := os.environ.get(PURE_VARIABLE)) is not None:
        text += f" ({PURE_VARIABLE}={value})"
    return text


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
    """One line of the table: a measurement with its median and spread, or a note.

    The "x ours" cell is the median over ``versus``'s, where given, else over the group's first
    row marked "(ours)" (for threads, at the same thread count); none where ``ratio`` is false."""

    def __init__(self, group: str, name: str, unit: str = "ns", note: str = "", digits: int = 0,
                 versus: Row | None = None, ratio: bool = True) -> None:
        self.group, self.name, self.unit, self.note, self.digits = group, name, unit, note, digits
        self.versus, self.ratio = versus, ratio
        self.values: list[float] = []

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def figure(self) -> str:
        """The median with its unit, or "" when not measured."""
        return f"{self.median:,.{self.digits}f} {self.unit}" if self.values else ""

    def cells(self, ours: Row | None) -> tuple[str, str, str, str]:
        if not self.values:
            return (self.name, self.note, "", "")
        lo, hi = min(self.values), max(self.values)
        base = self.versus if self.versus is not None else ours
        ratio = ""
        if self.ratio and base is not None and base.median:
            ratio = f"{self.median / base.median:.2f}x"  # type: ignore[operator]
        d = self.digits
        return (self.name, self.figure(), f"{lo:,.{d}f} - {hi:,.{d}f}", ratio)


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


DECIMAL_SCOPE = "decimal.localcontext(prec=5)"


def decimal_scope() -> Any:
    return decimal.localcontext(prec=5)


def time_rows(quick: bool, torch: Any, np: Any, jax: Any, notes: dict[str, str]) -> list[Row]:
    """Reads, scopes and decorated calls: timeit medians over interleaved rounds."""
    var: contextvars.ContextVar[int] = contextvars.ContextVar("bench", default=0)
    ns: dict[str, object] = {"backends": backends, "var": var, "decimal": decimal,
                             "reused": backends.cudnn.flags(deterministic=True)}

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
    add("scope", f"scope reused backends.cudnn.flags(deterministic=True), built once ({OURS})",
        "with reused:\n    pass")
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
    rounds = 3 if quick else 21
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
    entries = 500 if quick else 10_000
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
    # The loop still holds callbacks of the finished tasks (and so the tasks and their contexts):
    # run them now, or this body's memory is released during the next measurement and lowers it.
    for _ in range(3):
        await asyncio.sleep(0)
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


# What each fresh interpreter runs: the probe, then whether NumPy or CuPy came along.
IMPORT_PROBE = (
    "import time; t = time.perf_counter(); import backends; t = time.perf_counter() - t; "
    "import sys; print(t, 'numpy' in sys.modules, 'cupy' in sys.modules)"
)


def import_rows(quick: bool) -> tuple[list[Row], dict[str, bool], str]:
    """``import backends`` timed inside fresh interpreters (so their startup is excluded),
    alternating with the wall time of a bare ``python -c pass`` (the startup, for reference);
    whether any of those imports pulled in NumPy or CuPy; and a note if the probe failed."""
    ours = Row("import", f"import backends, fresh interpreter, startup excluded ({OURS})", unit="ms", digits=1)
    startup = Row("import", "interpreter startup, python -c pass (excluded above)", unit="ms", digits=1)
    pulled = {"numpy": False, "cupy": False}
    # The engine's own variable goes through; others (a flag's environment default) would not be
    # what a plain import pays.
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_") or k == PURE_VARIABLE}
    try:
        for _ in range(3 if quick else 21):
            out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=ROOT, env=env, capture_output=True,
                                 text=True, check=True, timeout=120).stdout.split()
            ours.values.append(float(out[0]) * 1e3)
            pulled["numpy"] |= out[1] == "True"
            pulled["cupy"] |= out[2] == "True"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], cwd=ROOT, env=env, check=True, timeout=120)
            startup.values.append((time.perf_counter() - start) * 1e3)
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        note = f"not measured (the import probe failed: {type(exc).__name__})"
        ours.values.clear()
        startup.values.clear()
        ours.note = startup.note = note
        return [ours, startup], pulled, note
    return [ours, startup], pulled, ""


def sync_rows(quick: bool) -> tuple[list[Row], str]:
    """The sync layer with the stand-in CuPy: a task step with and without
    ``backends.asyncio.install()``, ``backends.sync()`` and the cuBLAS check when nothing
    changed, and a stand-in GEMM wrapped and unwrapped. A note on the stand-in comes back too.

    Run last among the in-process rows: it imports the stand-in CuPy (``tests/standin`` first
    on ``sys.path``), and replaces its Python ``get_device_id``, ``runtime.getDevice`` and
    ``get_current_stream`` by C-speed callables, as CuPy's are C (``bench_sync.load_standin``).
    Pairs alternate which side runs first (``bench_core.paired_difference``)."""
    synced = Row("task", f"task step, await asyncio.sleep(0), after backends.asyncio.install() ({OURS})")
    plain = Row("task", "task step, await asyncio.sleep(0), no install()")
    added = Row("task", f"task step, added by install() ({OURS})", ratio=False)
    check = Row("cublas", f"backends.sync(), nothing changed ({OURS})", ratio=False)
    prepare = Row("cublas", f"cuBLAS wrapper check, nothing changed: sync.cublas.prepare(handle) ({OURS})",
                  ratio=False)
    wrapped = Row("cublas", f"stand-in cupy.matmul 64x64, wrapped ({OURS})")
    wrapped.versus = wrapped  # 1.00x: the GEMM rows compare to the wrapped GEMM, not to sync()
    bare = Row("cublas", "stand-in cupy.matmul 64x64, unwrapped", versus=wrapped)
    gemm = Row("cublas", f"stand-in cupy.matmul 64x64, added by the wrappers ({OURS})", ratio=False)
    rows = [synced, plain, added, check, prepare, wrapped, bare, gemm]
    try:
        import bench_sync

        if not bench_sync.STANDIN.is_dir():
            raise FileNotFoundError(bench_sync.STANDIN)
        import bench_concurrency

        standin = bench_sync.load_standin(quick=True)
    except Exception as exc:  # reported, not hidden
        note = f"skipped (stand-in CuPy: {type(exc).__name__})"
        for row in rows:
            row.note = note
        return rows, f"sync rows {note}"

    namespace = {"sync": backends.sync, "prepare": bench_sync.cublas_target.prepare, "handle": standin.handle}
    # per round: pairs of task runs of `steps` steps, pairs of GEMM runs of `number` calls
    steps, task_pairs, gemm_pairs, number = (300, 2, 2, 10) if quick else (2_000, 10, 10, 50)
    for _ in range(3 if quick else 15):
        check.values.append(median_ns("sync()", namespace, quick=True))
        prepare.values.append(median_ns("prepare(handle)", namespace, quick=True))
        without, with_ = asyncio.run(bench_concurrency._alternate(steps, task_pairs, standin.a))
        plain.values.append(statistics.median(without))
        synced.values.append(statistics.median(with_))
        added.values.append(paired_difference(without, with_))
        unwrapped_ns, wrapped_ns = bench_sync.gemm_pairs(standin, gemm_pairs, number)
        bare.values.append(statistics.median(unwrapped_ns))
        wrapped.values.append(statistics.median(wrapped_ns))
        gemm.values.append(paired_difference(unwrapped_ns, wrapped_ns))
    return rows, (f"sync rows: stand-in CuPy; its Python get_device_id ({standin.raw_query_ns:,.0f} ns), "
                  "runtime.getDevice and get_current_stream are replaced by C-speed callables, as CuPy's are C")


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


class Target(NamedTuple):
    """One target: our figure, the reference figure, their ratio, the limit and the verdict
    ("met", "MISSED", "not measured", or "reported" where there is no limit)."""

    name: str
    ours: str
    reference: str
    ratio: str
    limit: str
    verdict: str

    def line(self) -> str:
        return (f"target: {self.name}: ours {self.ours}; reference {self.reference}; ratio {self.ratio}; "
                f"limit {self.limit}  {self.verdict}")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def targets(rows: list[Row], pulled: dict[str, bool]) -> list[Target]:
    """Every target, from the rows of this run: first the issue's list, then those kept from before.

    Where a limit is a ratio, the ratio is ours over the reference; where it is absolute, the
    reference is the baseline measured beside ours in the same run, for scale."""

    def find(prefix: str, contains: str = "") -> Row | None:
        return next((r for r in rows if r.name.startswith(prefix) and contains in r.name), None)

    def med(row: Row | None) -> float | None:
        return None if row is None else row.median

    def shown(row: Row | None) -> str:
        return "-" if row is None else row.figure() or row.note or "not measured"

    def over(a: float, b: float, digits: int = 3) -> str:
        return f"{a / b:.{digits}f}x" if b else "-"

    def versus(name: str, ours: Row | None, theirs: Row | None, limit: float, strict: bool = False) -> Target:
        """Ours over theirs, within ``limit`` (strictly below it if ``strict``)."""
        text = f"{'<' if strict else '<='} {limit:.2f}x"
        a, b = med(ours), med(theirs)
        if a is None or b is None or not b:
            return Target(name, shown(ours), shown(theirs), "-", text, "not measured")
        r = a / b
        met = r < limit if strict else r <= limit
        return Target(name, shown(ours), shown(theirs), f"{r:.3f}x", text, _verdict(met))

    read, scope = find("read backends."), find("scope backends.")
    mem, get = find("memory per live scope", f"({OURS})"), find("read bare ContextVar.get()")
    out = [
        versus("flag read backends.cudnn.deterministic <= decimal.getcontext().prec",
               read, find("read decimal.getcontext()"), 1.0),
        versus('backends.cudnn.flags(deterministic=True) build+enter+exit < jax.default_matmul_precision("float32")',
               scope, find("scope jax."), 1.0, strict=True),
        versus("reused scope enter+exit <= 2.5x bare var.reset(var.set(1))",
               find("scope reused backends."), find("scope bare ContextVar"), 2.5),
        versus('call through @backends.cudnn.flags(deterministic=True) < @numpy.errstate(all="ignore")',
               find("call through @backends."), find("call through @numpy."), 1.0, strict=True),
        versus("memory per live scope <= numpy.errstate's", mem, find("memory per live scope", "numpy.errstate"), 1.0),
    ]

    name, limit = "asyncio task-step sync <= 100 ns added per step", "<= 100 ns added"
    added, plain, synced = find("task step, added"), find("task step, await asyncio.sleep(0), no"), \
        find("task step, await asyncio.sleep(0), after")
    a, p, s = med(added), med(plain), med(synced)
    if a is None or p is None or s is None:
        out.append(Target(name, shown(added), shown(plain), "-", limit, "not measured"))
    else:
        out.append(Target(name, f"{a:+,.0f} ns per step ({s:,.0f} ns with install())",
                          f"{p:,.0f} ns per step without install()", over(s, p), limit, _verdict(a <= 100)))

    name, limit = "cuBLAS wrapper check with nothing changed (backends.sync.cublas.prepare) <= 100 ns", "<= 100 ns"
    prepare = find("cuBLAS wrapper check")
    c, g = med(prepare), med(get)
    if c is None or g is None:
        out.append(Target(name, shown(prepare), shown(get), "-", limit, "not measured"))
    else:
        out.append(Target(name, shown(prepare), f"{g:,.0f} ns bare ContextVar.get()", over(c, g, 2), limit,
                          _verdict(c <= 100)))

    name, limit = "added per stand-in 64x64 cupy.matmul, wrapped vs unwrapped in alternating rounds", "none (shown)"
    gemm, wrapped, bare = find("stand-in cupy.matmul 64x64, added"), find("stand-in cupy.matmul 64x64, wrapped"), \
        find("stand-in cupy.matmul 64x64, unwrapped")
    d, w, u = med(gemm), med(wrapped), med(bare)
    if d is None or w is None or u is None:
        out.append(Target(name, shown(gemm), shown(bare), "-", limit, "not measured"))
    else:
        out.append(Target(name, f"{d:+,.0f} ns per GEMM ({w:,.0f} ns wrapped)", f"{u:,.0f} ns unwrapped",
                          over(w, u), limit, "reported"))

    name, limit = "import backends <= 15 ms, neither numpy nor cupy imported", "<= 15 ms, numpy and cupy not imported"
    imported, startup = find("import backends"), find("interpreter startup")
    i, t = med(imported), med(startup)
    if i is None or t is None:
        out.append(Target(name, shown(imported), shown(startup), "-", limit, "not measured"))
    else:
        yes = {k: "yes" if v else "no" for k, v in pulled.items()}
        out.append(Target(name, f"{i:,.1f} ms (numpy imported: {yes['numpy']}, cupy imported: {yes['cupy']})",
                          f"{t:,.1f} ms interpreter startup (excluded)", over(i, t, 2), limit,
                          _verdict(i <= 15 and not pulled["numpy"] and not pulled["cupy"])))

    # kept from earlier issues
    out += [
        versus("build+enter+exit <= 0.15x torch.backends.cudnn.flags", scope, find("scope torch."), 0.15),
        versus("flag read <= 0.5x torch.backends.cudnn.deterministic", read,
               find("read torch.backends.cudnn.deterministic"), 0.5),
        versus("build+enter+exit below numpy.errstate", scope, find("scope numpy."), 1.0, strict=True),
        versus("build+enter+exit below decimal.localcontext", scope, find("scope decimal."), 1.0, strict=True),
    ]
    name, limit = "memory per live scope < 1 KiB", "< 1 KiB"
    m = med(mem)
    out.append(Target(name, shown(mem), "1,024 B", "-" if m is None else over(m, 1024), limit,
                      "not measured" if m is None else _verdict(m < 1024)))
    out.append(versus("per-entry time with 8 threads <= 1.5x 1 thread", find("threads=8: per scope entry (ours)"),
                      find("threads=1: per scope entry (ours)"), 1.5))
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
    panels = (("scope", "build + enter + exit of a scope (reused: enter + exit)"), ("read", "a flag read"),
              ("call", "a call through a decorated function"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 10), height_ratios=[8, 6, 6])
    for ax, (group, title) in zip(axes, panels, strict=True):
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


def write_docs(out: Path, table: list[str], verdicts: list[Target], path: str, header: str,
               notes: list[str], png: bool, seconds: float) -> None:
    missed = [t for t in verdicts if t.verdict == "MISSED"]
    lines = [
        "# Benchmarks beside torch.backends, numpy.errstate, decimal and JAX",
        "",
        f"Generated by `python benchmarks/compare.py` (a full run, {seconds:.0f} s); rerun it to refresh this page.",
        "Every figure comes from one process on one machine (the import rows: fresh interpreters started",
        "by it). Times are medians of rounds, each round the median of timeit repeats (timeit's loop",
        "overhead included) or of alternating pairs of runs; the spread is the lowest and highest round.",
        "\"x ours\" is the row's median over ours in the same group (for threads, at the same thread",
        "count; for the unwrapped GEMM, over the wrapped one). The reused-scope row builds",
        "`s = backends.cudnn.flags(deterministic=True)` once and times `with s: pass`. Thread rows: N",
        "threads released together by a `threading.Barrier`, each entering a scope a fixed number of",
        "times; the figure is the wall time from the release to the last thread's end divided by all",
        "entries, so it is the cost per entry of the whole process. Under the GIL threads take turns, so",
        "this stays flat unless something on the path contends (a lock); per-thread times would grow",
        "with N by construction. Memory rows: traced bytes (`tracemalloc`) while the tasks wait on an",
        "`asyncio.Event` inside their scope, minus the same number of tasks waiting on an Event without",
        "one, divided by the number of tasks; each measurement starts once the loop has released the",
        "tasks of the one before (the callbacks it still held for them have run).",
        "",
        "The task-step and cuBLAS rows use the stand-in CuPy of `tests/standin` (no GPU), imported after",
        "the rows above, with its Python `cupy.cuda.device.get_device_id`, `cupy.cuda.runtime.getDevice`",
        "and `cupy.cuda.stream.get_current_stream` replaced by C-speed callables (CuPy's are C). Task",
        "step: one task inside a `tf32(True)` scope, having launched a GEMM, awaits",
        "`asyncio.sleep(0)` N times, created after `backends.asyncio.install()` or without it, in",
        "back-to-back pairs of runs that alternate which goes first; the added time per step is the",
        "mean of the median difference over each order (`bench_core.paired_difference`), per round.",
        "GEMM: a stand-in 64x64 `cupy.matmul`, wrapped and unwrapped (each wrapped function of",
        "`cupy_backends.cuda.libs.cublas` set back to its `__backends_wrapped__`, then re-wrapped) in",
        "alternating pairs the same way. The stand-in's GEMM costs tens of microseconds of its own, so",
        "the added time is a rough figure. Import: `import backends` timed inside each fresh",
        "interpreter (its startup excluded; a bare `python -c pass` is timed beside it for reference),",
        "with `sys.modules` checked for numpy and cupy afterwards.",
        "",
        "Two engines give the same behaviour: the pure-Python one (the reference, always there) and a",
        "compiled C accelerator that `pip install` builds where a C compiler works",
        "(`src/backends/_engine/_speedups.c`: flag reads, scope entry and exit, `flags(one_keyword=bool)`;",
        "`src/backends/sync/_speedups.c`: `sync()`, the asyncio task step and the cuBLAS check when nothing",
        "changed). Each hands every case but the common one to the pure code. `BACKENDS_PURE_PYTHON=1`",
        "selects the pure engine (rerun this script with it to compare), and `python -m backends` says",
        "which one is in use. CI runs the whole test suite on both.",
        "",
        f"- Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine()}",
        f"- Engine: {path} (`backends._engine.ACCELERATED`)",
        f"- Versions: {header}",
        *[f"- {note}" for note in notes],
        "",
        *table,
        "",
    ]
    if png:
        lines += ["![build+enter+exit, read and decorated-call times, log scale](benchmarks.png)", ""]
    lines += ["## Targets", "", "| target | ours | reference | ratio | limit | verdict |", "|---|---|---|--:|---|---|"]
    for t in verdicts:
        lines.append(f"| {t.name} | {t.ours} | {t.reference} | {t.ratio} | {t.limit} | {t.verdict} |")
    lines.append("")
    if missed:
        lines.append("Missed in this run: " + "; ".join(t.name for t in missed)
                     + ". The benchmark was not changed to meet them; the figures above are what this machine "
                     "measured.")
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
    path, header = engine(), versions(mods)
    print(f"backends compared, engine: {path}, {header}; {machine()}" + (" (--quick: rough figures)" if quick else ""),
          flush=True)

    rows = time_rows(quick, torch, np, jax, notes)
    rows += thread_rows(quick)
    rows += memory_rows(quick, np, notes)
    more, pulled, import_note = import_rows(quick)
    rows += more
    more, sync_note = sync_rows(quick)  # last: it imports the stand-in CuPy
    rows += more
    table = render(rows)
    verdicts = targets(rows, pulled)
    skipped = [f"{name}: {note}" for name, note in notes.items() if note]
    skipped += [note for note in (import_note and f"import rows {import_note}", sync_note) if note]

    for line in skipped:
        print(f"note: {line}")
    print("\n".join(table))
    print()
    for target in verdicts:
        print(target.line())
    seconds = time.perf_counter() - started
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table = markdown(rows)
        png = plot(rows, out / "benchmarks.png")
        if not png:
            print("note: matplotlib not installed, no chart written")
        write_docs(out, table, verdicts, path, header, skipped, png, seconds)
        print(f"wrote {out / 'benchmarks.md'}" + (f" and {out / 'benchmarks.png'}" if png else ""))
    print(f"run time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
