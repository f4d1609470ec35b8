"""End to end: the example inference server, run for real with uvicorn on a loopback port.

- 500 concurrent requests with mixed options each report exactly their own flags (read in the
  worker thread that computed the product) and the right checksum.
- Hostile bodies (too big, too deep, too large a product, overflowing, malformed, mistyped,
  unknown flags, ...) each get their documented status and JSON error code, and the server keeps
  serving: ``/health`` answers after every one of them.
- A slow product runs off the event loop: a small request sent while it is being computed is
  answered long before it finishes.
- ``run_in_threadpool`` carries a request's flags into the worker thread; ``loop.run_in_executor``
  does not.

Bounded: every request has a timeout, and the slowest test sends one product of about a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import json
import os
import random
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SERVER_EXTRA = "pip install scoped-backends[server]"
pytest.importorskip("starlette", reason=f"the inference server example needs starlette ({SERVER_EXTRA})")
pytest.importorskip("uvicorn", reason=f"the inference server example needs uvicorn ({SERVER_EXTRA})")
httpx = pytest.importorskip("httpx", reason="the end-to-end test needs httpx (pip install scoped-backends[test])")
np = pytest.importorskip("numpy")

import backends  # noqa: E402

HERE = Path(__file__).resolve().parent.parent / "examples" / "inference_server"
SERVE = HERE / "serve.py"
MAX_ELEMENTS = 10_000
MAX_BODY_BYTES = 1_048_576  # the documented default
READY_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 30.0
DETERMINISTIC_PRESET = {
    "cudnn.deterministic": True,
    "cudnn.benchmark": False,
    "cudnn.allow_tf32": False,
    "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
    "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
    "algorithms.deterministic": True,
}


LOGS: dict[str, Any] = {}  # base URL -> the server's log file


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _serving(**settings: str) -> Iterator[str]:
    """``serve.py`` in a subprocess with these environment variables; yields its base URL once
    ``GET /health`` answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKENDS_", "INFERENCE_"))}
    env.update(settings)
    port = _free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, str(SERVE), "--port", str(port), "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
        base = f"http://127.0.0.1:{port}"
        LOGS[base] = log
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"the server exited with {process.returncode}: {log.read().decode(errors='replace')}")
                try:
                    if httpx.get(f"{base}/health", timeout=1.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not answer GET /health within {READY_TIMEOUT_S} s")
                time.sleep(0.05)  # waiting for another process to bind its port: nothing to wait on
            yield base
            assert "Traceback" not in server_log(base)  # no request made the app fail
        finally:
            del LOGS[base]
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def server_log(base: str) -> str:
    log = LOGS[base]
    log.seek(0)
    text: str = log.read().decode(errors="replace")
    log.seek(0, os.SEEK_END)
    return text


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with _serving(INFERENCE_MAX_ELEMENTS=str(MAX_ELEMENTS)) as base:
        yield base


# -- good requests ------------------------------------------------------------------------------------
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
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=REQUEST_TIMEOUT_S) as client:
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


def test_concurrent_requests_each_compute_under_their_own_flags(server: str) -> None:
    defaults = httpx.get(f"{server}/v1/flags").json()["flags"]
    assert defaults == backends.snapshot().to_dict()

    # 50 in flight at a time (the client's connection limit), four rounds of them, every
    # combination of options many times over.
    requests = _good_requests(200)
    responses = asyncio.run(_send_all(server, requests))
    for response, (body, checksum, shape) in zip(responses, requests, strict=True):
        _check(response, body, checksum, shape)

    with httpx.Client(base_url=server, timeout=REQUEST_TIMEOUT_S) as client:
        body = {"seed": 7, "shape": [3, 5, 2], "precision": "tf32", "deterministic": True}
        _check(client.post("/v1/matmul", json=body), body, _checksum(*_seeded(7, [3, 5, 2])), [3, 2])
        assert client.get("/v1/flags").json()["flags"] == defaults  # no request changed a process default


