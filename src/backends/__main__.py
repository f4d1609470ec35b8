"""``python -m backends``: which copy and engine run here, the flag table, what this machine has,
and a live isolation self-check; ``--json`` gives the same as one JSON object, ``--help`` the keys.

The self-check is run for real, not simulated: threads and asyncio tasks sit inside different
scopes at the same time and check that each reads only its own flags, with a matmul under every
scope, so a user can see on their own machine that the guarantees hold. The exit status is 0 only
if every check passes. NumPy and CuPy are imported here lazily, never by ``import backends``.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import importlib.util
import json
import os
import platform
import sys
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import backends
from backends._engine import accelerator, environment
from backends._engine import mirror as mirror_module
from backends._engine.errors import brief
from backends._engine.scope import flags as flags_of  # backends.flags, for a mapping built at run time
from backends.availability import cpu
from backends.sync import cufft

#: One self-check result: (what was checked, passed, detail).
Check = tuple[str, bool, str]
Values = dict[str, object]
Matrix = list[list[float]]

THREADS = 8
TASKS = 50
_TIMEOUT = 30.0  # seconds before a waiting thread or task declares the check failed (never hit when healthy)
_LIBS = ("default", "cusolver", "magma")
_SIZE = 12  # matmul operands are _SIZE x _SIZE


# -- the flag table ----------------------------------------------------------------------------
def read_all() -> Values:
    """Every flag's effective value in this context, read through the public attributes
    (``backends.cuda.preferred_linalg_library()`` is called, as torch spells it)."""
    values: Values = {}
    for flag in backends.FLAGS:
        owner: Any = backends
        for part in flag.namespace.split("."):
            owner = getattr(owner, part)
        value = getattr(owner, flag.attribute)
        values[flag.name] = value() if callable(value) else value
    return values


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


#: Flags for a knob CuPy also sets by itself, and what is in force where the flag is not set
#: (contract section 8): the sync layer does not push the built-in default over CuPy's own.
CUPY_OWN = {cufft.FLAG: "CuPy's own plan cache size in force (not pushed)"}


def flag_rows() -> list[dict[str, Any]]:
    """The ``describe()`` rows as data: ``name``, ``value``, ``source``, the ``variable`` that
    set an environment default (else ``None``), and a ``note`` for a flag left at its built-in
    default for a knob CuPy also sets by itself (``CUPY_OWN``; else ``None``)."""
    return [
        {
            "name": row.name,
            "value": row.value,
            "source": row.source,
            "variable": environment.variable(row.name, os.environ) if row.source == "environment" else None,
            "note": CUPY_OWN.get(row.name) if row.source == "default" else None,
        }
        for row in backends.describe()
    ]


def flag_report(rows: list[dict[str, Any]] | None = None) -> list[str]:
    """The ``describe()`` table (name, value, source) as aligned text; an environment
    source names its variable, and a flag left at its built-in default for a knob CuPy also
    sets by itself says that CuPy's own setting is in force (``CUPY_OWN``)."""
    table = [("flag", "value", "source")]
    for row in flag_rows() if rows is None else rows:
        source = row["source"] + (f" ({row['variable']})" if row["variable"] else "")
        table.append((row["name"], repr(row["value"]), source + (f": {row['note']}" if row["note"] else "")))
    return _table(table)


def torch_rows() -> list[dict[str, Any]] | None:
    """torch as a sync target, once torch is imported (else ``None``): per flag, whether it
    ``reaches`` this torch, torch's ``value`` now (as torch's own getter gives it, ``repr``), and
    whose value that is (``in_force``: ``"backends"`` where a scope or a default set through
    backends pushed it, ``"torch's own"`` where torch's own value stands, ``None`` where the flag
    does not reach this torch)."""
    target = sys.modules.get("backends.sync.torch")
    mirror = getattr(target, "mirror", None)
    if mirror is None:
        return None
    current = mirror.current()
    rows = []
    for flag in backends.FLAGS:
        if flag.name not in current:
            rows.append({"name": flag.name, "reaches": False, "value": None, "in_force": None})
            continue
        wanted = mirror.wanted[mirror.names.index(flag.name)]
        in_force = "torch's own" if wanted is mirror_module.UNSET else "backends"
        rows.append({"name": flag.name, "reaches": True, "value": repr(current[flag.name]), "in_force": in_force})
    return rows


