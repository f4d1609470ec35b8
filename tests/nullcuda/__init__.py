"""The null CUDA: the real CuPy's host code, run on the CPU against CUDA libraries that answer
every call and launch nothing (``nullcuda.c``), recording what each call was given.

On the test side (no CuPy imported):

- ``build()`` compiles ``nullcuda.c`` (with stubs for every cuBLAS / cuSPARSE / cuFFT /
  cuSOLVER / cuTENSOR function the installed CuPy imports that it does not answer),
  ``runtime_shim.c`` and placeholder CUDA libraries with the system ``cc``, into a cache folder
  keyed by the sources and the installed CuPy; ``NullCudaUnavailable`` says why it cannot.
- ``environment(build)`` is the environment a process runs under it: ``LD_PRELOAD``, the
  loader path, the record file, CuPy's kernel cache.

In such a process (``tests/nullcuda/conftest.py`` does it):

- ``activate()`` routes CuPy's runtime module to the null CUDA (``runtime_shim.c`` says why
  that takes more than the loader), before anything else of CuPy is imported;
- ``recording()`` collects the calls made in a block, ``mark()`` writes a label between them.

``python -m tests.nullcuda [pytest arguments]`` builds it and runs pytest under it (by default
the cases in ``tests/nullcuda/``); ``tests/test_null_cuda.py`` runs those cases on both engines.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCES = ("nullcuda.c", "runtime_shim.c", "__init__.py")
CASES = sorted(str(path) for path in HERE.glob("cases_*.py"))

#: library prefix -> (what a stub of a function CuPy imports but nullcuda.c does not answer
#: does, the library's CUBLAS/CUSPARSE/...STATUS_NOT_SUPPORTED)
STUBS = {
    "cublas": ("routine", 15),  # every cuBLAS function CuPy binds takes the handle first
    "cusparse": ("unanswered", 10),
    "cufft": ("unanswered", 16),
    "cusolver": ("unanswered", 9),
    "cutensor": ("unanswered", 15),
    "cudnn": ("unanswered", 9),  # CuPy 13's cupyx.cudnn
}
#: the CUDA libraries nullcuda.c answers in full: a placeholder of each soname CuPy links,
#: preloaded, stands for the real library (not loaded at all): CuPy's modules link it, CuPy's
#: dlopen of it by name and cuda-pathfinder's "already loaded" check find it, and a symbol looked
#: up in it (dlsym, CuPy's SoftLink) is found in the null CUDA, which it links
PLACEHOLDER = re.compile(r"lib(cublas|cusparse|cufft|cusolver|cutensor|cutensorMg|cudnn)\.so\.\d+\Z")
#: functions CuPy 13.6 / 14.2 look up at run time (SoftLink, not linked: nm does not list them)
SOFT_LINKED = (
    "cusparseCreateCsc", "cusparseDenseToSparse_analysis", "cusparseDenseToSparse_bufferSize",
    "cusparseDenseToSparse_convert", "cusparseSpGEAM", "cusparseSpGEAM_bufferSize", "cusparseSpGEAM_createDescr",
    "cusparseSpGEAM_destroyDescr", "cusparseSpGEAM_nnz", "cusparseSpMatSetAttribute", "cusparseSpSM_analysis",
    "cusparseSpSM_bufferSize", "cusparseSpSM_createDescr", "cusparseSpSM_destroyDescr", "cusparseSpSM_solve",
    "cusparseSparseToDense", "cusparseSparseToDense_bufferSize", "cusolverDnXgeev", "cusolverDnXgeev_bufferSize",
    "cufftXtSetJITCallback",
)  # fmt: skip


class NullCudaUnavailable(RuntimeError):
    """The null CUDA cannot be built here (the reason is the message)."""


@dataclass(frozen=True)
class Build:
    """A built null CUDA in ``root``: ``preload`` (the null CUDA, ``libcuda.so.1``, then the
    placeholders of the CUDA libraries), ``shim`` (the runtime module's routing, a CPython
    extension), ``cupy`` (the CuPy distribution it was built for)."""

    root: Path
    preload: tuple[Path, ...]
    shim: Path
    cupy: str

    @classmethod
    def load(cls, root: Path) -> Build:
        made = json.loads((root / "complete").read_text())
        preload = (root / "lib" / "libcuda.so.1", *(root / "lib" / name for name in made["placeholders"]))
        return cls(root, preload, root / made["shim"], made["cupy"])


def _cupy_distribution() -> tuple[str, str]:
    for name in ("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return name, importlib.metadata.version(name)
    raise NullCudaUnavailable("the real CuPy is not installed (pip install cupy-cuda12x)")


def _cupy_extensions() -> list[Path]:
    """CuPy's compiled modules (found without importing CuPy)."""
    found: list[Path] = []
    for package in ("cupy", "cupy_backends", "cupyx"):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise NullCudaUnavailable(f"{package} is not installed")
        for location in spec.submodule_search_locations:
            if "standin" in Path(location).parts:
                raise NullCudaUnavailable(f"the {package} found is the stand-in ({location})")
            found.extend(sorted(Path(location).rglob("*.so")))
    return found


