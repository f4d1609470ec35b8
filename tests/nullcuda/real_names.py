"""The names CuPy's modules that the sync layer touches hold, per real CuPy release.

``tests/real_cupy_names.json`` keeps them for CuPy 13.6 and 14.2 (``dir()`` of each module and
of the classes the sync layer wraps methods of), so that ``tests/test_sync_names.py`` checks the
sync layer's reads against both releases on every machine, and the stand-in's names against
them. ``python -m tests.nullcuda.real_names --write`` records the installed CuPy's (run under
the null CUDA, where every module imports without CUDA libraries); ``tests/test_null_cuda.py``
checks, in CI's real-wheel job, that the file still says what the installed release holds.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SNAPSHOT = Path(__file__).resolve().parent.parent / "real_cupy_names.json"

#: the modules the sync layer's targets wrap or read (backends/sync/__init__.py TARGETS and what
#: the targets import), and CuPy 13's cuDNN alias
MODULES = (
    "cupy",
    "cupy.cuda.device",
    "cupy.cuda.stream",
    "cupy.cuda.cub",
    "cupy.cudnn",
    "cupy.fft._fft",
    "cupy.fft._cache",
    "cupy._core.core",
    "cupy._statistics.histogram",
    "cupy_backends.cuda.api.runtime",
    "cupy_backends.cuda.libs.cublas",
    "cupy_backends.cuda.libs.cusolver",
    "cupy_backends.cuda.libs.cusparse",
    "cupyx.cudnn",
    "cupyx.cusparse",
    "cupyx.cutensor",
    "cupyx.scipy.ndimage._measurements",
    "cupyx.scipy.sparse._coo",
    "cupyx.scipy.sparse._compressed",
)
#: module:class whose methods the sync layer wraps
CLASSES = (
    "cupy._core.core:ndarray",
    "cupy.fft._cache:PlanCache",
    "cupyx.scipy.sparse._coo:coo_matrix",
    "cupyx.scipy.sparse._coo:_coo_base",
    "cupyx.scipy.sparse._compressed:_compressed_sparse_matrix",
)


def collect() -> dict[str, list[str]]:
    """``dir()`` of each module (and class) above that this CuPy has (call it under the null
    CUDA, before ``backends`` is imported: nothing of CuPy's may be wrapped)."""
    from tests import nullcuda

    nullcuda.activate()
    if "backends.sync" in sys.modules:
        raise RuntimeError("collect() must run before backends wraps CuPy")
    names: dict[str, list[str]] = {}
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:  # not in this release (cupyx.cudnn is CuPy 13's)
            continue
        names[name] = sorted(dir(module))
    for path in CLASSES:
        module_name, _, class_name = path.partition(":")
        owner = getattr(sys.modules.get(module_name), class_name, None)
        if owner is not None:
            names[path] = sorted(dir(owner))
    return names


def installed() -> tuple[str, dict[str, list[str]]]:
    """The installed CuPy's version and names, collected in a child process under the null CUDA."""
    from tests import nullcuda

    built = nullcuda.build()
    with tempfile.TemporaryDirectory() as folder:
        env = nullcuda.environment(built, Path(folder) / "record.jsonl")
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH", "")]))
        done = subprocess.run(
            [sys.executable, "-c", "import json\nfrom tests.nullcuda.real_names import collect\n"
             "names = collect()\nimport cupy\nprint(json.dumps([cupy.__version__, names]))"],
            capture_output=True, text=True, env=env, cwd=root, timeout=600,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"collecting CuPy's names failed:\n{done.stderr}")
    version, names = json.loads(done.stdout)
    return version, names


def load() -> dict[str, dict[str, list[str]]]:
    """The recorded names: {CuPy version: {module or module:class: names}}."""
    return json.loads(SNAPSHOT.read_text())  # type: ignore[no-any-return]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {sys.executable} -m tests.nullcuda.real_names --write")
    version, names = installed()
    recorded = load() if SNAPSHOT.exists() else {}
    recorded[version] = names
    SNAPSHOT.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"{SNAPSHOT}: CuPy {version}, {len(names)} modules and classes")
