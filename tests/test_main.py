"""``python -m backends``: the report, and a self-check that passes here and fails when isolation breaks."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

import backends
from backends import __main__ as cli
from backends._engine import accelerator, environment
from backends._engine import scope as scope_module
from tests._helpers import PACKAGE

ROOT = Path(__file__).resolve().parent.parent
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def run_python(
    *args: str, pythonpath: Path | None = None, cwd: Path = ROOT, **variables: str
) -> subprocess.CompletedProcess[str]:
    """Run this interpreter in ``cwd`` (the repository root) on this suite's engine
    (``BACKENDS_PURE_PYTHON`` is kept) with no other ``BACKENDS_*`` variable and no ``CUPY_TF32``
    but ``variables``."""
    env = {
        k: v for k, v in os.environ.items()
        if k == accelerator.VARIABLE or not (k.startswith("BACKENDS_") or k == "CUPY_TF32")
    }  # fmt: skip
    env.update(variables)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def report(*args: str, cwd: Path = ROOT) -> dict[str, object]:
    """``python -m backends --json``'s object; the command must pass and print nothing else."""
    result = run_python(*args, "-m", "backends", "--json", cwd=cwd)
    assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
    parsed: dict[str, object] = json.loads(result.stdout)
    return parsed


def line(output: str, label: str) -> str:
    """The value printed beside ``label`` in the availability section."""
    found = re.search(rf"^\s+{re.escape(label)}\s+(.*?)\s*$", output, re.MULTILINE)
    assert found, f"no {label!r} line in:\n{output}"
    return found.group(1)


@pytest.fixture(scope="module")
def plain() -> subprocess.CompletedProcess[str]:
    """``python -m backends`` here, with no variable of ours: one run for the tests that read it."""
    return run_python("-m", "backends")


@pytest.fixture(scope="module")
def plain_json() -> dict[str, object]:
    """``python -m backends --json`` here, with no variable of ours."""
    return report()


def test_cli_prints_every_flag_and_passes_its_self_check(plain: subprocess.CompletedProcess[str]) -> None:
    result = plain
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
def test_cli_availability_without_cuda(plain: subprocess.CompletedProcess[str]) -> None:
    out = plain.stdout
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


