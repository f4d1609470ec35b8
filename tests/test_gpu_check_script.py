"""The GPU check's contract, pinned without a GPU: scripts/gpu_check.sh installs nothing from a
package index and hard-wires no CUDA major, says what went wrong and still writes its log and
JSON, its report refuses a dry run in which a test ran or skipped for another reason, and the
GPU tests record their figures as JSON lines (tests/gpu/harness.py).

The dry run itself (a Python 3.12 venv like the GPU machine's, the wheel folder installed
offline, tests/gpu collected and skipped) is CI's ``gpu-dry-run`` job (.ci/run).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "gpu_check.sh"
WHEELS = ROOT / "scripts" / "gpu_wheels.sh"
REPORT = ROOT / "scripts" / "gpu_check_report.py"

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash (the scripts are bash)")


def code_lines(path: Path) -> list[str]:
    """The script's lines that are not comments, continuation lines joined to their command."""
    joined = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
    return [line for line in joined.splitlines() if not line.lstrip().startswith("#")]


@needs_bash
@pytest.mark.parametrize("script", [CHECK, WHEELS], ids=lambda path: path.name)
def test_the_scripts_parse_and_print_their_usage(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    usage = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30, check=True)
    assert "scripts/gpu_wheels.sh" in usage.stdout
    if script == CHECK:
        assert "--dry-run" in usage.stdout
        wrong = subprocess.run(["bash", str(script), "--dryrun"], capture_output=True, text=True, timeout=30)
        assert wrong.returncode == 2
        assert "unknown argument '--dryrun'" in wrong.stderr


def test_every_pip_install_of_the_check_is_offline_from_the_wheel_folder() -> None:
    pip = re.compile(r"(-m\s+pip|(^|[;&|(]\s*)pip3?)\s+(install|download)\b")
    commands = [line for line in code_lines(CHECK) if pip.search(line)]
    assert commands, "gpu_check.sh installs nothing: where do pytest-asyncio and the frontends come from?"
    for command in commands:
        assert "--no-index" in command and '--find-links "$WHEELS"' in command, command
    # every install goes through that one function
    installs = [line for line in code_lines(CHECK) if re.search(r"\bpip_offline\b", line)]
    assert len(installs) >= 3


def test_the_wheel_folder_script_downloads_binaries_for_the_gpu_machines_python() -> None:
    (download,) = [line for line in code_lines(WHEELS) if "pip download" in line]
    for option in ("--only-binary=:all:", "--no-deps", '--python-version "$PYTHON_VERSION"', "--implementation cp"):
        assert option in download
    assert "PYTHON_VERSION=${GPU_WHEELS_PYTHON:-3.12}" in WHEELS.read_text(encoding="utf-8")


def test_the_cuda_major_comes_from_the_cupy_the_check_imports() -> None:
    code = "\n".join(code_lines(CHECK))
    assert "cupy.cuda.runtime.runtimeGetVersion() // 1000" in code
    hard_wired = re.findall(r"cuda1[0-9]x|cu1[0-9]\b|\.so\.1[0-9]|cuda_major=1[0-9]", code)
    assert hard_wired == []


def test_the_wheel_and_output_folders_are_ignored_by_git() -> None:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (an sdist's tests): .gitignore is not shipped")
    for path in (".gpu-wheels/x.whl", ".gpu-check/gpu_check.log"):
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path], timeout=30)
        assert ignored.returncode == 0, f"{path} is not ignored: it would be committed, or travel uncarried"


