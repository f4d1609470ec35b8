"""Test an installed wheel of backends on both engines: cibuildwheel's ``test-command``.

    python scripts/test_wheel.py                 # the suite, as ``pytest -q -n auto``
    python scripts/test_wheel.py -x tests/test_flags.py   # other pytest arguments instead

Run it from a folder holding a copy of the tests and the files they read (cibuildwheel's
``test-sources``), never from the source tree. For each engine, in a fresh interpreter, it
first checks what ``import backends`` finds: the installed wheel (a file under site-packages,
of the installed ``scoped-backends``), with the compiled accelerator in use where the wheel
carries it (a platform wheel: both C modules are in it) and pure Python where it does not (a
``py3-none-any`` wheel); then it runs pytest. First as installed, then with
``BACKENDS_PURE_PYTHON=1``. It stops at the first failure, with pytest's exit status or 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

VARIABLE = "BACKENDS_PURE_PYTHON"
DEFAULT_PYTEST_ARGS = ["-q", "-n", "auto", "-p", "no:cacheprovider"]

# Run in the interpreter and folder that pytest gets: what `import backends` finds there.
PROBE = r"""
import json, sysconfig
from importlib import metadata
from pathlib import Path

import backends
from backends._engine import accelerator

package = Path(backends.__file__).resolve()
site = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
# the installed distribution, looked for in site-packages only: an unpacked sdist in the current
# folder holds a scoped_backends.egg-info that would answer first
dist = next(metadata.distributions(name="scoped-backends", path=[str(folder) for folder in site]))
wheel = (dist.read_text("WHEEL") or "").splitlines()
tags = [line.split(":", 1)[1].strip() for line in wheel if line.startswith("Tag:")]
print(json.dumps({
    "file": str(package),
    "site_packages": any(package.is_relative_to(folder) for folder in site),
    "of_the_distribution": Path(dist.locate_file("backends/__init__.py")).resolve() == package,
    "tags": tags,
    "extensions": sorted(
        str(f) for f in dist.files or () if f.stem.startswith("_speedups") and f.suffix in (".so", ".pyd")
    ),
    "accelerated": accelerator.ACCELERATED,
    "engine": accelerator.describe(),
}))
"""


def problems(found: dict[str, Any], pure_wanted: bool) -> list[str]:
    """What is wrong with what the probe found, for a run with or without ``BACKENDS_PURE_PYTHON``."""
    wrong = []
    if not found["site_packages"]:
        wrong.append(f"backends is imported from {found['file']}, not from site-packages: a source tree is in the way")
    if not found["of_the_distribution"]:
        wrong.append(f"backends ({found['file']}) is not the installed scoped-backends' package")
    tags = found["tags"]
    if not tags:  # nothing to say what it should carry
        wrong.append("the installed scoped-backends has no wheel tag (WHEEL): not installed from a wheel")
        return wrong
    pure_wheel = bool(tags) and all(str(tag).endswith("-none-any") for tag in tags)
    extensions = found["extensions"]
    if pure_wheel and extensions:
        wrong.append(f"a {tags[0]} wheel carries compiled modules: {extensions}")
    if not pure_wheel and len(extensions) != 2:
        wrong.append(f"a platform wheel ({', '.join(tags)}) should carry both C modules, it has {extensions}")
    if pure_wanted or pure_wheel:
        if found["accelerated"]:
            wrong.append(f"the compiled engine is in use, expected pure Python: {found['engine']}")
    elif not found["accelerated"]:
        wrong.append(f"the wheel carries the accelerator, but the engine is {found['engine']}")
    return wrong


def run(pure: bool, pytest_args: list[str]) -> int:
    environment = {key: value for key, value in os.environ.items() if key != VARIABLE}
    if pure:
        environment[VARIABLE] = "1"
    label = f"{VARIABLE}=1" if pure else "as installed"
    probe = subprocess.run([sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        print(f"test_wheel ({label}): import backends failed:\n{probe.stderr}", file=sys.stderr)
        return 1
    found = json.loads(probe.stdout)
    wrong = problems(found, pure)
    if wrong:
        print(f"test_wheel ({label}):", *wrong, sep="\n  ", file=sys.stderr)
        return 1
    print(f"test_wheel ({label}): {found['file']}, {', '.join(found['tags'])}, {found['engine']}", flush=True)
    return subprocess.run([sys.executable, "-m", "pytest", *pytest_args], env=environment, check=False).returncode


def main(argv: list[str]) -> int:
    pytest_args = argv or DEFAULT_PYTEST_ARGS
    for pure in (False, True):
        status = run(pure, pytest_args)
        if status != 0:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
