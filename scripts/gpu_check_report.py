"""The Python half of scripts/gpu_check.sh: what the interpreter in use holds, the device, and
the final report (the JSON of figures, the SKIPPED and FAILED lines, the dry run's own checks).

Standard library only: it runs under whatever ``python3`` the GPU machine has.

    python3 scripts/gpu_check_report.py probe --site DIR --json FILE --shell FILE
    python3 scripts/gpu_check_report.py device --json FILE
    python3 scripts/gpu_check_report.py report --out FILE --environment FILE [--device FILE]
        --figures FILE --junit-dir DIR --stages FILE --run NAME=RC ... --set KEY=VALUE ...
        --left-out TEXT ... [--dry-run] [--status passed|failed|incomplete]

``probe`` imports CuPy (``cupy.cuda.runtime.runtimeGetVersion()``, which needs no driver) and
lists the library folders of the interpreter's site directories and of each ``--site``
(``nvidia/*/lib``, ``cutensor/lib``: cuDNN and cuTENSOR are loaded by name, not through CuPy), the
versions of the distributions that matter, and writes them as JSON, and the CUDA major and the
library path as shell assignments. ``device`` is the first CUDA call (the script's dry run stops
before it). ``report`` gathers everything into one JSON file and prints the summary; with
``--dry-run`` it also fails unless every test of every run was collected and skipped with the dry
run's reason.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import json
import os
import shlex
import site
import sys
import sysconfig
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

#: distributions whose versions the report gives (those present), besides every nvidia-*, cuda-*,
#: cupy* and cutensor* one
DISTRIBUTIONS = ("numpy", "pytest", "pytest-asyncio", "pytest-timeout", "pytest-xdist", "setuptools", "torch", "pip")
DRY_RUN_WORDS = "dry run"


def site_folders(extra: list[str]) -> list[str]:
    """The interpreter's site directories (a venv's included), then ``extra``; existing, once each."""
    found = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    return [folder for folder in dict.fromkeys([*found, *extra]) if folder and os.path.isdir(folder)]


def library_folders(folders: list[str]) -> list[str]:
    """``nvidia/*/lib`` (the CUDA library wheels: ``cu13/lib``, ``cudnn/lib``, ...) and
    ``cutensor/lib`` under each folder."""
    found: list[str] = []
    for folder in folders:
        found += sorted(glob.glob(os.path.join(folder, "nvidia", "*", "lib")))
        found += sorted(glob.glob(os.path.join(folder, "cutensor", "lib")))
    return list(dict.fromkeys(found))


def versions() -> dict[str, str]:
    """Versions of the distributions that matter here, as importlib.metadata finds them on sys.path."""
    found: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower().replace("_", "-")
        if name in DISTRIBUTIONS or name.startswith(("nvidia-", "cuda-", "cupy", "cutensor")):
            found.setdefault(name, distribution.version)
    return dict(sorted(found.items()))


def probe(arguments: argparse.Namespace) -> int:
    try:
        import cupy
    except Exception as error:  # the script says what to do
        print(f"CuPy does not import: {error!r}", file=sys.stderr)
        return 1
    runtime = int(cupy.cuda.runtime.runtimeGetVersion())
    folders = site_folders(arguments.site)
    libraries = library_folders(folders)
    found = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "cupy": cupy.__version__,
        "cuda_runtime": runtime,
        "cuda_major": runtime // 1000,
        "site_folders": folders,
        "library_folders": libraries,
        "distributions": versions(),
    }
    for name, value in found.items():
        if name != "distributions":
            print(f"  {name}: {value}")
    print("  distributions: " + ", ".join(f"{k} {v}" for k, v in found["distributions"].items()))
    Path(arguments.json).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    Path(arguments.shell).write_text(
        f"cuda_major={runtime // 1000}\nlibrary_path={shlex.quote(':'.join(libraries))}\n", encoding="utf-8"
    )
    return 0


def device(arguments: argparse.Namespace) -> int:
    import cupy

    if not cupy.cuda.is_available():
        print("cupy.cuda.is_available() is False", file=sys.stderr)
        return 1
    current = cupy.cuda.Device()
    properties = cupy.cuda.runtime.getDeviceProperties(current.id)
    name = properties["name"]
    found = {
        "id": current.id,
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "compute_capability": str(current.compute_capability),
        "multiprocessors": int(properties.get("multiProcessorCount", 0)),
        "memory_bytes": int(properties.get("totalGlobalMem", 0)),
        "cuda_runtime": int(cupy.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": int(cupy.cuda.runtime.driverGetVersion()),
        "devices": int(cupy.cuda.runtime.getDeviceCount()),
    }
    print(", ".join(f"{key} {value}" for key, value in found.items()))
    Path(arguments.json).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    return 0


def read_json(path: str | None) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")) if path else None
    except (OSError, ValueError) as error:
        return {"unreadable": f"{path}: {error}"}


def read_figures(path: str) -> list[Any]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    figures = []
    for line in lines:
        try:
            figures.append(json.loads(line))
        except ValueError:
            figures.append({"unreadable": line[:300]})
    return figures


def read_junit(path: Path) -> dict[str, Any]:
    """One pytest run from its JUnit XML: counts, and each skip, failure and error with its text."""
    run: dict[str, Any] = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "skips": [], "failures": []}
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        run["unreadable"] = f"{path.name}: {error}"
        return run
    for suite in root.iter("testsuite"):
        run["duration_s"] = round(float(suite.get("time", 0) or 0), 2)
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        test = f"{module}::{case.get('name', '')}"
        run["tests"] += 1
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            run["passed"] += 1
        elif outcome.tag == "skipped":
            run["skipped"] += 1
            run["skips"].append({"test": test, "reason": outcome.get("message", "")})
        else:
            run["failed" if outcome.tag == "failure" else "errors"] += 1
            text = (outcome.get("message") or outcome.text or "").strip()
            run["failures"].append({"test": test, "kind": outcome.tag, "message": text[:2000]})
    return run


def dry_run_problems(runs: list[dict[str, Any]]) -> list[str]:
    """What a dry run must show: each run collected tests and skipped every one of them for the
    dry run, and nothing failed."""
    problems = []
    for run in runs:
        name = run["name"]
        if run.get("unreadable") or run["tests"] == 0:
            problems.append(f"run {name}: no test was collected ({run.get('unreadable', 'empty report')})")
        for failure in run["failures"]:
            problems.append(f"run {name}: {failure['kind']} in {failure['test']}: {failure['message'][:300]}")
        for skip in run["skips"]:
            if DRY_RUN_WORDS not in skip["reason"]:
                problems.append(f"run {name}: {skip['test']} skipped for another reason: {skip['reason']}")
        if run["passed"]:
            problems.append(f"run {name}: {run['passed']} test(s) ran in a dry run")
        if run.get("rc") not in (0, None):
            problems.append(f"run {name}: pytest exited with {run['rc']}")
    return problems


def report(arguments: argparse.Namespace) -> int:
    runs = []
    for item in arguments.run:
        name, _, rc = item.partition("=")
        run = {"name": name, "rc": int(rc) if rc.lstrip("-").isdigit() else rc}
        run.update(read_junit(Path(arguments.junit_dir) / f"junit-{name}.xml"))
        runs.append(run)
    stages = []
    if arguments.stages and os.path.exists(arguments.stages):
        for line in Path(arguments.stages).read_text(encoding="utf-8").splitlines():
            at, _, name = line.partition("\t")
            stages.append({"at_s": int(at), "stage": name})
    figures = read_figures(arguments.figures)
    problems = dry_run_problems(runs) if arguments.dry_run else []
    status = arguments.status
    if problems:
        status = "failed"
    result = {
        "script": "scripts/gpu_check.sh",
        "mode": "dry run" if arguments.dry_run else "GPU",
        "status": status,
        "duration_s": stages[-1]["at_s"] if stages else None,
        "environment": read_json(arguments.environment),
        "device": read_json(arguments.device),
        "script_settings": dict(item.partition("=")[::2] for item in arguments.set),
        "stages": stages,
        "runs": runs,
        "figures": figures,
        "left_out": arguments.left_out,
        "dry_run_problems": problems,
    }
    Path(arguments.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    print(f"figures ({len(figures)}):")
    for figure in figures:
        print(f"  [{figure.get('run', '?')}] {figure.get('test', '?')}: {figure.get('text', figure)}")
    skipped = sum(run["skipped"] for run in runs)
    print(f"\nSKIPPED, with reasons ({skipped} tests, {len(arguments.left_out)} by the script):")
    for text in arguments.left_out:
        print(f"  SKIPPED (script) {text}")
    for run in runs:  # one line per reason, then its tests
        by_reason: dict[str, list[str]] = {}
        for skip in run["skips"]:
            by_reason.setdefault(skip["reason"], []).append(skip["test"])
        for reason, tests in by_reason.items():
            print(f"  SKIPPED [{run['name']}] {len(tests)} test(s): {reason}")
            if len(tests) <= 3:
                print("".join(f"      {test}\n" for test in tests), end="")
    failures = [(run["name"], failure) for run in runs for failure in run["failures"]]
    if failures:
        print(f"\nFAILED ({len(failures)}):")
        for name, failure in failures:
            first = failure["message"].splitlines()[0] if failure["message"] else ""
            print(f"  FAILED [{name}] {failure['test']} ({failure['kind']}): {first[:300]}")
    print("\nruns: " + "; ".join(
        f"{run['name']}: pytest exit {run['rc']}, {run['passed']} passed, {run['failed']} failed, "
        f"{run['errors']} errors, {run['skipped']} skipped" for run in runs
    ))  # fmt: skip
    for problem in problems:
        print(f"dry run: {problem}", file=sys.stderr)
    print(f"JSON: {arguments.out}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    probe_parser = commands.add_parser("probe")
    probe_parser.add_argument("--site", action="append", default=[])
    probe_parser.add_argument("--json", required=True)
    probe_parser.add_argument("--shell", required=True)
    device_parser = commands.add_parser("device")
    device_parser.add_argument("--json", required=True)
    report_parser = commands.add_parser("report")
    report_parser.add_argument("--out", required=True)
    report_parser.add_argument("--environment")
    report_parser.add_argument("--device")
    report_parser.add_argument("--figures", default="")
    report_parser.add_argument("--junit-dir", default=".")
    report_parser.add_argument("--stages")
    report_parser.add_argument("--run", action="append", default=[])
    report_parser.add_argument("--set", action="append", default=[])
    report_parser.add_argument("--left-out", action="append", default=[])
    report_parser.add_argument("--dry-run", action="store_true")
    report_parser.add_argument("--status", default="passed")
    arguments = parser.parse_args()
    return {"probe": probe, "device": device, "report": report}[arguments.command](arguments)


if __name__ == "__main__":
    sys.exit(main())
