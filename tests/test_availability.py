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
        # nor the engines of backends.integrations.ray and .dask, installed or not
        "assert not {'ray', 'dask', 'distributed'} & set(sys.modules), sorted(sys.modules)\n"
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


# -- the cache --------------------------------------------------------------------------------------
#
# A stand-in CuPy whose cuda.is_available() reads a file on every call and counts its calls, so a
# test sees both whether backends asked CuPy again and what CuPy would have said.
_COUNTING_CUPY = """
import os
calls = 0
class cuda:
    @staticmethod
    def is_available():
        global calls
        calls += 1
        with open(os.environ["FAKE_CUPY_ANSWER"]) as answer:
            return answer.read() == "1"
"""


def _counting_cupy(tmp_path: Path, answer: str) -> tuple[Path, dict[str, str]]:
    site = tmp_path / "site"
    (site / "cupy").mkdir(parents=True)
    (site / "cupy" / "__init__.py").write_text(_COUNTING_CUPY)
    answer_file = tmp_path / "answer"
    answer_file.write_text(answer)
    return site, {"FAKE_CUPY_ANSWER": str(answer_file)}


def run_probe(code: str, pythonpath: Path | None, env: dict[str, str]) -> list[object]:
    full = {**os.environ, **env}
    if pythonpath is not None:
        full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), full.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    result: list[object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_cuda_answers_come_from_a_cache_after_the_first_call(tmp_path: Path) -> None:
    site, env = _counting_cupy(tmp_path, "1")
    code = f"""
import json, timeit
import backends, cupy
answers = [backends.cuda.is_available() for _ in range(1000)]
answers += [backends.cuda.is_built(), backends.cudnn.is_available() is False]  # no cuDNN in this CuPy
open({str(tmp_path / "answer")!r}, "w").write("0")     # CuPy would now say False: nobody asks it
answers.append(backends.cuda.is_available())
per_call = min(timeit.repeat(backends.cuda.is_available, number=10_000, repeat=5)) / 10_000
print(json.dumps([cupy.calls, sorted(set(answers)), per_call]))
"""
    calls, answers, per_call = run_probe(code, site, env)
    assert calls == 1  # cudnn.is_available() used the cached cuda answer too
    assert answers == [True]
    # Uncached, a query costs 20-60 us (CuPy looked up on sys.path each time); cached, about 0.3 us.
    # The bound is generous for a loaded machine.
    assert per_call < 2e-6, f"{per_call * 1e6:.2f} us per cached is_available()"


def test_a_machine_without_cupy_is_answered_from_the_cache_too() -> None:
    code = """
import json, sys, timeit
sys.modules["cupy"] = None        # not installed, whatever this interpreter has
import backends
first = [backends.cuda.is_built(), backends.cuda.is_available(), backends.cudnn.version()]
per_call = min(timeit.repeat(backends.cuda.is_built, number=10_000, repeat=5)) / 10_000
print(json.dumps([first, per_call]))
"""
    first, per_call = run_probe(code, None, {})
    assert first == [False, False, None]
    assert per_call < 2e-6, f"{per_call * 1e6:.2f} us per cached is_built() without CuPy"


def test_cupy_imported_later_is_seen_by_the_next_query(tmp_path: Path) -> None:
    site, env = _counting_cupy(tmp_path, "1")
    code = f"""
import importlib, json, sys
import backends
answers = [backends.cuda.is_built(), backends.cuda.is_available()]      # CuPy is not on sys.path yet
sys.path.insert(0, {str(site)!r})
importlib.invalidate_caches()
answers += [backends.cuda.is_built(), backends.cuda.is_available()]     # installed, not imported: cached
import cupy
answers += [backends.cuda.is_built(), backends.cuda.is_available()]     # imported: asked again
print(json.dumps(answers))
"""
    if HAS_CUPY:
        pytest.skip("needs an interpreter without a real CuPy on sys.path")
    assert run_probe(code, None, env) == [False, False, False, False, True, True]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX only")
def test_a_forked_child_asks_cupy_again(tmp_path: Path) -> None:
    site, env = _counting_cupy(tmp_path, "1")
    code = f"""
import json, os
import backends, cupy
parent = [backends.cuda.is_available()]
open({str(tmp_path / "answer")!r}, "w").write("0")
parent.append(backends.cuda.is_available())    # cached: still True
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, json.dumps([backends.cuda.is_available(), cupy.calls]).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 1000))
os.waitpid(pid, 0)
print(json.dumps([parent, child, backends.cuda.is_available(), cupy.calls]))
"""
    parent, child, parent_after, parent_calls = run_probe(code, site, env)
    assert parent == [True, True]
    assert child == [False, 2]          # the child asked CuPy once more, and got its answer now
    assert parent_after is True and parent_calls == 1


def test_cpu_answers_are_cached_until_a_new_module_is_imported() -> None:
    pytest.importorskip("numpy")
    pytest.importorskip("threadpoolctl")
    code = """
import json, timeit
import numpy, threadpoolctl
import backends
calls = 0
real = threadpoolctl.threadpool_info
def counting():
    global calls
    calls += 1
    return real()
threadpoolctl.threadpool_info = counting
answers = [backends.mkl.is_available() for _ in range(100)]
counts = [calls]
import colorsys                      # any new import: a native library may have come with it
answers.append(backends.mkl.is_available())
counts.append(calls)
per_call = min(timeit.repeat(backends.openmp.is_available, number=10_000, repeat=5)) / 10_000
print(json.dumps([counts, len(set(answers)), per_call]))
"""
    counts, distinct, per_call = run_probe(code, None, {})
    assert counts == [1, 2]
    assert distinct == 1
    assert per_call < 2e-6, f"{per_call * 1e6:.2f} us per cached openmp.is_available()"
