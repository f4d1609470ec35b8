"""Probe the real CuPy / CUDA library / cuDNN frontend wheels in a fresh interpreter.

Run by ``tests/test_real_wheels.py`` (``python tests/real_wheels_probe.py ORDER``); it prints
one JSON object and never calls a CUDA function with a handle: it imports modules and reads
attributes and docstrings. The only CUDA calls are the ones ``backends.sync()`` makes (a device
query, which fails without a driver). ORDER is one of:

``cupy alone``
    CuPy and the CUDA library modules, no ``backends`` (the ground truth).
``backends first``
    ``import backends``, then CuPy, then the CUDA library modules.
``cupy first``
    ``import cupy``, then ``backends``, then the CUDA library modules (imported lazily, as CuPy does).
``libraries first``
    CuPy and every CUDA library module, then ``backends`` (hooks run on already-imported modules).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
import warnings
from typing import Any

# Running this file puts tests/ first on sys.path: drop it, so only installed packages answer.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

ORDERS = ("cupy alone", "backends first", "cupy first", "libraries first")

#: The modules the sync layer wraps, with the statement that imports each the way CuPy does.
#: cuBLAS and cuSOLVER go through ``cupy_backends.cuda.libs.__getattr__``, which loads the
#: shared library with cuda-pathfinder first (a plain ``import cupy_backends.cuda.libs.cublas``
#: fails to find ``libcublas.so.12`` in a wheel install).
LIBRARIES = {
    "cupy_backends.cuda.libs.cublas": "from cupy_backends.cuda.libs import cublas",
    "cupy_backends.cuda.libs.cusolver": "from cupy_backends.cuda.libs import cusolver",
    "cupy.cuda.cufft": "from cupy.cuda import cufft",
    "cupy.fft._fft": "import cupy.fft._fft",
    "cupyx.scipy.fft": "import cupyx.scipy.fft",
    "cupyx.scipy.linalg": "import cupyx.scipy.linalg",
    "cupyx.cudnn": "import cupyx.cudnn",  # CuPy 13 (needs libcudnn.so.8); gone in CuPy 14
    "cupy.cudnn": "import cupy.cudnn",  # CuPy 13's deprecated alias, filled by `from cupyx.cudnn import *`
    "cudnn": "import cudnn",
    "cupyx.scipy.ndimage": "import cupyx.scipy.ndimage",
    "cupyx.scipy.sparse": "import cupyx.scipy.sparse",
    "cupyx.cusparse": "import cupyx.cusparse",  # loads libcusparse (absent from some installs)
}
#: algorithms.deterministic's wrap points: (module, owner attribute path or "", attribute)
DETERMINISM_POINTS = (
    ("cupy._core.core", "ndarray", "_scatter_op"),
    ("cupy.cuda.cub", "", "cub_scan"),
    ("cupy._statistics.histogram", "", "_bincount_with_weight_kernel"),
    ("cupy._statistics.histogram", "", "_weighted_histogram_kernel"),
    ("cupyx.scipy.ndimage._measurements", "", "_ndimage_sum_kernel"),
    ("cupyx.scipy.ndimage._measurements", "", "_ndimage_mean_kernel"),
    ("cupyx.scipy.ndimage._measurements", "", "_ndimage_variance_kernel"),
    ("cupyx.scipy.sparse._coo", "_coo_base|coo_matrix", "sum_duplicates"),
    ("cupyx.scipy.sparse._compressed", "_compressed_sparse_matrix", "_get_intXint"),
    ("cupy_backends.cuda.libs.cusparse", "", "spMV"),
    ("cupy_backends.cuda.libs.cusparse", "", "spMM"),
    ("cupy_backends.cuda.libs.cusparse", "", "spMV_bufferSize"),
    ("cupy_backends.cuda.libs.cusparse", "", "spMM_bufferSize"),
)
#: CuPy's Python modules that call cuSPARSE's generic SpMV / SpMM (and their size queries)
CUSPARSE_CALLERS = (
    "cupyx.cusparse",
    "cupyx.scipy.sparse.linalg._iterative",
    "cupyx.scipy.sparse.linalg._eigen",
)
#: CuPy 13's convolutions that the cudnn target wraps
CONVOLUTIONS = ("convolution_forward", "convolution_backward_filter", "convolution_backward_data")
#: the cuDNN frontend graph methods whose signatures the cudnn_frontend target relies on
GRAPH_METHODS = (
    "__init__",
    "build",
    "validate",
    "build_operation_graph",
    "create_execution_plans",
    "check_support",
    "build_plans",
    "deselect_numeric_notes",
    "execute",
    "execute_plan_at_index",
)


def _outcome(call: Any) -> list[str]:
    try:
        return ["ok", repr(call())]
    except BaseException as error:  # report, never raise: the test decides
        return [type(error).__name__, str(error)]


def _import_libraries(report: dict[str, Any]) -> None:
    for name, statement in LIBRARIES.items():
        try:
            if importlib.util.find_spec(name) is None:  # not part of this CuPy, or not installed
                report["imports"][name] = ["absent", f"no module named {name}"]
                continue
        except ImportError as error:  # a parent package fails to import
            report["imports"][name] = [type(error).__name__, str(error)]
            continue
        try:
            exec(statement, {})
            report["imports"][name] = ["ok", ""]
        except BaseException as error:
            report["imports"][name] = [type(error).__name__, str(error)]


def _first_doc_line(function: Any) -> str:
    doc = getattr(function, "__doc__", None) or ""
    lines = doc.strip().splitlines()
    return lines[0].strip() if lines else ""


def _describe(owner: Any, name: str, value: Any, full_doc: bool = False) -> dict[str, Any]:
    """What a test needs to know about one attribute: is it a backends wrapper, and what
    is the real object behind it (its type, name, docstring)."""
    original = getattr(value, "__backends_wrapped__", None)
    real = value if original is None else original
    entry: dict[str, Any] = {
        "wrapped": original is not None,
        "kind": type(real).__name__,
        "real_name": getattr(real, "__name__", None),
        "doc": _first_doc_line(real),
        # a wrapper of a wrapper: the module was wrapped twice without unwrapping first
        "double": original is not None and hasattr(original, "__backends_wrapped__"),
    }
    if full_doc:
        entry["full_doc"] = getattr(real, "__doc__", None) or ""
    if isinstance(owner, type(sys)):
        # a Cython builtin of this module is bound to it (``__self__``); a wrapper must keep
        # the module's own function, not one taken from elsewhere
        entry["bound_to_module"] = getattr(real, "__self__", None) is owner
    return entry


def _callables(module: Any) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for name in sorted(dir(module)):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if callable(value) and not isinstance(value, type):
            table[name] = _describe(module, name, value)
    return table


def _split_top(text: str) -> list[str]:
    """Split ``text`` at the commas outside brackets and quotes (pybind11 signatures have
    ``dict[a, b]`` types and ``<enum.VALUE: 0>`` defaults)."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[(<{":
            depth += 1
        elif char in "])>}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return [part.strip() for part in parts]