def run_with_scopes_that_set_nothing(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with ``args`` where a scope's entry publishes nothing: every check that reads flags
    inside a scope must fail."""
    code = (
        "import sys, backends._engine.scope as s\n"
        "s.Scope.__enter__ = lambda self: self\n"
        "from backends.__main__ import main\n"
        f"sys.exit(main({list(args)!r}))\n"
    )
    return run_python("-c", code)


def test_cli_exits_non_zero_when_the_self_check_fails() -> None:
    result = run_with_scopes_that_set_nothing()
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


def test_help_describes_the_report_its_options_and_every_json_key(plain_json: dict[str, object]) -> None:
    result = run_python("-m", "backends", "--help")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    out = result.stdout
    assert out.startswith("usage: python -m backends [-h] [--json] [--version]\n")
    assert "--json" in out and "self-check of isolation" in out and "exit status: 0 if every self-check passed" in out
    documented = set(re.findall(r"^  (\w+) {2,}", out.split("--json prints one JSON object")[1], re.MULTILINE))
    assert documented == set(plain_json), "the --help epilog and the JSON object disagree on the keys"


def test_version_prints_the_version_the_copy_python_and_the_engine_and_exits_0() -> None:
    result = run_python("-m", "backends", "--version")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == (
        f"backends {backends.__version__} ({PACKAGE}), Python {platform.python_version()}, "
        f"engine: {accelerator.describe()}\n"
    )


@pytest.mark.parametrize("args", [["--bogus"], ["--json", "extra"], ["-x"]])
def test_an_unknown_option_prints_the_usage_and_exits_2(args: list[str]) -> None:
    result = run_python("-m", "backends", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: python -m backends [-h] [--json] [--version]\n")
    assert "python -m backends: error: unrecognized arguments: " in result.stderr
    assert "Traceback" not in result.stderr


def test_json_report_has_the_copy_the_engine_every_flag_and_the_checks(plain_json: dict[str, object]) -> None:
    data = plain_json
    assert data["version"] == backends.__version__
    assert data["engine"] == {
        "accelerated": accelerator.ACCELERATED,
        "reason": accelerator.reason or None,
        "sync_reason": None,
        "description": accelerator.describe(),
    }
    assert data["path"] == str(PACKAGE)
    assert data["flags"] == [
        {"name": flag.name, "value": flag.default, "source": "default", "variable": None,
         "note": cli.CUPY_OWN.get(flag.name)}
        for flag in backends.FLAGS
    ]  # fmt: skip
    assert data["ignored_variables"] == []
    available = {row["name"]: row["value"] for row in data["availability"]}  # type: ignore[attr-defined]
    assert available["backends"] == backends.__version__
    assert available["cuda.is_built()"] is HAS_CUPY
    assert available["mps.is_available()"] is False
    checks = data["self_check"]
    assert [check["passed"] for check in checks] == [True] * 4, checks  # type: ignore[attr-defined]
    assert data["passed"] is True


def test_json_report_names_the_variable_of_an_environment_default_and_an_ignored_one() -> None:
    env = {**os.environ, "BACKENDS_CUDNN_BENCHMARK": "on", "BACKENDS_CUDNN_DETERMINSTIC": "1"}
    result = subprocess.run([sys.executable, "-m", "backends", "--json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    rows = {row["name"]: row for row in data["flags"]}
    assert rows["cudnn.benchmark"] == {"name": "cudnn.benchmark", "value": True, "source": "environment",
                                       "variable": "BACKENDS_CUDNN_BENCHMARK", "note": None}  # fmt: skip
    assert data["ignored_variables"] == [
        {"name": "BACKENDS_CUDNN_DETERMINSTIC", "value": "1", "did_you_mean": "BACKENDS_CUDNN_DETERMINISTIC"}
    ]


def test_json_report_of_a_failing_self_check_exits_1() -> None:
    result = run_with_scopes_that_set_nothing("--json")
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["passed"] is False
    assert [check["passed"] for check in data["self_check"]] == [False, False, True, False]


def test_the_report_says_which_copy_it_imported(plain: subprocess.CompletedProcess[str]) -> None:
    out = plain.stdout
    assert out.splitlines()[1] == f"imported from {PACKAGE}"


def test_run_in_the_checkout_it_reports_the_installed_copy_and_its_engine() -> None:
    # `pip install .`, then `python -m backends` in the checkout: `python -m` puts the current
    # folder first on sys.path, and the src layout keeps the package out of it, so the report is
    # of the copy pip installed (here: the one this suite imports), compiled where that one is.
    assert not (ROOT / "backends").exists()
    data = report(cwd=ROOT)
    assert data["path"] == str(PACKAGE)
    assert data["engine"]["accelerated"] is accelerator.ACCELERATED  # type: ignore[index]
    assert "shadowed_copy" not in data


BAD_FLAG_VARIABLES = {"BACKENDS_CUDNN_BENCHMARK": "maybe", "BACKENDS_CUDNN_BENCHMARK_LIMIT": "-3"}
#: What ``import backends`` says of each (contract section 7), the report's line for it.
BAD_FLAG_PROBLEMS = [
    "environment variable BACKENDS_CUDNN_BENCHMARK='maybe' does not parse: cudnn.benchmark takes "
    "1/0/true/false/yes/no/on/off in any case",
    "environment variable BACKENDS_CUDNN_BENCHMARK_LIMIT='-3' does not parse: cudnn.benchmark_limit must be "
    "an int >= 0, got -3 (int)",
]


@pytest.mark.parametrize("invocation", [["-m", "backends"], ["-mbackends"], ["-Em", "backends"]])
def test_a_flag_variable_that_does_not_parse_is_a_line_of_the_report_not_a_traceback(invocation: list[str]) -> None:
    result = run_python(*invocation, **BAD_FLAG_VARIABLES)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == ""
    out = result.stdout
    section = out.split("Variables whose value does not parse\n")[1].split("\n\n")[0].splitlines()
    effect = "      import backends raises ValueError for it (this report uses the flag's built-in default)"
    assert section == [line for problem in BAD_FLAG_PROBLEMS for line in (f"  {problem}", effect)]
    assert re.search(r"^  cudnn\.benchmark +False +default$", out, re.MULTILINE)
    assert "all 4 checks passed\nbut import backends fails with this environment" in out


def test_json_report_lists_a_variable_that_does_not_parse_and_fails() -> None:
    result = run_python("-m", "backends", "--json", **BAD_FLAG_VARIABLES)
    assert result.returncode == 1 and result.stderr == "", result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["refused_variables"] == [
        {"name": name, "problem": problem, "import_fails": True}
        for name, problem in zip(BAD_FLAG_VARIABLES, BAD_FLAG_PROBLEMS, strict=True)
    ]
    assert data["passed"] is False
    assert all(check["passed"] for check in data["self_check"])


def test_only_the_report_goes_on_without_a_variable_that_does_not_parse(tmp_path: Path) -> None:
    # A program, and another module run with -m that imports backends, still fail at import.
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("import backends\n")
    for args in (["-c", "import backends"], ["-m", "probe"]):
        result = run_python(*args, pythonpath=tmp_path, **BAD_FLAG_VARIABLES)
        assert result.returncode == 1
        assert f"ValueError: {BAD_FLAG_PROBLEMS[0]}" in result.stderr, args


def test_a_value_that_only_warns_at_import_is_a_line_of_the_report_not_a_warning() -> None:
    result = run_python("-m", "backends", "--json", BACKENDS_PURE_PYTHON="perhaps", CUPY_TF32="x")
    assert result.returncode == 0 and result.stderr == "", result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert [(v["name"], v["import_fails"]) for v in data["refused_variables"]] == [
        ("BACKENDS_PURE_PYTHON", False), ("CUPY_TF32", False)
    ]
    assert data["refused_variables"][0]["problem"] == (
        "BACKENDS_PURE_PYTHON='perhaps' is ignored: it takes 1/0/true/false/yes/no/on/off in any case"
    )
    assert data["refused_variables"][1]["problem"].startswith("CUPY_TF32='x' is ignored: CuPy reads it as")
    text = run_python("-m", "backends", BACKENDS_PURE_PYTHON="perhaps").stdout
    assert "  BACKENDS_PURE_PYTHON='perhaps' is ignored" in text
    assert "      import backends warns (UserWarning) and ignores it" in text


@pytest.mark.parametrize(
    ("argv", "orig_argv", "reporting"),
    [
        (["-m"], ["python", "-m", "backends"], True),
        (["-m", "--json"], ["python", "-X", "dev", "-m", "backends", "--json"], True),
        (["-m"], ["python", "-Im", "backends"], True),
        (["-m", "x"], ["python", "-mbackends", "x"], True),
        (["-m"], ["python", "-m", "probe"], False),  # another module found by -m that imports backends
        (["-m", "backends"], ["python", "-m", "probe", "backends"], False),
        (["-m"], ["python", "-mmbackends"], False),  # the module mbackends
        (["-c"], ["python", "-c", "import backends"], False),
        (["/x/backends/__main__.py"], ["python", "-m", "backends"], False),  # found: it runs
        ([], [], False),
    ],
)
def test_only_python_m_backends_finding_its_module_counts_as_the_report(
    argv: list[str], orig_argv: list[str], reporting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert environment._running_the_report() is reporting
