"""The inference server as a Ray Serve deployment: replicas of the same app behind Serve's proxy.

    python examples/inference_server/serve_ray.py [--port 8000] [--replicas 2]

Each replica runs ``app.create_app()`` (the same ``POST /v1/matmul``, ``GET /health``, ``GET /ready``
and ``GET /v1/flags``, the same error codes and limits: docs/inference-server.md), so each request
computes under its own flags inside the replica that serves it, and a hostile body is refused there
as it is by ``serve.py``. Settings come from the environment, read in each replica:
INFERENCE_MAX_BODY_BYTES, INFERENCE_MAX_ELEMENTS and INFERENCE_BACKEND. Every answer says which
replica gave it (the ``x-replica`` header: its process id). Needs ``pip install 'scoped-backends[ray,server]'``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ray import serve

HERE = str(Path(__file__).resolve().parent)
sys.path.insert(0, HERE)
from app import create_app  # noqa: E402  (the app of serve.py, beside this file)

REPLICAS = 2
# The replicas import this file and app.py as the driver does: from this folder.
PYTHONPATH = os.pathsep.join([HERE, *filter(None, [os.environ.get("PYTHONPATH")])])


def with_replica_header(app: Any) -> Any:
    """``app`` (ASGI), with an ``x-replica: <pid>`` header on every HTTP answer."""
    replica = str(os.getpid()).encode()

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def send_with_header(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-replica", replica)]}
            await send(message)

        return await app(scope, receive, send_with_header)

    return asgi


@serve.deployment(
    num_replicas=REPLICAS,
    ray_actor_options={"num_cpus": 0.5, "runtime_env": {"env_vars": {"PYTHONPATH": PYTHONPATH}}},
)
@serve.ingress()
class MatmulService:
    """One replica: the Starlette app, built in the replica's own process (its limits and
    backend are read there)."""

    def __init__(self, max_elements: int | None = None, max_body_bytes: int | None = None) -> None:
        self.max_elements, self.max_body_bytes = max_elements, max_body_bytes

    def __serve_build_asgi_app__(self) -> Any:
        return with_replica_header(create_app(self.max_elements, self.max_body_bytes))


def deployment(replicas: int = REPLICAS, **limits: int | None) -> Any:
    """The Serve application: ``replicas`` replicas of ``MatmulService(**limits)``."""
    return MatmulService.options(num_replicas=replicas).bind(**limits)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--replicas", type=int, default=REPLICAS)
    args = parser.parse_args(argv)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    serve.run(deployment(args.replicas), name="matmul", route_prefix="/", blocking=True)


if __name__ == "__main__":
    main()
