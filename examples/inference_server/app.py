"""An async inference server: each request computes under its own backends flags.

``POST /v1/matmul`` multiplies two matrices, given as ``{"a": [[...]], "b": [[...]]}`` or generated
from ``{"seed": int, "shape": [m, k, n]}``, with per-request options
``{"precision": "ieee" | "tf32", "deterministic": true | false}``. Only these two options map to
flags (``cuda.matmul.allow_tf32`` and the ``backends.deterministic()`` preset); a client can never
set any other flag, nor a process default. The answer carries the result's checksum and every flag
the product was computed under, read with ``backends.snapshot()`` in the worker thread that
computed it.

``GET /health`` (liveness), ``GET /ready`` (the backend and device chosen), ``GET /v1/flags`` (the
process defaults). Every refusal is JSON, ``{"error": {"code", "field", "message"}}``, with a
stable ``code``; docs/inference-server.md lists them, the request and response shapes, and the
limits (``INFERENCE_MAX_ELEMENTS``, ``INFERENCE_MAX_BODY_BYTES``, ``INFERENCE_BACKEND``).

The event loop only reads bodies and routes: JSON parsing, validation and the product run in
Starlette's thread pool (``run_in_threadpool``), which copies the request's context into the
worker thread, so the request's scope holds there. (``loop.run_in_executor`` would not.)
"""

from __future__ import annotations

import array
import contextlib
import itertools
import json
import math
import os
import re
import reprlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import backends

MAX_ELEMENTS_ENV = "INFERENCE_MAX_ELEMENTS"
DEFAULT_MAX_ELEMENTS = 1_000_000
MAX_BODY_ENV = "INFERENCE_MAX_BODY_BYTES"
DEFAULT_MAX_BODY_BYTES = 1_048_576  # 1 MiB: json.loads of it takes tens of ms; larger shapes use "seed"
BACKEND_ENV = "INFERENCE_BACKEND"  # "auto" (CuPy when CUDA is usable, else NumPy), "numpy" or "cupy"

TOP_LEVEL_KEYS = frozenset({"a", "b", "seed", "shape", "precision", "deterministic"})
PRECISIONS = {"ieee": False, "tf32": True}  # precision -> cuda.matmul.allow_tf32
MAX_NESTING = 512  # levels of arrays/objects a body may nest (a valid request nests 3)
MAX_SEED = 2**63  # numpy's default_rng takes any int; a bound keeps seeds portable to other clients


class ApiError(Exception):
    """A refusal: the HTTP status, a stable ``code``, the offending ``field`` (``None`` for the body
    as a whole) and a message for people."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def _invalid(code: str, field: str | None, message: str) -> ApiError:
    return ApiError(422, code, message, field)


# Client values are echoed in messages: reprlib bounds their size and depth (a 1 MB string, a
# 900-deep list), and repr() escapes what cannot be printed.
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = _repr.maxlong = 40
_repr.maxlist = _repr.maxdict = 6
_repr.maxlevel = 3


def show(value: object) -> str:
    """A short, printable rendering of a client's value, for a message."""
    return f"{type(value).__name__} {_repr.repr(value)}"


def _field_name(key: str) -> str:
    """An unknown key as the ``field`` of an error: itself when short and printable, else its
    bounded repr."""
    return key if len(key) <= 64 and key.isprintable() else _repr.repr(key)


