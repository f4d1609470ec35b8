"""Requests per second and p50/p99 latency of the example inference server, with and without the
per-request scope, measured side by side in one run.

Two uvicorn servers run on two loopback ports, in one process, on one event loop and one thread
pool (two server processes differed by several percent even when both ran the same app):

- **scoped**: the example as shipped; each request computes under its ``precision`` and
  ``deterministic`` options (``request_scope``, entered in the request's task and carried into the
  worker thread by ``run_in_threadpool``);
- **unscoped**: the same app (the module loaded a second time) with ``request_scope`` replaced by
  a no-op, so every product runs under the process defaults.

One client process sends the same requests to both (``{"seed", "shape": [8, 8, 8], "precision":
"tf32", "deterministic": true}``) over keep-alive connections, a fixed number in flight, in rounds
that alternate between the two servers (ABBA order), so that drift in the machine's speed falls on
both alike. The client is a minimal HTTP/1.1 one on asyncio streams, so that the figures are more
the server's than the client's. Every answer is checked: 200, and the flags each server should
report (the request's for scoped, the defaults for unscoped).

    python benchmarks/bench_server.py           # 16 rounds of 1,000 requests per server (under a minute)
    python benchmarks/bench_server.py --quick   # 2 rounds of 200: a smoke test for CI

On a small shared machine, round-to-round noise (several percent) is larger than the scope's cost,
so the last row times what the scope adds to a request directly: ``request_scope()`` entered and
exited, and the snapshot the worker takes inside it against one taken outside (timeit medians).

It is a report, not a test: the exit status is 0 unless a server fails to start or answers wrongly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "inference_server" / "app.py"
BODY = {"seed": 1, "shape": [8, 8, 8], "precision": "tf32", "deterministic": True}
VARIANTS = ("scoped", "unscoped")
LABELS = {
    "scoped": "per-request scope (as shipped)",
    "unscoped": "no scope (request_scope a no-op)",
}


# -- the servers ----------------------------------------------------------------------------------------
def _load_app(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the classes are made
    spec.loader.exec_module(module)
    return module


async def serve(ports: dict[str, int]) -> None:
    """Run both servers in this process until it is terminated."""
    import uvicorn

    running = []
    for variant, port in ports.items():
        module = _load_app(f"inference_server_app_{variant}")
        if variant == "unscoped":
            # create_app's handler looks request_scope up in its own module at each request.
            module.request_scope = lambda options: contextlib.nullcontext()
        config = uvicorn.Config(module.create_app(), host="127.0.0.1", port=port, log_level="warning")
        running.append(uvicorn.Server(config).serve())
    await asyncio.gather(*running)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def servers() -> Iterator[dict[str, int]]:
    """Both servers started (each answering ``GET /health``); their ports by variant."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKENDS_", "INFERENCE_"))}
    env["INFERENCE_BACKEND"] = "numpy"  # the same backend for both, on every machine
    ports = {variant: _free_port() for variant in VARIANTS}
    command = [sys.executable, __file__, "--serve", *(str(ports[variant]) for variant in VARIANTS)]
    processes = [subprocess.Popen(command, env=env)]
    try:
        for port in ports.values():
            _wait_for_health(port, processes)
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for_health(port: int, processes: list[subprocess.Popen[bytes]], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if any(process.poll() is not None for process in processes):
            raise SystemExit("the servers exited during start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if sock.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"no server answered on port {port} within {timeout_s} s")
        time.sleep(0.05)  # another process binding its port: there is nothing to wait on


# -- the client ---------------------------------------------------------------------------------------------
def _request_bytes() -> bytes:
    body = json.dumps(BODY).encode()
    head = (
        "POST /v1/matmul HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    return int(lines[0].split()[1]), await reader.readexactly(length)


async def _connection(port: int, count: int, latencies: list[float], answers: list[bytes]) -> None:
    """One keep-alive connection sending ``count`` requests one after the other."""
    request = _request_bytes()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            start = time.perf_counter()
            writer.write(request)
            status, body = await _read_answer(reader)
            latencies.append(time.perf_counter() - start)
            if status != 200:
                raise SystemExit(f"HTTP {status}: {body[:200]!r}")
            answers.append(body)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def one_round(port: int, requests: int, connections: int) -> tuple[float, list[float], list[bytes]]:
    """Wall seconds, per-request latencies and answer bodies of ``requests`` requests over
    ``connections`` connections."""
    latencies: list[float] = []
    answers: list[bytes] = []
    share = [requests // connections + (i < requests % connections) for i in range(connections)]
    start = time.perf_counter()
    await asyncio.gather(*(_connection(port, n, latencies, answers) for n in share if n))
    return time.perf_counter() - start, latencies, answers


def _check_flags(variant: str, answers: list[bytes]) -> None:
    """Scoped answers carry the request's flags; unscoped ones the process defaults."""
    wanted = variant == "scoped"
    for body in {bytes(answer) for answer in answers}:  # the same request: few distinct bodies
        flags = json.loads(body)["flags"]
        if (flags["cuda.matmul.allow_tf32"], flags["cudnn.deterministic"]) != (wanted, wanted):
            raise SystemExit(f"{variant}: unexpected flags {flags}")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


Results = dict[str, dict[str, list[float]]]  # variant -> {"rps": per round, "latencies": per request}


async def measure(ports: dict[str, int], rounds: int, requests: int, connections: int) -> Results:
    results: Results = {v: {"rps": [], "latencies": []} for v in VARIANTS}
    for variant in VARIANTS:  # warm-up: the servers' worker threads, NumPy's first products
        await one_round(ports[variant], max(50, requests // 10), connections)
    for index in range(rounds):
        order = VARIANTS if index % 4 in (0, 3) else VARIANTS[::-1]  # ABBA BAAB ...
        for variant in order:
            wall, latencies, answers = await one_round(ports[variant], requests, connections)
            _check_flags(variant, answers)
            results[variant]["rps"].append(requests / wall)
            results[variant]["latencies"].extend(latencies)
    return results


def report(results: Results, rounds: int, requests: int, connections: int) -> None:
    import starlette
    import uvicorn

    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, uvicorn {uvicorn.__version__}, "
        f"starlette {starlette.__version__}, loopback; {connections} connections in flight; "
        f"{rounds} rounds of {requests} requests per server, alternating"
    )
    print(f"request: POST /v1/matmul {json.dumps(BODY)}")
    for variant in VARIANTS:
        rps, latencies = results[variant]["rps"], results[variant]["latencies"]
        print(
            f"{LABELS[variant]:<34} {statistics.median(rps):8.0f} requests/s (median round)   "
            f"p50 {percentile(latencies, 0.50) * 1e3:6.2f} ms   p99 {percentile(latencies, 0.99) * 1e3:6.2f} ms"
        )
    scoped, unscoped = results["scoped"], results["unscoped"]
    # Rounds were run in pairs, so each pair's ratio is measured under the same conditions.
    ratios = [a / b - 1 for a, b in zip(scoped["rps"], unscoped["rps"], strict=True)]
    p50 = percentile(scoped["latencies"], 0.5) - percentile(unscoped["latencies"], 0.5)
    print(
        f"difference, scoped vs unscoped: requests/s {statistics.median(ratios):+.1%} (median of paired rounds, "
        f"range {min(ratios):+.1%} to {max(ratios):+.1%}), p50 {p50 * 1e3:+.3f} ms"
    )


def scope_cost(quick: bool, p50_s: float) -> str:
    """What the scope adds to one request, timed in this process: entering and exiting
    ``request_scope()``, plus the worker's snapshot inside it rather than outside."""
    module = _load_app("inference_server_app_timed")
    options = {"precision": BODY["precision"], "deterministic": BODY["deterministic"]}

    def scoped() -> None:
        with module.request_scope(options):
            module.backends.snapshot().to_dict()

    def unscoped() -> None:
        with contextlib.nullcontext():
            module.backends.snapshot().to_dict()

    number, repeat = (500, 3) if quick else (5000, 9)
    scoped_s, unscoped_s = (statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number
                            for fn in (scoped, unscoped))
    added = scoped_s - unscoped_s
    return (
        f"the scope's own cost per request (timeit): {added * 1e6:.1f} us "
        f"(request_scope() entered and exited, and the snapshot inside it), {added / p50_s:.1%} of the p50 latency"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 200 requests: a smoke test")
    parser.add_argument("--connections", type=int, default=4, help="requests in flight (default 4)")
    # The servers' process: --serve SCOPED_PORT UNSCOPED_PORT.
    parser.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(serve(dict(zip(VARIANTS, args.serve, strict=True))))
        return
    rounds, requests = (2, 200) if args.quick else (16, 1000)
    with servers() as ports:
        results = asyncio.run(measure(ports, rounds, requests, args.connections))
    report(results, rounds, requests, args.connections)
    print(scope_cost(args.quick, statistics.median(percentile(results[v]["latencies"], 0.5) for v in VARIANTS)))


if __name__ == "__main__":
    main()
