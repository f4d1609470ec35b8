"""The real CuPy's host code through the sync layer's wrapped paths, under the null CUDA.

``tests/nullcuda/`` holds the null CUDA (a shared library built here with the system ``cc``,
preloaded ahead of the CUDA libraries: it answers CuPy's calls on the CPU and records what each
library call was given) and the cases that run under it (``cases_*.py``). This file builds it
and runs those cases in a child pytest, once per engine, and checks that the names the sync
layer is checked against (``tests/real_cupy_names.json``) are still the installed CuPy's.

CI's real-wheel job (``.ci/run``) runs it with the real CuPy 14.2 and 13.6 and sets
``REAL_WHEELS_CUPY`` to the version it installed: then nothing here may skip. Elsewhere it
skips where the real CuPy or a C compiler is missing, saying which.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests import nullcuda
from tests.nullcuda import real_names

EXPECTED_CUPY = os.environ.get("REAL_WHEELS_CUPY", "")  # set by CI's real-wheel job
ROOT = Path(__file__).resolve().parent.parent

#: the cases that skip or are expected to fail, by CuPy major version, and why: any other fails
#: the run (a path the null CUDA stopped reaching), and so does a listed one that ran (stale)
EXPECTED_SKIPS = {
    13: {
        "test_bf16_gemms_follow_the_bf16_flag_not_the_fp16_one": "CuPy 13.6.0 has no bfloat16 arrays",
        "test_minor_axis_fancy_indexing_in_the_scope": "CuPy 13 indexes the minor axis through a transpose",
    },
    14: {
        # (an expected failure: the null CUDA cannot reach CUB)
        "test_minor_axis_fancy_indexing_in_the_scope": "the null CUDA does not reach it",
    },
}


def _not_available(why: str) -> None:
    if EXPECTED_CUPY:
        pytest.fail(f"REAL_WHEELS_CUPY={EXPECTED_CUPY} (the real-wheel CI job), but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def built() -> nullcuda.Build:
    spec = importlib.util.find_spec("cupy")
    if spec is None or not spec.origin or "standin" in Path(spec.origin).parts:
        _not_available("the null CUDA runs the real CuPy, which is not installed (pip install cupy-cuda12x)")
    try:
        return nullcuda.build()
    except nullcuda.NullCudaUnavailable as error:
        _not_available(f"the null CUDA cannot be built here: {error}")
        raise


@pytest.mark.parametrize("engine", ["compiled", "pure"])
def test_the_real_cupy_runs_through_every_wrapped_path_under_the_null_cuda(
    built: nullcuda.Build, engine: str, tmp_path: Path
) -> None:
    from backends._engine import accelerator

    if engine == "compiled" and not accelerator.ACCELERATED:
        _not_available("the compiled accelerator is not built here (pip install -e . builds it)")
    env = nullcuda.environment(built, tmp_path / "record.jsonl")
    env["BACKENDS_PURE_PYTHON"] = "1" if engine == "pure" else "0"
    env["NULLCUDA_DEVICES"] = "2"  # the second-device case runs too
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    report = tmp_path / "cases.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs", f"--junitxml={report}",
               *nullcuda.CASES]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    output = done.stdout + done.stderr
    print(output)  # the cases' summary (pytest -rP shows it)
    assert done.returncode == 0, output
    skipped = {
        case.get("name"): (case.find("skipped").get("message") or "")  # type: ignore[union-attr]
        for case in ElementTree.parse(report).iter("testcase")
        if case.find("skipped") is not None
    }
    expected = EXPECTED_SKIPS.get(int(built.cupy.split()[-1].split(".")[0]), {})
    assert set(skipped) == set(expected), f"skipped: {skipped}"
    for case, reason in expected.items():
        assert reason in skipped[case], skipped[case]
    record = (tmp_path / "record.jsonl").read_text().splitlines()
    unanswered = sorted({json.loads(line)["function"] for line in record if '"unanswered"' in line})
    assert unanswered == [], f"CuPy called functions the null CUDA does not answer: {unanswered}"
    # the cases' process ended quietly (CuPy destroys its handles at exit, through the wrappers)
    assert "Error in sys.excepthook" not in output and "Exception ignored" not in output, output


def test_the_recorded_names_are_the_installed_cupys(built: nullcuda.Build) -> None:
    """``tests/real_cupy_names.json`` (what ``tests/test_sync_names.py`` checks the sync layer
    and the stand-in against) still says what this CuPy's modules hold."""
    version, names = real_names.installed()
    recorded = real_names.load()
    if version not in recorded:
        _not_available(f"CuPy {version} is not recorded in {real_names.SNAPSHOT.name} (only {sorted(recorded)})")
    assert recorded[version] == names, (
        f"CuPy {version}'s names changed: run python -m tests.nullcuda.real_names --write "
        "and check what the sync layer reads"
    )


# -- compiler hygiene, and what needs no CuPy -----------------------------------------------------

WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-Werror"]


@pytest.mark.parametrize("source", ["nullcuda.c", "runtime_shim.c"])
def test_the_null_cuda_compiles_without_warnings(source: str, tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) here")
    include = sysconfig.get_paths()["include"]
    done = subprocess.run(
        ["cc", "-c", "-fPIC", "-O2", *WARNINGS, "-I", include, str(nullcuda.HERE / source), "-o", str(tmp_path / "o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_cases_refuse_to_run_outside_the_null_cuda() -> None:
    """Collected by a plain pytest they skip, saying where they run (and import no CuPy)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("NULLCUDA")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *nullcuda.CASES],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout + done.stderr  # skipped whole
    assert re.search(r"runs under the null CUDA only: tests/test_null_cuda.py starts it", done.stdout), done.stdout
