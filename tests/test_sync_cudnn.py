"""The cuDNN target for CuPy 13's ``cupyx.cudnn`` and its ``cupy.cudnn`` alias (contract
section 9), against the stand-in (``tests/standin/cupyx/cudnn.py``, which records what each
convolution received and what CuPy 13 decided from it).

What depends on the order of imports or on a warn-once runs in a fresh interpreter with the
stand-in on ``PYTHONPATH``; the rest uses the ``standin_cupy`` fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import backends
from tests.standin_fixture import STANDIN

REPO = Path(__file__).resolve().parent.parent
CONV = ((0, 0), (1, 1), (1, 1), 1)  # pad, stride, dilation, groups
PLAIN = {"deterministic": False, "auto_tune": False, "tensor_core": "auto"}


def run_python(code: str, **env: str) -> Any:
    """Run ``code`` in a fresh interpreter (stand-in CuPy and the repository on
    ``PYTHONPATH``); return the JSON it prints last. Its stderr must stay empty."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("STANDIN_", "CUPY_", "BACKENDS_", "PYTHON"))}
    environ["PYTHONPATH"] = os.pathsep.join([str(STANDIN), str(REPO)])
    prelude = textwrap.dedent(
        """
        import json
        def conv(module, name, dtype="float32", **kwargs):
            import cupy
            a, b, c = (cupy.ndarray((1, 1, 4, 4), dtype) for _ in range(3))
            arrays = (a, b, c) if name == "convolution_backward_filter" else (a, b, None, c)
            getattr(module, name)(*arrays, (0, 0), (1, 1), (1, 1), 1, **kwargs)
            import cupyx.cudnn
            return list(cupyx.cudnn.RECORDER.calls[-1][1:8])
        """
    )
    command = [sys.executable, "-c", prelude + textwrap.dedent(code)]
    done = subprocess.run(command, env={**environ, **env}, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def backward_filter(cupy: ModuleType, dtype: str = "float32", **kwargs: Any) -> Any:
    """One ``convolution_backward_filter`` call; what the stand-in recorded."""
    import cupyx.cudnn

    x, gy, gw = (cupy.ndarray((1, 1, 4, 4), dtype) for _ in range(3))
    cupyx.cudnn.convolution_backward_filter(x, gy, gw, *CONV, **{**PLAIN, **kwargs})
    return cupyx.cudnn.RECORDER.calls[-1]


# -- the flags CuPy 13 honours ---------------------------------------------------------------------


def test_default_flags_pass_the_callers_arguments(standin_cupy: ModuleType) -> None:
    import cupyx.cudnn

    for dtype in ("float32", "float64", "float16"):
        for deterministic, auto_tune, tensor_core in ((False, False, "auto"), (True, True, "always")):
            call = backward_filter(
                standin_cupy, dtype, deterministic=deterministic, auto_tune=auto_tune, tensor_core=tensor_core
            )
            assert call[1:4] == (deterministic, auto_tune, tensor_core)
    x = standin_cupy.ndarray((1, 1, 4, 4), "float32")
    cupyx.cudnn.convolution_forward(x, x, None, x, *CONV, auto_tune=False, tensor_core="never")
    assert cupyx.cudnn.RECORDER.calls[-1][:4] == ("convolution_forward", None, False, "never")


def test_algorithms_deterministic_makes_the_backward_convolutions_deterministic_too(standin_cupy: ModuleType) -> None:
    cupy = standin_cupy
    with backends.algorithms.flags(deterministic=True):
        assert backward_filter(cupy)[1] is True
    with backends.flags({}):  # torch's spelling, inside a scope: for the rest of it
        backends.use_deterministic_algorithms(True)
        assert backward_filter(cupy)[1] is True
    assert backward_filter(cupy)[1] is False


def test_deterministic_benchmark_and_enabled_reach_every_convolution(standin_cupy: ModuleType) -> None:
    import cupyx.cudnn

    cupy = standin_cupy
    w, x, y = (cupy.ndarray((1, 1, 4, 4), "float32") for _ in range(3))
    with backends.cudnn.flags(deterministic=True, benchmark=True):
        assert backward_filter(cupy)[1:3] == (True, True)
        cupyx.cudnn.convolution_backward_data(w, x, None, y, *CONV, **PLAIN)
        assert cupyx.cudnn.RECORDER.calls[-1][:3] == ("convolution_backward_data", True, True)
        cupyx.cudnn.convolution_forward(x, w, None, y, *CONV, auto_tune=False, tensor_core="auto")
        assert cupyx.cudnn.RECORDER.calls[-1][:3] == ("convolution_forward", None, True)
    assert backward_filter(cupy)[1:3] == (False, False)

    calls = len(cupyx.cudnn.RECORDER.calls)
    with backends.cudnn.flags(enabled=False):
        for call in (
            lambda: backward_filter(cupy),
            lambda: cupyx.cudnn.convolution_forward(x, w, None, y, *CONV, auto_tune=False, tensor_core="auto"),
        ):
            with pytest.raises(RuntimeError, match=r"backends\.cudnn\.enabled is False"):
                call()
    assert len(cupyx.cudnn.RECORDER.calls) == calls


def test_allow_tf32_leaves_the_callers_tensor_core_argument_alone(standin_cupy: ModuleType) -> None:
    """For float32, CuPy 13 treats "auto", "always" and "never" alike (no tensor cores
    asked for), so rewriting the caller's argument would change nothing but what CuPy's
    error messages report. allow_tf32 never touches float16 either (TF32 is a float32 mode)."""
    with backends.cudnn.flags(allow_tf32=True):
        for dtype in ("float32", "float16"):
            for mode in ("auto", "always", "never"):
                call = backward_filter(standin_cupy, dtype, tensor_core=mode)
                assert call.tensor_core == mode
    with pytest.raises(ValueError, match="tensor_code_mode"):  # CuPy's own check still runs
        backward_filter(standin_cupy, tensor_core="sometimes")


def test_convolutions_called_with_keywords_get_the_flags_too(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cupyx.cudnn

    from backends.sync import wrapping

    x = standin_cupy.ndarray((1, 1, 4, 4), "float32")
    arrays = {"pad": (0, 0), "stride": (1, 1), "dilation": (1, 1), "groups": 1}
    with backends.cudnn.flags(deterministic=True, benchmark=True):
        cupyx.cudnn.convolution_backward_data(W=x, x=x, b=None, y=x, **arrays, **PLAIN)
    assert cupyx.cudnn.RECORDER.calls[-1][1:3] == (True, True)
    monkeypatch.setattr(wrapping, "warned", set())
    with backends.cudnn.flags(allow_tf32=False), pytest.warns(UserWarning, match="cannot forbid TF32"):
        cupyx.cudnn.convolution_forward(x=x, W=x, b=None, y=x, **arrays, auto_tune=False, tensor_core="auto")


# -- 7. allow_tf32=False cannot be honoured by CuPy 13 -----------------------------------------------


def test_allow_tf32_false_warns_once_that_cupy_13_cannot_forbid_tf32() -> None:
    out = run_python(
        """
        import warnings
        import backends, cupyx.cudnn
        out = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for label, allow, dtype in (("allowed", True, "float32"), ("half", False, "float16"),
                                        ("double", False, "float64"), ("float", False, "float32"),
                                        ("again", False, "float32")):
                start = len(caught)
                with backends.cudnn.flags(allow_tf32=allow):
                    fwd = conv(cupyx.cudnn, "convolution_forward", dtype, auto_tune=False, tensor_core="never")
                    bwd = conv(cupyx.cudnn, "convolution_backward_data", dtype,
                               deterministic=False, auto_tune=False, tensor_core="auto")
                out[label] = {"calls": [fwd, bwd],
                              "warnings": [[w.category.__name__, str(w.message)] for w in caught[start:]]}
        print(json.dumps(out))
        """
    )
    default_math = 0
    for label in ("allowed", "half", "double"):
        assert out[label]["warnings"] == [], label
    [(category, message)] = out["float"]["warnings"]
    assert category == "UserWarning"
    assert "allow_tf32" in message and "cupyx.cudnn" in message and "TF32" in message
    assert out["again"]["warnings"] == []  # once per process
    for label in ("float", "again"):
        fwd, bwd = out[label]["calls"]
        # The callers' arguments, and the math type cuDNN picked (never FMA, which CuPy 13 cannot ask for).
        assert fwd == [None, False, "never", "float32", False, False, default_math]
        assert bwd == [False, False, "auto", "float32", False, False, default_math]


# -- 6. CuPy 13's cupy.cudnn alias, whichever is imported first --------------------------------------

_ALIAS_CHECK = """
import backends
from backends.sync import hooks
out = {"same": cudnn.convolution_forward is cupyx.cudnn.convolution_forward,
       "failures": [name for name, _ in hooks.failures]}
with backends.cudnn.flags(deterministic=True, benchmark=True):
    out["bwd"] = conv(cudnn, "convolution_backward_filter", **{"deterministic": False, "auto_tune": False,
                                                              "tensor_core": "auto"})
    out["fwd"] = conv(cudnn, "convolution_forward", auto_tune=False, tensor_core="auto")
with backends.cudnn.flags(enabled=False):
    try:
        conv(cudnn, "convolution_backward_data", deterministic=False, auto_tune=False, tensor_core="auto")
        out["disabled"] = "ran"
    except RuntimeError as error:
        out["disabled"] = str(error)
print(json.dumps(out))
"""

ORDERS = {
    "alias before backends": ("from cupy import cudnn\nimport cupyx.cudnn\n", ""),
    "alias after backends": ("import backends\n", "import cupyx.cudnn\nfrom cupy import cudnn\n"),
    "cupyx.cudnn before backends, alias after": ("import cupyx.cudnn\n", "from cupy import cudnn\n"),
    "alias alone, after backends": ("import backends\nfrom cupy import cudnn\nimport cupyx.cudnn\n", ""),
}


@pytest.mark.parametrize("order", ORDERS)
def test_the_cupy_cudnn_alias_gets_every_cudnn_flag_whichever_is_imported_first(order: str) -> None:
    before, after = ORDERS[order]
    body = _ALIAS_CHECK.replace("import backends\n", "import backends\n" + after, 1)
    out = run_python(before + body)
    assert out["failures"] == []
    assert out["same"] is True  # as in CuPy: the alias holds cupyx.cudnn's very functions
    assert out["bwd"][:2] == [True, True]  # deterministic and auto_tune forced by the flags
    assert out["fwd"][:2] == [None, True]
    assert "backends.cudnn.enabled is False" in out["disabled"]


def test_importing_the_alias_warns_as_cupy_13_does(standin_cupy: ModuleType) -> None:
    with pytest.warns(DeprecationWarning, match=r"cupy\.cudnn is deprecated"):
        from cupy import cudnn
    import cupyx.cudnn

    assert cudnn.convolution_backward_data is cupyx.cudnn.convolution_backward_data
    with backends.cudnn.flags(deterministic=True):
        x, gy, gw = (standin_cupy.ndarray((1, 1, 4, 4), "float32") for _ in range(3))
        cudnn.convolution_backward_filter(x, gy, gw, *CONV, **PLAIN)
    assert cupyx.cudnn.RECORDER.calls[-1].deterministic is True


def test_a_benchmark_limit_cupy_13_cannot_honour_warns_once(
    standin_cupy: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cupyx.cudnn

    from backends.sync import wrapping

    monkeypatch.setattr(wrapping, "warned", set())
    x = standin_cupy.ndarray((1, 1, 4, 4), "float16")
    arrays = {"pad": (0, 0), "stride": (1, 1), "dilation": (1, 1), "groups": 1}
    forward = {"auto_tune": False, "tensor_core": "auto"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with backends.cudnn.flags(benchmark=True):  # the default limit: CuPy's own search, nothing to say
            cupyx.cudnn.convolution_forward(x, x, None, x, **arrays, **forward)
        with backends.cudnn.flags(benchmark_limit=3):  # no autotuning at all: the limit is moot
            cupyx.cudnn.convolution_forward(x, x, None, x, **arrays, **forward)
        with backends.cudnn.flags(benchmark=True, benchmark_limit=3):
            cupyx.cudnn.convolution_forward(x, x, None, x, **arrays, **forward)
            cupyx.cudnn.convolution_forward(x, x, None, x, **arrays, **forward)
    [warning] = caught
    assert warning.category is UserWarning and "benchmark_limit" in str(warning.message)
    assert warning.filename == __file__
    assert cupyx.cudnn.RECORDER.calls[-1].autotuned