@needs_bash
def test_without_cupy_the_check_says_so_and_still_writes_its_log_and_json(tmp_path: Path) -> None:
    """The suite's interpreter has no CuPy (its tests use a stand-in on demand): the check stops at once."""
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip(f"this interpreter has CuPy ({sys.executable}): the check would go on")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPU_CHECK", "BACKENDS_"))},
        "GPU_CHECK_PYTHON": sys.executable,
        "OUT": str(tmp_path),
        "GPU_WHEELS": str(tmp_path / "no-wheels"),
        "TMPDIR": str(tmp_path),
    }
    run = subprocess.run(["bash", str(CHECK), "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED: CuPy does not import" in run.stdout
    log = (tmp_path / "gpu_check.log").read_text(encoding="utf-8")
    assert "FAILED: CuPy does not import" in log
    result = json.loads((tmp_path / "gpu_check.json").read_text(encoding="utf-8"))
    assert result["status"] == "failed"
    assert result["mode"] == "dry run"
    assert [stage["stage"] for stage in result["stages"]][-1] == "end"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("gpu-check.")) == []  # its temp folder


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="1.5">
<testcase classname="tests.gpu.test_gpu" name="test_a" time="0.1"><skipped type="pytest.skip" message="{a}"/></testcase>
<testcase classname="tests.gpu.test_gpu" name="test_b[x]" time="0.1">{b}</testcase>
</testsuite></testsuites>"""
DRY = "dry run (scripts/gpu_check.sh --dry-run): stopped before the first CUDA call"


def report(tmp_path: Path, junit: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    (tmp_path / "junit-main.xml").write_text(junit, encoding="utf-8")
    (tmp_path / "figures.jsonl").write_text(
        json.dumps({"run": "main", "test": "tests/gpu/test_gpu.py::test_b[x]", "text": "t", "figures": {"x": 1.5}})
        + "\n",
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, str(REPORT), "report", "--out", str(tmp_path / "gpu_check.json"), "--junit-dir",
         str(tmp_path), "--figures", str(tmp_path / "figures.jsonl"), "--run", "main=0", *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return run, json.loads((tmp_path / "gpu_check.json").read_text(encoding="utf-8"))


def test_a_dry_run_passes_only_when_every_test_was_skipped_for_the_dry_run(tmp_path: Path) -> None:
    skipped = f'<skipped type="pytest.skip" message="{DRY}"/>'
    run, result = report(tmp_path, JUNIT.format(a=DRY, b=skipped), "--dry-run")
    assert run.returncode == 0, run.stderr
    assert result["dry_run_problems"] == []
    assert result["runs"][0]["skipped"] == 2
    assert result["figures"] == [
        {"run": "main", "test": "tests/gpu/test_gpu.py::test_b[x]", "text": "t", "figures": {"x": 1.5}}
    ]
    assert "SKIPPED [main] 2 test(s): dry run" in run.stdout

    # one test ran, and the other skipped for another reason: both are reported, and it fails
    run, result = report(tmp_path, JUNIT.format(a="needs CuPy and a CUDA device", b=""), "--dry-run")
    assert run.returncode == 1
    assert result["status"] == "failed"
    problems = "\n".join(result["dry_run_problems"])
    assert "tests/gpu/test_gpu.py::test_a skipped for another reason: needs CuPy" in problems
    assert "1 test(s) ran in a dry run" in problems


def test_the_report_lists_failures_with_their_message(tmp_path: Path) -> None:
    failure = '<failure message="AssertionError: assert 2 == 1">long traceback</failure>'
    run, result = report(tmp_path, JUNIT.format(a="cuTENSOR is not on this machine", b=failure), "--status", "failed")
    assert run.returncode == 0  # a GPU run's verdict is the script's; the report only records it
    assert result["status"] == "failed"
    (failed,) = result["runs"][0]["failures"]
    assert failed == {
        "test": "tests/gpu/test_gpu.py::test_b[x]",
        "kind": "failure",
        "message": "AssertionError: assert 2 == 1",
    }
    assert "FAILED [main] tests/gpu/test_gpu.py::test_b[x] (failure): AssertionError: assert 2 == 1" in run.stdout
    assert "SKIPPED [main] 1 test(s): cuTENSOR is not on this machine" in run.stdout


def test_say_prints_and_records_plain_json_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    numpy = pytest.importorskip("numpy")
    from tests.gpu.harness import say

    path = tmp_path / "figures.jsonl"
    monkeypatch.setenv("GPU_CHECK_FIGURES", str(path))
    monkeypatch.setenv("GPU_CHECK_RUN", "pure")
    say("error 1e-7", error=numpy.float32(0.5), count=numpy.int64(3), ratio=float("nan"), dims=(2, numpy.int32(4)))
    say("second")
    assert capsys.readouterr().out == "[gpu] error 1e-7\n[gpu] second\n"
    first, second = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    assert first == {
        "run": "pure",
        "test": "tests/test_gpu_check_script.py::test_say_prints_and_records_plain_json_figures",
        "text": "error 1e-7",
        "figures": {"error": 0.5, "count": 3, "ratio": "nan", "dims": [2, 4]},
    }
    assert second["figures"] == {}
