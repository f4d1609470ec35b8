"""``Record``: ``typing.NamedTuple`` without importing ``typing`` (a third of ``import backends``,
with the ``re`` and ``enum`` it imports). ``class Flag(Record):`` with annotated fields (and
defaults) makes the same class ``typing.NamedTuple`` would: a ``collections.namedtuple`` with the
class's methods and docstring. Type checkers read ``typing.NamedTuple`` itself."""

from __future__ import annotations

import collections

TYPE_CHECKING = False  # typing.TYPE_CHECKING, which the type checkers also recognise by this name
if TYPE_CHECKING:
    from typing import NamedTuple as Record

    __all__ = ["Record"]
else:

    class _RecordMeta(type):
        def __new__(mcls, name, bases, namespace):
            if not bases:  # Record itself
                return super().__new__(mcls, name, bases, namespace)
            fields = list(namespace.get("__annotations__", {}))
            defaults = [namespace[field] for field in fields if field in namespace]
            base = collections.namedtuple(name, fields, defaults=defaults, module=namespace.get("__module__"))
            body = {key: value for key, value in namespace.items() if key not in fields}
            body["__slots__"] = ()
            return type(name, (base,), body)

    class Record(metaclass=_RecordMeta):
        pass
