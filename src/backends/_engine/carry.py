"""A snapshot as bytes that decoding validates without running anything from them.

What ``backends.integrations.ray`` sends with each call, where a pickle would let the bytes a
worker is given choose code to run: ``MAGIC``, then a JSON object of every flag's value by dotted
name (``{"cudnn.enabled": true, ...}``). Decoding reads that data and builds the snapshot through
``Snapshot.from_dict``, which checks every name and value; anything else is refused with
``ValueError``. JSON keeps a ``bool`` apart from an ``int``, and the names are the flag table's,
so a worker of another version of backends decodes what it knows and refuses what it does not.

Both ends cache: the same snapshot is encoded once, and the same bytes are decoded (and checked)
once, so carrying unchanged flags call after call costs two dictionary look-ups.
"""

from __future__ import annotations

import json

from .scope import Snapshot

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see record.py)
if TYPE_CHECKING:
    from typing import Any

#: The first bytes of an encoded snapshot: what it is, and the version of the format.
MAGIC = b"backends.Snapshot/1\n"
#: How many snapshots a process keeps encoded, and decoded, by their values and their bytes.
_KEPT = 64

_encoded: dict[tuple[Any, ...], bytes] = {}
_decoded: dict[bytes, Snapshot] = {}


def encode(snap: Snapshot) -> bytes:
    """``snap`` as bytes (see the module); ``TypeError`` if it is not a ``Snapshot``."""
    if not isinstance(snap, Snapshot):
        raise TypeError(f"encode() takes a backends.Snapshot, got {type(snap).__name__}")
    values = snap._alone  # every flag's value, in the table's order: the same flags, the same bytes
    data = _encoded.get(values)
    if data is None:
        data = MAGIC + json.dumps(snap.to_dict(), separators=(",", ":")).encode("ascii")
        _keep(_encoded, values, data)
    return data


def decode(data: bytes) -> Snapshot:
    """The snapshot ``data`` encodes. Raises ``ValueError`` for bytes that are not an encoded
    snapshot, and what ``Snapshot.from_dict`` raises (``TypeError``, ``ValueError``, ``KeyError``)
    for one whose names or values it refuses; nothing in ``data`` is run."""
    if type(data) is not bytes:
        raise TypeError(f"decode() takes bytes, got {type(data).__name__}")
    known = _decoded.get(data)
    if known is not None:
        return known
    if not data.startswith(MAGIC):
        raise ValueError("these bytes are not an encoded backends.Snapshot (they do not start with its marker)")
    try:
        values: Any = json.loads(data[len(MAGIC) :])
    except (ValueError, RecursionError) as error:  # (UnicodeDecodeError is a ValueError)
        raise ValueError(f"an encoded backends.Snapshot whose data does not parse: {error}") from None
    if type(values) is not dict:
        raise ValueError(f"an encoded backends.Snapshot holds a JSON object, not {type(values).__name__}")
    snap = Snapshot.from_dict(values)
    _keep(_decoded, data, snap)
    return snap


def _keep(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _KEPT:  # the sets of flags a program carries are few: start again
        cache.clear()
    cache[key] = value
