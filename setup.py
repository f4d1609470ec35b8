"""Build of scoped-backends with its optional C accelerator; the metadata is in pyproject.toml.

The two C modules, ``backends._engine._speedups`` and ``backends.sync._speedups``, are built by
setuptools' ``build_ext`` with the platform's compiler and flags (``CC``, ``CFLAGS``, ``LDFLAGS``,
``ARCHFLAGS``; MSVC on Windows). A wheel gets them and a platform tag; an editable install gets them
beside their sources.

Where they cannot be built (the C compiler fails, ``BACKENDS_BUILD_PURE_PYTHON=1``, PyPy, a
free-threaded CPython), the build says why on stderr and builds without them (after a failed
compile, the same command again): the pure-Python package, tagged ``py3-none-any``, which behaves
the same (the pure path is the reference). All or nothing: never one of the two modules without
the other. The reason is written into the package it builds, ``backends/_engine/_build_note.txt``,
which ``python -m backends`` reports while the accelerator is missing.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CCompilerError, ExecError, PlatformError

ROOT = Path(__file__).resolve().parent
#: the accelerator: the engine's reads and scopes, and the sync layer's checks when nothing changed
EXTENSIONS = [
    Extension("backends._engine._speedups", ["backends/_engine/_speedups.c"]),
    Extension("backends.sync._speedups", ["backends/sync/_speedups.c"]),
]
#: why the accelerator is missing, in the package (read by backends/_engine/accelerator.py)
NOTE = Path("backends", "_engine", "_build_note.txt")
VARIABLE = "BACKENDS_BUILD_PURE_PYTHON"
#: why the first attempt failed, for the build without the accelerator that follows it
FAILED = "_BACKENDS_BUILD_FAILED"


class BuildFailed(Exception):
    """The accelerator could not be built; ``str()`` says why, in one line."""


def why_not() -> str | None:
    """Why the accelerator is not even tried here, or ``None``."""
    if os.environ.get(FAILED):
        return os.environ[FAILED]
    if os.environ.get(VARIABLE, "").strip().lower() in ("1", "true", "yes", "on"):
        return f"{VARIABLE} was set"
    if platform.python_implementation() != "CPython":
        return f"{platform.python_implementation()} is not CPython"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):  # the C sources #error there
        return "a free-threaded CPython (the accelerator relies on the GIL)"
    return None


def captured(call: Callable[[], None]) -> tuple[str, BaseException | None]:
    """Run ``call`` with this process's stdout and stderr (file descriptors 1 and 2, so the
    compiler's too) sent to a temporary file; return what was written, and the exception
    raised, if any. The output is written to stderr afterwards, as it would have been."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    error: BaseException | None = None
    with tempfile.TemporaryFile() as file:
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
        try:
            call()
        except BaseException as raised:
            error = raised
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        file.seek(0)
        output = file.read().decode(errors="replace")
    sys.stderr.write(output)
    return output, error


def first_errors(output: str, error: BaseException) -> str:
    """The compiler's first error lines (``gcc: error: ...``, ``fatal error C1083: ...``), else
    the message of ``error`` (``command 'cc' failed: No such file or directory``); one line."""
    lines = [line.strip() for line in output.splitlines() if re.search(r"\berror\b", line, re.IGNORECASE)]
    text = " / ".join(lines[:2]) or str(error)
    return text if len(text) <= 300 else text[:297] + "..."


class optional_build_ext(build_ext):
    """``build_ext`` that raises ``BuildFailed``, saying why, where the C compiler fails."""

    def run(self) -> None:
        try:
            super().run()
        except PlatformError as error:  # no compiler for this platform at all
            raise BuildFailed(f"no C compiler here ({error})") from error

    def build_extensions(self) -> None:
        # Windows hands a child process the console's own handles, not file descriptors 1 and 2:
        # there the compiler's output is not captured, and the reason is distutils' message.
        output, error = captured(super().build_extensions)
        if isinstance(error, (CCompilerError, ExecError, PlatformError)):
            raise BuildFailed(f"the C compiler failed: {first_errors(output, error)}") from error
        if error is not None:
            raise error


def recording_build_py(reason: str | None) -> type[build_py]:
    """``build_py`` that writes ``reason`` into the package it builds (``None``: removes the note):
    the wheel's build folder, or for an editable install the source tree, where it also removes
    this interpreter's compiled modules left in place by an earlier build, which would otherwise
    be imported instead of the pure path."""

    class recording_build_py(build_py):
        def run(self) -> None:
            package = ROOT if self.editable_mode else Path(self.build_lib)
            (package / NOTE).unlink(missing_ok=True)
            if reason is not None:
                print(f"backends: building the pure-Python package: {reason}", file=sys.stderr)
                (package / NOTE).parent.mkdir(parents=True, exist_ok=True)
                (package / NOTE).write_text(reason + "\n", encoding="utf-8")
                if self.editable_mode:
                    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
                    for extension in EXTENSIONS:
                        *folders, name = extension.name.split(".")
                        stale = ROOT.joinpath(*folders, name + suffix)
                        try:
                            stale.unlink(missing_ok=True)
                        except OSError as error:  # Windows: a running interpreter has it loaded
                            print(f"backends: {stale} stays, and is imported: {error}", file=sys.stderr)
            super().run()

    return recording_build_py


def run_setup(reason: str | None) -> None:
    """``setup()`` with the accelerator (``reason`` is ``None``) or without it, saying why not."""
    setup(
        ext_modules=EXTENSIONS if reason is None else [],
        cmdclass={"build_ext": optional_build_ext, "build_py": recording_build_py(reason)},
    )


reason = why_not()
if reason is None:
    try:
        run_setup(None)
    except BuildFailed as failure:
        print(f"backends: the C accelerator was not built ({failure}); building again without it", file=sys.stderr)
        # The same command again, in a fresh interpreter: a second setup() in this one trips over
        # distutils' caches (it takes the editable build's metadata folder, removed since, as made).
        again = subprocess.call([sys.executable, __file__, *sys.argv[1:]], env={**os.environ, FAILED: str(failure)})
        if again:
            sys.exit(again)
else:
    run_setup(reason)
