"""Smoke tests of the benchmark scripts: they run and print every row and target. Timings are not asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # each test runs a benchmark script

ROWS = (
    "bare ContextVar.get()",
    "bare ContextVar set()+reset()",
    "plain function call",
    "read backends.cudnn.deterministic",
    "with cudnn.flags(deterministic=True): pass",
    "with <reused scope>: pass",
    "call through @cudnn.flags(...) function",
    'with numpy.errstate(all="ignore"): pass',
    "import backends (fresh interpreter)",
)

#: Rows with a target from issue 8, which must carry a "met"/"MISSED" verdict.
TARGETED = (ROWS[3], ROWS[4], ROWS[5], ROWS[8])


def test_bench_core_quick_prints_every_row() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_core.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for row in ROWS:
        assert any(line.startswith(row) for line in lines), f"no {row!r} row in:\n{result.stdout}"
    for row in TARGETED:
        text = next(line for line in lines if line.startswith(row))
        assert text.endswith((" met", " MISSED")), f"no verdict on {text!r}"


def test_bench_sync_quick_prints_the_sync_cost_with_a_verdict() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_sync.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for row in ("backends.sync(), nothing changed", "cuBLAS wrapper check, nothing changed"):
        line = next(line for line in lines if line.startswith(row))
        assert line.rstrip().endswith(("met", "MISSED")), line
    assert "per GEMM" in result.stdout
    assert "alternating pairs" in result.stdout  # wrapped and unwrapped GEMMs measured in turns
    assert "C-speed" in result.stdout  # says that the stand-in's device query was replaced
    matmul = next(line for line in lines if line.startswith("stand-in cupy.matmul 64x64, wrapped"))
    assert "<= 1.02x" in matmul and matmul.rstrip().endswith(("met", "MISSED")), matmul
    # the real CuPy's cuBLAS module: measured where it is importable, else a line that says why not
    real = next(line for line in lines if line.startswith("real CuPy cuBLAS wrappers"))
    if "not measured (" not in real:
        assert "the current-stream query is stubbed" in result.stdout
        for case, limit in (("capi: routine (sdot), no scope", 100), ("capi: GEMM (gemmEx float32), tf32(True)", 150)):
            line = next(line for line in lines if line.startswith(case))
            assert "unwrapped" in line and " added " in line and f"<= {limit} ns" in line, line
            assert line.rstrip().endswith(("met", "MISSED")), line


def test_bench_concurrency_quick_prints_the_task_step_cost_beside_a_sleep_round_trip() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_concurrency.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("await asyncio.sleep(0), plain loop") for line in lines), result.stdout
    line = next(line for line in lines if line.startswith("task-step sync, added per step"))
    assert line.rstrip().endswith(("met", "MISSED")), line
    assert "<= 300 ns" in line
    assert "C-speed" in result.stdout  # says that the stand-in's device query was replaced


#: Rows of benchmarks/compare.py measured with the standard library and NumPy alone.
COMPARE_ROWS = (
    "read backends.cudnn.deterministic (ours)",
    "read numpy.geterr()",
    "read decimal.getcontext().prec",
    "read bare ContextVar.get()",
    "scope backends.cudnn.flags(deterministic=True) (ours)",
    'scope numpy.errstate(all="ignore")',
    "scope decimal.localcontext(prec=5)",
    "scope bare ContextVar.set()+reset()",
    "call through @backends.cudnn.flags(deterministic=True) (ours)",
    "scope reused backends.cudnn.flags(deterministic=True), built once (ours)",
    "threads=1: per scope entry (ours)",
    "threads=8: per scope entry (ours)",
    "task step, await asyncio.sleep(0), after backends.asyncio.install() (ours)",
    "task step, await asyncio.sleep(0), no install()",
    "task step, added by install() (ours)",
    "cuBLAS wrapper check, nothing changed",
    "stand-in cupy.matmul 64x64, wrapped (ours)",
    "stand-in cupy.matmul 64x64, unwrapped",
    "stand-in cupy.matmul 64x64, added by the wrappers (ours)",
)
#: The targets compare.py must print, each with our figure, the reference, ratio, limit and verdict.
COMPARE_TARGETS = (
    "flag read backends.cudnn.deterministic <= decimal.getcontext().prec",
    'backends.cudnn.flags(deterministic=True) build+enter+exit < jax.default_matmul_precision("float32")',
    "reused scope enter+exit <= 2.5x bare var.reset(var.set(1))",
    'call through @backends.cudnn.flags(deterministic=True) < @numpy.errstate(all="ignore")',
    "memory per live scope <= numpy.errstate's",
    "asyncio task-step sync <= 100 ns added per step",
    "cuBLAS wrapper check with nothing changed (backends.sync.cublas.prepare) <= 100 ns",
    "added per stand-in 64x64 cupy.matmul, wrapped vs unwrapped in alternating rounds",
    "import backends <= 15 ms, neither numpy nor cupy imported",
    "build+enter+exit <= 0.15x torch.backends.cudnn.flags",
)
#: Targets measured with the standard library and NumPy alone (JAX and torch may be skipped).
COMPARE_MEASURED_TARGETS = (0, 2, 3, 4, 5, 6, 7, 8)
#: Rows that need torch or JAX: measured where installed, otherwise "skipped (...)".
COMPARE_OPTIONAL = (
    "read torch.backends.cudnn.deterministic",
    "read torch.backends.cuda.matmul.allow_tf32",
    "scope torch.backends.cudnn.flags(deterministic=True)",
    'scope jax.default_matmul_precision("float32")',
)


@pytest.mark.parametrize("skip", ["", "torch,jax"], ids=["as-installed", "BENCH_SKIP=torch,jax"])
def test_compare_quick_prints_ours_beside_the_others_and_skips_what_is_missing(skip: str, tmp_path: Path) -> None:
    # The skipping run also asks for the pure-Python engine (which the engine itself reads) and
    # writes its page to a temporary folder, so that both are checked without a third run.
    env = {k: v for k, v in os.environ.items() if k != "BACKENDS_PURE_PYTHON"}
    env["BENCH_SKIP"] = skip
    output: list[str] = []
    if skip:
        env["BACKENDS_PURE_PYTHON"] = "1"
        output = ["--output", str(tmp_path)]
    docs = ROOT / "docs" / "benchmarks.md"
    before = docs.read_bytes() if docs.exists() else None
    result = subprocess.run(
        [sys.executable, "benchmarks/compare.py", "--quick", *output],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    if skip:
        assert "engine: pure Python (BACKENDS_PURE_PYTHON=1)" in lines[0], lines[0]
    else:
        assert "engine: compiled" in lines[0] or "engine: pure Python" in lines[0], lines[0]
    for index, name in enumerate(COMPARE_TARGETS):
        line = next((line for line in lines if line.startswith(f"target: {name}: ")), None)
        assert line is not None, f"no target {name!r} in:\n{result.stdout}"
        for field in ("ours ", "reference ", "ratio ", "limit "):
            assert f"; {field}" in line or f": {field}" in line, (field, line)
        assert line.rstrip().endswith(("  met", "  MISSED", "  not measured", "  reported")), line
        if index in COMPARE_MEASURED_TARGETS:
            assert not line.endswith("not measured"), line
    imported = next(line for line in lines if line.startswith("target: import backends"))
    assert "numpy imported: " in imported and "cupy imported: " in imported, imported
    if skip:
        page = (tmp_path / "benchmarks.md").read_text(encoding="utf-8")
        assert "| target | ours | reference | ratio | limit | verdict |" in page
        assert all(f"| {name} |" in page for name in COMPARE_TARGETS)
        assert "Engine: pure Python (BACKENDS_PURE_PYTHON=1)" in page
    for row in COMPARE_ROWS:
        line = next((line for line in lines if line.startswith(row)), None)
        assert line is not None, f"no {row!r} row in:\n{result.stdout}"
        assert " ns " in line, f"not measured: {line!r}"
    assert any(line.startswith("memory per live scope") and "(ours)" in line and " B " in line for line in lines)
    assert any(line.startswith("import backends, fresh interpreter") and " ms " in line for line in lines)
    for row in COMPARE_OPTIONAL:
        line = next((line for line in lines if line.startswith(row)), None)
        assert line is not None, f"no {row!r} row in:\n{result.stdout}"
        assert " ns " in line or "skipped (" in line, line
        if skip:
            assert "skipped (BENCH_SKIP)" in line, line
    assert any(line.startswith("target: ") and line.rstrip().endswith(("met", "MISSED", "not measured"))
               for line in lines)
    after = docs.read_bytes() if docs.exists() else None
    assert after == before, "--quick must not rewrite docs/benchmarks.md"


def test_bench_server_quick_prints_both_variants_and_their_difference() -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    pytest.importorskip("numpy")
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_server.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for row in ("per-request scope (as shipped)", "no scope (request_scope a no-op)"):
        line = next((line for line in lines if line.startswith(row)), None)
        assert line is not None, f"no {row!r} row in:\n{result.stdout}"
        assert "requests/s" in line and " p50 " in line and " p99 " in line and line.endswith(" ms"), line
    assert any(line.startswith("difference, scoped vs unscoped: requests/s ") for line in lines), result.stdout
    assert "loopback" in result.stdout


def test_bench_scale_out_quick_prints_each_engine_beside_its_plain_call_as_a_ratio() -> None:
    from tests._dev_tools import import_extra, import_ray

    import_ray()
    import_extra("distributed", "dask")
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_scale_out.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for row in ("in process: snapshot, encode, decode, enter, exit", "  the same, flags never carried before"):
        line = next((line for line in lines if line.startswith(row)), None)
        assert line is not None and line.endswith("us per call (best of 7)"), result.stdout
    for row in ("Ray task: plain (A), backends_ray (B)", "Dask submit: plain (A), backends_dask (B)",
                "Ray task: plain (A), plain again (B): noise", "Dask submit: plain (A), plain again (B): noise",
                "Ray actor call: plain (A), backends_ray (B)"):
        line = next(line for line in lines if line.startswith(row))
        assert " A " in line and " B " in line and "added" in line and "ratio B/A" in line and "(pairs " in line, line
    assert "A and B alternating call by call" in result.stdout  # plain and carrying calls in turns, in one run
