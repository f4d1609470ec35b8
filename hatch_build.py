"""Build hook: compile the optional C accelerator, ``backends/_engine/_speedups.c`` and
``backends/sync/_speedups.c``.

Where a C compiler works, the wheel gets ``_speedups.<abi>.so`` beside each source and a
platform tag; an editable install gets them beside the sources. Where none does (or on PyPy, a
free-threaded CPython, Windows, or with ``BACKENDS_BUILD_PURE_PYTHON=1``), the hook says why on
stderr and the wheel is the pure-Python package, which behaves the same (the pure path is the
reference; ``python -m backends`` says which is in use). The compiler is the one CPython was
built with (``sysconfig``'s ``CC``/``LDSHARED``), or ``$CC`` when set, as setuptools does.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

#: the C sources, each built into a module of the same name beside it: the engine's reads and
#: scopes, and the sync layer's checks when nothing changed
SOURCES = (Path("backends") / "_engine" / "_speedups.c", Path("backends") / "sync" / "_speedups.c")


def _why_not() -> str | None:
    if os.environ.get("BACKENDS_BUILD_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes", "on"):
        return "BACKENDS_BUILD_PURE_PYTHON is set"
    if platform.python_implementation() != "CPython":
        return f"{platform.python_implementation()} is not CPython"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "a free-threaded CPython (the accelerator relies on the GIL)"
    if sys.platform == "win32":
        return "Windows (no build recipe here)"
    return None


def compile_speedups(root: Path, source: Path, output: Path) -> str | None:
    """Compile ``source`` into ``output``; ``None`` on success, else why not."""
    why = _why_not()
    if why is not None:
        return why
    linker = shlex.split(os.environ.get("LDSHARED") or sysconfig.get_config_var("LDSHARED") or "cc -shared")
    compiler = os.environ.get("CC")
    if compiler:  # $CC replaces the compiler of LDSHARED (as in distutils), keeping its flags
        linker = [*shlex.split(compiler), *linker[1:]]
    flags = shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC")
    # Written beside the output and renamed over it: a process that has the old library loaded
    # keeps its copy (writing into a loaded library in place crashes that process).
    partial = output.with_name(output.name + ".partial")
    command = [
        *linker, *flags, "-O2", "-I", sysconfig.get_paths()["include"], str(root / source), "-o", str(partial),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"the C compiler did not run ({error})"
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return f"the C compiler failed:\n{done.stderr.strip()}"
    os.replace(partial, output)
    return None


class SpeedupsHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        name = "_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        built: dict[str, str] = {}
        for source in SOURCES:
            if version == "editable":  # the import system reads the source tree: build it there
                output = root / source.parent / name
            else:
                output = Path(tempfile.mkdtemp(prefix="backends-build-")) / name
            why = compile_speedups(root, source, output)
            if why is not None:
                print(f"backends: installing the pure-Python engine: {why}", file=sys.stderr)
                return  # all or nothing: a half-built accelerator is never installed
            built[str(output)] = f"{source.parent.as_posix()}/{name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"].update(built)
