"""End to end: the inference server as a Ray Serve deployment (examples/inference_server/serve_ray.py),
two replicas on the session's local Ray cluster, behind Serve's HTTP proxy on a loopback port.

- 1,000 concurrent requests with mixed per-request ``precision`` and ``deterministic``: each answer
  reports exactly its own flags (read in the replica's worker thread that computed it) and the
  right checksum, 0 mismatches, and both replicas answered.
- Every hostile body of tests/test_inference_server.py gets its documented status, code and field
  from a replica, ``/health`` answers after each, and the same two replica processes serve
  afterwards: none was taken down.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests._dev_tools import import_ray
from tests.test_inference_server import (
    HERE,
    HOSTILE,
    MAX_ELEMENTS,
    REQUEST_TIMEOUT_S,
    _check,
    _free_port,
    _good_requests,
    httpx,
)

import_ray()
pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'scoped-backends[ray]')")
pytestmark = pytest.mark.slow  # a Serve application: about 15 s to start, and 1,000 requests

REQUESTS = 1_000


@pytest.fixture(scope="module")
def serve_app(ray_cluster: Any) -> Iterator[str]:
    """The deployment, two replicas, on a free loopback port; its base URL."""
    from ray import serve

    sys.path.insert(0, str(HERE))
    try:
        import serve_ray
    finally:
        sys.path.remove(str(HERE))
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(serve_ray.deployment(max_elements=MAX_ELEMENTS), name="matmul", route_prefix="/")
        base = f"http://127.0.0.1:{port}"
        _wait_until_both_replicas_answer(base)
        yield base
    finally:
        serve.shutdown()


def _replicas(base: str, count: int) -> set[str]:
    """The replicas (process ids) that answer ``count`` health checks."""
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_S) as client:
        answers = [client.get("/health") for _ in range(count)]
    assert {(a.status_code, a.text) for a in answers} == {(200, '{"status":"ok"}')}
    return {a.headers["x-replica"] for a in answers}


def _wait_until_both_replicas_answer(base: str, deadline_s: float = 60.0) -> set[str]:
    """The two replicas, once both have answered. ``serve.run`` returns once both are healthy, but
    the HTTP proxy learns of them later (Serve pushes the replica set to it asynchronously), and
    even then its router may send request after request to one replica (in a CI run on a loaded
    machine, 40 health checks in a row all reached the same one). Wait for the observable
    condition, both answering, not for a time or a count."""
    seen: set[str] = set()
    stop = time.monotonic() + deadline_s
    while len(seen) < 2 and time.monotonic() < stop:
        seen |= _replicas(base, count=10)
    assert len(seen) == 2, f"only replica(s) {sorted(seen)} answered through Serve's proxy in {deadline_s:.0f} s"
    return seen


async def _send_all(base: str, requests: list[tuple[dict[str, Any], float, list[int]]]) -> list[Any]:
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=REQUEST_TIMEOUT_S * 4) as client:
        return await asyncio.gather(*(client.post("/v1/matmul", json=body) for body, _, _ in requests))


def test_a_thousand_concurrent_requests_each_compute_under_their_own_flags(serve_app: str) -> None:
    requests = _good_requests(REQUESTS)
    responses = asyncio.run(_send_all(serve_app, requests))
    mismatches = []
    for response, (body, checksum, shape) in zip(responses, requests, strict=True):
        try:
            _check(response, body, checksum, shape)
        except AssertionError as error:
            mismatches.append((body, str(error)[:200]))
    assert mismatches == [], f"{len(mismatches)} of {REQUESTS} answers were not computed under their own flags"
    assert len({response.headers["x-replica"] for response in responses}) == 2  # both replicas served


def test_no_hostile_body_takes_a_replica_down(serve_app: str) -> None:
    before = _wait_until_both_replicas_answer(serve_app)
    with httpx.Client(base_url=serve_app, timeout=REQUEST_TIMEOUT_S) as client:
        for case in HOSTILE:
            headers = {"content-type": case.content_type} if case.content_type is not None else {}
            if case.method == "GET":
                response = client.get(case.path)
            else:
                response = client.request(case.method, case.path, content=case.content(), headers=headers)
            assert response.status_code == case.status, (case.name, response.text)
            assert response.headers["content-type"] == "application/json", case.name
            error = response.json()["error"]
            assert (error["code"], error["field"]) == (case.code, case.field), (case.name, error)
            assert client.get("/health").json() == {"status": "ok"}, case.name
    # the same two processes: a replica that died and was replaced would answer with a new pid
    assert _wait_until_both_replicas_answer(serve_app) == before