def test_health_and_ready(server: str) -> None:
    with httpx.Client(base_url=server, timeout=REQUEST_TIMEOUT_S) as client:
        health = client.get("/health")
        assert health.status_code == 200 and health.headers["content-type"] == "application/json"
        assert health.json() == {"status": "ok"}
        ready = client.get("/ready").json()
    expected = "cupy" if backends.cuda.is_available() else "numpy"
    assert ready == {
        "status": "ready", "backend": expected, "device": "cuda:0" if expected == "cupy" else "cpu", "in_flight": 0,
    }


# -- hostile requests ---------------------------------------------------------------------------------
JSON = "application/json"


@dataclass(frozen=True)
class Hostile:
    """A request the server must refuse: what is sent, and the status, ``code`` and ``field`` of the refusal."""

    name: str
    body: bytes | object  # bytes as they are, anything else through json.dumps
    status: int
    code: str
    field: str | None = None
    content_type: str | None = JSON
    method: str = "POST"
    path: str = "/v1/matmul"

    def content(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


SEEDED = {"seed": 1, "shape": [2, 2, 2]}
DEEP = 500  # below the parser's recursion limit: valid JSON, the wrong type where a number belongs

HOSTILE = [
    # The four bodies that got a plain-text 500 before, and the product that was accepted.
    Hostile("float32-overflow", b'{"a": [[1e308]], "b": [[1e308]]}', 422, "non_finite_result"),
    Hostile("deep-arrays", b"[" * 100_000, 422, "too_deep"),
    Hostile("deep-objects", b'{"a":' * 50_000, 422, "too_deep"),
    # Valid JSON that 3.14's json parses (it measures the C stack, not a recursion count): the
    # server's own limit answers, the same on every Python.
    Hostile("deep-objects-closed", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, 422, "too_deep"),
    Hostile("513-deep", b'{"a": ' + b"[" * 512 + b"]" * 512 + b', "b": [[1]]}', 422, "too_deep"),
    Hostile("brackets-in-strings", b'{"a": [["' + b"[" * 5000 + b'"]], "b": [[1]]}', 422, "wrong_type", "a[0][0]"),
    Hostile("terabyte-product", {"seed": 1, "shape": [1_000_000, 1, 1_000_000]}, 422, "too_large", "shape"),
    Hostile("1e8-element-product", {"seed": 1, "shape": [10_000, 1, 10_000]}, 422, "too_large", "shape"),
    Hostile("input-over-the-limit", {"seed": 1, "shape": [MAX_ELEMENTS + 1, 1, 1]}, 422, "too_large", "shape"),
    Hostile("literal-over-the-limit", {"a": [[0.0] * 101] * 100, "b": [[1.0]] * 101}, 422, "too_large", "a"),
    Hostile("literal-product-over-the-limit", {"a": [[1.0]] * 101, "b": [[1.0] * 100]}, 422, "too_large", "b"),
    # Size, media type, routing.
    Hostile("body-over-the-cap", b" " * (MAX_BODY_BYTES + 1), 413, "body_too_large"),
    Hostile("5-MB-matrix", b'{"a": [[' + b"0," * 2_500_000 + b"0]]}", 413, "body_too_large"),
    Hostile("text-plain", SEEDED, 415, "unsupported_media_type", content_type="text/plain"),
    Hostile("form-encoded", b"seed=1&shape=2,2,2", 415, "unsupported_media_type",
            content_type="application/x-www-form-urlencoded"),
    Hostile("no-content-type", SEEDED, 415, "unsupported_media_type", content_type=None),
    Hostile("get-matmul", b"", 405, "method_not_allowed", method="GET"),
    Hostile("no-such-route", SEEDED, 404, "not_found", path="/v1/matmul2"),
    # Not JSON, or not a JSON object.
    Hostile("empty-body", b"", 422, "invalid_json"),
    Hostile("truncated", b'{"seed": 1, "shape": [8, 8, 8]', 422, "invalid_json"),
    Hostile("single-quotes", b"{'seed': 1}", 422, "invalid_json"),
    Hostile("trailing-comma", b'{"seed": 1, "shape": [2, 2, 2],}', 422, "invalid_json"),
    Hostile("not-utf8", b"\xff\xfe\xfd", 422, "invalid_json"),
    Hostile("control-character", b'{"seed": 1, "shape": [2, 2, 2], "precision": "tf\x0032"}', 422, "invalid_json"),
    Hostile("5000-digit-int", b'{"seed": ' + b"9" * 5000 + b', "shape": [1, 1, 1]}', 422, "invalid_json"),
    Hostile("array-body", [1, 2], 422, "not_an_object"),
    Hostile("string-body", "matmul", 422, "not_an_object"),
    Hostile("number-body", 42, 422, "not_an_object"),
    Hostile("null-body", None, 422, "not_an_object"),
    # Keys: unknown (flags among them), missing, conflicting.
    Hostile("flag-name", {**SEEDED, "cudnn.benchmark": True}, 422, "unknown_field", "cudnn.benchmark"),
    Hostile("torch-flag-name", {**SEEDED, "allow_tf32": True}, 422, "unknown_field", "allow_tf32"),
    Hostile("flags-object", {**SEEDED, "flags": {"cudnn.deterministic": True}}, 422, "unknown_field", "flags"),
    Hostile("colour", {**SEEDED, "colour": "red"}, 422, "unknown_field", "colour"),
    Hostile("lone-surrogate-key", b'{"\\ud800": 1}', 422, "unknown_field", "'\\ud800'"),
    Hostile("empty-object", {}, 422, "missing_field"),
    Hostile("only-a", {"a": [[1.0]]}, 422, "missing_field", "b"),
    Hostile("only-seed", {"seed": 1}, 422, "missing_field", "shape"),
    Hostile("both-kinds", {"a": [[1]], "b": [[1]], **SEEDED}, 422, "conflicting_fields"),
    # Options.
    Hostile("precision-fp8", {**SEEDED, "precision": "fp8"}, 422, "invalid_value", "precision"),
    Hostile("precision-upper-case", {**SEEDED, "precision": "TF32"}, 422, "invalid_value", "precision"),
    Hostile("precision-empty", {**SEEDED, "precision": ""}, 422, "invalid_value", "precision"),
    Hostile("precision-number", {**SEEDED, "precision": 32}, 422, "wrong_type", "precision"),
    Hostile("deterministic-string", {**SEEDED, "deterministic": "yes"}, 422, "wrong_type", "deterministic"),
    Hostile("deterministic-one", {**SEEDED, "deterministic": 1}, 422, "wrong_type", "deterministic"),
    Hostile("deterministic-null", {**SEEDED, "deterministic": None}, 422, "wrong_type", "deterministic"),
    # Seed and shape.
    Hostile("seed-string", {"seed": "1", "shape": [2, 2, 2]}, 422, "wrong_type", "seed"),
    Hostile("seed-float", {"seed": 1.5, "shape": [2, 2, 2]}, 422, "wrong_type", "seed"),
    Hostile("seed-bool", {"seed": True, "shape": [2, 2, 2]}, 422, "wrong_type", "seed"),
    Hostile("seed-negative", {"seed": -1, "shape": [2, 2, 2]}, 422, "invalid_value", "seed"),
    Hostile("seed-2**64", {"seed": 2**64, "shape": [2, 2, 2]}, 422, "invalid_value", "seed"),
    Hostile("shape-string", {"seed": 1, "shape": "2,2,2"}, 422, "wrong_type", "shape"),
    Hostile("shape-object", {"seed": 1, "shape": {"m": 2}}, 422, "wrong_type", "shape"),
    Hostile("shape-two", {"seed": 1, "shape": [2, 2]}, 422, "invalid_value", "shape"),
    Hostile("shape-four", {"seed": 1, "shape": [2, 2, 2, 2]}, 422, "invalid_value", "shape"),
    Hostile("shape-empty", {"seed": 1, "shape": []}, 422, "invalid_value", "shape"),
    Hostile("shape-zero", {"seed": 1, "shape": [0, 2, 2]}, 422, "invalid_value", "shape[0]"),
    Hostile("shape-negative", {"seed": 1, "shape": [2, -3, 2]}, 422, "invalid_value", "shape[1]"),
    Hostile("shape-float", {"seed": 1, "shape": [2, 2, 2.5]}, 422, "wrong_type", "shape[2]"),
    Hostile("shape-integral-float", {"seed": 1, "shape": [2.0, 2, 2]}, 422, "wrong_type", "shape[0]"),
    Hostile("shape-bool", {"seed": 1, "shape": [True, 2, 2]}, 422, "wrong_type", "shape[0]"),
    Hostile("shape-1e30", {"seed": 1, "shape": [10**30, 1, 1]}, 422, "too_large", "shape"),
    # 'a' would have 10**8000 elements: more digits than Python converts to a string.
    Hostile("shape-4000-digits", b'{"seed": 1, "shape": [1' + b"0" * 4000 + b", 1" + b"0" * 4000 + b", 1]}", 422,
            "too_large", "shape"),
    Hostile("shape-300-digits", b'{"seed": 1, "shape": [' + b"9" * 300 + b", 1, 1]}", 422, "too_large", "shape"),
    # Matrices.
    Hostile("a-string", {"a": "[[1]]", "b": [[1]]}, 422, "wrong_type", "a"),
    Hostile("a-empty", {"a": [], "b": [[1]]}, 422, "invalid_value", "a"),
    Hostile("a-empty-row", {"a": [[]], "b": [[1]]}, 422, "invalid_value", "a[0]"),
    Hostile("a-flat", {"a": [1, 2], "b": [[1], [2]]}, 422, "wrong_type", "a[0]"),
    Hostile("a-string-entry", {"a": [[1, "x"]], "b": [[1], [2]]}, 422, "wrong_type", "a[0][1]"),
    Hostile("a-bool-entry", {"a": [[1, True]], "b": [[1], [2]]}, 422, "wrong_type", "a[0][1]"),
    Hostile("a-null-entry", {"a": [[1, None]], "b": [[1], [2]]}, 422, "wrong_type", "a[0][1]"),
    Hostile("a-ragged", {"a": [[1, 2], [3]], "b": [[1], [2]]}, 422, "ragged_matrix", "a[1]"),
    Hostile("a-nested-500-deep", b'{"a": [[' + b"[" * DEEP + b"]" * DEEP + b']], "b": [[1]]}', 422, "wrong_type",
            "a[0][0]"),
    Hostile("b-not-multiplying", {"a": [[1, 2, 3]], "b": [[1], [2]]}, 422, "shape_mismatch", "b"),
    Hostile("nan-literal", b'{"a": [[NaN]], "b": [[1]]}', 422, "not_finite", "a[0][0]"),
    Hostile("infinity-literal", b'{"a": [[1]], "b": [[-Infinity]]}', 422, "not_finite", "b[0][0]"),
    Hostile("1e999", b'{"a": [[1e999]], "b": [[1]]}', 422, "not_finite", "a[0][0]"),
    Hostile("int-beyond-float64", b'{"a": [[1' + b"0" * 400 + b"]], " + b'"b": [[1]]}', 422, "not_finite", "a[0][0]"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[case.name for case in HOSTILE])
def test_a_hostile_request_gets_its_json_error_and_the_server_keeps_serving(server: str, case: Hostile) -> None:
    headers = {"content-type": case.content_type} if case.content_type is not None else {}
    with httpx.Client(base_url=server, timeout=REQUEST_TIMEOUT_S) as client:
        if case.method == "GET":
            response = client.get(case.path)
        else:
            # httpx sets no content-type for raw content, so None really sends none.
            response = client.request(case.method, case.path, content=case.content(), headers=headers)
        assert response.status_code == case.status, response.text
        assert response.headers["content-type"] == "application/json"
        error = response.json()["error"]
        assert set(error) == {"code", "field", "message"}
        assert (error["code"], error["field"]) == (case.code, case.field), error
        assert isinstance(error["message"], str) and 0 < len(error["message"]) < 500, error
        assert client.get("/health").json() == {"status": "ok"}


def test_the_hostile_table_covers_the_cases_of_the_issue() -> None:
    names = {case.name for case in HOSTILE}
    assert {"float32-overflow", "deep-arrays", "deep-objects", "terabyte-product", "1e8-element-product"} <= names
    assert len(HOSTILE) >= 26


# Raw sockets for the 50 MB body: httpx (like most clients) sends a whole body before it reads the
# answer, so only a client that reads while it sends can see that the 413 came before the end.
JUNK_BYTES = 50 * 1024 * 1024
CHUNK = b"x" * 65_536


def _read_response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of one HTTP/1.1 response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65_536)
        assert more, f"the server closed the connection after {data!r}"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        more = sock.recv(65_536)
        assert more, "the server closed the connection mid-body"
        body += more
    return int(lines[0].split()[1]), json.loads(body)


def _send_until_answered(port: int, head: bytes, chunks: Iterator[bytes]) -> tuple[int, dict[str, Any], int]:
    """Send ``head``, then chunks for as long as the server has not answered; return the answer's
    status and body and how many body bytes were sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT_S) as sock:
        sock.sendall(head)
        sent = 0
        for chunk in chunks:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            sock.sendall(chunk)
            sent += len(chunk)
        status, body = _read_response(sock)
        return status, body, sent


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def test_a_50_mb_declared_body_is_refused_from_its_header(server: str) -> None:
    head = (
        b"POST /v1/matmul HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {JUNK_BYTES}\r\n\r\n".encode()
    )
    # One chunk of the 50 MB, then nothing more: the answer comes without the rest.
    status, body, sent = _send_until_answered(_port(server), head, iter([CHUNK]))
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    assert sent <= len(CHUNK)
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}


def test_a_50_mb_chunked_body_is_refused_once_it_passes_the_cap(server: str) -> None:
    head = (
        b"POST /v1/matmul HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    framed = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK)
    status, body, sent = _send_until_answered(_port(server), head, iter([framed] * (JUNK_BYTES // len(CHUNK))))
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    # The answer came after the cap and well before the end: what was sent past the cap only
    # filled the socket buffers.
    assert MAX_BODY_BYTES < sent < JUNK_BYTES // 2, sent
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}


def test_a_client_hanging_up_mid_body_is_no_server_error(server: str) -> None:
    head = (
        b"POST /v1/matmul HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    before = server_log(server)
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=REQUEST_TIMEOUT_S) as sock:
        sock.sendall(head + b'{"seed": 1,')
    # The next request on another connection is served after the hang-up was handled (one loop).
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}
    assert httpx.post(f"{server}/v1/matmul", json={"seed": 1, "shape": [2, 2, 2]}).status_code == 200
    assert server_log(server)[len(before):].count("Traceback") == 0


# -- the event loop stays free ---------------------------------------------------------------------
SLOW_SHAPE = [2000, 2000, 2000]  # 8e9 multiply-adds plus 8e6 random numbers: about a second on 2 cores


@pytest.fixture
def slow_server() -> Iterator[str]:
    # NumPy, so the slow product is slow on every machine (a GPU would do it in milliseconds).
    with _serving(INFERENCE_MAX_ELEMENTS=str(2000 * 2000), INFERENCE_BACKEND="numpy") as base:
        yield base


async def _small_during_slow(base: str) -> tuple[float, float, bool, list[int]]:
    small = {"seed": 3, "shape": [4, 4, 4], "precision": "tf32"}
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_TIMEOUT_S) as client:
        assert (await client.post("/v1/matmul", json=small)).status_code == 200  # connections and threads warm
        started = time.monotonic()
        slow = asyncio.create_task(client.post("/v1/matmul", json={"seed": 1, "shape": SLOW_SHAPE}))
        # Wait until the server is computing the slow product: /ready counts products in flight.
        # (Each poll is itself a small request answered while the product is being computed.)
        while (await client.get("/ready")).json()["in_flight"] == 0:
            # Done before /ready ever counted it: the product blocked the event loop (so /ready too).
            assert not slow.done(), "the slow product was never seen in flight"
            assert time.monotonic() - started < REQUEST_TIMEOUT_S
        sent = time.monotonic()
        answer = await client.post("/v1/matmul", json=small)
        small_latency = time.monotonic() - sent
        slow_still_running = not slow.done()
        slow_answer = await slow
        slow_total = time.monotonic() - started
    assert answer.status_code == 200 and answer.json()["flags"]["cuda.matmul.allow_tf32"] is True, answer.text
    assert slow_answer.status_code == 200, slow_answer.text
    return small_latency, slow_total, slow_still_running, slow_answer.json()["shape"]


def test_a_slow_product_does_not_stall_a_small_request(slow_server: str) -> None:
    small_latency, slow_total, slow_still_running, shape = asyncio.run(_small_during_slow(slow_server))
    assert shape == [SLOW_SHAPE[0], SLOW_SHAPE[2]]
    # With the product on the event loop, the small request waited for all of it: it was answered
    # while the slow one was still being computed (an order of events, not a time bound, which a
    # loaded machine would break).
    timings = f"small request {small_latency:.3f} s, slow one {slow_total:.3f} s"
    assert slow_still_running, f"the small request finished after the slow one: {timings}"


# -- context propagation --------------------------------------------------------------------------
def _load_app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inference_server_app", HERE / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the classes are made
    spec.loader.exec_module(module)
    return module


def test_run_in_threadpool_carries_the_request_flags_and_run_in_executor_does_not() -> None:
    from starlette.concurrency import run_in_threadpool

    app = _load_app()
    job = app.parse_body(b'{"seed": 1, "shape": [2, 2, 2], "precision": "tf32", "deterministic": true}', 100)
    backend = app.choose_backend("numpy")

    # an executor whose one worker thread starts outside any scope (with 3.14's thread_inherit_context
    # a thread started inside the request's scope would keep a copy of it)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    executor.submit(app.compute, job, backend).result()

    async def request() -> tuple[dict[str, object], dict[str, object]]:
        loop = asyncio.get_running_loop()
        with app.request_scope(job.options):  # as the handler does, in the request's task
            _, pooled = await run_in_threadpool(app.compute, job, backend)
            _, executed = await loop.run_in_executor(executor, app.compute, job, backend)
        return pooled, executed

    with executor:
        pooled, executed = asyncio.run(request())
    assert pooled == _expected_flags(job.options)  # the worker thread saw the request's scope
    assert pooled["cuda.matmul.allow_tf32"] is True and pooled["cudnn.deterministic"] is True
    assert executed == backends.snapshot().to_dict()  # the executor's thread saw only the process defaults
    assert executed["cuda.matmul.allow_tf32"] is False and executed["cudnn.deterministic"] is False


def test_ready_counts_the_products_being_computed_not_the_requests_waiting_for_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool of 3 threads and 6 requests, each product held until released: once every body is
    parsed and 3 products are being computed (the other 3 wait for a thread), ``in_flight`` is 3."""
    import threading

    import anyio.to_thread

    app = _load_app()
    parsed, started, release = threading.Semaphore(0), threading.Semaphore(0), threading.Event()
    parse_body = app.parse_body

    def counted_parse(body: bytes, limit: int) -> Any:
        job = parse_body(body, limit)
        parsed.release()
        return job

    monkeypatch.setattr(app, "parse_body", counted_parse)

    class Held:
        name, device = "numpy", "cpu"

        @staticmethod
        def checksum(a: Any, b: Any) -> float:
            started.release()
            assert release.wait(REQUEST_TIMEOUT_S)
            return float((a @ b).sum())

    application = app.create_app(backend=Held())  # type: ignore[arg-type]

    async def main() -> tuple[int, list[int], int]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 3  # the pool's size, in this loop
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://app", timeout=REQUEST_TIMEOUT_S) as client:
            posts = [asyncio.create_task(client.post("/v1/matmul", json={"seed": i, "shape": [2, 2, 2]}))
                     for i in range(6)]  # fmt: skip
            for semaphore, count in ((parsed, 6), (started, 3)):  # (waited for in asyncio's own threads)
                for _ in range(count):
                    assert await asyncio.to_thread(semaphore.acquire, timeout=REQUEST_TIMEOUT_S)
            during = (await client.get("/ready")).json()["in_flight"]
            release.set()
            statuses = [answer.status_code for answer in await asyncio.gather(*posts)]
            after = (await client.get("/ready")).json()["in_flight"]
        return during, statuses, after

    try:
        during, statuses, after = asyncio.run(main())
    finally:
        release.set()
    assert (during, statuses, after) == (3, [200] * 6, 0)
