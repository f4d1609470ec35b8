"""Namespaces such as ``backends.cudnn``: module objects whose flag attributes are
properties derived from the flag table.

A namespace class names its ``prefix`` and gets, from the table, one property per
flag and view under that prefix, and a ``flags(**kwargs)`` scope builder whose
keywords are those flags. Unknown attributes raise ``UnknownFlagError`` with the
closest valid name (torch silently accepts typos).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from . import state
from .accelerator import speedups
from .errors import TORCH_ONLY, UnknownFlagError, closest, nearest, not_scoped, show
from .scope import Scope
from .state import assign, current
from .table import FLAGS, NAMES, VIEWS, Flag, View

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see record.py)
if TYPE_CHECKING:
    from typing import Any, ClassVar


def _flag_property(flag: Flag) -> Any:
    """The flag's attribute: a property (the reference), or with the compiled accelerator a
    descriptor that reads in C what the property's getter reads, and for everything else
    (setting, deleting, reading it on the class, its ``__doc__``) is that property."""
    prop = _reference_property(flag)
    return prop if speedups is None else speedups.flag_descriptor(flag.name, prop)


def _reference_property(flag: Flag) -> property:
    name = flag.name

    # The hot path: one ContextVar.get and one or two dict lookups.
    def get(self: object, _current: Any = current, _state: Any = state) -> Any:
        frame = _current()
        # state.published is rebound by every write: look it up on each read, never keep it.
        return frame[name] if name in frame else _state.published[name]

    def set_(self: object, value: object) -> None:
        assign(name, value)

    return property(get, set_, doc=f"{flag.doc} ({flag.allowed}; default {flag.default!r}).")


def _view_property(view: View) -> property:
    name, when_true, when_false = view.flag, view.when_true, view.when_false

    def get(self: object) -> str:
        return when_true if state.read(name) else when_false

    def set_(self: object, value: object) -> None:
        if not issubclass(type(value), str):
            raise TypeError(f"{view.name} must be {when_true!r} or {when_false!r}, got {show(value)}")
        text = str.__str__(value)
        if text not in (when_true, when_false):
            raise ValueError(f"{view.name} must be {when_true!r} or {when_false!r}, got {show(value)}")
        assign(name, text == when_true)

    return property(get, set_, doc=view.doc)


_CACHE_LIMIT = 512


def _flags_builder(prefix: str, members: dict[str, Flag]) -> Any:
    """``flags(**kwargs)`` for one namespace; ``None`` means "not given"."""
    label = f"backends.{prefix}.flags"
    # Scopes for calls whose values are all exactly True, False or None, keyed by
    # the call's keyword items. Only such calls are cached, so a hit can never
    # stand in for a call with 1 or 1.0 (equal to True, but invalid).
    plain: dict[tuple[tuple[str, Any], ...], Scope] = {}

    def flags(*args: Any, **kwargs: Any) -> Scope:
        if args:
            raise TypeError(
                f"{label}() takes keyword arguments only, e.g. {label}({next(iter(members))}=True); "
                f"as a decorator write @{label}(...) with parentheses"
            )
        try:
            if len(kwargs) == 1:  # the common `flags(deterministic=True)`: no key to build
                ((attribute, value),) = kwargs.items()
                pair = single.get(attribute)
                if pair is not None and (value is True or value is False):
                    return pair[value]  # a bool indexes (scope_false, scope_true)
            for value in kwargs.values():
                if value is not True and value is not False and value is not None:
                    return build(kwargs)
            key = tuple(kwargs.items())
            scope = plain.get(key)
        except (TypeError, ValueError, KeyError):
            raise
        except Exception:  # a keyword that is a str subclass whose __eq__ raises
            return build(kwargs)
        if scope is None:
            scope = build(kwargs)
            if len(plain) >= _CACHE_LIMIT:
                plain.clear()
            plain[key] = scope
        return scope

    def build(kwargs: dict[str, Any]) -> Scope:
        overrides = {}
        for keyword, value in kwargs.items():
            attribute = str.__str__(keyword)  # a plain str: a subclass's own methods never run
            flag = members.get(attribute)
            if flag is None:
                hint = closest(attribute, members)
                raise TypeError(
                    f"{label}() got an unknown flag {attribute!r}"
                    + (f"; did you mean {hint!r}?" if hint else "")
                    + f" (it takes {', '.join(members)})"
                )
            if value is not None:
                overrides[flag.name] = flag.check(value)
        shown = ", ".join(f"{n.rpartition('.')[2]}={v!r}" for n, v in overrides.items())
        return Scope(overrides, f"{label}({shown})")

    single = {
        attribute: (build({attribute: False}), build({attribute: True}))
        for attribute, flag in members.items()
        if flag.type is bool
    }

    flags.__doc__ = (
        f"A scope overriding only the given ``backends.{prefix}`` flags; ``None`` means "
        f"not given (torch's ``flags()`` resets every flag it is not given; this does not).\n\n"
        f"Raises ``TypeError`` for an unknown keyword or a wrong type and ``ValueError`` "
        f"for a value out of range, before anything is entered."
    )
    # For help() and inspect.signature(): a stub whose signature lists the keywords.
    # (Building an inspect.Signature here would import `inspect` with `backends`.)
    stub_source = f"def flags(*, {', '.join(f'{a}=None' for a in members)}): pass"
    stub: dict[str, Any] = {}
    exec(stub_source, stub)
    flags.__wrapped__ = stub["flags"]  # type: ignore[attr-defined]
    if speedups is not None:  # the one-bool-keyword call in C; anything else (and every attribute) is flags'
        return speedups.fast_flags(single, flags)
    return flags


class Namespace(ModuleType):
    """Base of every flag namespace. Subclasses set ``prefix``."""

    prefix: ClassVar[str] = ""
    #: attribute name -> Flag, for this namespace's own flags
    members: ClassVar[dict[str, Flag]] = {}
    #: ``flags(**kwargs) -> Scope``, generated from the table for namespaces with flags
    flags: ClassVar[Callable[..., Scope]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.members = {f.attribute: f for f in FLAGS if f.namespace == cls.prefix}
        for flag in cls.members.values():
            if flag.spelling == "attribute":
                setattr(cls, flag.attribute, _flag_property(flag))
        for view in VIEWS:
            if view.namespace == cls.prefix:
                setattr(cls, view.attribute, _view_property(view))
        if cls.members and "flags" not in vars(cls):
            # A staticmethod: no bound method to build on each call.
            cls.flags = staticmethod(_flags_builder(cls.prefix, cls.members))

    def __init__(self) -> None:
        super().__init__(f"backends.{self.prefix}", type(self).__doc__)
        # A module-level __getattr__ (PEP 562) in the instance dict, not a class
        # __getattr__: the class hook would slow every flag read by about 60 ns.
        self.__dict__["__getattr__"] = self._getattr

    def _public(self) -> list[str]:
        return [n for n in dir(type(self)) if not n.startswith("_") and n not in ("prefix", "members")]

    def _getattr(self, name: str) -> Any:
        name = str.__str__(name)
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._unknown(name)

    def __setattr__(self, name: str, value: Any) -> None:
        name = str.__str__(name)  # a plain str: a subclass's own methods never run
        flag = self.members.get(name)
        if flag is not None and flag.spelling == "function":
            assign(flag.name, value)  # e.g. cuda.preferred_linalg_library = "cusolver"
        elif name.startswith("_") or any(name in vars(k) for k in type(self).__mro__) or name in self.__dict__:
            super().__setattr__(name, value)  # properties, and monkeypatching in tests
        else:
            raise self._unknown(name)

    def _unknown(self, name: str) -> UnknownFlagError:
        name = str.__str__(name)  # a plain str: a subclass's own methods never run
        dotted = f"{self.prefix}.{name}"
        hint = not_scoped(dotted)  # a torch setting: say why it is not here, not a look-alike
        if not hint:
            own = [f"{self.prefix}.{n}" for n in self._public()]
            flagless = not self.members and not any(v.namespace == self.prefix for v in VIEWS)
            # A flagless namespace suggests only its own names: backends.openmp.enabled must
            # not point to backends.cudnn.enabled.
            best = nearest(dotted, own if flagless else [*own, *NAMES, *(v.name for v in VIEWS)])
            if best is not None:
                hint = f"; did you mean backends.{best}?"
            elif flagless:
                why = ": torch's are not scoped here, as nothing in CuPy or NumPy reads them"
                hint = f" (backends.{self.prefix} has no flags{why if self.prefix in TORCH_ONLY else ', as in torch'})"
        return UnknownFlagError(f"backends.{self.prefix} has no flag or attribute {name!r}{hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle by reference (cloudpickle would otherwise try to copy the "module").
        import importlib

        return (importlib.import_module, (self.__name__,))

    def __dir__(self) -> list[str]:
        return sorted(set(self._public()) | {n for n in self.__dict__ if not n.startswith("_")})

    def __repr__(self) -> str:
        return f"<namespace backends.{self.prefix}>"