def _run(*command: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise NullCudaUnavailable(f"{' '.join(map(str, command))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _imports(extensions: list[Path]) -> tuple[set[str], dict[str, set[str]]]:
    """The functions CuPy's modules import from the libraries in STUBS (and SOFT_LINKED), and
    the CUDA libraries of PLACEHOLDER they link, with the symbol versions they require of each
    (``readelf``)."""
    names: set[str] = set(SOFT_LINKED)
    versions: dict[str, set[str]] = {}
    for extension in extensions:
        for line in _run("readelf", "-d", "--wide", extension).splitlines():
            if (match := re.search(r"\(NEEDED\).*\[(\S+)\]", line)) and PLACEHOLDER.match(match.group(1)):
                versions.setdefault(match.group(1), set())
        for line in _run("nm", "-D", "--undefined-only", extension).splitlines():
            name = line.split()[-1].split("@")[0]
            if name.startswith(tuple(STUBS)):
                names.add(name)
        needs_from = None
        for line in _run("readelf", "-V", "--wide", extension).splitlines():
            if match := re.search(r"File: (\S+)", line):
                needs_from = match.group(1)
            elif (match := re.search(r"Name: (\S+)", line)) and needs_from and PLACEHOLDER.match(needs_from):
                versions.setdefault(needs_from, set()).add(match.group(1))
    return names, versions


def _stubs(imported: set[str], answered: set[str]) -> str:
    lines = [
        "/* Generated by tests/nullcuda/__init__.py: functions CuPy imports that nullcuda.c does not answer. */",
        "extern int nullcuda_cublas_routine(const char *name, void *handle);",
        "extern int nullcuda_unanswered(const char *name, int status);",
    ]
    for name in sorted(imported - answered):
        prefix = next(prefix for prefix in STUBS if name.startswith(prefix))
        kind, status = STUBS[prefix]
        export = '__attribute__((visibility("default")))'
        if kind == "routine":
            lines.append(f'{export} int {name}(void *handle) {{ return nullcuda_cublas_routine("{name}", handle); }}')
        else:
            lines.append(f'{export} int {name}(void) {{ return nullcuda_unanswered("{name}", {status}); }}')
    return "\n".join(lines) + "\n"


def _placeholder(soname: str, versions: set[str], where: Path) -> Path:
    """A library named ``soname`` that defines nothing but the symbol versions CuPy requires of
    it (the loader checks them) and links the null CUDA, where its symbols are found."""
    ordered = sorted(versions)
    source = where / f"{soname}.c"
    script = where / f"{soname}.map"
    source.write_text("".join(f"int nullcuda_placeholder_{i};\n" for i in range(max(1, len(ordered)))))
    script.write_text(
        "".join(
            f"{version} {{ global: nullcuda_placeholder_{i}; }}{' ' + ordered[i - 1] if i else ''};\n"
            for i, version in enumerate(ordered)
        )
        or "{ local: *; };\n"
    )
    library = where / "lib" / soname
    _run("cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", f"-Wl,--version-script={script}", "-Wl,-rpath,$ORIGIN",
         "-o", library, source, "-Wl,--no-as-needed", where / "lib" / "libcuda.so.1")  # fmt: skip
    return library


def cache_root() -> Path:
    """Where builds are kept: ``NULLCUDA_CACHE``, else the user's cache folder."""
    if os.environ.get("NULLCUDA_CACHE"):
        return Path(os.environ["NULLCUDA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "scoped-backends-nullcuda"


def build(cache: Path | None = None) -> Build:
    """The null CUDA for the installed CuPy and this Python, built once per change of either
    or of the sources (a new folder under ``cache``, made whole before it is used).

    Raises:
        NullCudaUnavailable: no real CuPy, no C compiler or binutils (``cc``, ``nm``,
            ``readelf``), not Linux, or a step failed (its output is in the message).
    """
    if not sys.platform.startswith("linux"):
        raise NullCudaUnavailable(f"the null CUDA is built for Linux (LD_PRELOAD), not {sys.platform}")
    for tool in ("cc", "nm", "readelf"):
        if shutil.which(tool) is None:
            raise NullCudaUnavailable(f"{tool} is not on PATH (the null CUDA is compiled at test time)")
    distribution, version = _cupy_distribution()
    extensions = _cupy_extensions()
    key = hashlib.sha256()
    for source in SOURCES:
        key.update((HERE / source).read_bytes())
    key.update(f"{distribution} {version} {sys.version} {sysconfig.get_config_var('EXT_SUFFIX')}".encode())
    key.update("\n".join(str(path) for path in extensions).encode())
    cache = cache or cache_root()
    root = cache / key.hexdigest()[:16]
    if (root / "complete").exists():
        return Build.load(root)
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=cache, prefix="building-"))
    try:
        (work / "lib").mkdir()
        flags = ("-O1", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra")
        _run("cc", *flags, "-c", HERE / "nullcuda.c", "-o", work / "nullcuda.o")
        answered = {line.split()[-1] for line in _run("nm", "-g", "--defined-only", work / "nullcuda.o").splitlines()}
        imported, versions = _imports(extensions)
        (work / "stubs.c").write_text(_stubs(imported, answered))
        _run("cc", *flags, "-c", work / "stubs.c", "-o", work / "stubs.o")
        _run("cc", "-shared", "-pthread", "-Wl,-soname,libcuda.so.1", "-o", work / "lib" / "libcuda.so.1",
             work / "nullcuda.o", work / "stubs.o")  # fmt: skip
        placeholders = [_placeholder(soname, needed, work).name for soname, needed in sorted(versions.items())]
        include = sysconfig.get_paths()["include"]
        shim = "_nullcuda_runtime" + sysconfig.get_config_var("EXT_SUFFIX")
        _run("cc", *flags, f"-I{include}", "-shared", "-o", work / shim, HERE / "runtime_shim.c")
        made = {"cupy": f"{distribution} {version}", "placeholders": placeholders, "shim": shim,
                "stubs": sorted(imported - answered)}  # fmt: skip
        (work / "complete").write_text(json.dumps(made, indent=1))
        try:
            work.rename(root)
        except OSError:  # another process finished the same build first
            if not (root / "complete").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Build.load(root)


def environment(built: Build, record: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process under the null CUDA ``built``, recording to ``record``.

    CuPy's kernel cache is the build's (NVRTC, the real one, compiles each kernel once); CuPy's
    accelerators are off (CUB links NVIDIA's runtime statically: ``runtime_shim.c``), unless
    ``base`` sets them."""
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = ":".join([*map(str, built.preload), *([preload] if preload else [])])
    env["NULLCUDA_BUILD"] = str(built.root)
    env["NULLCUDA_SHIM"] = str(built.shim)
    env["NULLCUDA_RECORD"] = str(record)
    env.setdefault("NULLCUDA_CUDA_VERSION", "13000" if "cuda13" in built.cupy else "12090")
    env.setdefault("CUPY_CACHE_DIR", str(built.root / "kernels"))
    env.setdefault("CUPY_ACCELERATORS", "")
    return env


# ---------------------------------------------------------------- in the process under it


@dataclass
class Routing:
    """What ``activate()`` did to CuPy's runtime module: the functions routed to the null CUDA,
    and those left to the real module (name -> why), which raise CuPy's ``CUDARuntimeError``
    when called (the static CUDA runtime finds no driver it accepts)."""

    routed: list[str]
    left: dict[str, str]


_routing: Routing | None = None
_CTYPES = {
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "intptr_t": ctypes.c_ssize_t,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "cudaMemcpyKind": ctypes.c_int,
    "PyObject *": ctypes.py_object,
}


class _Optional(ctypes.Structure):
    """Cython's optional-arguments struct of a cpdef function with one default (``__pyx_n``:
    how many are given)."""

    _fields_ = [("n", ctypes.c_int), ("value", ctypes.c_int)]


def _ctype(c_type: str) -> Any:
    if c_type.startswith("struct") and c_type.endswith("*") and "opt_args" not in c_type:
        return ctypes.py_object  # a Cython extension type (PointerAttributes)
    return _CTYPES[c_type]


def _python_function(name: str, signature: str, address: int, original: Any) -> Any:
    """A Python function with ``original``'s name and parameters (its embedded signature) that
    calls the C function at ``address`` (Cython signature ``signature``) with
    ``skip_dispatch`` set, raising what it raises."""
    restype, _, args = signature.partition("(")
    c_args = [arg.strip() for arg in args.rstrip(")").split(",") if arg.strip() not in ("", "void")]
    skip_at = next(i for i, arg in enumerate(c_args) if "skip_dispatch" in arg)
    optional = len(c_args) > skip_at + 1
    argtypes = [_ctype(arg) for arg in c_args[:skip_at]] + [ctypes.c_int]
    if optional:
        argtypes.append(ctypes.POINTER(_Optional))
    call = ctypes.PYFUNCTYPE(_ctype(restype.strip()), *argtypes)(address)
    doc = (original.__doc__ or "").splitlines()[0] if original.__doc__ else f"{name}()"
    params = [part.strip() for part in doc.partition("(")[2].rpartition(")")[0].split(",") if part.strip()]
    names = [param.split("=")[0].split()[-1] for param in params]
    if len(names) != skip_at + optional:
        raise RuntimeError(f"runtime.{name}: signature {signature!r} does not match {doc!r}")

    def function(*args: Any, **kwargs: Any) -> Any:
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments ({len(args)} given)")
        given = dict(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in names or key in given:
                raise TypeError(f"{name}() got an unexpected or repeated argument {key!r}")
            given[key] = value
        missing = [param for param in names[:skip_at] if param not in given]
        if missing:
            raise TypeError(f"{name}() missing required arguments {missing}")
        fixed = [given[param] for param in names[:skip_at]]
        if not optional:
            return call(*fixed, 1)
        extra = names[skip_at]
        return call(*fixed, 1, ctypes.pointer(_Optional(1, given[extra])) if extra in given else None)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"{doc}\n\nRouted to the null CUDA (tests/nullcuda/runtime_shim.c)."
    return function


def activate() -> Routing:
    """Route CuPy's runtime module to the null CUDA: each function of ``runtime_shim.c`` whose
    Cython signature matches the installed module's replaces it, in ``__pyx_capi__`` (for
    CuPy's Cython modules, imported after this) and as an attribute (for Python code). Only
    names the real module has are replaced; none is added. Idempotent.

    Raises:
        RuntimeError: not under the null CUDA (``environment()``), or a module that cimports
            the runtime module was imported first.
    """
    global _routing
    if _routing is not None:
        return _routing
    shim_path = os.environ.get("NULLCUDA_SHIM")
    if not shim_path or not os.environ.get("LD_PRELOAD", "").count("libcuda.so.1"):
        raise RuntimeError("not under the null CUDA: run through tests/nullcuda.environment()")
    early = sorted(
        name
        for name in sys.modules
        if name.split(".")[0] in ("cupy", "cupyx")
        or (name.startswith("cupy_backends.") and name not in _RUNTIME_IMPORTS)
    )
    if early:
        raise RuntimeError(f"activate() must run before CuPy is imported; already imported: {early}")
    from cupy_backends.cuda.api import runtime

    loader = importlib.machinery.ExtensionFileLoader("_nullcuda_runtime", shim_path)
    spec = importlib.util.spec_from_file_location("_nullcuda_runtime", shim_path, loader=loader)
    assert spec is not None
    shim: ModuleType = importlib.util.module_from_spec(spec)
    loader.exec_module(shim)
    capi: dict[str, Any] = runtime.__pyx_capi__
    shim.bind(capi["check_status"], runtime.PointerAttributes)
    routing = Routing([], {})
    for name, (signature, capsule, address) in sorted(shim.routed().items()):
        original = capi.get(name)
        if original is None:
            routing.left[name] = "not in this CuPy"
            continue
        if _capsule_name(original) != signature:
            routing.left[name] = f"signature {_capsule_name(original)!r}, not {signature!r}"
            continue
        capi[name] = capsule
        if hasattr(runtime, name):  # a cdef function (_ensure_context) has no attribute
            setattr(runtime, name, _python_function(name, signature, address, getattr(runtime, name)))
        routing.routed.append(name)
    for name in capi:
        if name not in routing.routed and name not in routing.left and "(" in _capsule_name(capi[name]):
            routing.left[name] = "not routed (the real module's static CUDA runtime answers)"
    _routing = routing
    return routing


_RUNTIME_IMPORTS = ("cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda._softlink", "cupy_backends.cuda.api",
                    "cupy_backends.cuda.api._runtime_enum", "cupy_backends.cuda.api.runtime")  # fmt: skip


def _capsule_name(capsule: Any) -> str:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    return (get_name(capsule) or b"").decode()


def _library() -> Any:
    return ctypes.CDLL(None)  # the preloaded null CUDA is in the process's global scope


def mark(label: str) -> None:
    """Write ``label`` into the record (a ``{"call": "mark"}`` line)."""
    _library().nullcuda_mark(label.encode())


def calls_since(offset: int) -> list[dict[str, Any]]:
    """The calls recorded after byte ``offset`` of the record file."""
    path = os.environ["NULLCUDA_RECORD"]
    if not os.path.exists(path):  # nothing recorded yet
        return []
    with open(path, "rb") as record:
        record.seek(offset)
        return [json.loads(line) for line in record.read().decode().splitlines() if line.strip()]


def record_size() -> int:
    path = os.environ["NULLCUDA_RECORD"]
    return os.path.getsize(path) if os.path.exists(path) else 0


@contextlib.contextmanager
def recording() -> Iterator[list[dict[str, Any]]]:
    """``with recording() as calls:``: after the block, ``calls`` holds every call recorded
    during it (from every thread: filter by ``"tid"``)."""
    calls: list[dict[str, Any]] = []
    start = record_size()
    try:
        yield calls
    finally:
        calls.extend(calls_since(start))