def torch_report(rows: list[dict[str, Any]] | None) -> list[str]:
    """``torch_rows()`` as aligned text."""
    if rows is None:
        return ["  torch is not imported: its settings follow the flags once it is (a sync target)"]
    version = getattr(sys.modules.get("torch"), "__version__", "?")
    table = [("flag", f"torch {version}'s value", "whose")]
    for row in rows:
        if row["reaches"]:
            table.append((row["name"], row["value"], row["in_force"]))
        else:
            table.append((row["name"], "-", "does not reach this torch (a build without CUDA or cuDNN)"))
    return _table(table)


def ignored_variables() -> list[dict[str, str | None]]:
    """Each ``BACKENDS_*`` variable that no flag reads: ``name``, ``value`` and ``did_you_mean``
    (the flag variable its name is a near miss of, else ``None``)."""
    found = environment.ignored(os.environ)
    return [{"name": name, "value": os.environ[name], "did_you_mean": near} for name, near in found]


def ignored_report(variables: list[dict[str, str | None]] | None = None) -> list[str]:
    """Each ``BACKENDS_*`` variable that no flag reads, with its value cut short, and a
    did-you-mean where its name is a near miss of a flag's variable; ``none`` if there is none."""
    lines = []
    for variable in ignored_variables() if variables is None else variables:
        name, near = str(variable["name"]), variable["did_you_mean"]
        # A name with a lone surrogate (undecodable bytes) or a control character is shown
        # escaped, as values are: print() would raise on the surrogate.
        shown = name if name.isprintable() and len(name) <= 80 else brief(name)
        lines.append(f"  {shown}={brief(variable['value'])}" + (f": did you mean {near}?" if near else ""))
    return lines or ["  none"]


def refused_variables() -> list[dict[str, Any]]:
    """Each variable whose value does not parse (``environment.REFUSED``: ``python -m backends``
    imported without it): ``name``, ``problem`` (the error or warning that ``import backends``
    gives, naming the variable, its value and what it takes) and ``import_fails`` (the import
    raises ``ValueError`` for it; else it warns and ignores it)."""
    return [{"name": name, "problem": problem, "import_fails": raises} for name, problem, raises in environment.REFUSED]


def refused_report(variables: list[dict[str, Any]]) -> list[str]:
    """A line per variable that does not parse, and what ``import backends`` does with it."""
    lines = []
    for variable in variables:
        effect = (
            "import backends raises ValueError for it (this report uses the flag's built-in default)"
            if variable["import_fails"] else "import backends warns (UserWarning) and ignores it"
        )  # fmt: skip
        lines += [f"  {variable['problem']}", f"      {effect}"]
    return lines or ["  none"]


# -- which copy of backends ---------------------------------------------------------------------
#: The folder of the ``backends`` imported here (``backends.__file__``'s).
PATH = os.path.dirname(os.path.realpath(backends.__file__))


# -- availability -------------------------------------------------------------------------------
def _safe(query: Callable[[], object]) -> object:
    """A query's answer; an exception is described, not raised (the report must finish)."""
    try:
        return query()
    except Exception as error:
        return f"raised {type(error).__name__}: {error}"


def _import(name: str) -> tuple[Any, str]:
    """``(module, "")`` if ``name`` imports, else ``(None, why)``; a broken install counts as absent."""
    try:
        if importlib.util.find_spec(name) is None:
            return None, "not installed"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name), ""
    except Exception as error:
        return None, f"installed, but import fails ({type(error).__name__}: {error})"


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10} ({code})"


def _cupy_details(cupy: Any) -> list[tuple[str, str]]:
    """Runtime, driver and device of a working CuPy; each guarded, as a driver may be missing."""
    runtime = cupy.cuda.runtime
    queries: list[tuple[str, Callable[[], str]]] = [
        ("CUDA runtime", lambda: _cuda_version(runtime.runtimeGetVersion())),
        ("CUDA driver", lambda: _cuda_version(runtime.driverGetVersion())),
        ("CUDA devices", lambda: str(runtime.getDeviceCount())),
        ("device 0", lambda: runtime.getDeviceProperties(0)["name"].decode(errors="replace")),
    ]
    details = []
    for label, query in queries:
        try:
            details.append((label, query()))
        except Exception as error:
            details.append((label, f"unavailable ({type(error).__name__}: {error})"))
    return details


