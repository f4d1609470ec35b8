"""End to end: the example inference server, run for real with uvicorn on a loopback port.

500 concurrent requests with mixed options must each report exactly their own flags and the right
checksum; bad input gets HTTP 422 with a clear message, and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the inference server example needs starlette (pip install backends[server])")
pytest.importorskip("uvicorn", reason="the inference server example needs uvicorn (pip install backends[server])")
httpx = pytest.importorskip("httpx", reason="the end-to-end test needs httpx (pip install backends[test])")
np = pytest.importorskip("numpy")

import backends  # noqa: E402

SERVE = Path(__file__).resolve().parent.parent / "examples" / "inference_server" / "serve.py"
MAX_ELEMENTS = 10_000
READY_TIMEOUT_S = 20.0
DETERMINISTIC_PRESET = {
    "cudnn.deterministic": True,
    "cudnn.benchmark": False,
    "cudnn.allow_tf32": False,
    "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
    "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_")}
    env["INFERENCE_MAX_ELEMENTS"] = str(MAX_ELEMENTS)
    port = _free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, str(SERVE), "--port", str(port), "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"the server exited with {process.returncode}: {log.read().decode(errors='replace')}")
                try:
                    if httpx.get(f"{base}/v1/flags", timeout=1.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not answer GET /v1/flags within {READY_TIMEOUT_S} s")
                time.sleep(0.05)
            yield base
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _seeded(seed: int, shape: list[int]) -> tuple[Any, Any]:
    m, k, n = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def _checksum(a: Any, b: Any) -> float:
    return float((np.asarray(a, dtype=np.float32) @ np.asarray(b, dtype=np.float32)).sum(dtype=np.float64))


def _expected_flags(options: dict[str, Any]) -> dict[str, Any]:
    expected = backends.snapshot().to_dict()  # the built-in defaults (the server has no BACKENDS_* variables)
    if options.get("deterministic"):
        expected.update(DETERMINISTIC_PRESET)
    expected["cuda.matmul.allow_tf32"] = options.get("precision") == "tf32"
    return expected


def _good_requests(count: int) -> list[tuple[dict[str, Any], float, list[int]]]:
    rng = random.Random(4)
    requests = []
    for i in range(count):
        options: dict[str, Any] = {}
        choice = rng.randrange(3)
        if choice:
            options["precision"] = "tf32" if choice == 2 else "ieee"
        choice = rng.randrange(3)
        if choice:
            options["deterministic"] = choice == 2
        if i % 4 == 0:
            a = [[rng.randint(-5, 5) for _ in range(3)] for _ in range(2)]
            b = [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(3)]
            requests.append(({"a": a, "b": b, **options}, _checksum(a, b), [2, 4]))
        else:
            shape = [8, 8, 8]
            requests.append(({"seed": i, "shape": shape, **options}, _checksum(*_seeded(i, shape)), [8, 8]))
    return requests


async def _send_all(base: str, requests: list[tuple[dict[str, Any], float, list[int]]]) -> list[Any]:
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30.0) as client:
        return await asyncio.gather(*(client.post("/v1/matmul", json=body) for body, _, _ in requests))


def _check(response: Any, body: dict[str, Any], checksum: float, shape: list[int]) -> None:
    assert response.status_code == 200, (body, response.text)
    answer = response.json()
    options = {k: body[k] for k in ("precision", "deterministic") if k in body}
    assert answer["flags"] == _expected_flags(options), body
    assert answer["flags"]["cuda.matmul.allow_tf32"] == (options.get("precision") == "tf32")
    assert answer["flags"]["cudnn.deterministic"] == bool(options.get("deterministic"))
    assert answer["shape"] == shape
    # float32 on the CPU here; TF32 on a GPU would round more, hence the tolerance.
    assert answer["checksum"] == pytest.approx(checksum, rel=1e-3, abs=1e-3), body


BAD = [
    (b'{"seed": 1, "shape": [8, 8, 8]', "malformed JSON"),
    (b"\xff\xfe", "malformed JSON"),
    ([1, 2], "must be a JSON object"),
    ({"seed": 1, "shape": [2, 2, 2], "colour": "red"}, "unknown key"),
    ({"seed": 1, "shape": [2, 2, 2], "cudnn.benchmark": True}, "unknown key"),
    ({"seed": 1, "shape": [2, 2, 2], "precision": 1}, "'precision' must be one of"),
    ({"seed": 1, "shape": [2, 2, 2], "precision": "fp8"}, "'precision' must be one of"),
    ({"seed": 1, "shape": [2, 2, 2], "deterministic": "yes"}, "'deterministic' must be true or false"),
    ({"seed": "1", "shape": [2, 2, 2]}, "'seed' must be"),
    ({"seed": 1, "shape": [2, 2]}, "'shape' must be [m, k, n]"),
    ({"a": [[1, 2, 3]], "b": [[1], [2]]}, "shapes do not multiply"),
    ({"seed": 1, "shape": [MAX_ELEMENTS + 1, 1, 1]}, "more than the limit"),
    ({"a": [[0.0] * 101] * 100, "b": [[1.0]] * 101}, "more than the limit"),
    ({"a": [[1, "x"]], "b": [[1], [2]]}, "must be a number"),
    ({"a": [[1, True]], "b": [[1], [2]]}, "must be a number"),
    ({"a": [[1, 2], [3]], "b": [[1], [2]]}, "ragged"),
    ({"a": [[1, 2]]}, "give both 'a' and 'b'"),
    ({"a": [[1]], "b": [[1]], "seed": 1, "shape": [1, 1, 1]}, "not both"),
    ({}, "give 'a' and 'b', or 'seed' and 'shape'"),
]


def test_inference_server_end_to_end(server: str) -> None:
    defaults = httpx.get(f"{server}/v1/flags").json()["flags"]
    assert defaults == backends.snapshot().to_dict()

    requests = _good_requests(500)
    responses = asyncio.run(_send_all(server, requests))
    for response, (body, checksum, shape) in zip(responses, requests, strict=True):
        _check(response, body, checksum, shape)

    with httpx.Client(base_url=server, timeout=10.0) as client:
        for bad, message in BAD:
            if isinstance(bad, bytes):
                response = client.post("/v1/matmul", content=bad, headers={"content-type": "application/json"})
            else:
                response = client.post("/v1/matmul", json=bad)
            assert response.status_code == 422, (bad, response.text)
            assert message in response.json()["error"], (bad, response.json())

        body, checksum, shape = _good_requests(1)[0]
        _check(client.post("/v1/matmul", json=body), body, checksum, shape)
        body = {"seed": 7, "shape": [3, 5, 2], "precision": "tf32", "deterministic": True}
        _check(client.post("/v1/matmul", json=body), body, _checksum(*_seeded(7, [3, 5, 2])), [3, 2])
        assert client.get("/v1/flags").json()["flags"] == defaults
