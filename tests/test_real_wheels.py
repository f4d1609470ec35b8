"""The sync layer against the REAL CuPy, CUDA library and cuDNN frontend wheels, without a GPU.

CI's real-wheel job (``.ci/run``) runs this file in two virtual environments: ``cupy-cuda12x``
14 with the ``nvidia-*-cu12`` library wheels that ``cupy_backends.cuda.libs.cublas``,
``cusolver`` and ``cupy.cuda.cufft`` load, cuDNN 9 and NVIDIA's cuDNN frontend (the newest
release, then again with 1.23 first on ``PYTHONPATH``); and ``cupy-cuda12x`` 13 with the same
libraries and cuDNN 8, for ``cupyx.cudnn`` and its ``cupy.cudnn`` alias. There it sets
``REAL_WHEELS_CUPY`` (and ``REAL_WHEELS_FRONTEND``) to the versions it installed, and then no
check of what was installed may skip: a broken install fails the job. What a release lacks
(``cupyx.cudnn`` on CuPy 14, the frontend beside CuPy 13) skips, saying so; elsewhere the file
skips, saying why.

Every check runs in a fresh interpreter (``tests/real_wheels_probe.py``), for each import order:
``backends`` first, ``cupy`` first (CUDA libraries imported lazily afterwards, as CuPy does), and
every CUDA library module before ``backends``. Nothing calls a CUDA function with a handle: the
probe imports modules and reads attributes and the Cython docstrings, whose first line is the
function's signature, e.g. ``gemmEx(intptr_t handle, int transa, ..., int computeType, int algo)``.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import backends

HERE = Path(__file__).resolve().parent
PROBE = HERE / "real_wheels_probe.py"
#: set by .ci/run's real-wheel job: the versions it installed; then no check may skip
EXPECTED_CUPY = os.environ.get("REAL_WHEELS_CUPY", "")
EXPECTED_FRONTEND = os.environ.get("REAL_WHEELS_FRONTEND", "")  # "" when not installed

ORDERS = ("backends first", "cupy first", "libraries first")
CUBLAS = "cupy_backends.cuda.libs.cublas"
CUSOLVER = "cupy_backends.cuda.libs.cusolver"

#: Handle-taking cuBLAS functions that need not be wrapped: they launch no kernel, so the math
#: mode is irrelevant to them (CuPy calls the stream ones before every routine).
CUBLAS_NOT_LAUNCHES = {
    "destroy": "handle life cycle: ends the handle (a wrapper may only do bookkeeping)",
    "getVersion": "reads the library version",
    "getMathMode": "reads the math mode",
    "setMathMode": "sets the math mode itself (a wrapper may only observe it)",
    "getPointerMode": "reads the pointer mode",
    "setPointerMode": "sets the pointer mode (host/device scalars), launches nothing",
    "getStream": "reads the handle's stream",
    "setStream": "sets the handle's stream; CuPy calls it before every routine",
}
#: Handle-taking cuSOLVER functions that are handle and stream management, not routines.
CUSOLVER_MANAGEMENT = {
    "destroy": "handle life cycle",
    "spDestroy": "handle life cycle (cuSOLVER Sp)",
    "getStream": "reads the handle's stream",
    "setStream": "sets the handle's stream; CuPy calls it before every routine",
}

_SIGNATURE = re.compile(r"^(?P<name>\w+)\((?P<params>.*)\)(?:\s*->\s*(?P<returns>.+))?$")


def parameters(doc_line: str, name: str) -> list[str] | None:
    """Parameter names from a Cython signature line, e.g.
    ``gemmEx(intptr_t handle, int transa, ..., int algo)`` -> ``["handle", "transa", ..., "algo"]``;
    ``None`` when the line is not ``name``'s signature."""
    match = _SIGNATURE.match(doc_line.strip())
    if match is None or match["name"] != name:
        return None
    text = match["params"].strip()
    if not text:
        return []
    names = []
    for declaration in text.split(","):
        declaration = declaration.split("=")[0].strip()  # drop a default value
        # the name is the last word; a bare "*" (keyword-only parameters follow) is kept
        names.append("*" if declaration == "*" else declaration.split()[-1].lstrip("*&"))
    return names


# -- the environment --------------------------------------------------------------------------
def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    # cwd outside the checkout: only what is installed answers
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(), **kwargs)


