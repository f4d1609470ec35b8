"""``python -m tests.nullcuda [pytest arguments]``: build the null CUDA for the CuPy installed in
this interpreter and run pytest under it (the cases in ``tests/nullcuda/`` where no path is given), with the
record in a temporary file (``NULLCUDA_RECORD`` names another)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import nullcuda


def main(argv: list[str]) -> int:
    try:
        built = nullcuda.build()
    except nullcuda.NullCudaUnavailable as error:
        print(f"the null CUDA cannot be built here: {error}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nullcuda-") as folder:
        record = Path(os.environ.get("NULLCUDA_RECORD") or Path(folder) / "record.jsonl")
        env = nullcuda.environment(built, record)
        paths = [arg for arg in argv if not arg.startswith("-") and Path(arg.split("::")[0]).exists()]
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv, *([] if paths else nullcuda.CASES)]
        print(f"under the null CUDA ({built.root}), recording to {record}:", " ".join(command), file=sys.stderr)
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
