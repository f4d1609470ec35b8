"""The plain-data encoding of a snapshot that backends.integrations.ray sends with each call: it
round-trips, is the same bytes for the same flags, and decoding checks every name and value and
refuses anything else without running any of it (what a worker does with it: tests/test_ray.py)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

import backends
from backends._engine import carry
from backends._engine.carry import MAGIC, decode, encode


def encoded(values: Any) -> bytes:
    return MAGIC + json.dumps(values).encode()


def test_a_snapshot_round_trips_and_the_same_flags_give_the_same_bytes() -> None:
    with backends.cudnn.flags(deterministic=True), backends.cuda.matmul.tf32(True):
        snap = backends.snapshot()
    data = encode(snap)
    assert data.startswith(MAGIC)
    assert json.loads(data[len(MAGIC) :]) == snap.to_dict()  # plain data: every flag by name
    assert decode(data) == snap
    again = backends.Snapshot.from_dict(snap.to_dict())  # another object, the same flags
    assert encode(again) == data
    assert decode(bytes(data)) is decode(data)  # decoded (and checked) once
    with decode(data):
        assert (backends.cudnn.deterministic, backends.cuda.matmul.allow_tf32) == (True, True)


def test_snapshot_is_the_same_object_while_nothing_changes_and_a_new_one_when_something_does() -> None:
    with backends.cudnn.flags(benchmark=True):
        first, second = backends.snapshot(), backends.snapshot()
        assert first is second and first["cudnn.benchmark"] is True
        backends.set_defaults({"cuda.matmul.allow_tf32": True})  # a process default changes
        third = backends.snapshot()
    assert third is not first and third["cuda.matmul.allow_tf32"] is True and third["cudnn.benchmark"] is True
    assert backends.snapshot()["cudnn.benchmark"] is False


def test_bytes_that_are_not_an_encoded_snapshot_are_refused_with_value_error(tmp_path: Path) -> None:
    marker = tmp_path / "loaded"

    class WritesAMarker:
        def __reduce__(self) -> tuple[Any, ...]:
            return (open, (str(marker), "w"))

    for data in (pickle.dumps(WritesAMarker()), b"", b"\x00" * 40, pickle.dumps(backends.snapshot())):
        with pytest.raises(ValueError, match=r"not an encoded backends\.Snapshot"):
            decode(data)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (MAGIC + b"{not json", ValueError, "does not parse"),
        (MAGIC + b"\xff\xfe", ValueError, "does not parse"),
        (MAGIC + b"[" * 100_000 + b"]" * 100_000, ValueError, "does not parse"),
        (encoded([["cudnn.enabled", True]]), ValueError, "holds a JSON object, not list"),
        (encoded({"cudnn.enabled": True}), KeyError, "a Snapshot needs every flag"),
        (encoded({**backends.snapshot(), "cudnn.enabled": 1}), TypeError, "cudnn.enabled"),  # an int is not a bool
        (encoded({**backends.snapshot(), "cudnn.benchmark_limit": -1}), ValueError, "benchmark_limit"),
        (encoded({**backends.snapshot(), "cudnn.new_flag": True}), KeyError, "new_flag"),
    ],
)
def test_an_encoded_snapshot_that_does_not_check_out_is_refused_as_from_dict_refuses_it(
    data: bytes, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        decode(data)
    assert data not in carry._decoded


def test_only_snapshots_and_bytes_are_taken() -> None:
    with pytest.raises(TypeError, match=r"encode\(\) takes a backends\.Snapshot, got dict"):
        encode({"cudnn.enabled": True})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"decode\(\) takes bytes, got bytearray"):
        decode(bytearray(encode(backends.snapshot())))  # type: ignore[arg-type]


def test_the_caches_stay_small_whatever_is_carried() -> None:
    for limit in range(1, 3 * carry._KEPT):
        with backends.cudnn.flags(benchmark_limit=limit):
            assert decode(encode(backends.snapshot()))["cudnn.benchmark_limit"] == limit
    assert len(carry._encoded) <= carry._KEPT and len(carry._decoded) <= carry._KEPT