def availability() -> list[tuple[str, object]]:
    """``(label, value)``: versions and descriptions as text, the ``is_available()``-style
    answers as their values (``bool``, ``int``, ``None``), for every backend. Never raises;
    a label indented by two spaces details the row above it."""
    rows: list[tuple[str, object]] = [
        ("Python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.platform})"),
        ("backends", backends.__version__),
    ]
    numpy, why = _import("numpy")
    rows.append(("NumPy", numpy.__version__ if numpy is not None else why))
    if numpy is not None:
        pools = cpu.threadpools()  # threadpoolctl's view of the native libraries NumPy loaded
        for pool in pools:
            rows.append((
                "  " + {"blas": "BLAS", "openmp": "OpenMP"}.get(str(pool.get("user_api")), str(pool.get("user_api"))),
                f"{pool.get('internal_api', '?')} {pool.get('version') or ''}, {pool.get('num_threads', '?')} threads"
                f" ({pool.get('filepath', '?')})",
            ))
        if not pools:
            rows.append(("  BLAS/OpenMP", "unknown (threadpoolctl not installed)"))
        elif not any(pool.get("user_api") == "openmp" for pool in pools):
            rows.append(("  OpenMP", "none loaded"))
    cupy, why = _import("cupy")
    rows.append(("CuPy", str(getattr(cupy, "__version__", "?")) if cupy is not None else why))
    if cupy is not None and getattr(cupy.cuda.runtime, "is_hip", False):
        # hipBLAS has no math mode and CuPy passes no cuBLAS compute type there: nothing to push.
        rows.append(("  cuda.matmul.*", "no effect: CuPy is a ROCm/HIP build (hipBLAS has no math mode)"))
    rows += [
        ("cuda.is_built()", _safe(backends.cuda.is_built)),
        ("cuda.is_available()", _safe(backends.cuda.is_available)),
    ]
    if cupy is not None and backends.cuda.is_available():
        rows += _cupy_details(cupy)
    else:
        rows.append(("CUDA runtime/driver", "n/a (no usable CUDA device)"))
    for label, query in (
        ("cudnn.is_available()", backends.cudnn.is_available),
        ("cudnn.version()", backends.cudnn.version),
        ("mkl.is_available()", backends.mkl.is_available),
        ("mkldnn.is_available()", backends.mkldnn.is_available),
        ("openmp.is_available()", backends.openmp.is_available),
        ("mps.is_built()", backends.mps.is_built),
        ("mps.is_available()", backends.mps.is_available),
    ):
        rows.append((label, _safe(query)))
    return rows


def availability_report(rows: list[tuple[str, object]] | None = None) -> list[str]:
    """``availability()`` as aligned text (answers as their ``repr``)."""
    rows = availability() if rows is None else rows
    return _table([(label, value if isinstance(value, str) else repr(value)) for label, value in rows])


# -- the self-check -------------------------------------------------------------------------------
def _py_matmul(a: Matrix, b: Matrix) -> Matrix:
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in zip(*b, strict=True)] for row in a]


class _Matmuls:
    """Real work under every scope: a matmul whose result is checked against pure Python."""

    def __init__(self, use_numpy: bool | None) -> None:
        self.runs: list[str | None] = []  # None per correct result, else what went wrong
        self.fn: Callable[[Matrix, Matrix], Matrix] = _py_matmul
        numpy = _import("numpy")[0] if use_numpy is not False else None
        if use_numpy and numpy is None:
            raise RuntimeError("self_check(use_numpy=True) but NumPy does not import")
        if numpy is not None:
            def numpy_matmul(a: Matrix, b: Matrix) -> Matrix:
                product = numpy.asarray(a, dtype=numpy.float64) @ numpy.asarray(b, dtype=numpy.float64)
                result: Matrix = product.tolist()
                return result

            self.fn = numpy_matmul
            self.label = f"NumPy {numpy.__version__} float64 matmul"
        else:
            self.label = "pure-Python matmul (" + ("NumPy not installed)" if use_numpy is None else "NumPy not used)")

    def run(self, seed: int, where: str) -> None:
        # Small integers: every product and sum is exact in float64, so results compare with ==.
        a = [[float((seed + 7 * i + 3 * j) % 11) for j in range(_SIZE)] for i in range(_SIZE)]
        b = [[float((5 * seed + i + 2 * j) % 13 - 6) for j in range(_SIZE)] for i in range(_SIZE)]
        try:
            ok = self.fn(a, b) == _py_matmul(a, b)
            self.runs.append(None if ok else f"{where}: wrong matmul result")
        except Exception as error:
            self.runs.append(f"{where}: matmul raised {type(error).__name__}: {error}")


