"""Build of scoped-backends with its optional C accelerator; the metadata is in pyproject.toml.

The two C modules, ``backends._engine._speedups`` and ``backends.sync._speedups``, are built by
setuptools' ``build_ext`` with the platform's compiler and flags (``CC``, ``CFLAGS``, ``LDFLAGS``,
``ARCHFLAGS``; MSVC on Windows). A wheel gets them and a platform tag; an editable install gets them
beside their sources.

Where they cannot be built (the C compiler fails, ``BACKENDS_BUILD_PURE_PYTHON=1``, PyPy, a
free-threaded CPython), the build says why on stderr and builds without them (after a failed
compile, the same command again): the pure-Python package, tagged ``py3-none-any``, which behaves
the same (the pure path is the reference). All or nothing: never one of the two modules without
the other. The reason is written into the package it builds, ``src/backends/_engine/_build_note.txt``,
which ``python -m backends`` reports while the accelerator is missing.

Builds are reproducible: two builds of one commit, with ``SOURCE_DATE_EPOCH`` set to its time
(``git log -1 --format=%ct``), give byte-identical files. The C compiler maps the source folder,
which for a wheel built from the sdist is a new temporary one each time, to ``.`` in the
modules' debug information (``-ffile-prefix-map``); the sdist is written sorted, owned by no one,
its times clamped to ``SOURCE_DATE_EPOCH``, and with no time or name in its gzip header
(setuptools' own sdist records the build's time). Wheels take their times from
``SOURCE_DATE_EPOCH`` themselves.
"""

from __future__ import annotations

import gzip
import os
import platform
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.errors import CCompilerError, ExecError, PlatformError

ROOT = Path(__file__).resolve().parent
#: the folder that holds the package (the src layout)
SOURCE = ROOT / "src"
#: the accelerator: the engine's reads and scopes, and the sync layer's checks when nothing changed
EXTENSIONS = [
    Extension("backends._engine._speedups", ["src/backends/_engine/_speedups.c"]),
    Extension("backends.sync._speedups", ["src/backends/sync/_speedups.c"]),
]
#: why the accelerator is missing, in the package (read by src/backends/_engine/accelerator.py)
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


def captured(call: Callable[[], None], echo: bool = True) -> tuple[str, BaseException | None]:
    """Run ``call`` with this process's stdout and stderr (file descriptors 1 and 2, so the
    compiler's too) sent to a temporary file; return what was written, and the exception
    raised, if any. With ``echo``, the output is written to stderr afterwards, as it would have been."""
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
    if echo:
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
        output, error = captured(self._build_extensions_reproducibly)
        if isinstance(error, (CCompilerError, ExecError, PlatformError)):
            raise BuildFailed(f"the C compiler failed: {first_errors(output, error)}") from error
        if error is not None:
            raise error


    def _build_extensions_reproducibly(self) -> None:
        # GCC and clang: the source folder is "." in the debug information (GCC leaves the option
        # itself out of the DW_AT_producer switches it records). A compiler without the option
        # (GCC < 8, clang < 10) builds as before.
        if self.compiler.compiler_type == "unix":
            folders = dict.fromkeys([str(ROOT), os.getcwd()])
            flags = [f"-ffile-prefix-map={folder}=." for folder in folders]
            if self._compiler_accepts(flags):
                for extension in self.extensions:
                    extension.extra_compile_args = [*extension.extra_compile_args, *flags]
        super().build_extensions()

    def _compiler_accepts(self, flags: list[str]) -> bool:
        """Whether the compiler compiles a one-line file with ``flags`` (its output is not shown:
        an error here only means the flags are left out)."""
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder, "probe.c")
            source.write_text("int probe;\n", encoding="utf-8")
            _, error = captured(lambda: self.compiler.compile([str(source)], output_dir=folder, extra_postargs=flags),
                                echo=False)  # fmt: skip
        if error is not None and not isinstance(error, CCompilerError):
            raise error
        return error is None


def normalized_tarball(path: str, folder: str) -> None:
    """Write ``folder`` (relative, and everything in it) to the gzipped tarball ``path``: entries
    sorted, owned by uid/gid 0 with no names, modes 0o755/0o644, times clamped to
    ``SOURCE_DATE_EPOCH`` when it is set, and a gzip header with neither a time nor a name."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    clamp = int(epoch) if epoch else None
    names = [folder]
    for parent, folders, files in os.walk(folder):
        names += [os.path.join(parent, name) for name in folders + files]

    def normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
        info.mtime = int(info.mtime) if clamp is None else min(int(info.mtime), clamp)
        return info

    with (
        open(path, "wb") as raw,
        gzip.GzipFile("", "wb", 9, raw, mtime=clamp or 0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name in sorted(names):
            tar.add(name, recursive=False, filter=normalized)


class reproducible_sdist(sdist):
    """setuptools' ``sdist``, with its ``.tar.gz`` written by ``normalized_tarball``."""

    def make_archive(
        self, base_name: str, format: str, root_dir: str | None = None, base_dir: str | None = None, **owner: Any
    ) -> str:
        if format != "gztar" or root_dir is not None or base_dir is None:
            return str(super().make_archive(base_name, format, root_dir, base_dir, **owner))
        normalized_tarball(base_name + ".tar.gz", base_dir)
        return base_name + ".tar.gz"


def recording_build_py(reason: str | None) -> type[build_py]:
    """``build_py`` that writes ``reason`` into the package it builds (``None``: removes the note):
    the wheel's build folder, or for an editable install the source tree, where it also removes
    this interpreter's compiled modules left in place by an earlier build, which would otherwise
    be imported instead of the pure path."""

    class recording_build_py(build_py):
        def run(self) -> None:
            package = SOURCE if self.editable_mode else Path(self.build_lib)
            (package / NOTE).unlink(missing_ok=True)
            if reason is not None:
                print(f"backends: building the pure-Python package: {reason}", file=sys.stderr)
                (package / NOTE).parent.mkdir(parents=True, exist_ok=True)
                (package / NOTE).write_text(reason + "\n", encoding="utf-8")
                if self.editable_mode:
                    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
                    for extension in EXTENSIONS:
                        *folders, name = extension.name.split(".")
                        stale = SOURCE.joinpath(*folders, name + suffix)
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
        cmdclass={
            "build_ext": optional_build_ext,
            "build_py": recording_build_py(reason),
            "sdist": reproducible_sdist,
        },
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
