"""Check, with the resolver's dry run, that each CUDA extra installs CuPy *with* the CUDA libraries
the sync layer reaches, that the ray and dask extras bring their engines, and that the bare install
brings nothing else.

    python scripts/check_extras.py [PROJECT]     # PROJECT: a wheel, an sdist or a source tree (default: .)

Run by .ci/run. Each line of EXPECTED is a distribution that `pip install --dry-run` must choose
for that extra; exits non-zero, naming what is missing, otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: extra -> the distributions it must bring (normalised names)
EXPECTED: dict[str, set[str]] = {
    "": {"scoped-backends"},
    "cuda12": {
        "cupy-cuda12x",
        *(f"nvidia-{lib}-cu12" for lib in ("cublas", "cufft", "cusolver", "cusparse", "cuda-nvrtc", "cudnn")),
    },
    "cuda13": {
        "cupy-cuda13x",
        *(f"nvidia-{lib}" for lib in ("cublas", "cufft", "cusolver", "cusparse", "cuda-nvrtc")),
        "nvidia-cudnn-cu13",
    },
    "ray": {"ray", "starlette", "uvicorn"},  # Ray Serve's HTTP stack, which the example deployment uses
    "dask": {"dask", "distributed"},
}


def resolve(requirement: str) -> set[str]:
    """The distributions pip would install for ``requirement`` into an empty environment."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
             "--report", str(report), requirement],
            check=True,
        )  # fmt: skip
        chosen = json.loads(report.read_text(encoding="utf-8"))["install"]
    return {item["metadata"]["name"].lower().replace("_", "-") for item in chosen}


def main(project: str = ".") -> int:
    failed = False
    for extra, expected in EXPECTED.items():
        requirement = f"{project}[{extra}]" if extra else project
        chosen = resolve(requirement)
        missing = sorted(expected - chosen)
        if extra == "" and chosen != expected:  # no runtime dependencies at all
            missing.append(f"nothing else, but the resolver also chose {sorted(chosen - expected)}")
        print(f"[{extra or 'no extra'}] {len(chosen)} distributions" + (f"; MISSING: {missing}" if missing else ""))
        failed = failed or bool(missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
