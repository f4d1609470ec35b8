"""Availability queries: right answers without a GPU or CuPy, never raising, never importing eagerly."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import backends

HAS_CUPY = importlib.util.find_spec("cupy") is not None
no_cupy = pytest.mark.skipif(HAS_CUPY, reason="checks the answers of a machine without CuPy")

QUERIES = {
    "cuda.is_built": backends.cuda.is_built,
    "cuda.is_available": backends.cuda.is_available,
    "cudnn.is_available": backends.cudnn.is_available,
    "mkl.is_available": backends.mkl.is_available,
    "mkldnn.is_available": backends.mkldnn.is_available,
    "openmp.is_available": backends.openmp.is_available,
    "mps.is_built": backends.mps.is_built,
    "mps.is_available": backends.mps.is_available,
}

_PROBE = """
import json, sys
import backends
print(json.dumps({
    "is_built": backends.cuda.is_built(),
    "is_available": backends.cuda.is_available(),
    "cudnn_is_available": backends.cudnn.is_available(),
    "cudnn_version": backends.cudnn.version(),
}))
"""


def run_python(code: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", QUERIES)
def test_every_query_returns_a_bool(name: str) -> None:
    assert type(QUERIES[name]()) is bool


def test_cudnn_version_is_an_int_or_none() -> None:
    version = backends.cudnn.version()
    assert version is None or type(version) is int
    assert (version is not None) == backends.cudnn.is_available()


@no_cupy
def test_cuda_and_cudnn_without_cupy() -> None:
    assert backends.cuda.is_built() is False
    assert backends.cuda.is_available() is False
    assert backends.cudnn.is_available() is False
    assert backends.cudnn.version() is None


def test_mps_is_never_there() -> None:
    assert backends.mps.is_built() is False
    assert backends.mps.is_available() is False


def test_cpu_answers_match_threadpoolctl() -> None:
    pytest.importorskip("numpy")
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy  # noqa: F401  (loads NumPy's BLAS, so threadpoolctl can see it)

    pools = threadpoolctl.threadpool_info()
    assert any(pool["user_api"] == "blas" for pool in pools), pools  # NumPy's BLAS really was found
    assert backends.mkl.is_available() is any(pool["internal_api"] == "mkl" for pool in pools)
    assert backends.openmp.is_available() is any(pool["user_api"] == "openmp" for pool in pools)
    # NumPy never loads oneDNN; only a library such as torch would.
    if "torch" not in sys.modules and not any("dnnl" in pool["filepath"] for pool in pools):
        assert backends.mkldnn.is_available() is False


def test_import_backends_imports_neither_numpy_nor_cupy() -> None:
    code = (
        "import sys, backends\n"
        "before = ['numpy' in sys.modules, 'cupy' in sys.modules]\n"
        "backends.cuda.is_built(); backends.mps.is_available()\n"
        "print(before, ['numpy' in sys.modules, 'cupy' in sys.modules])\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.strip().split("] [")
    assert before == "[False, False"
    if not HAS_CUPY:  # and on a machine without CuPy, asking about CUDA imports nothing either
        assert after == "False, False]"


@pytest.mark.parametrize(
    "fake",
    [
        pytest.param("raise RuntimeError('CUDA driver version is insufficient')\n", id="import-raises"),
        pytest.param(
            "class _Cuda:\n"
            "    @staticmethod\n"
            "    def is_available():\n"
            "        raise RuntimeError('cudaErrorNoDevice')\n"
            "cuda = _Cuda()\n",
            id="is_available-raises",
        ),
    ],
)
def test_a_broken_cupy_is_built_but_not_available(tmp_path: Path, fake: str) -> None:
    marker = tmp_path / "imported"
    package = tmp_path / "cupy"
    package.mkdir()
    # The marker proves the queries really reached the broken CuPy rather than skipping it.
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + fake)
    result = run_python(_PROBE, pythonpath=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert json.loads(result.stdout) == {
        "is_built": True, "is_available": False, "cudnn_is_available": False, "cudnn_version": None,
    }
    assert marker.exists()
