"""Issue 12, behaviours 1, 6 and 9: a stray environment variable never breaks ``import backends``;
``from backends import *`` shadows nothing and ``help(backends)`` works without trio; every hint
for a name this project does not have is true.

What ``import backends`` does is checked in fresh interpreters, with no ``BACKENDS_*`` or
``CUPY_TF32`` variables but the ones a test sets.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import backends
from backends._engine import environment

from ._helpers import NO_PLUGIN_AUTOLOAD, OUR_PLUGIN, state

ROOT = Path(__file__).resolve().parent.parent

#: Prepended to a fresh interpreter's code: ``import trio`` fails there, as where trio is not installed.
BLOCK_TRIO = textwrap.dedent(
    """
    import sys
    class _NoTrio:
        def find_spec(self, name, path=None, target=None):
            if name == "trio" or name.startswith("trio."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _NoTrio())
    """
)


def clean_environ(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BACKENDS_") and k != "CUPY_TF32"}
    return {**env, **variables}


def python(*args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=clean_environ(**variables), capture_output=True, text=True, timeout=120
    )


# --------------------------------------------------------------------------- #
# 1. The environment never breaks `import backends`
# --------------------------------------------------------------------------- #

#: BACKENDS_* names that are no flag's variable, and the flag variable each is a near miss of
#: (judged on the part after BACKENDS_, ignoring case: difflib ratio >= 0.85), or None.
NEAR_MISSES = {
    "BACKENDS_CUDNN_DETERMINISTC": "BACKENDS_CUDNN_DETERMINISTIC",
    "BACKENDS_CUDNN_DETERMINSTIC": "BACKENDS_CUDNN_DETERMINISTIC",
    "BACKENDS_CUDNN_DETERMINISTIC_": "BACKENDS_CUDNN_DETERMINISTIC",
    "BACKENDS_CUDNN__DETERMINISTIC": "BACKENDS_CUDNN_DETERMINISTIC",
    "BACKENDS_cudnn_deterministic": "BACKENDS_CUDNN_DETERMINISTIC",
    "backends_cudnn_deterministic": "BACKENDS_CUDNN_DETERMINISTIC",
    "BACKENDS_CUDNN_ENABLE": "BACKENDS_CUDNN_ENABLED",
    "BACKENDS_CUDNN_BENCHMARKS": "BACKENDS_CUDNN_BENCHMARK",
    "BACKENDS_CUDNN_BENCHMARK_LIMT": "BACKENDS_CUDNN_BENCHMARK_LIMIT",
    "BACKENDS_CUDA_MATMUL_ALLOW_TF23": "BACKENDS_CUDA_MATMUL_ALLOW_TF32",
    "BACKENDS_CUDA_PREFERED_LINALG_LIBRARY": "BACKENDS_CUDA_PREFERRED_LINALG_LIBRARY",
    "BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAXSIZE": "BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE",
    "BACKENDS_CUDA_CUFFT_PLAN_CACHE_SIZE": "BACKENDS_CUDA_CUFFT_PLAN_CACHE_MAX_SIZE",
}
NOT_NEAR = [
    "BACKENDS_VERBOSE", "BACKENDS_CONFIG", "BACKENDS_CACHE_DIR", "BACKENDS_LOG_LEVEL", "BACKENDS_CI_JOBS",
    "BACKENDS_HOME", "BACKENDS_SOAK", "BACKENDS_DEBUG", "BACKENDS_X", "BACKENDS_",
    "BACKENDS_CUDNN", "BACKENDS_CUDA_MATMUL", "BACKENDS_DETERMINISTIC", "BACKENDS_CUDNN_DETERMINISTIC_ALGORITHMS",
    "BACKENDS_CUDNN_CONV_FP32_PRECISION", "BACKENDS_CUDA_MATMUL_FP32_PRECISION",
]
NOT_FLAGS = {"BACKENDS_VERBOSE": "1", "BACKENDS_CONFIG": "/etc/backends.toml", "BACKENDS_CACHE_DIR": "/tmp/cache",
             "BACKENDS_LOG_LEVEL": "debug", "BACKENDS_CI_JOBS": "4",
             "BACKENDS_CUDNN_DETERMINSTIC": "1", "BACKENDS_CUDA_ALLOW_TF32": "yes"}
LONG = "x" * 5000


@pytest.mark.parametrize(("variable", "text"), NOT_FLAGS.items())
def test_a_backends_name_that_is_no_flag_is_ignored_at_import(variable: str, text: str) -> None:
    done = python("-c", "import json, backends; print(json.dumps(backends.snapshot().to_dict()))", **{variable: text})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert json.loads(done.stdout) == {flag.name: flag.default for flag in backends.FLAGS}


def test_a_pytest_run_with_the_plugin_survives_stray_backends_variables(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "tox.ini").write_text("[pytest]\n")
    env = clean_environ(**NOT_FLAGS, **NO_PLUGIN_AUTOLOAD)  # ours loads through its entry point's name
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *OUR_PLUGIN, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


@pytest.mark.parametrize(("name", "meant"), NEAR_MISSES.items())
def test_a_near_miss_of_a_flag_variable_is_ignored_with_a_did_you_mean(name: str, meant: str) -> None:
    assert environment.read({name: "1"}) == {}
    assert environment.ignored({name: "1", "PATH": "/bin"}) == [(name, meant)]


@pytest.mark.parametrize("name", NOT_NEAR)
def test_a_name_near_no_flag_variable_is_ignored_with_no_did_you_mean(name: str) -> None:
    assert environment.read({name: "1"}) == {}
    assert environment.ignored({name: "1"}) == [(name, None)]


def test_flag_variables_and_other_names_are_not_listed_as_ignored() -> None:
    environ = {flag.env_var: "" for flag in backends.FLAGS} | {"CUPY_TF32": "1", "PATH": "/bin", "BACKEND_X": "1"}
    assert environment.ignored(environ) == []


def test_python_m_backends_lists_the_ignored_variables_with_a_did_you_mean_only_for_near_misses() -> None:
    done = python("-m", "backends", BACKENDS_VERBOSE="1", BACKENDS_CUDNN_DETERMINSTC="on", BACKENDS_CONFIG=LONG)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "Ignored BACKENDS_* variables (no flag reads them)" in out
    lines = {line.split("=")[0].strip(): line for line in out.splitlines() if line.startswith("  BACKENDS_")}
    assert lines["BACKENDS_VERBOSE"].strip() == "BACKENDS_VERBOSE='1'"
    assert lines["BACKENDS_CUDNN_DETERMINSTC"].strip() == (
        "BACKENDS_CUDNN_DETERMINSTC='on': did you mean BACKENDS_CUDNN_DETERMINISTIC?"
    )
    assert "did you mean" not in lines["BACKENDS_CONFIG"]
    assert len(lines["BACKENDS_CONFIG"]) < 120  # the 5,000-character value, cut short
    assert re.search(r"^  cudnn\.deterministic +False +default$", out, re.MULTILINE)  # the typo changed nothing


@pytest.mark.skipif(sys.platform == "win32", reason="undecodable bytes in the environment are a POSIX thing")
def test_python_m_backends_lists_an_undecodable_name_and_value_escaped() -> None:
    done = python("-m", "backends", **{"BACKENDS_\udcff": "\udcfe"})  # bytes 0xff and 0xfe: not UTF-8
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  'BACKENDS_\\udcff'='\\udcfe'\n" in done.stdout


def test_python_m_backends_says_when_no_variable_was_ignored_and_names_a_flag_variable_it_read() -> None:
    out = python("-m", "backends", BACKENDS_CUDNN_BENCHMARK="1", CUPY_TF32="1").stdout
    assert "Ignored BACKENDS_* variables (no flag reads them)\n  none\n" in out
    assert "cudnn.benchmark" in out and "environment (BACKENDS_CUDNN_BENCHMARK)" in out
    assert "environment (CUPY_TF32)" in out


def test_a_flag_variable_with_a_bad_value_still_fails_import_naming_it() -> None:
    done = python("-c", "import backends", BACKENDS_CUDNN_DETERMINISTIC="maybe", BACKENDS_VERBOSE="1")
    assert done.returncode != 0
    assert "ValueError: environment variable BACKENDS_CUDNN_DETERMINISTIC='maybe' does not parse" in done.stderr
    assert "BACKENDS_VERBOSE" not in done.stderr


@pytest.mark.parametrize("variable", [flag.env_var for flag in backends.FLAGS])
def test_a_5000_character_value_is_cut_short_in_the_error(variable: str) -> None:
    with pytest.raises(ValueError) as raised:
        environment.read({variable: LONG})
    message = str(raised.value)
    assert variable in message and "xxxxxxxxxx" in message
    assert len(message) < 400


def test_a_5000_character_cupy_tf32_is_cut_short_in_its_warning() -> None:
    with pytest.warns(UserWarning, match="CUPY_TF32") as caught:
        assert environment.read({"CUPY_TF32": LONG}) == {}
    assert len(str(caught[0].message)) < 400


# --------------------------------------------------------------------------- #
# 6. `from backends import *` and help(backends)
# --------------------------------------------------------------------------- #

_STDLIB_NAMES = textwrap.dedent(
    """
    import importlib, json, sys, warnings
    skip = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "__main__"}
    for name in sorted(sys.stdlib_module_names - skip):
        if not name.startswith("_"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    importlib.import_module(name)
            except BaseException:
                pass
    exported = {}  # name -> a stdlib module whose __all__ has it, submodules (concurrent.futures) included
    for module_name, module in list(sys.modules.items()):
        if module_name.partition(".")[0] in sys.stdlib_module_names:
            for name in getattr(module, "__all__", ()):
                exported.setdefault(str(name), module_name)
    print(json.dumps({"modules": sorted(sys.stdlib_module_names), "exported": exported}))
    """
)


def test_star_import_binds_no_standard_library_name() -> None:
    done = python("-c", _STDLIB_NAMES)
    assert done.returncode == 0, done.stderr
    stdlib = json.loads(done.stdout)
    bound: dict[str, object] = {}
    exec("from backends import *", bound)
    bound.pop("__builtins__")
    assert not set(bound) & set(stdlib["modules"])
    assert {name: stdlib["exported"][name] for name in bound if name in stdlib["exported"]} == {}
    assert {"asyncio", "trio", "Thread", "ThreadPoolExecutor"}.isdisjoint(bound)


def test_names_left_out_of_star_import_stay_reachable_and_listed() -> None:
    assert callable(backends.asyncio.install)
    assert issubclass(backends.ThreadPoolExecutor, concurrent.futures.ThreadPoolExecutor)
    assert issubclass(backends.Thread, threading.Thread)
    assert backends.Flag is type(backends.FLAGS[0]) and callable(backends.sync)
    pytest.importorskip("trio")
    assert backends.trio.Instrument.__name__ == "Instrument"
    for name in ("asyncio", "trio", "Thread", "ThreadPoolExecutor", "run_in_executor", "Flag", "sync", "flags"):
        assert name in dir(backends)


def test_star_import_and_help_work_without_trio() -> None:
    code = BLOCK_TRIO + textwrap.dedent(
        """
        import pydoc
        from backends import *
        import backends
        text = pydoc.plain(pydoc.render_doc(backends))
        assert "backends.flags" in text or "flags(" in text, text[:500]
        assert "trio" in dir(backends)
        try:
            backends.trio
        except AttributeError as error:
            print("AttributeError:", error)
        try:
            from backends import trio
        except ImportError as error:
            print("ImportError:", error)
        print("help ok", len(text))
        """
    )
    done = python("-c", code)
    assert done.returncode == 0, done.stderr
    assert "help ok" in done.stdout
    assert "AttributeError: backends.trio needs trio" in done.stdout
    assert "ImportError: cannot import name 'trio'" in done.stdout


# --------------------------------------------------------------------------- #
# 9. Hints that are true
# --------------------------------------------------------------------------- #

NOT_SCOPED = "nothing in CuPy or NumPy reads it"
TORCH_ONLY = [
    ("mkldnn", "enabled"), ("mkldnn", "deterministic"), ("mkldnn", "allow_tf32"), ("mkldnn", "flags"),
    ("cuda", "enable_flash_sdp"), ("cuda", "flash_sdp_enabled"), ("cuda", "enable_math_sdp"),
    ("cuda", "sdp_kernel"), ("cuda", "preferred_blas_library"), ("cudnn", "rnn"), ("", "nnpack"),
    ("cuda", "cublas_workspace_size"), ("cuda", "cublaslt_workspace_size"), ("cuda", "blas_workspace_size"),
    ("cuda.matmul", "allow_fp16_accumulation"), ("cuda.matmul", "allow_fp16_reduced_precision_reduction_split_k"),
    ("cuda.matmul", "allow_bf16_reduced_precision_reduction_split_k"), ("cudnn", "depthwise_kernel"),
]


def owner(prefix: str) -> object:
    found: object = backends
    for part in filter(None, prefix.split(".")):
        found = getattr(found, part)
    return found


@pytest.mark.parametrize(("prefix", "name"), TORCH_ONLY, ids=lambda p: p or "backends")
def test_a_torch_name_this_project_does_not_scope_says_so(prefix: str, name: str) -> None:
    before = state()
    namespace = owner(prefix)
    torch_name = f"torch.backends.{prefix + '.' if prefix else ''}{name}"
    for attempt in (lambda: getattr(namespace, name), lambda: setattr(namespace, name, False)):
        with pytest.raises(AttributeError) as raised:
            attempt()
        message = str(raised.value)
        assert f"torch has {torch_name}, but this project does not scope it ({NOT_SCOPED})" in message
        assert "did you mean" not in message and "as in torch" not in message
        if "cudnn" not in prefix:
            assert "cudnn" not in message  # cuda.enable_flash_sdp: no cuDNN hint
    assert state() == before


def test_a_torch_name_in_a_mapping_says_so_too() -> None:
    before = state()
    for name in ("mkldnn.enabled", "cuda.enable_flash_sdp", "mkldnn.matmul.fp32_precision"):
        with pytest.raises(KeyError) as raised:
            backends.flags({name: True})
        torch_name = "torch.backends." + (name if "matmul" not in name else "mkldnn.matmul")
        assert f"unknown flag {name!r}: torch has {torch_name}, but this project does not scope it" in str(raised.value)
    assert state() == before


def test_a_flagless_namespace_says_as_in_torch_only_where_torchs_has_no_flags() -> None:
    with pytest.raises(AttributeError, match=r"backends\.openmp has no flags, as in torch\)$"):
        backends.openmp.benchmark  # noqa: B018
    with pytest.raises(AttributeError) as raised:
        backends.mkldnn.benchmark  # noqa: B018
    message = str(raised.value)
    assert "backends.mkldnn has no flags" in message and "as in torch" not in message
    assert "torch's are not scoped here" in message


@pytest.mark.parametrize(
    ("prefix", "name", "meant"),
    [
        ("cudnn", "fp32_precision", "cudnn.conv.fp32_precision"),
        ("cuda", "fp32_precision", "cuda.matmul.fp32_precision"),
        ("cuda.matmul", "fp32_precison", "cuda.matmul.fp32_precision"),
        ("cuda", "allow_tf32", "cuda.matmul.allow_tf32"),
        ("cudnn.conv", "allow_tf32", "cudnn.allow_tf32"),
        ("cudnn", "allow_fp16_reduced_precision_reduction", "cuda.matmul.allow_fp16_reduced_precision_reduction"),
    ],
)
def test_attribute_hints_point_at_flags_and_views(prefix: str, name: str, meant: str) -> None:
    with pytest.raises(AttributeError) as raised:
        getattr(owner(prefix), name)
    assert str(raised.value).endswith(f"; did you mean backends.{meant}?")


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("cuda.allow_tf32", "did you mean 'cuda.matmul.allow_tf32'?"),
        ("cuda.matmul.allow_tf33", "did you mean 'cuda.matmul.allow_tf32'?"),
        ("cudnn.conv.allow_tf32", "did you mean 'cudnn.allow_tf32'?"),
        ("cudnn.determinstic", "did you mean 'cudnn.deterministic'?"),
        ("cudnn.fp32_precision", "did you mean 'cudnn.allow_tf32'? ('cudnn.conv.fp32_precision' is its view)"),
        ("cuda.fp32_precision", "did you mean 'cuda.matmul.allow_tf32'? ('cuda.matmul.fp32_precision' is its view)"),
    ],
)
def test_mapping_hints_consider_the_last_part_and_views(name: str, hint: str) -> None:
    before = state()
    with pytest.raises(KeyError) as raised:
        backends.flags({"cudnn.benchmark": True, name: True})
    assert str(raised.value) == f"unknown flag {name!r}; {hint}"
    assert state() == before


@pytest.mark.parametrize("name", ["cuda.enable_fancy_sdp", "cuda.matmul", "cudnn.conv", "cudnn.flags", "cuda.sdp"])
def test_no_hint_in_a_mapping_where_no_flag_is_near(name: str) -> None:
    with pytest.raises(KeyError) as raised:
        backends.flags({name: True})
    assert str(raised.value) == f"unknown flag {name!r}"


@pytest.mark.parametrize(("prefix", "name"), [("cuda", "enable_fancy_sdp"), ("cuda", "sdp"), ("mps", "enabled")])
def test_no_hint_on_a_namespace_where_no_flag_is_near(prefix: str, name: str) -> None:
    with pytest.raises(AttributeError) as raised:
        getattr(owner(prefix), name)
    assert "did you mean" not in str(raised.value) and "cudnn" not in str(raised.value)