@functools.cache
def _why_not_real() -> str | None:
    """``None`` when the real wheels are here, else why not."""
    spec = importlib.util.find_spec("cupy")
    if spec is None:
        return "CuPy is not installed"
    if spec.origin and "standin" in Path(spec.origin).parts:
        return f"the CuPy found is the stand-in ({spec.origin})"
    done = _run(
        [
            sys.executable,
            "-c",
            "import cupy; from cupy_backends.cuda.libs import cublas, cusolver; from cupy.cuda import cufft",
        ]
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return f"the CUDA library wheels do not load: {last}"
    return None


@pytest.fixture(scope="module", autouse=True)
def _real_wheels() -> None:
    why = _why_not_real()
    if why is None:
        return
    if EXPECTED_CUPY:
        pytest.fail(f"REAL_WHEELS_CUPY={EXPECTED_CUPY} (the real-wheel CI job) but {why}", pytrace=False)
    pytest.skip(f"needs the real cupy-cuda12x and nvidia-*-cu12 wheels (CI's real-wheel job in .ci/run): {why}")


@functools.cache
def probe(order: str) -> dict[str, Any]:
    done = _run([sys.executable, str(PROBE), order])
    assert done.returncode == 0, f"probe {order!r} crashed:\n{done.stderr}"
    assert done.stderr == "", f"probe {order!r} wrote to stderr:\n{done.stderr}"
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def frontend_expected() -> bool:
    return bool(probe("cupy alone")["imports"]["cudnn"][0] == "ok")


def need_frontend() -> None:
    if not frontend_expected():
        if EXPECTED_FRONTEND:
            pytest.fail(f"REAL_WHEELS_FRONTEND={EXPECTED_FRONTEND} but `import cudnn` fails", pytrace=False)
        pytest.skip("NVIDIA's cuDNN frontend (nvidia-cudnn-frontend) is not installed")


def need_cupy13_cudnn() -> None:
    if probe("cupy alone")["imports"]["cupyx.cudnn"][0] != "ok":
        if EXPECTED_CUPY.startswith("13."):
            pytest.fail(
                f"REAL_WHEELS_CUPY={EXPECTED_CUPY} but cupyx.cudnn does not import: "
                f"{probe('cupy alone')['imports']['cupyx.cudnn']}",
                pytrace=False,
            )
        pytest.skip(f"cupyx.cudnn is CuPy 13's (needs libcudnn.so.8); CuPy here is {probe('cupy alone')['cupy']}")


def signatures(module: str) -> dict[str, list[str] | None]:
    """name -> parameter names of every public function of ``module``, from the real
    (unwrapped) docstrings, read without backends."""
    table = probe("cupy alone")["modules"][module]
    return {name: parameters(entry["doc"], name) for name, entry in table.items()}


def handle_taking(module: str) -> list[str]:
    return sorted(name for name, params in signatures(module).items() if params and params[0] == "handle")


# -- what is installed ------------------------------------------------------------------------
def test_the_real_wheels_are_the_ones_ci_installed() -> None:
    alone = probe("cupy alone")
    assert "standin" not in Path(alone["cupy_file"]).parts, alone["cupy_file"]
    if EXPECTED_CUPY:
        assert alone["cupy"] == EXPECTED_CUPY
    else:
        assert alone["cupy"].split(".")[0] in ("13", "14"), alone["cupy"]
    failed = {name: why for name, why in alone["imports"].items() if why[0] not in ("ok", "absent")}
    assert failed == {}, f"CUDA library modules that do not import even without backends: {failed}"
    # the probes import the backends under test (an editable install of another checkout would not be)
    for order in ORDERS:
        assert probe(order)["backends_file"] == backends.__file__, (order, probe(order)["backends_file"])
    version = alone.get("frontend", {}).get("version")
    if EXPECTED_CUPY:  # the CI job says which frontend it put first on the path
        assert version == (EXPECTED_FRONTEND or None), (version, alone["imports"]["cudnn"])


@pytest.mark.parametrize("order", ORDERS)
def test_backends_changes_no_import_and_warns_nothing(order: str) -> None:
    alone, report = probe("cupy alone"), probe(order)
    assert report["imports"] == alone["imports"]
    # CuPy's own (CuPy 13: "cupy.cudnn is deprecated"), and none from backends
    assert report["warnings"] == alone["warnings"]
    assert report["aliases"] == {"cupy.cuda.cublas": True, "cupy.cuda.cusolver": True}
    # CuPy 14 answers False without a driver; CuPy 13 raises CUDARuntimeError
    assert report["cupy.cuda.is_available"] == alone["cupy.cuda.is_available"]
    assert report["backends.cuda.is_available"] == ["ok", "False"]
    assert report["backends.sync"] == ["ok", "None"]


@pytest.mark.parametrize("order", ORDERS)
def test_every_target_installs_on_the_real_modules(order: str) -> None:
    report = probe(order)
    failures = "\n".join(
        f"--- hook on {name}: {kind}: {message}\n{trace}" for name, kind, message, trace in report["failures"]
    )
    assert report["failures"] == [], f"hook failures ({order}):\n{failures}"
    expected = {"cublas", "cufft", "cusolver"} | ({"cudnn_frontend"} if frontend_expected() else set())
    assert expected <= set(report["installed"]), f"installed {report['installed']}, expected at least {expected}"
    # and, generally: every target whose CuPy module was imported is installed on it
    missing = [
        f"{report['targets'][module]} (on {module})"
        for module, imported in report["target_modules_imported"].items()
        if imported and report["targets"][module] not in report["installed"]
    ]
    assert missing == [], f"targets whose module was imported but that did not install: {missing}"
    if not frontend_expected():
        assert "cudnn_frontend" not in report["installed"]


# -- cuBLAS ------------------------------------------------------------------------------------
def test_the_real_cublas_docstrings_give_every_signature() -> None:
    """The parse the coverage checks rely on: every public function of the real module has a
    signature line naming it; and the handle-taking set includes the routines issue 11 names."""
    unparsed = {
        name: probe("cupy alone")["modules"][CUBLAS][name]["doc"]
        for name, params in signatures(CUBLAS).items()
        if params is None
    }
    assert unparsed == {}, f"cuBLAS docstrings whose first line is not the signature: {unparsed}"
    taking = handle_taking(CUBLAS)
    assert {"gemmEx", "strsm", "ssyrk", "sgemv", "sgetrfBatched", "cgeam", "zgeam"} <= set(taking)
    assert len(taking) > 90, taking
    print(f"\n{len(taking)} handle-taking functions in the real {CUBLAS}: {' '.join(taking)}")


@pytest.mark.parametrize("order", ORDERS)
def test_cublas_wraps_every_handle_taking_function(order: str) -> None:
    table = probe(order)["modules"][CUBLAS]
    taking = handle_taking(CUBLAS)
    stale = sorted(set(CUBLAS_NOT_LAUNCHES) - set(taking))
    assert stale == [], f"exempted in this test but not handle-taking functions of the real module: {stale}"
    unwrapped = [name for name in taking if name not in CUBLAS_NOT_LAUNCHES and not table[name]["wrapped"]]
    assert unwrapped == [], (
        f"{len(unwrapped)} handle-taking cuBLAS functions run without the launching context's math mode "
        f"({order}): {', '.join(unwrapped)}"
    )
    assert table["create"]["wrapped"], "cublas.create is not wrapped: a new handle would not get the creator's mode"


@pytest.mark.parametrize("order", ORDERS)
def test_cublas_wrappers_keep_the_real_functions(order: str) -> None:
    """Same public names and docstrings as CuPy alone, and each wrapper wraps the module's own
    function of its name, once."""
    alone, table = probe("cupy alone")["modules"][CUBLAS], probe(order)["modules"][CUBLAS]
    assert sorted(table) == sorted(alone), "backends added or removed public names of cuBLAS"
    wrong = {
        name: entry
        for name, entry in table.items()
        if entry["wrapped"]
        and (
            entry["real_name"] != name
            or not entry["bound_to_module"]
            or entry["double"]
            or entry["doc"] != alone[name]["doc"]
            or entry["kind"] != alone[name]["kind"]
        )
    }
    assert wrong == {}, f"wrappers whose original is not the real cuBLAS function of that name: {wrong}"


def gemm_table_errors(
    table: Mapping[str, tuple[int | None, int | None]], real: Mapping[str, list[str] | None]
) -> list[str]:
    """What is wrong with ``_GEMMS`` (name -> positional index of ``Atype``, of ``computeType``)
    against the real signatures."""
    errors = []
    for name, indices in sorted(table.items()):
        params = real.get(name)
        if params is None:
            errors.append(f"_GEMMS[{name!r}]: the real module has no function {name}")
            continue
        for index, wanted in zip(indices, ("Atype", "computeType"), strict=True):
            actual = params.index(wanted) if wanted in params else None
            if index != actual:
                at = "no such parameter" if actual is None else f"parameter {actual}"
                found = params[index] if index is not None and index < len(params) else None
                errors.append(
                    f"_GEMMS[{name!r}] says {wanted} is positional {index} ({found!r} there), but the real "
                    f"{name}({', '.join(params)}) has {wanted} at {at}"
                )
    for name, params in sorted(real.items()):
        if params and params[0] == "handle" and {"Atype", "computeType"} & set(params) and name not in table:
            errors.append(f"{name}({', '.join(params)}) takes a data/compute type but is not in _GEMMS")
    return errors


def test_gemm_indices_match_the_real_signatures() -> None:
    """Every positional index the cuBLAS wrappers assume (``backends.sync.cublas._GEMMS``) names
    the real parameter, so a CuPy release that moves one fails CI, not a user's GPU job."""
    table = {name: tuple(where) for name, where in probe("backends first")["gemms"].items()}
    assert table, "backends.sync.cublas._GEMMS is empty"
    errors = gemm_table_errors(table, signatures(CUBLAS))
    assert errors == [], "\n".join(errors)


def test_the_gemm_index_check_catches_a_moved_parameter() -> None:
    """The check above can fail, with a message naming the function and the parameter."""
    table: dict[str, tuple[int | None, int | None]] = {
        name: tuple(where) for name, where in probe("backends first")["gemms"].items()
    }
    real = signatures(CUBLAS)
    assert gemm_table_errors(table, real) == []
    broken = dict(table, gemmEx=(8, 18), sgemmEx=(None, None), cublasNope=(1, 2))
    errors = "\n".join(gemm_table_errors(broken, real))
    assert "_GEMMS['gemmEx'] says computeType is positional 18 ('algo' there)" in errors
    assert "has computeType at parameter 17" in errors
    assert "_GEMMS['sgemmEx'] says Atype is positional None" in errors
    assert "no function cublasNope" in errors
    # and a CuPy release that moves computeType (here: swapped with algo) is caught
    moved = copy.deepcopy(real)
    params = moved["gemmEx"]
    assert params is not None
    params[17], params[18] = params[18], params[17]
    assert any(
        "gemmEx" in error and "computeType at parameter 18" in error for error in gemm_table_errors(table, moved)
    )
    del moved["gemmStridedBatchedEx"]
    assert any("no function gemmStridedBatchedEx" in error for error in gemm_table_errors(table, moved))


def _cupy_python_sources() -> Iterator[Path]:
    spec = importlib.util.find_spec("cupy")
    assert spec is not None and spec.origin is not None
    site = Path(spec.origin).parent.parent
    for package in ("cupy", "cupyx"):
        for path in sorted((site / package).rglob("*.py")):
            if "tests" not in path.relative_to(site).parts:
                yield path


def test_cupy_python_code_reaches_cublas_and_cusolver_through_the_module() -> None:
    """CuPy's Python callers look cuBLAS/cuSOLVER functions up on the module at call time
    (``cublas.sgemm(...)``, ``cupy.cuda.cublas.sgetrfBatched``), which is what the wrappers replace;
    none binds a function by name at import (``from ...cublas import sgemm``), which would bypass them."""
    binding = re.compile(r"from\s+(cupy_backends\.cuda\.libs|cupy\.cuda)\.(cublas|cusolver)\s+import\s")
    found = [
        f"{path}:{n}: {line.strip()}"
        for path in _cupy_python_sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if binding.search(line)
    ]
    assert found == [], "\n".join(found)


# -- cuSOLVER, cuFFT ---------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_cusolver_wraps_every_handle_taking_routine(order: str) -> None:
    alone, table = probe("cupy alone")["modules"][CUSOLVER], probe(order)["modules"][CUSOLVER]
    unparsed = [name for name, params in signatures(CUSOLVER).items() if params is None and alone[name]["doc"]]
    assert unparsed == [], f"cuSOLVER docstrings whose first line is not the signature: {unparsed}"
    taking = handle_taking(CUSOLVER)
    assert len(taking) > 150 and "sgetrf" in taking, taking
    assert set(CUSOLVER_MANAGEMENT) <= set(taking)
    unwrapped = [name for name in taking if name not in CUSOLVER_MANAGEMENT and not table[name]["wrapped"]]
    assert unwrapped == [], f"cuSOLVER routines not wrapped ({order}): {unwrapped}"
    wrong = [
        name
        for name, entry in table.items()
        if entry["wrapped"] and (entry["real_name"] != name or not entry["bound_to_module"] or entry["double"])
    ]
    assert wrong == [], f"cuSOLVER wrappers whose original is not the module's own function: {wrong}"


@pytest.mark.parametrize("order", ORDERS)
def test_cufft_wraps_the_plan_cache_lookup_that_cupy_fft_uses(order: str) -> None:
    report = probe(order)
    entry = report["modules"]["cupy.fft._fft"]["get_plan_cache"]
    assert entry["wrapped"], "cupy.fft._fft.get_plan_cache is not wrapped"
    assert (entry["real_name"], entry["real_module"], entry["double"]) == ("get_plan_cache", "cupy.fft._cache", False)
    # the wrapped name is what cupy.fft's transforms call, as a module global, at call time
    calls = report["plan_cache_callers"]["cupy.fft._fft"]
    assert calls["bare_calls"] and calls["module_level_imports"] and not calls["local_imports"], calls


# -- cuDNN frontend ----------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_cudnn_frontend_graph_methods_are_wrapped_around_the_real_ones(order: str) -> None:
    need_frontend()
    alone, report = probe("cupy alone")["frontend"], probe(order)["frontend"]
    assert report["version"] == alone["version"] and report["pygraph"] == alone["pygraph"]
    methods = report["pygraph_methods"]
    # the plan filter must hold for both ways plans are made (frontend <= 1.23: C++ build()
    # calls C++ create_execution_plans directly, so build itself must be wrapped)
    for name in ("build", "create_execution_plans"):
        assert methods[name]["wrapped"], f"cudnn.pygraph.{name} is not wrapped (frontend {report['version']})"
    assert sorted(methods) == sorted(alone["pygraph_methods"]), "backends added or removed pygraph methods"
    wrong = {
        name: entry
        for name, entry in methods.items()
        if entry["wrapped"]
        and (
            entry["double"]
            or entry["full_doc"] != alone["pygraph_methods"][name]["full_doc"]
            or entry["kind"] != alone["pygraph_methods"][name]["kind"]
        )
    }
    assert wrong == {}, f"pygraph wrappers whose original is not the real method: {wrong}"
    if not report["has_context"]:  # <= 1.23: the graph's I/O type is only known from its construction
        assert report["signatures"]["__init__"]["wrapped"], "pygraph has no context, and __init__ is not wrapped"


def _shown(overloads: list[list[list[str]]]) -> str:
    return " | ".join("(" + ", ".join(f"{p}: {a}" if a else p for p, a in params) + ")" for params in overloads)


def test_cudnn_frontend_has_what_the_target_relies_on() -> None:
    """The frontend's real methods, parameters and enums that backends/sync/cudnn_frontend.py
    uses, read from its signatures (pybind11 docstrings on 1.23, Python signatures on 1.32)."""
    need_frontend()
    frontend = probe("cupy alone")["frontend"]
    sigs, enums, release = frontend["signatures"], frontend["enums"], frontend["version"]
    problems = []

    def overloads(name: str) -> list[list[list[str]]]:
        if name not in sigs:
            problems.append(f"cudnn.pygraph.{name} does not exist in frontend {release}")
            return []
        found: list[list[list[str]]] = sigs[name]["overloads"]
        return found

    def positional(params: list[list[str]]) -> list[list[str]]:
        return [p for p in params if not p[0].startswith(("*", "kw:"))]

    # pygraph(name, io_data_type, ...): io_data_type is positional 1 after self (_recording_io_type)
    for params in overloads("__init__"):
        if len(params) < 2 or params[1][0] != "io_data_type":
            problems.append(f"pygraph.__init__{_shown([params])}: positional 1 is not io_data_type")
    # graph.deselect_numeric_notes([notes]) (_drop_plans)
    if not any(len(positional(p)) == 1 for p in overloads("deselect_numeric_notes")):
        problems.append(f"deselect_numeric_notes{_shown(overloads('deselect_numeric_notes'))} takes no single list")
    for enum, names in (
        ("numerical_note", {"NONDETERMINISTIC", "TENSOR_CORE", "DOWN_CONVERT_INPUTS"}),
        ("data_type", {"FLOAT", "NOT_SET"}),
        ("build_plan_policy", {"HEURISTICS_CHOICE"}),
    ):
        if not names <= set(enums[enum]):
            problems.append(f"cudnn.{enum} lacks {sorted(names - set(enums[enum]))} (has {enums[enum]})")
    if frontend["build_is_python"]:
        # 1.32: build() reaches the wrapped create_execution_plans as an attribute; the I/O type is the context's
        if "create_execution_plans" not in frontend["build_calls"]:
            problems.append(f"pygraph.build (Python) calls {frontend['build_calls']}, not self.create_execution_plans")
        if not frontend["has_context"] or "io_data_type" not in frontend["context_fields"]:
            problems.append(f"pygraph.context.io_data_type missing (GraphContext fields {frontend['context_fields']})")
    else:
        # <= 1.23: C++ build(modes) is replayed step by step from Python (_build_in_steps)
        build = overloads("build")
        if not any(len(p) == 1 and "heur_mode" in p[0][1] for p in build) or [] not in build:
            problems.append(f"pybind build{_shown(build)}: not the overloads (modes: list[heur_mode]) and ()")
        plan = overloads("create_execution_plans")
        if not any(len(p) == 1 and "heur_mode" in p[0][1] for p in plan):
            problems.append(f"create_execution_plans{_shown(plan)} does not take (list[heur_mode])")
        for name in ("validate", "build_operation_graph", "check_support"):
            if [] not in overloads(name):
                problems.append(f"pygraph.{name}{_shown(overloads(name))} cannot be called without arguments")
        policy = overloads("build_plans")
        if not any(p and "build_plan_policy" in p[0][1] for p in policy):
            problems.append(f"build_plans{_shown(policy)} does not take a build_plan_policy first")
    assert problems == [], f"frontend {release}:\n" + "\n".join(problems)


# -- CuPy 13's cupyx.cudnn ---------------------------------------------------------------------
CONVOLUTIONS = ("convolution_forward", "convolution_backward_filter", "convolution_backward_data")


@pytest.mark.parametrize("order", ORDERS)
def test_cupy13_convolutions_are_wrapped_in_cupyx_cudnn_and_its_alias(order: str) -> None:
    need_cupy13_cudnn()
    alone, report = probe("cupy alone"), probe(order)
    assert "cudnn" in report["installed"]
    for module in ("cupyx.cudnn", "cupy.cudnn"):
        for name in CONVOLUTIONS:
            entry, real = report["modules"][module][name], alone["modules"][module][name]
            assert entry["wrapped"], f"{module}.{name} is not wrapped ({order})"
            assert (entry["doc"], entry["double"]) == (real["doc"], False), (module, name, entry)
    assert report["cudnn_alias_same"] == dict.fromkeys(CONVOLUTIONS, True), report["cudnn_alias_same"]


def test_cupy13_convolution_signatures_match_what_the_target_assumes() -> None:
    """backends/sync/cudnn.py reads the first array positionally (x; W for backward_data) or by
    those keywords, and passes deterministic / auto_tune / tensor_core by keyword."""
    need_cupy13_cudnn()
    table = probe("cupy alone")["modules"]["cupyx.cudnn"]
    problems = []
    for name, first, keywords in (
        ("convolution_forward", "x", {"auto_tune", "tensor_core"}),
        ("convolution_backward_filter", "x", {"deterministic", "auto_tune", "tensor_core"}),
        ("convolution_backward_data", "W", {"deterministic", "auto_tune", "tensor_core"}),
    ):
        params = parameters(table[name]["doc"], name)
        if params is None:
            problems.append(f"cannot read the signature of {name}: {table[name]['doc']!r}")
            continue
        keyword_only = set(params[params.index("*") + 1 :]) if "*" in params else set()
        if params[0] != first:
            problems.append(f"{name}({', '.join(params)}): positional 0 is {params[0]}, not {first}")
        if not keywords <= keyword_only:
            problems.append(f"{name}({', '.join(params)}): {sorted(keywords - keyword_only)} not keyword-only")
        if name == "convolution_forward" and "deterministic" in params:
            problems.append(f"{name} now takes deterministic: the target must pass it")
    assert problems == [], "\n".join(problems)


# -- python -m backends ------------------------------------------------------------------------
def test_python_m_backends_is_right_here() -> None:
    done = _run([sys.executable, "-m", "backends"])
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert re.search(rf"^\s*CuPy\s+{re.escape(probe('cupy alone')['cupy'])}\s*$", out, re.M), out
    assert re.search(r"^\s*cuda\.is_built\(\)\s+True\s*$", out, re.M), out
    assert re.search(r"^\s*cuda\.is_available\(\)\s+False\s*$", out, re.M), out
    assert re.search(r"^all \d+ checks passed$", out, re.M), out
    if re.search(r"\bcusolver\b", out):  # where the report lists the sync layer's targets: all of them
        for target in ("cublas", "cufft", "cusolver", *(("cudnn_frontend",) if frontend_expected() else ())):
            assert re.search(rf"\b{target}\b", out), f"python -m backends lists targets but not {target}:\n{out}"


# -- algorithms.deterministic ------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
def test_every_determinism_wrap_point_is_wrapped_once(order: str) -> None:
    points = probe(order)["determinism_points"]
    problems = {
        point: entry
        for point, entry in points.items()
        if (entry == "module not imported" and not point.startswith("cupy_backends.cuda.libs.cusparse"))
        or entry is None
        or (isinstance(entry, dict)
        and (not entry["wrapped"] or entry["double"]))
    }
    assert problems == {}, f"not wrapped (once) in the real CuPy {probe(order)['cupy']}: {problems}"


@pytest.mark.parametrize("order", ORDERS)
def test_cupys_own_entry_points_reach_the_checks_before_any_cuda_call(order: str) -> None:
    report = probe(order)
    inside = report["determinism_in_scope"]
    assert ("numpy.add.at" in inside) == (not report["cupy"].startswith("13."))
    for entry_point in ("cupy.add.at", "numpy.add.at"):  # ufunc.at, and NumPy's __array_ufunc__ dispatch
        if entry_point not in inside:
            continue  # CuPy 13: its __array_ufunc__ makes a CUDA call first (without a driver: noise)
        kind, message = inside[entry_point]
        assert kind == "RuntimeError" and message.startswith("cupy.add.at"), (entry_point, inside[entry_point])
    assert inside["cub_scan"] == ["ok", "None"]  # declined: CuPy runs its own scan


def test_the_real_cusparse_routines_take_the_operation_second() -> None:
    report = probe("backends first")
    for name in ("spMV", "spMM"):
        entry = report["determinism_points"][f"cupy_backends.cuda.libs.cusparse:{name}"]
        if entry == "module not imported":
            pytest.skip("libcusparse is not installed here")
        assert entry["doc"].startswith(f"{name}(intptr_t handle, Operation opA,"), entry["doc"]


# -- cuSPARSE's deterministic algorithms, and 14.2's minor-axis indexing (issue 22) ----------------------
def need_cusparse(report: dict[str, Any]) -> dict[str, Any]:
    if "cusparse" not in report:
        if EXPECTED_CUPY and report["imports"]["cupyx.cusparse"][0] != "absent":
            pytest.fail(f"REAL_WHEELS_CUPY={EXPECTED_CUPY} but libcusparse does not load: "
                        f"{report['imports']['cupyx.cusparse']}", pytrace=False)  # fmt: skip
        pytest.skip("libcusparse is not installed here")
    return report["cusparse"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("order", ORDERS)
def test_cusparse_size_queries_and_launches_are_wrapped_once(order: str) -> None:
    report = probe(order)
    need_cusparse(report)
    for name in ("spMV", "spMM", "spMV_bufferSize", "spMM_bufferSize"):
        entry = report["determinism_points"][f"cupy_backends.cuda.libs.cusparse:{name}"]
        assert entry["wrapped"] and not entry["double"] and entry["bound_to_module"], (name, entry)


def test_cupys_callers_reach_the_generic_products_through_the_module_with_the_algorithm_in_place() -> None:
    """Every SpMV / SpMM call (and size query) in CuPy's Python code goes through the module (so
    the wrappers see it), passes every argument positionally, and the algorithm where the
    wrapper reads it: argument 9 of spMV (index 8), argument 10 of spMM (index 9)."""
    report = probe("cupy alone")
    need_cusparse(report)
    seen = set()
    for module, found in report["cusparse_callers"].items():
        assert found is not None, f"{module} is not a Python module of this CuPy"
        assert found["imports"] == ["from cupy_backends.cuda.libs import cusparse as _cusparse"], (module, found)
        for call in found["calls"]:
            where = f"{found['file']}:{call['line']}"
            assert call["through"] == "_cusparse.", where
            at = 8 if call["function"].startswith("spMV") else 9
            expected = at + (1 if call["function"].endswith("_bufferSize") else 2)
            assert len(call["arguments"]) == expected and "=" not in "".join(call["arguments"]), (where, call)
            assert call["arguments"][at] in ("alg", "spmv_alg"), (where, call["arguments"])
            seen.add(call["function"])
    assert seen == {"spMV", "spMV_bufferSize", "spMM", "spMM_bufferSize"}


def test_the_deterministic_algorithms_follow_the_real_descriptors_formats() -> None:
    """Descriptors made by the real cuSPARSE (host calls) answer their format, and the target's
    tables give cusparse.h's deterministic algorithms: SpMV CSR_ALG2 (3) / COO_ALG2 (4), SpMM
    CSR_ALG3 (12) / COO_ALG2 (2), none for a transposed product or a CSC descriptor."""
    info = need_cusparse(probe("backends first"))
    assert info["constants"] == {
        "CUSPARSE_FORMAT_CSR": 1, "CUSPARSE_FORMAT_CSC": 2, "CUSPARSE_FORMAT_COO": 3,
        "CUSPARSE_OPERATION_NON_TRANSPOSE": 0, "CUSPARSE_MV_ALG_DEFAULT": 0, "CUSPARSE_MM_ALG_DEFAULT": 0,
        "CUSPARSE_CSRMV_ALG2": 3, "CUSPARSE_COOMM_ALG2": 2,  # cusparse.h: SPMV_CSR_ALG2, SPMM_COO_ALG2
    }  # fmt: skip
    assert info["formats"] == {"csr": ["ok", 1], "coo": ["ok", 3], "csc": ["ok", 2]}
    assert info["algorithms"] == {
        "spMV csr op=0": 3, "spMV csr op=1": None, "spMM csr op=0": 12, "spMM csr op=1": None,
        "spMV coo op=0": 4, "spMV coo op=1": None, "spMM coo op=0": 2, "spMM coo op=1": None,
        "spMV csc op=0": None, "spMV csc op=1": None, "spMM csc op=0": None, "spMM csc op=1": None,
    }  # fmt: skip
    if probe("backends first")["cupy"].startswith("13."):
        # CuPy 13's CUDA build still binds the legacy products (it never calls them with CUDA 11 and
        # newer: check_availability); guarded all the same, as on ROCm
        legacy = [f"{p}{n}" for p in "cdsz" for n in ("csrmm", "csrmm2", "csrmv")]
        assert info["legacy"] == dict.fromkeys(sorted(legacy), True)
    else:
        assert info["legacy"] == {}  # CuPy 14's CUDA build: no csrmv/csrmm/csrmm2 (its HIP build has them)


@pytest.mark.parametrize("order", ORDERS)
def test_minor_axis_fancy_indexing_is_rerouted_on_cupy14_and_left_alone_on_cupy13(order: str) -> None:
    report = probe(order)
    minor = report.get("minor_index")
    if minor is None:
        pytest.fail(f"cupyx.scipy.sparse did not import: {report['imports']['cupyx.scipy.sparse']}", pytrace=False)
    if report["cupy"].startswith("13."):
        assert (minor["fill_B"], minor["sorted"]) == (False, False)  # through a transpose, no write pointer
        assert minor["fancy"]["wrapped"] is False
    else:
        assert (minor["fill_B"], minor["sorted"]) == (True, True)
        assert minor["fancy"]["wrapped"] is (order != "cupy alone") and not minor["fancy"]["double"]


# -- cuTENSOR (cuda.matmul.allow_tf32 on einsum's contractions) --------------------------------------
_CUTENSOR_PROBE = r"""
import inspect, json, re, sys
order = sys.argv[1]
if order == "backends first":
    import backends
import cupy
import cupy.linalg._einsum as einsum_module
if order == "cupy first":
    import backends
report = {"einsum_source": inspect.getsource(einsum_module)}
try:
    import cupyx.cutensor as cutensor
except ImportError as error:
    report["cutensor"] = ["ImportError", str(error)]
else:
    if order == "libraries first":
        import backends
    import cupy_backends.cuda.libs.cutensor as library
    real = getattr(cutensor.contraction, "__backends_wrapped__", cutensor.contraction)
    report["cutensor"] = ["ok", cutensor.__name__]
    report["wrapped"] = real is not cutensor.contraction
    report["double"] = hasattr(real, "__backends_wrapped__")
    report["doc"] = (real.__doc__ or "").strip().splitlines()[0]
    report["constants"] = {n: getattr(library, n) for n in ("COMPUTE_DESC_32F", "COMPUTE_DESC_TF32")}
from backends.sync import hooks, installed, TARGETS
report["installed"] = sorted(installed)
report["targets"] = dict(TARGETS)
report["failures"] = [[name, repr(error)] for name, error in hooks.failures]
print(json.dumps(report))
"""


@functools.cache
def cutensor_probe(order: str) -> dict[str, Any]:
    done = _run([sys.executable, "-c", _CUTENSOR_PROBE, order])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_einsums_cutensor_path_reaches_the_wrapped_contraction() -> None:
    """cupy/linalg/_einsum.py calls ``cutensor.contraction(...)`` on the ``cupyx.cutensor`` module,
    looked up at call time and without ``compute_desc``: what backends/sync/cutensor.py wraps."""
    report = cutensor_probe("cupy first")
    source = report["einsum_source"]
    assert re.search(r"^\s+from cupyx import cutensor\b", source, re.M), "einsum no longer imports cupyx.cutensor"
    assert not re.search(r"from cupyx\.?_?cutensor import\s", source), "einsum binds a cuTENSOR function by name"
    calls = re.findall(r"cutensor\.contraction\((.*?)\)\n", source, re.S)
    assert len(calls) == 1 and "compute_desc" not in calls[0], calls
    assert report["targets"]["cupyx.cutensor"] == "cutensor"


@pytest.mark.parametrize("order", ORDERS)
def test_cutensor_contraction_is_wrapped_where_cutensor_loads(order: str) -> None:
    report = cutensor_probe(order)
    assert report["failures"] == [], report["failures"]
    if report["cutensor"][0] != "ok":
        assert "cutensor" not in report["installed"]
        # .ci/run installs cutensor-cu12 in one environment and says so: there it may not skip
        assert not os.environ.get("REAL_WHEELS_CUTENSOR"), f"cupyx.cutensor did not load: {report['cutensor'][1]}"
        pytest.skip(f"libcutensor is not installed here (cupyx.cutensor: {report['cutensor'][1]})")
    assert "cutensor" in report["installed"] and report["wrapped"] and not report["double"], report
    params = parameters(report["doc"], "contraction")
    assert params is not None, report["doc"]
    assert [params[i] for i in (1, 3, 6, 13)] == ["A", "B", "C", "compute_desc"], params
    assert report["constants"] == {"COMPUTE_DESC_32F": 4, "COMPUTE_DESC_TF32": 4096}


# -- CuPy's own plan cache size (contract section 8) ------------------------------------------
_PLAN_CACHE_RULE = r"""
import json
import backends
from cupy.fft._cache import PlanCache
import cupy.fft.config
from backends.sync.cufft import fit

MAX_SIZE = "cuda.cufft_plan_cache.max_size"
out = {"config is _cache's": cupy.fft.config.get_plan_cache.__module__ == "cupy.fft._cache"}
refused = []
for size in (-2, -1):
    try:
        PlanCache(dev=0).set_size(size)
    except ValueError:
        refused.append(size)
out["cupy refuses"] = refused
cache = PlanCache(dev=0)  # a real cache: no CUDA call until a plan is stored
seen = []
for size in (0, -1, 64):
    cache.set_size(size)
    fit(cache)
    seen.append(cache.get_size())
out["cupy's own size stands"] = seen
with backends.flags({MAX_SIZE: 5}):
    fit(cache)
    inside = [cache.get_size()]
    cache.set_size(0)  # through CuPy, where the flag is set
    fit(cache)
    inside.append(cache.get_size())
    with backends.cuda.cufft_plan_cache.flags(max_size=-1):
        fit(cache)
        inside.append(cache.get_size())
fit(cache)
out["inside"], out["after"] = inside, cache.get_size()
print(json.dumps(out))
"""


def test_a_size_set_through_the_real_plan_cache_stands_where_the_flag_is_not_set() -> None:
    done = _run([sys.executable, "-c", _PLAN_CACHE_RULE])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = json.loads(done.stdout)
    assert out == {
        "config is _cache's": True,
        "cupy refuses": [-2],  # and takes -1 (unlimited): the flag's range is CuPy's
        "cupy's own size stands": [0, -1, 64],
        "inside": [5, 5, -1],
        "after": 0,  # the size set through CuPy inside the scope is CuPy's own now
    }, out


# -- the import race (issue 22 item 3) --------------------------------------------------------
RACE_PROBE = HERE / "import_race_probe.py"
#: pure-Python modules with a window (CuPy 14.2: all three are imported after ``import cupy``)
RACE_MODULES = ("cupyx.scipy.ndimage._measurements", "cupyx.scipy.sparse._coo", "cupyx.scipy.sparse._compressed")


@pytest.mark.parametrize("module", RACE_MODULES)
@pytest.mark.parametrize("order", ["module first", "backends first", "window"])
def test_import_backends_racing_a_real_import_leaves_it_wrapped(order: str, module: str) -> None:
    done = _run([sys.executable, str(RACE_PROBE), order, module])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    report = json.loads(done.stdout)
    assert report["errors"] == [] and report["failures"] == [], report
    assert report["wrapped"] and all(state is True for state in report["wrapped"].values()), report
    if order == "module first":  # import backends ran while the body was held part-way
        assert all(state is None for state in report["early"]["wrap points"].values()), report