def _overloads(name: str, function: Any) -> list[list[list[str]]]:
    """Each overload of a graph method as [[parameter, annotation], ...] without ``self``: from
    ``inspect.signature`` (a Python method) or from pybind11's docstring lines
    (``build(self: cudnn._compiled_module.pygraph, arg0: list[heur_mode]) -> None``)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        pass
    else:
        kinds: dict[Any, str] = {
            inspect.Parameter.VAR_POSITIONAL: "*",
            inspect.Parameter.VAR_KEYWORD: "**",
            inspect.Parameter.KEYWORD_ONLY: "kw:",
        }
        if not any(
            p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()
        ) or "Overloaded function" not in (function.__doc__ or ""):
            return [
                [
                    [kinds.get(p.kind, "") + p.name, "" if p.annotation is p.empty else str(p.annotation)]
                    for p in list(signature.parameters.values())
                    if p.name != "self"
                ]
            ]
    found = []
    for line in (getattr(function, "__doc__", None) or "").splitlines():
        match = re.match(rf"^\s*(?:\d+\.\s+)?{re.escape(name)}\((.*)\)\s*(?:->.*)?$", line)
        if match is None or match.group(1) in ("*args, **kwargs",):
            continue
        params = []
        for part in _split_top(match.group(1)):
            declared, _, annotation = part.partition(":")
            annotation = annotation.split("=")[0].strip()
            if declared.strip() != "self":
                params.append([declared.split("=")[0].strip(), annotation])
        found.append(params)
    return found


def _frontend(report: dict[str, Any]) -> None:
    cudnn = sys.modules.get("cudnn")
    if cudnn is None:
        return
    graph = getattr(cudnn, "pygraph", None)
    info: dict[str, Any] = {
        "version": getattr(cudnn, "__version__", None),
        "file": getattr(cudnn, "__file__", None),
        "pygraph": None if graph is None else f"{graph.__module__}.{graph.__qualname__}",
        "pygraph_metaclass": None if graph is None else type(graph).__name__,
        "module_wrapped": {},
        "pygraph_methods": {},
    }
    for name in sorted(dir(cudnn)):
        value = getattr(cudnn, name, None)
        if hasattr(value, "__backends_wrapped__"):
            info["module_wrapped"][name] = _describe(cudnn, name, value, full_doc=True)
    if graph is not None:
        for name in sorted(dir(graph)):
            if name.startswith("__"):
                continue
            value = getattr(graph, name, None)
            if callable(value):
                info["pygraph_methods"][name] = _describe(graph, name, value, full_doc=True)
        info["signatures"] = {}
        for name in GRAPH_METHODS:
            value = inspect.getattr_static(graph, name, None)
            if value is None:
                continue
            real = getattr(value, "__backends_wrapped__", value)
            info["signatures"][name] = {
                "kind": type(real).__name__,
                "overloads": _overloads(name, real),
                "wrapped": real is not value,
            }
        build = getattr(
            inspect.getattr_static(graph, "build", None), "__backends_wrapped__", None
        ) or inspect.getattr_static(graph, "build", None)
        info["build_is_python"] = inspect.isfunction(build)
        # a Python build (1.32) reaches the other stages as attributes: which ones
        info["build_calls"] = re.findall(r"self\.(\w+)\(", inspect.getsource(build)) if info["build_is_python"] else []
        info["has_context"] = inspect.getattr_static(graph, "context", None) is not None
    context_class = getattr(cudnn, "GraphContext", None)
    info["context_fields"] = sorted(getattr(context_class, "__dataclass_fields__", {})) if context_class else []
    info["enums"] = {
        enum: sorted(n for n in dir(getattr(cudnn, enum, None)) if n.isupper())
        for enum in ("numerical_note", "data_type", "heur_mode", "build_plan_policy")
    }
    report["frontend"] = info


def _calls_of(module_name: str, function: str) -> dict[str, Any] | None:
    """How a CuPy Python module's source reaches ``function``: bare calls (a module global,
    looked up at call time, so wrapping the module attribute is seen) and imports of it
    inside a function (a local binding that a wrapper on the module would not reach)."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as source:
        lines = source.read().splitlines()
    bare = re.compile(rf"(?<![\w.]){function}\(")
    return {
        "file": spec.origin,
        "bare_calls": [n for n, line in enumerate(lines, 1) if bare.search(line) and "import" not in line],
        "module_level_imports": [
            n
            for n, line in enumerate(lines, 1)
            if line.startswith(("from ", "import ")) and re.search(rf"\b{function}\b", line)
        ],
        "local_imports": [
            n
            for n, line in enumerate(lines, 1)
            if line[:1].isspace() and re.match(r"\s+(from|import)\s", line) and re.search(rf"\b{function}\b", line)
        ],
    }


