"""``python -m backends``: the report, and a self-check that passes here and fails when isolation breaks."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from backends import __main__ as cli
from backends._engine import scope as scope_module

ROOT = Path(__file__).resolve().parent.parent
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def run_python(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run this interpreter in the repository root with no ``BACKENDS_*``/``CUPY_TF32`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_") and k != "CUPY_TF32"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def line(output: str, label: str) -> str:
    """The value printed beside ``label`` in the availability section."""
    found = re.search(rf"^\s+{re.escape(label)}\s+(.*?)\s*$", output, re.MULTILINE)
    assert found, f"no {label!r} line in:\n{output}"
    return found.group(1)


def test_cli_prints_every_flag_and_passes_its_self_check() -> None:
    result = run_python("-m", "backends")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    out = result.stdout
    for flag in backends.FLAGS:
        source = "default" + (": CuPy's own plan cache size in force (not pushed)" if "cufft" in flag.name else "")
        row = rf"^\s+{re.escape(flag.name)}\s+{re.escape(repr(flag.default))}\s+{re.escape(source)}$"
        assert re.search(row, out, re.M), flag
    checks = re.findall(r"^\s+(PASS|FAIL)\s", out, re.MULTILINE)
    assert checks == ["PASS"] * 4
    assert "all 4 checks passed" in out
    for label in ("Python", "backends", "NumPy", "CuPy", "mkl.is_available()", "mkldnn.is_available()",
                  "openmp.is_available()", "mps.is_built()", "mps.is_available()"):
        line(out, label)


@pytest.mark.skipif(HAS_CUPY, reason="checks the report of a machine without CuPy")
def test_cli_availability_without_cuda() -> None:
    out = run_python("-m", "backends").stdout
    assert line(out, "CuPy") == "not installed"
    assert line(out, "cuda.is_built()") == "False"
    assert line(out, "cuda.is_available()") == "False"
    assert line(out, "cudnn.is_available()") == "False"
    assert line(out, "cudnn.version()") == "None"
    assert line(out, "mps.is_available()") == "False"


def test_cli_report_survives_a_broken_cupy(tmp_path: Path) -> None:
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise RuntimeError('CUDA driver version is insufficient')\n")
    result = run_python("-m", "backends", pythonpath=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "import fails (RuntimeError: CUDA driver version is insufficient)" in line(result.stdout, "CuPy")
    assert line(result.stdout, "cuda.is_built()") == "True"
    assert line(result.stdout, "cuda.is_available()") == "False"
    assert line(result.stdout, "cudnn.version()") == "None"


def test_cli_exits_non_zero_when_the_self_check_fails() -> None:
    # A scope whose entry publishes nothing: every check that reads flags inside a scope must fail.
    code = (
        "import sys, backends._engine.scope as s\n"
        "s.Scope.__enter__ = lambda self: self\n"
        "from backends.__main__ import main\n"
        "sys.exit(main())\n"
    )
    result = run_python("-c", code)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"^\s+FAIL\s+8 threads", result.stdout, re.MULTILINE)
    assert "FAILED: " in result.stdout


def test_importing_the_cli_module_does_not_import_numpy() -> None:
    result = run_python("-c", "import sys, backends.__main__; print('numpy' in sys.modules, 'cupy' in sys.modules)")
    assert result.stdout.split() == ["False", "False"], result.stderr


@pytest.mark.parametrize("use_numpy", [None, False])
def test_self_check_passes_in_process(use_numpy: bool | None) -> None:
    checks = cli.self_check(use_numpy=use_numpy)
    assert [(passed, detail) for _, passed, detail in checks if not passed] == []
    assert len(checks) == 4
    matmul = checks[2][0]
    assert ("NumPy" in matmul and "float64" in matmul) if use_numpy is None else "pure-Python" in matmul
    assert "158 products" in checks[2][2]  # one per thread, three per task


def test_self_check_detects_a_scope_that_sets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scope_module.Scope, "__enter__", lambda self: self)
    threads, tasks, matmul, restored = cli.self_check()
    assert not threads[1] and "thread 0, inside its scope: read" in threads[2]
    assert not tasks[1] and "task 0, inside its scope: read" in tasks[2]
    assert matmul[1]  # the matmuls themselves still ran and were right: only isolation is reported
    # With no scope active, the in-scope assignment of cufft_plan_cache.max_size became a process
    # default: the final check sees that leak.
    assert not restored[1] and "process defaults changed" in restored[2]


def test_self_check_detects_process_global_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch's model: a scope writes the process-wide values and restores the defaults on exit.
    def enter(self: backends.Scope) -> backends.Scope:
        backends.set_defaults(self.overrides)
        return self

    def exit_(self: backends.Scope, *exc_info: object) -> None:
        backends.reset_defaults()

    monkeypatch.setattr(scope_module.Scope, "__enter__", enter)
    monkeypatch.setattr(scope_module.Scope, "__exit__", exit_)
    threads, tasks, _, _ = cli.self_check()
    assert not threads[1]
    assert not tasks[1] and "parent task while 50 tasks are inside their scopes: read" in tasks[2]


def test_self_check_inside_a_scope_uses_the_callers_flags_as_reference() -> None:
    with backends.cudnn.flags(deterministic=True):
        checks = cli.self_check(use_numpy=False)
        assert backends.cudnn.deterministic is True
    assert all(passed for _, passed, _ in checks), checks


def test_cli_reports_cuda_versions_and_survives_a_failing_driver_query(tmp_path: Path) -> None:
    # A stand-in CuPy that sees a device: the GPU branch of the report runs without a GPU here.
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(
        "import types\n"
        "__version__ = '13.9.0'\n"
        "def _driver():\n"
        "    raise RuntimeError('cudaErrorInsufficientDriver')\n"
        "runtime = types.SimpleNamespace(runtimeGetVersion=lambda: 12040, driverGetVersion=_driver,\n"
        "                                getDeviceCount=lambda: 1,\n"
        "                                getDeviceProperties=lambda i: {'name': b'Fake GPU'})\n"
        "cuda = types.SimpleNamespace(is_available=lambda: True, runtime=runtime)\n"
    )
    result = run_python("-m", "backends", pythonpath=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert line(out, "CuPy") == "13.9.0"
    assert line(out, "cuda.is_available()") == "True"
    assert line(out, "CUDA runtime") == "12.4 (12040)"
    assert line(out, "CUDA driver") == "unavailable (RuntimeError: cudaErrorInsufficientDriver)"
    assert line(out, "device 0") == "Fake GPU"


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """`python -m backends | head -1`: the first line, then a quiet stop (no BrokenPipeError)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "backends"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()
    child.stdout.close()  # as `head -1` does
    errors = child.stderr.read()
    child.stderr.close()
    child.wait(timeout=120)
    assert first.startswith("backends ")
    assert "Traceback" not in errors and "BrokenPipeError" not in errors
