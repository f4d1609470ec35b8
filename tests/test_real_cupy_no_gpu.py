"""With the real CuPy wheel installed and no driver, backends changes nothing about CuPy.

CI's real-wheel job (``.ci/run``) runs this file twice: in a virtual environment that has
``cupy-cuda12x`` alone (no CUDA libraries, no driver), and in one that also has the CUDA library
wheels and the cuDNN frontend (``tests/test_real_wheels.py`` checks the sync layer there). It
sets ``REAL_WHEELS_CUPY`` to the CuPy version it installed, and then these tests may not skip.
Elsewhere they are skipped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

EXPECTED_CUPY = os.environ.get("REAL_WHEELS_CUPY", "")  # set by CI's real-wheel job


@pytest.fixture(scope="module", autouse=True)
def _real_cupy() -> None:
    spec = importlib.util.find_spec("cupy")
    if spec is not None and spec.origin and "standin" not in spec.origin.split(os.sep):
        return
    why = "CuPy is not installed" if spec is None else f"the CuPy found is the stand-in ({spec.origin})"
    if EXPECTED_CUPY:
        pytest.fail(f"REAL_WHEELS_CUPY={EXPECTED_CUPY} (the real-wheel CI job) but {why}", pytrace=False)
    pytest.skip(f"needs the real CuPy wheel (CI's real-wheel job in .ci/run installs cupy-cuda12x): {why}")


PROBE = """
import json, sys, warnings
warnings.simplefilter("error")
order = sys.argv[1]
if order == "backends first":
    import backends, cupy
elif order == "cupy first":
    import cupy, backends
else:
    import cupy
    backends = None

def outcome(call):
    try:
        return ["ok", repr(call())]
    except BaseException as error:
        return [type(error).__name__, str(error)]

def load_cublas():
    from cupy_backends.cuda.libs import cublas
    return cublas.__name__

report = {
    "cupy.cuda.is_available": outcome(cupy.cuda.is_available),
    "cupy.ones": outcome(lambda: cupy.ones(3)),
    "cublas": outcome(load_cublas),
    "fft": outcome(lambda: cupy.fft.fft(cupy.ones(4))),
}
if backends is not None:
    report["backends.cuda.is_built"] = outcome(backends.cuda.is_built)
    report["backends.cuda.is_available"] = outcome(backends.cuda.is_available)
    report["backends.cudnn.version"] = outcome(backends.cudnn.version)
    report["backends.sync"] = outcome(backends.sync)
    report["plan cache size"] = outcome(lambda: backends.cuda.cufft_plan_cache.size)
print(json.dumps(report))
"""


def _probe(order: str) -> dict[str, list[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, order], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # no warnings either
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("order", ["backends first", "cupy first"])
def test_cupy_behaves_exactly_as_without_backends(order: str) -> None:
    alone, together = _probe("cupy alone"), _probe(order)
    for key, result in alone.items():
        assert together[key] == result, key
    # CuPy 14 answers False without a driver; CuPy 13 raises (the loop above: backends changes neither)
    assert together["cupy.cuda.is_available"] == ["ok", "False"] or together["cupy.cuda.is_available"][0] == (
        "CUDARuntimeError"
    )


@pytest.mark.parametrize("order", ["backends first", "cupy first"])
def test_backends_answers_without_raising(order: str) -> None:
    report = _probe(order)
    assert report["backends.cuda.is_built"] == ["ok", "True"]
    assert report["backends.cuda.is_available"] == ["ok", "False"]
    assert report["backends.cudnn.version"] == ["ok", "None"]
    assert report["backends.sync"] == ["ok", "None"]
    assert report["plan cache size"][0] == "RuntimeError"
    assert "CUDA is not available" in report["plan cache size"][1]


def test_python_m_backends_reports_cupy_and_passes() -> None:
    done = subprocess.run([sys.executable, "-m", "backends"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cuda.is_built()        True" in done.stdout
    assert "cuda.is_available()    False" in done.stdout
    if EXPECTED_CUPY:
        assert re.search(rf"^\s*CuPy\s+{re.escape(EXPECTED_CUPY)}$", done.stdout, re.M), done.stdout


def test_the_compute_capability_query_reaches_the_real_runtime() -> None:
    """The cuBLAS and cuTENSOR targets ask a device's compute capability through CuPy's runtime
    module, which exports no name for the attribute (the first GPU launch once raised
    ``AttributeError`` there). Without a driver the real module answers with its own
    ``CUDARuntimeError``: the call got as far as the driver."""
    from cupy_backends.cuda.api import runtime

    from backends.sync import device_has_tf32

    assert not hasattr(runtime, "deviceAttributeComputeCapabilityMajor")
    with pytest.raises(runtime.CUDARuntimeError):
        device_has_tf32(runtime, 0)