def _cufft(report: dict[str, Any]) -> None:
    report["plan_cache_callers"] = {
        name: _calls_of(name, "get_plan_cache") for name in ("cupy.fft._fft", "cupyx.scipy.fftpack._fft")
    }
    module = sys.modules.get("cupy.fft._fft")
    if module is None:
        return
    table = {}
    for name in sorted(vars(module)):
        value = vars(module)[name]
        if hasattr(value, "__backends_wrapped__") or name == "get_plan_cache":
            table[name] = _describe(module, name, value)
            table[name]["real_module"] = getattr(getattr(value, "__backends_wrapped__", value), "__module__", None)
    report["modules"]["cupy.fft._fft"] = table


def _determinism(report: dict[str, Any], backends: Any) -> None:
    """Which of algorithms.deterministic's wrap points are wrapped, and what a deterministic
    scope does to CuPy's own entry points on an array that has no device memory behind it
    (a ``MemoryPointer`` on ``UnownedMemory(0, ...)``, built without a driver): a refused
    operation must raise before its first CUDA call, and ``cub_scan`` must decline. (Outside the
    scope these would make CUDA calls, which CuPy 13 reports on stderr without a driver.)"""
    import cupy

    points: dict[str, Any] = {}
    for module_name, owners, name in DETERMINISM_POINTS:
        module = sys.modules.get(module_name)
        if module is None:
            points[f"{module_name}:{name}"] = "module not imported"
            continue
        owner = module
        for candidate in owners.split("|") if owners else []:
            if hasattr(module, candidate):
                owner = getattr(module, candidate)
                break
        value = inspect.getattr_static(owner, name, None)
        points[f"{module_name}:{name}"] = None if value is None else _describe(owner, name, value)
    report["determinism_points"] = points
    if backends is None:
        return
    import numpy

    memory = cupy.cuda.UnownedMemory(0, 16, None, device_id=0)
    fake = cupy.ndarray((4,), cupy.float32, memptr=cupy.cuda.MemoryPointer(memory, 0))
    cub = sys.modules["cupy.cuda.cub"]
    with backends.algorithms.flags(deterministic=True):
        inside = report["determinism_in_scope"] = {
            # an index that can repeat (a list: CuPy converts it later, after the check)
            "cupy.add.at": _outcome(lambda: cupy.add.at(fake, [0, 0], 1.0)),
            "cub_scan": _outcome(lambda: cub.cub_scan(fake, cub.CUPY_CUB_CUMSUM)),
        }
        if int(cupy.__version__.split(".")[0]) >= 14:  # 13's __array_ufunc__ asks for a stream first
            inside["numpy.add.at"] = _outcome(lambda: numpy.add.at(fake, numpy.array([0, 0]), 1.0))


