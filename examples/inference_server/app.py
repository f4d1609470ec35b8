"""An async inference server: each request computes under its own backends flags.

``POST /v1/matmul`` multiplies two matrices, given as ``{"a": [[...]], "b": [[...]]}`` or generated
from ``{"seed": int, "shape": [m, k, n]}``, with per-request options
``{"precision": "ieee" | "tf32", "deterministic": true | false}``. Only these two options map to
flags (``cuda.matmul.allow_tf32`` and the ``backends.deterministic()`` preset); a client can never
set any other flag, nor a process default. The answer carries the result's checksum and every flag
the product was computed under, read with ``backends.snapshot()`` inside the request's scope.

``GET /v1/flags`` shows the process defaults. Bad input gets HTTP 422 with ``{"error": "..."}``.

The largest matrix accepted has ``INFERENCE_MAX_ELEMENTS`` elements (default 1,000,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import backends

MAX_ELEMENTS_ENV = "INFERENCE_MAX_ELEMENTS"
DEFAULT_MAX_ELEMENTS = 1_000_000

TOP_LEVEL_KEYS = frozenset({"a", "b", "seed", "shape", "precision", "deterministic"})
PRECISIONS = {"ieee": False, "tf32": True}  # precision -> cuda.matmul.allow_tf32


class BadRequest(ValueError):
    """The request cannot be served; the message goes back to the client with HTTP 422."""


def max_elements_from_env() -> int:
    raw = os.environ.get(MAX_ELEMENTS_ENV)
    if raw is None:
        return DEFAULT_MAX_ELEMENTS
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{MAX_ELEMENTS_ENV}={raw!r} is not an integer") from None
    if value < 1:
        raise SystemExit(f"{MAX_ELEMENTS_ENV}={raw!r} must be at least 1")
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_matrix(name: str, value: object, max_elements: int) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise BadRequest(f"{name!r} must be a non-empty list of rows, got {type(value).__name__}")
    width = None
    for i, row in enumerate(value):
        if not isinstance(row, list) or not row:
            raise BadRequest(f"{name!r} row {i} must be a non-empty list of numbers")
        if width is None:
            width = len(row)
            if len(value) * width > max_elements:
                raise BadRequest(
                    f"{name!r} has {len(value)}x{width}={len(value) * width} elements, "
                    f"more than the limit of {max_elements}"
                )
        elif len(row) != width:
            raise BadRequest(f"{name!r} is ragged: row {i} has {len(row)} entries, row 0 has {width}")
        for j, entry in enumerate(row):
            if isinstance(entry, bool) or not isinstance(entry, int | float):
                raise BadRequest(f"{name!r}[{i}][{j}] must be a number, got {type(entry).__name__} {entry!r}")
            if isinstance(entry, float) and not math.isfinite(entry):
                raise BadRequest(f"{name!r}[{i}][{j}] must be finite, got {entry!r}")
    return np.asarray(value, dtype=np.float64)


def _seeded(seed: object, shape: object, max_elements: int) -> tuple[np.ndarray, np.ndarray]:
    if not _is_int(seed) or not 0 <= seed < 2**63:  # type: ignore[operator]
        raise BadRequest(f"'seed' must be a non-negative integer, got {seed!r}")
    if not isinstance(shape, list) or len(shape) != 3 or not all(_is_int(d) and d > 0 for d in shape):
        raise BadRequest(f"'shape' must be [m, k, n], three positive integers, got {shape!r}")
    m, k, n = shape
    for name, rows, cols in (("a", m, k), ("b", k, n)):
        if rows * cols > max_elements:
            raise BadRequest(
                f"{name!r} would have {rows}x{cols}={rows * cols} elements, more than the limit of {max_elements}"
            )
    return seeded_matrices(seed, (m, k, n))  # type: ignore[arg-type]


def seeded_matrices(seed: int, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The matrices a ``{"seed", "shape"}`` request multiplies (clients can recompute them)."""
    m, k, n = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def parse_request(payload: object, max_elements: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Validate a request body; return the two matrices and the flags its options ask for."""
    if not isinstance(payload, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(payload).__name__}")
    unknown = sorted(set(payload) - TOP_LEVEL_KEYS)
    if unknown:
        raise BadRequest(f"unknown key(s) {unknown}; allowed: {sorted(TOP_LEVEL_KEYS)}")

    has_matrices = "a" in payload or "b" in payload
    has_seed = "seed" in payload or "shape" in payload
    if has_matrices and has_seed:
        raise BadRequest("give either 'a' and 'b', or 'seed' and 'shape', not both")
    if has_matrices:
        if "a" not in payload or "b" not in payload:
            raise BadRequest("give both 'a' and 'b'")
        a = _parse_matrix("a", payload["a"], max_elements)
        b = _parse_matrix("b", payload["b"], max_elements)
        if a.shape[1] != b.shape[0]:
            raise BadRequest(f"shapes do not multiply: a is {a.shape[0]}x{a.shape[1]}, b is {b.shape[0]}x{b.shape[1]}")
    elif has_seed:
        if "seed" not in payload or "shape" not in payload:
            raise BadRequest("give both 'seed' and 'shape'")
        a, b = _seeded(payload["seed"], payload["shape"], max_elements)
    else:
        raise BadRequest("give 'a' and 'b', or 'seed' and 'shape'")

    options: dict[str, Any] = {}
    if "precision" in payload:
        precision = payload["precision"]
        if not isinstance(precision, str) or precision not in PRECISIONS:
            raise BadRequest(f"'precision' must be one of {sorted(PRECISIONS)}, got {precision!r}")
        options["precision"] = precision
    if "deterministic" in payload:
        deterministic = payload["deterministic"]
        if not isinstance(deterministic, bool):
            raise BadRequest(f"'deterministic' must be true or false, got {deterministic!r}")
        options["deterministic"] = deterministic
    return a, b, options


@contextlib.contextmanager
def request_scope(options: dict[str, Any]) -> Iterator[None]:
    """The scope a request runs under: only the allowlisted options become flags."""
    overrides: dict[str, object] = {}
    if "precision" in options:
        overrides["cuda.matmul.allow_tf32"] = PRECISIONS[options["precision"]]
    with contextlib.ExitStack() as stack:
        if options.get("deterministic"):
            stack.enter_context(backends.deterministic())
        # Inside the deterministic preset, so an explicit precision wins over the preset's TF32 off.
        stack.enter_context(backends.flags(overrides))
        yield


def matmul_checksum(a: np.ndarray, b: np.ndarray) -> float:
    """``sum(a @ b)`` in float32 (where TF32 applies), on the GPU when there is one."""
    if backends.cuda.is_available():
        import cupy

        product = cupy.asarray(a, dtype=cupy.float32) @ cupy.asarray(b, dtype=cupy.float32)
        return float(product.sum(dtype=cupy.float64).get())
    product = a.astype(np.float32) @ b.astype(np.float32)
    return float(product.sum(dtype=np.float64))


def create_app(max_elements: int | None = None) -> Starlette:
    limit = max_elements_from_env() if max_elements is None else max_elements

    def error(message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=422)

    async def matmul(request: Request) -> JSONResponse:
        body = await request.body()
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error(f"malformed JSON: {exc}")
        try:
            a, b, options = parse_request(payload, limit)
        except BadRequest as exc:
            return error(str(exc))
        with request_scope(options):
            await asyncio.sleep(0)  # simulated I/O: other requests run here, under their own flags
            flags = backends.snapshot().to_dict()
            checksum = matmul_checksum(a, b)
        return JSONResponse({"checksum": checksum, "shape": [a.shape[0], b.shape[1]], "flags": flags})

    async def defaults(request: Request) -> JSONResponse:
        return JSONResponse({"flags": backends.snapshot().to_dict()})

    return Starlette(routes=[Route("/v1/matmul", matmul, methods=["POST"]), Route("/v1/flags", defaults)])


app = create_app()