class SafeJSONResponse(JSONResponse):
    """JSON that always encodes: ASCII only (a lone surrogate from a client's ``"\\ud800"`` cannot
    be UTF-8 encoded) and no NaN/Infinity (they are not JSON; results are checked before)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"code": error.code, "field": error.field, "message": error.message}}
    return SafeJSONResponse(body, status_code=error.status, headers=headers)


# -- configuration ----------------------------------------------------------------------------------
def _positive_int_from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not an integer") from None
    if value < 1:
        raise SystemExit(f"{name}={raw!r} must be at least 1")
    return value


def max_elements_from_env() -> int:
    return _positive_int_from_env(MAX_ELEMENTS_ENV, DEFAULT_MAX_ELEMENTS)


def max_body_bytes_from_env() -> int:
    return _positive_int_from_env(MAX_BODY_ENV, DEFAULT_MAX_BODY_BYTES)


@dataclass(frozen=True)
class Backend:
    """Where products are computed: ``name`` is ``"cupy"`` or ``"numpy"``, ``device`` ``"cuda:0"`` or ``"cpu"``."""

    name: str
    device: str
    checksum: Callable[[np.ndarray, np.ndarray], float]


def _numpy_checksum(a: np.ndarray, b: np.ndarray) -> float:
    product = a.astype(np.float32) @ b.astype(np.float32)
    return float(product.sum(dtype=np.float64))


def _cupy_backend() -> Backend:
    import cupy

    def checksum(a: np.ndarray, b: np.ndarray) -> float:
        product = cupy.asarray(a, dtype=cupy.float32) @ cupy.asarray(b, dtype=cupy.float32)
        return float(product.sum(dtype=cupy.float64).get())

    return Backend("cupy", f"cuda:{cupy.cuda.Device().id}", checksum)


def choose_backend(wanted: str | None = None) -> Backend:
    """The backend ``wanted`` (default: ``INFERENCE_BACKEND``, else ``"auto"``); ``SystemExit`` for
    ``"cupy"`` without a usable CUDA device, or an unknown name."""
    wanted = (wanted if wanted is not None else os.environ.get(BACKEND_ENV, "auto")).lower()
    if wanted not in ("auto", "numpy", "cupy"):
        raise SystemExit(f"{BACKEND_ENV}={wanted!r}: expected 'auto', 'numpy' or 'cupy'")
    # Cached after the first call (backends.availability): cheap enough to ask anywhere.
    if wanted == "cupy" and not backends.cuda.is_available():
        raise SystemExit(f"{BACKEND_ENV}=cupy, but backends.cuda.is_available() is False")
    if wanted != "numpy" and backends.cuda.is_available():
        return _cupy_backend()
    return Backend("numpy", "cpu", _numpy_checksum)


# -- requests -----------------------------------------------------------------------------------------
def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(n: int) -> str:
    # A shape entry may have 4,300 digits (json.loads' limit), a product of two twice as many:
    # more than repr() converts. Beyond 18 digits, the order of magnitude says enough.
    return str(n) if n < 10**18 else f"about 2**{n.bit_length() - 1}"


def _check_size(field: str, what: str, rows: int, cols: int, max_elements: int) -> None:
    if rows * cols > max_elements:
        count = f"{_count(rows)}x{_count(cols)}={_count(rows * cols)}"
        raise _invalid("too_large", field, f"{what} would have {count} elements, more than the limit of {max_elements}")


def _parse_matrix(name: str, value: object, max_elements: int) -> list[list[float]]:
    """``value`` as rows of floats, after checking its shape against the limit (before converting)."""
    if not isinstance(value, list):
        raise _invalid("wrong_type", name, f"{name!r} must be a non-empty list of rows, got {show(value)}")
    if not value:
        raise _invalid("invalid_value", name, f"{name!r} must have at least one row")
    first = value[0]
    if not isinstance(first, list):
        raise _invalid("wrong_type", f"{name}[0]", f"{name!r} row 0 must be a list of numbers, got {show(first)}")
    if not first:
        raise _invalid("invalid_value", f"{name}[0]", f"{name!r} row 0 must have at least one number")
    _check_size(name, repr(name), len(value), len(first), max_elements)
    rows = []
    for i, row in enumerate(value):
        if not isinstance(row, list):
            raise _invalid("wrong_type", f"{name}[{i}]", f"{name!r} row {i} must be a list of numbers, got {show(row)}")
        if len(row) != len(first):
            message = f"{name!r} is ragged: row {i} has {len(row)} entries, row 0 has {len(first)}"
            raise _invalid("ragged_matrix", f"{name}[{i}]", message)
        numbers = []
        for j, entry in enumerate(row):
            where = f"{name}[{i}][{j}]"
            if isinstance(entry, bool) or not isinstance(entry, int | float):
                raise _invalid("wrong_type", where, f"{where} must be a number, got {show(entry)}")
            try:
                number = float(entry)  # an int beyond 1.8e308 raises OverflowError
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):  # NaN, Infinity and 1e999 are accepted by json.loads
                raise _invalid("not_finite", where, f"{where} must be a finite float64, got {show(entry)}")
            numbers.append(number)
        rows.append(numbers)
    return rows


@dataclass(frozen=True)
class Job:
    """A validated request: the matrices (given, or a seed and a shape to generate them from, in the
    worker thread) and the options that become flags."""

    a: list[list[float]] | None
    b: list[list[float]] | None
    seed: int | None
    shape: tuple[int, int, int]
    options: dict[str, Any]

    def matrices(self) -> tuple[np.ndarray, np.ndarray]:
        if self.seed is not None:
            return seeded_matrices(self.seed, self.shape)
        return np.array(self.a, dtype=np.float64), np.array(self.b, dtype=np.float64)


def seeded_matrices(seed: int, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The matrices a ``{"seed", "shape"}`` request multiplies (clients can recompute them)."""
    m, k, n = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def _parse_seeded(seed: object, shape: object, max_elements: int) -> tuple[int, tuple[int, int, int]]:
    if not _is_int(seed):
        raise _invalid("wrong_type", "seed", f"'seed' must be an integer, got {show(seed)}")
    if not 0 <= seed < MAX_SEED:  # type: ignore[operator]
        raise _invalid("invalid_value", "seed", f"'seed' must be in [0, 2**63), got {show(seed)}")
    wanted = f"'shape' must be [m, k, n], three positive integers, got {show(shape)}"
    if not isinstance(shape, list):
        raise _invalid("wrong_type", "shape", wanted)
    if len(shape) != 3:
        raise _invalid("invalid_value", "shape", wanted)
    for i, d in enumerate(shape):
        if not _is_int(d):
            raise _invalid("wrong_type", f"shape[{i}]", f"shape[{i}] must be a positive integer, got {show(d)}")
        if d < 1:
            raise _invalid("invalid_value", f"shape[{i}]", f"shape[{i}] must be a positive integer, got {show(d)}")
    m, k, n = shape
    # Every size is checked before anything is allocated: [1000000, 1, 1000000] has small inputs and
    # a product of 10**12 elements. With all three within the limit, m*k*n <= limit**1.5.
    _check_size("shape", "'a'", m, k, max_elements)
    _check_size("shape", "'b'", k, n, max_elements)
    _check_size("shape", "the product", m, n, max_elements)
    return seed, (m, k, n)  # type: ignore[return-value]