def _generic_calls(module_name: str) -> dict[str, Any] | None:
    """Every call of ``spMV``, ``spMM`` and their ``_bufferSize`` in a CuPy Python module's source:
    through which name it is made and its arguments (top-level, as written)."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as source:
        text = source.read()
    calls = []
    for match in re.finditer(r"([\w.]*)\b(spM[VM](?:_bufferSize)?)\(", text):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        calls.append({
            "through": match.group(1), "function": match.group(2),
            "arguments": [" ".join(a.split()) for a in _split_top(text[match.end() : end - 1])],
            "line": text.count("\n", 0, match.start()) + 1,
        })  # fmt: skip
    imports = re.findall(
        r"^\s*(from cupy_backends\.cuda\.libs import cusparse as \w+|.*\bimport spM[VM]\b.*)$", text, re.M
    )
    return {"file": spec.origin, "calls": calls, "imports": imports}


def _cusparse(report: dict[str, Any], backends: Any) -> None:
    """What the cusparse target relies on in the real bindings: the constants, and the format
    that ``spMatGetFormat`` answers for descriptors made by ``createCsr``/``Coo``/``Csc`` (host
    calls: no GPU needed); with backends, the algorithm its tables give each of them. And the
    sparse classes' minor-axis indexing paths (``_fill_B``, ``_minor_index_fancy_sorted``)."""
    report["cusparse_callers"] = {name: _generic_calls(name) for name in CUSPARSE_CALLERS}
    compressed = sys.modules.get("cupyx.scipy.sparse._compressed")
    if compressed is not None:
        matrix = compressed._compressed_sparse_matrix
        fancy = inspect.getattr_static(matrix, "_minor_index_fancy", None)
        report["minor_index"] = {
            "fill_B": inspect.getattr_static(matrix, "_fill_B", None) is not None,
            "sorted": inspect.getattr_static(matrix, "_minor_index_fancy_sorted", None) is not None,
            "fancy": None if fancy is None else _describe(matrix, "_minor_index_fancy", fancy),
        }
    module = sys.modules.get("cupy_backends.cuda.libs.cusparse")
    if module is None:
        return
    names = (
        "CUSPARSE_FORMAT_CSR", "CUSPARSE_FORMAT_CSC", "CUSPARSE_FORMAT_COO", "CUSPARSE_OPERATION_NON_TRANSPOSE",
        "CUSPARSE_MV_ALG_DEFAULT", "CUSPARSE_MM_ALG_DEFAULT", "CUSPARSE_CSRMV_ALG2", "CUSPARSE_COOMM_ALG2",
    )  # fmt: skip
    info: dict[str, Any] = {"constants": {n: getattr(module, n, None) for n in names}, "formats": {}, "algorithms": {}}
    info["legacy"] = {  # the legacy products: name -> wrapped
        n: hasattr(getattr(module, n), "__backends_wrapped__")
        for n in sorted(dir(module))
        if re.fullmatch(r"[sdcz]csrm(v|m|m2)", n)
    }
    index = module.CUSPARSE_INDEX_32I
    makers = {
        "csr": lambda: module.createCsr(4, 4, 0, 16, 0, 0, index, index, 0, 0),
        "coo": lambda: module.createCoo(4, 4, 0, 0, 0, 0, index, 0, 0),
        "csc": lambda: module.createCsc(4, 4, 0, 16, 0, 0, index, index, 0, 0),
    }
    target = importlib.import_module("backends.sync.cusparse") if backends is not None else None
    for name, make in makers.items():
        try:
            desc = make()
        except BaseException as error:
            info["formats"][name] = [type(error).__name__, str(error)]
            continue
        try:
            info["formats"][name] = ["ok", module.spMatGetFormat(desc)]
            if target is not None and "cusparse" in importlib.import_module("backends.sync").installed:
                for routine in (target.SPMV, target.SPMM):
                    for op in (0, 1):
                        info["algorithms"][f"{routine.name} {name} op={op}"] = target.algorithm(routine, op, desc)
        finally:
            module.destroySpMat(desc)
    report["cusparse"] = info