def _expect(problems: list[str], where: str, expected: Mapping[str, object]) -> None:
    """Read every flag here and record any that differs from ``expected`` (value or type)."""
    got = read_all()
    wrong = {n: got[n] for n in expected if got[n] != expected[n] or type(got[n]) is not type(expected[n])}
    if wrong:
        problems.append(f"{where}: read {wrong}, expected {({n: expected[n] for n in wrong})}")


def _threads(baseline: Values, defaults: Values, work: _Matmuls) -> list[str]:
    """THREADS threads, all inside different scopes at once (a Barrier holds them there), plus
    one scope object entered by all of them; the main thread reads while they are inside. The
    problems are listed thread by thread, in thread order, whichever thread finished first."""
    found: list[list[str]] = [[] for _ in range(THREADS + 1)]  # each thread's, then the main thread's
    barrier = threading.Barrier(THREADS + 1, timeout=_TIMEOUT)
    shared = backends.cudnn.flags(benchmark=True)

    def worker(i: int) -> None:
        own: Values = {
            "cudnn.deterministic": i % 2 == 0,
            "cuda.matmul.allow_tf32": i % 3 == 0,
            "cuda.preferred_linalg_library": _LIBS[i % 3],
            "cudnn.benchmark_limit": 100 + i,
        }
        problems = found[i]
        try:
            start = read_all()  # a new thread starts from the process defaults (or, where threads
            if start not in (defaults, baseline):  # inherit the context, from the caller's flags)
                problems.append(f"thread {i}: started with {start}")
            expected = {**start, "cudnn.benchmark": True, **own}
            with shared, flags_of(own):
                _expect(problems, f"thread {i}, inside its scope", expected)
                work.run(i, f"thread {i}")
                barrier.wait()  # every thread is inside its scope now; the main thread reads
                barrier.wait()  # the main thread has read
                _expect(problems, f"thread {i}, inside its scope after the others entered", expected)
            _expect(problems, f"thread {i}, after its scope", start)
        except Exception as error:
            problems.append(f"thread {i}: {type(error).__name__}: {error}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,), name=f"backends-check-{i}") for i in range(THREADS)]
    for thread in threads:
        thread.start()
    problems = found[THREADS]
    try:
        barrier.wait()
        _expect(problems, f"main thread while {THREADS} threads are inside their scopes", baseline)
        barrier.wait()
    except threading.BrokenBarrierError:
        problems.append("main thread: the barrier broke (a thread failed first)")
    for thread in threads:
        thread.join()
    return [problem for problems in found for problem in problems]


def _tasks(baseline: Values, work: _Matmuls) -> list[str]:
    """TASKS asyncio tasks on one loop, each inside its own scope (``async with`` or the
    decorator form) across several awaits, all inside at once while the parent task reads."""
    problems: list[str] = []

    async def run_all() -> None:
        all_inside, release = asyncio.Event(), asyncio.Event()
        inside = 0

        async def body(i: int, expected: Values) -> None:
            nonlocal inside
            _expect(problems, f"task {i}, inside its scope", expected)
            inside += 1
            if inside == TASKS:
                all_inside.set()
            await release.wait()
            for step in range(3):
                await asyncio.sleep(0)
                if step == 1 and i % 4 == 0:  # assignment inside a scope: for this scope only
                    backends.cuda.cufft_plan_cache.max_size = 2000 + i
                    expected = {**expected, "cuda.cufft_plan_cache.max_size": 2000 + i}
                _expect(problems, f"task {i}, after await {step + 1}", expected)
                work.run(1000 + i, f"task {i}")

        async def task(i: int) -> None:
            own: Values = {
                "cudnn.deterministic": i % 2 == 0,
                "cudnn.allow_tf32": i % 3 == 0,
                "cuda.matmul.allow_fp16_reduced_precision_reduction": i % 5 == 0,
                "cuda.cufft_plan_cache.max_size": 1000 + i,
            }
            scope = flags_of(own)
            try:
                if i % 2:
                    async with scope:
                        await body(i, {**baseline, **own})
                else:
                    await scope(body)(i, {**baseline, **own})
                _expect(problems, f"task {i}, after its scope", baseline)
            except Exception as error:
                problems.append(f"task {i}: {type(error).__name__}: {error}")
                all_inside.set()
                release.set()

        tasks = [asyncio.create_task(task(i)) for i in range(TASKS)]
        try:
            await asyncio.wait_for(all_inside.wait(), _TIMEOUT)
            _expect(problems, f"parent task while {TASKS} tasks are inside their scopes", baseline)
        finally:
            release.set()
            await asyncio.gather(*tasks)

    asyncio.run(run_all())
    return problems


def _restored(baseline: Values, defaults: Values, rows: list[backends.FlagRow]) -> list[str]:
    problems: list[str] = []
    _expect(problems, "main thread", baseline)
    now = contextvars.Context().run(read_all)  # an empty context reads the process defaults
    if now != defaults:
        problems.append(f"process defaults changed: {defaults} became {now}")
    if backends.describe() != rows:
        problems.append(f"describe() changed: {rows} became {backends.describe()}")
    return problems


def _run(name: str, check: Callable[[], list[str]], detail: str) -> Check:
    try:
        problems = check()
    except Exception as error:
        problems = [f"raised {type(error).__name__}: {error}"]
    if not problems:
        return name, True, detail
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    return name, False, shown


def self_check(use_numpy: bool | None = None) -> list[Check]:
    """Run the isolation self-check for real; return ``(name, passed, detail)`` per check.

    ``use_numpy``: ``None`` does the matmuls with NumPy if it imports, else in pure Python;
    ``False`` forces pure Python; ``True`` requires NumPy. Call it outside any scope to check
    against the process defaults (inside one, the caller's flags are the reference).
    """
    baseline = read_all()
    defaults = contextvars.Context().run(read_all)
    rows = backends.describe()
    work = _Matmuls(use_numpy)

    def matmuls() -> list[str]:
        wrong = [run for run in work.runs if run is not None]
        return wrong or ([] if work.runs else ["no matmul ran"])

    return [
        _run(f"{THREADS} threads in different scopes at once each read only their own flags",
             lambda: _threads(baseline, defaults, work),
             "one shared scope object too; the main thread kept its flags meanwhile"),
        _run(f"{TASKS} asyncio tasks in different scopes, awaiting inside, each read only their own",
             lambda: _tasks(baseline, work),
             "async with and decorator forms, assignment inside scopes; the parent task kept its flags"),
        _run(f"a real matmul under every scope gives the right result: {work.label}", matmuls,
             f"{len(work.runs)} products checked against pure Python"),
        _run("afterwards every flag is back to the process defaults", lambda: _restored(baseline, defaults, rows),
             "effective values, process defaults and describe() as before"),
    ]


EPILOG = """\
exit status: 0 if every self-check passed, 1 if one failed or a variable's value makes
import backends fail, 2 for a bad option.

--json prints one JSON object with these keys:
  version              backends.__version__
  engine               {"accelerated": the compiled accelerator is in use,
                        "reason": why the pure-Python engine is in use (null when accelerated),
                        "sync_reason": why the sync layer runs in pure Python while the
                        compiled engine runs (null otherwise),
                        "description": the engine line of the text report}
  path                 the folder of the backends imported (backends.__file__'s)
  flags                one {"name", "value", "source", "variable", "note"} per flag, as
                       backends.describe(): source is "default", "environment", "process default"
                       or "scope"; variable, the one that set an environment default (else null)
  torch                null where torch is not imported; else one {"name", "reaches", "value",
                       "in_force"} per flag: whether it reaches this torch, torch's value now (its
                       getter's, as repr), "backends" or "torch's own" (null where it does not reach)
  ignored_variables    one {"name", "value", "did_you_mean"} per BACKENDS_* variable no flag reads
  refused_variables    one {"name", "problem", "import_fails"} per variable whose value does not
                       parse: problem, what import backends says; import_fails, whether it raises
                       (else it warns and ignores the variable)
  availability         one {"name", "value"} per line of the availability section: versions as
                       text, is_available()-style answers as true/false/null/numbers
  self_check           one {"name", "passed", "detail"} per check
  passed               the exit status is 0: every self-check passed, and import backends works
                       with these variables
"""


def engine_line() -> str:
    """Which engine runs, and why: ``accelerator.describe()``, and where the compiled engine runs
    but the sync layer's compiled module is not used, why not."""
    line = accelerator.describe()
    layer = sys.modules["backends.sync"]
    if accelerator.ACCELERATED and layer.compiled() is None:
        line += f"; the sync layer runs in pure Python ({layer.reason})"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report (``--json``: as one JSON object) and run the self-check; 0 if every
    check passed and ``import backends`` works with this environment, else 1 (argparse exits 2
    for a bad option)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m backends",
        description="Report which copy of backends is imported and which engine it runs (the compiled\n"
        "accelerator or pure Python, and why), every flag with its value and source, the BACKENDS_*\n"
        "variables no flag reads, what this machine has (CuPy, CUDA, cuDNN, NumPy's BLAS and OpenMP);\n"
        "then run a self-check of isolation across threads and asyncio tasks, for real.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object (keys below)")
    version = f"backends {backends.__version__} ({PATH}), Python {platform.python_version()}, engine: {engine_line()}"
    parser.add_argument(
        "--version", action="version", version=version,
        help="print the version, where it is imported from and the engine, and exit",
    )
    options = parser.parse_args(argv)

    flags, ignored, available, torch = flag_rows(), ignored_variables(), availability(), torch_rows()
    refused = refused_variables()
    import_fails = any(variable["import_fails"] for variable in refused)
    if options.json:
        checks = self_check()
        passed = all(ok for _, ok, _ in checks) and not import_fails
        print(json.dumps({
            "version": backends.__version__,
            "engine": {
                "accelerated": accelerator.ACCELERATED,
                "reason": accelerator.reason or None,
                "sync_reason": (sys.modules["backends.sync"].compiled() is None and accelerator.ACCELERATED
                                and sys.modules["backends.sync"].reason) or None,
                "description": engine_line(),
            },
            "path": PATH,
            "flags": flags,
            "torch": torch,
            "ignored_variables": ignored,
            "refused_variables": refused,
            "availability": [{"name": label.strip(), "value": value} for label, value in available],
            "self_check": [{"name": name, "passed": ok, "detail": detail} for name, ok, detail in checks],
            "passed": passed,
        }, indent=2))
        return 0 if passed else 1

    print(f"backends {backends.__version__}, engine: {engine_line()}")
    print(f"imported from {PATH}")
    print("\nFlags in this context (backends.describe())")
    print("\n".join(flag_report(flags)))
    print("\ntorch (a sync target: its own settings follow the flags of the code running)")
    print("\n".join(torch_report(torch)))
    print("\nIgnored BACKENDS_* variables (no flag reads them)")
    print("\n".join(ignored_report(ignored)))
    print("\nVariables whose value does not parse")
    print("\n".join(refused_report(refused)))
    print("\nAvailability")
    print("\n".join(availability_report(available)))
    print(f"\nSelf-check: isolation across {THREADS} threads and {TASKS} asyncio tasks, run for real")
    checks = self_check()  # after the report is out: it takes a moment
    for name, ok, detail in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}\n        {detail}")
    failed = sum(not ok for _, ok, _ in checks)
    print(f"\n{'FAILED: ' + str(failed) + ' of ' if failed else 'all '}{len(checks)} checks "
          f"{'failed' if failed else 'passed'}")
    if import_fails:
        print("but import backends fails with this environment: see the variables whose value does not parse")
    return 1 if failed or import_fails else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # The reader went away (`python -m backends | head -1`): stop quietly, as Python's
        # documentation of SIGPIPE advises, instead of a traceback about the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
