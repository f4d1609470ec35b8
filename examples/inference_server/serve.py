"""Start the inference server on 127.0.0.1.

    python examples/inference_server/serve.py [--port 8000]

Settings come from the environment: INFERENCE_MAX_BODY_BYTES (default 1 MiB),
INFERENCE_MAX_ELEMENTS (default 1,000,000 per matrix and per product) and INFERENCE_BACKEND
(auto, numpy or cupy). docs/inference-server.md describes the endpoints and the errors.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from app import app

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