def main(order: str) -> dict[str, Any]:
    report: dict[str, Any] = {"order": order, "imports": {}, "modules": {}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        backends: Any = None
        if order == "backends first":
            import backends
        import cupy

        report["cupy"] = cupy.__version__
        report["cupy_file"] = cupy.__file__
        if order == "libraries first":
            _import_libraries(report)
        if order == "cupy first":
            import backends
        if order != "libraries first":
            _import_libraries(report)
        if order == "libraries first":
            import backends

        for name in ("cupy_backends.cuda.libs.cublas", "cupy_backends.cuda.libs.cusolver"):
            module = sys.modules.get(name)
            if module is not None:
                report["modules"][name] = _callables(module)
        _cufft(report)
        _frontend(report)
        _determinism(report, backends)
        _cusparse(report, backends)
        for name in ("cupyx.cudnn", "cupy.cudnn"):
            module = sys.modules.get(name)
            if module is not None:
                report["modules"][name] = {
                    c: _describe(module, c, getattr(module, c)) for c in CONVOLUTIONS if hasattr(module, c)
                }
        if "cupyx.cudnn" in sys.modules and "cupy.cudnn" in sys.modules:
            report["cudnn_alias_same"] = {
                c: getattr(sys.modules["cupy.cudnn"], c, None) is getattr(sys.modules["cupyx.cudnn"], c, None)
                for c in CONVOLUTIONS
            }
        report["aliases"] = {
            "cupy.cuda.cublas": getattr(cupy.cuda, "cublas", None) is sys.modules.get("cupy_backends.cuda.libs.cublas"),
            "cupy.cuda.cusolver": getattr(cupy.cuda, "cusolver", None)
            is sys.modules.get("cupy_backends.cuda.libs.cusolver"),
        }
        report["cupy.cuda.is_available"] = _outcome(cupy.cuda.is_available)
        if backends is not None:
            # ``backends.sync`` is the function; the package is sys.modules["backends.sync"]
            sync_layer = importlib.import_module("backends.sync")
            sync_cublas = importlib.import_module("backends.sync.cublas")
            hooks = importlib.import_module("backends.sync.hooks")

            report["failures_after_import"] = [
                [name, type(error).__name__, str(error), "".join(traceback.format_exception(error))]
                for name, error in hooks.failures
            ]
            report["backends_file"] = backends.__file__
            report["installed"] = sorted(sync_layer.installed)
            report["target_modules_imported"] = {name: name in sys.modules for name in sync_layer.TARGETS}
            report["targets"] = dict(sync_layer.TARGETS)
            report["gemms"] = {name: list(where) for name, where in sync_cublas._GEMMS.items()}
            report["backends.sync"] = _outcome(backends.sync)
            report["backends.cuda.is_available"] = _outcome(backends.cuda.is_available)
            report["failures"] = [
                [name, type(error).__name__, str(error), "".join(traceback.format_exception(error))]
                for name, error in hooks.failures
            ]
    report["warnings"] = [f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})" for w in caught]
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ORDERS:
        sys.exit(f"usage: python {sys.argv[0]} {{{' | '.join(ORDERS)}}}")
    print(json.dumps(main(sys.argv[1])))