def parse_request(payload: object, max_elements: int) -> Job:
    """Validate a decoded request body; ``ApiError`` (422) for anything a client got wrong."""
    if not isinstance(payload, dict):
        raise _invalid("not_an_object", None, f"the body must be a JSON object, got {show(payload)}")
    unknown = sorted(set(payload) - TOP_LEVEL_KEYS)
    if unknown:
        shown = ", ".join(_repr.repr(key) for key in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise _invalid(
            "unknown_field",
            _field_name(unknown[0]),
            f"unknown key(s) {shown}; allowed: {sorted(TOP_LEVEL_KEYS)} "
            "(a client sets flags only through 'precision' and 'deterministic')",
        )

    has_matrices = "a" in payload or "b" in payload
    has_seed = "seed" in payload or "shape" in payload
    if has_matrices and has_seed:
        raise _invalid("conflicting_fields", None, "give either 'a' and 'b', or 'seed' and 'shape', not both")
    if has_matrices:
        for name in ("a", "b"):
            if name not in payload:
                raise _invalid("missing_field", name, "give both 'a' and 'b'")
        a = _parse_matrix("a", payload["a"], max_elements)
        b = _parse_matrix("b", payload["b"], max_elements)
        if len(a[0]) != len(b):
            raise _invalid(
                "shape_mismatch", "b", f"shapes do not multiply: a is {len(a)}x{len(a[0])}, b is {len(b)}x{len(b[0])}"
            )
        _check_size("b", "the product", len(a), len(b[0]), max_elements)
        matrices: tuple[Any, Any, int | None, tuple[int, int, int]] = (a, b, None, (len(a), len(b), len(b[0])))
    elif has_seed:
        for name in ("seed", "shape"):
            if name not in payload:
                raise _invalid("missing_field", name, "give both 'seed' and 'shape'")
        seed, shape = _parse_seeded(payload["seed"], payload["shape"], max_elements)
        matrices = (None, None, seed, shape)
    else:
        raise _invalid("missing_field", None, "give 'a' and 'b', or 'seed' and 'shape'")
    return Job(*matrices, _parse_options(payload))


def _parse_options(payload: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}

    if "precision" in payload:
        precision = payload["precision"]
        if not isinstance(precision, str):
            raise _invalid("wrong_type", "precision", f"'precision' must be a string, got {show(precision)}")
        if precision not in PRECISIONS:
            raise _invalid(
                "invalid_value", "precision", f"'precision' must be one of {sorted(PRECISIONS)}, got {show(precision)}"
            )
        options["precision"] = precision
    if "deterministic" in payload:
        deterministic = payload["deterministic"]
        if not isinstance(deterministic, bool):
            message = f"'deterministic' must be true or false, got {show(deterministic)}"
            raise _invalid("wrong_type", "deterministic", message)
        options["deterministic"] = deterministic
    return options


# A JSON string (with its escapes), and a bracket's step in nesting depth (as a signed byte).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def nesting_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in ``body``, brackets inside strings left out
    (linear time, in C: a 1 MiB body takes a few ms)."""
    brackets = _JSON_STRING.sub(b"", body).translate(_STEPS, _NOT_BRACKETS)
    return max(itertools.accumulate(array.array("b", brackets)), default=0)


def parse_body(body: bytes, max_elements: int) -> Job:
    """Decode and validate a body (run in a worker thread: a 1 MiB body takes tens of ms).

    Nesting is limited here, before parsing: how deep ``json.loads`` goes before it raises
    ``RecursionError`` differs between Pythons (3.14 measures the C stack and parses a 50,000-deep
    object), so the same body gets the same answer on every Python."""
    too_deep = f"the body nests arrays or objects more than {MAX_NESTING} levels deep"
    if nesting_depth(body) > MAX_NESTING:
        raise _invalid("too_deep", None, too_deep)
    try:
        payload = json.loads(body)
    except RecursionError:  # called on a deep stack already: the same answer
        raise _invalid("too_deep", None, too_deep) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _invalid("invalid_json", None, f"the body is not valid JSON: {exc}") from None
    except ValueError:  # Python refuses to convert an integer literal of more than 4300 digits
        raise _invalid("invalid_json", None, "the body has an integer literal too long to convert") from None
    return parse_request(payload, max_elements)


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


def compute(job: Job, backend: Backend) -> tuple[float, dict[str, object]]:
    """The checksum of ``a @ b`` in float32 and the flags it ran under (both read in this thread)."""
    a, b = job.matrices()
    # A float64 input beyond float32's range becomes inf when cast; the caller refuses a non-finite
    # checksum, so numpy's overflow warnings would only be noise in the server's log.
    with np.errstate(over="ignore", invalid="ignore"):
        checksum = backend.checksum(a, b)
    return checksum, backends.snapshot().to_dict()


class InFlight:
    """Products being computed now, for ``GET /ready``: counted in the worker thread from the start
    of the product to its end, so a request waiting for a free thread of the pool is not counted
    (at most the pool's size, 40 with Starlette's default)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the pool's threads count at once
        self.count = 0

    def compute(self, job: Job, backend: Backend) -> tuple[float, dict[str, object]]:
        """``compute(job, backend)``, counted while it runs."""
        with self._lock:
            self.count += 1
        try:
            return compute(job, backend)
        finally:
            with self._lock:
                self.count -= 1


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed ``max_bytes``: from the
    Content-Length header before reading anything, or while streaming a chunked body."""
    declared = request.headers.get("content-length")
    # The server (h11) has already refused a Content-Length that is not digits.
    if declared is not None and declared.isascii() and declared.isdigit() and (
        len(declared) > 18 or int(declared) > max_bytes
    ):
        size = declared if len(declared) <= 18 else "over 10**18"
        raise ApiError(413, "body_too_large", f"the body is {size} bytes, more than the limit of {max_bytes}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:  # stop here: the rest is never held in memory
                raise ApiError(413, "body_too_large", f"the body is more than the limit of {max_bytes} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        # Nobody will read this answer; it keeps a hang-up from being logged as a server error.
        raise ApiError(400, "incomplete_body", "the connection closed before the body ended") from None
    return b"".join(chunks)


def _is_json(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "application/json"


# -- the app --------------------------------------------------------------------------------------------
def create_app(
    max_elements: int | None = None, max_body_bytes: int | None = None, backend: Backend | None = None
) -> Starlette:
    element_limit = max_elements_from_env() if max_elements is None else max_elements
    body_limit = max_body_bytes_from_env() if max_body_bytes is None else max_body_bytes
    chosen = choose_backend() if backend is None else backend
    in_flight = InFlight()

    async def matmul(request: Request) -> Response:
        if not _is_json(request.headers.get("content-type")):
            raise ApiError(415, "unsupported_media_type", "send the body as Content-Type: application/json")
        body = await read_body(request, body_limit)
        job = await run_in_threadpool(parse_body, body, element_limit)
        with request_scope(job.options):
            # run_in_threadpool runs compute() in a copy of this task's context: the scope just
            # entered holds in the worker thread, and the event loop serves other requests meanwhile.
            try:
                checksum, flags = await run_in_threadpool(in_flight.compute, job, chosen)
            except MemoryError:  # cupy's OutOfMemoryError is one too
                raise ApiError(503, "out_of_memory", "not enough memory for this product now; retry later") from None
        if not math.isfinite(checksum):
            message = f"the product overflowed float32 (its checksum is {checksum}); scale the inputs down"
            raise _invalid("non_finite_result", None, message)
        m, _, n = job.shape
        return SafeJSONResponse({"checksum": checksum, "shape": [m, n], "flags": flags})

    async def defaults(request: Request) -> Response:
        return SafeJSONResponse({"flags": backends.snapshot().to_dict()})

    async def health(request: Request) -> Response:
        return SafeJSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        answer = {"status": "ready", "backend": chosen.name, "device": chosen.device, "in_flight": in_flight.count}
        return SafeJSONResponse(answer)

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own refusals (no such route, wrong method) in the same JSON shape.
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(ApiError(exc.status_code, code, str(exc.detail)), headers=exc.headers)

    async def internal_error(request: Request, exc: Exception) -> Response:
        # Only a bug gets here (the traceback is still logged): the client gets JSON, not text.
        return error_response(ApiError(500, "internal_error", "the server failed to answer this request"))

    routes = [
        Route("/v1/matmul", matmul, methods=["POST"]),
        Route("/v1/flags", defaults, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
    ]
    handlers = {ApiError: refused, HTTPException: http_error, Exception: internal_error}
    return Starlette(routes=routes, exception_handlers=handlers)


app = create_app()
