"""Namespaces such as ``backends.cudnn``: module objects whose flag attributes are
properties derived from the flag table.

A namespace class names its ``prefix`` and gets, from the table, one property per
flag and view under that prefix, and a ``flags(**kwargs)`` scope builder whose
keywords are those flags. Unknown attributes raise ``UnknownFlagError`` with the
closest valid name (torch silently accepts typos).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from . import state
from .accelerator import speedups
from .errors import TORCH_ONLY, UnknownFlagError, closest, nearest, not_scoped, use_the_flag
from .scope import Scope
from .state import SLOT, VALUES, VIEWS_BY_NAME, assign, current
from .table import FLAGS, NAMES, VIEWS, Flag, View
from .wording import show

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (see record.py)
if TYPE_CHECKING:
    from typing import Any, ClassVar


def _flag_property(flag: Flag) -> Any:
    """The flag's attribute: a property (the reference), or with the compiled accelerator a
    descriptor that reads in C what the property's getter reads, and for everything else
    (setting, deleting, reading it on the class, its ``__doc__``) is that property."""
    prop = _reference_property(flag)
    return prop if speedups is None else speedups.flag_descriptor(flag.name, SLOT[flag.name], prop)


def _reference_property(flag: Flag) -> property:
    name, slot = flag.name, SLOT[flag.name]

    # The hot path: one ContextVar.get and two to four index operations.
    def get(self: object, _current: Any = current, _published: Any = state.published) -> Any:
        value = _current()[VALUES][slot]
        # published[0] is replaced by every write: read it on each read, never keep it.
        return _published[0][slot] if value is None else value

    def set_(self: object, value: object) -> None:
        __tracebackhide__ = True  # see state.assign_checked
        assign(name, value)

    return property(get, set_, doc=flag.summary)


def _view_property(view: View) -> property:
    name, when_true, when_false = view.flag, view.when_true, view.when_false

    def get(self: object) -> str:
        return when_true if state.read(name) else when_false

    def set_(self: object, value: object) -> None:
        __tracebackhide__ = True  # see state.assign_checked
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
                view = VIEWS_BY_NAME.get(f"{prefix}.{attribute}")
                if view is not None:  # as a mapping says of it (state.check_mapping)
                    raise TypeError(f"{label}() got {attribute!r}, a view, not a flag: {use_the_flag(view, prefix)}")
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


_MISSING = object()


def example(namespace: Namespace) -> str:
    """An assignment of one of ``namespace``'s flags, for messages: the first that is off by default,
    turned on (``backends.cudnn.benchmark = True``), else its first flag or view; ``""`` for none."""
    flag = min(namespace.members.values(), key=lambda f: f.default is not False, default=None)  # the first such
    if flag is not None:
        value = True if flag.type is bool else next((c for c in flag.choices if c != flag.default), flag.default)
        return f"{namespace.__name__}.{flag.attribute} = {value!r}"
    view = next(iter(namespace._views.values()), None)
    return f"{namespace.__name__}.{view.attribute} = {view.when_true!r}" if view is not None else ""


def not_a_flag(owner: ModuleType, name: str, found: Any, done: str, what: str = "") -> AttributeError:
    """The error for assigning (``done="assigned"``) or deleting (``"deleted"``) ``owner.name``, a
    public name of the package or of a namespace that assignment does not set: it says what the
    name is and what to do instead. ``found`` is what ``owner``'s class or dict holds under
    ``name`` (never called or read through), or the ``Flag`` or ``View`` being deleted; ``what``
    says what it is where ``found`` cannot (a name imported on first use)."""
    advice = ""
    if not what:
        what, advice = _what_it_is(owner, name, found)
    if done == "deleted" and not isinstance(found, (Flag, View)):
        advice = ""  # what to do instead of deleting is said only for a flag
    text = f"{owner.__name__}.{name} is {what}" + (" and cannot be deleted" if done == "deleted" else ", not a flag")
    return AttributeError(text + (f": {advice}" if advice else ""), obj=owner)  # obj: see UnknownFlagError


def _what_it_is(owner: ModuleType, name: str, found: Any) -> tuple[str, str]:
    """What ``owner.name`` is, for ``not_a_flag()``, and what to do instead of assigning it."""
    if isinstance(found, (Flag, View)):
        what = "a flag" if isinstance(found, Flag) else f"a view of backends.{found.flag}"
        return what, "assign it instead (backends.reset_defaults() puts every default back)"
    if isinstance(found, Namespace):
        assignment = example(found)
        return "a namespace", f"assign its flags, e.g. {assignment}" if assignment else "it has no flags"
    if isinstance(found, ModuleType):
        return f"the module {found.__name__}", ""
    if isinstance(found, type):
        return "a class", ""
    if isinstance(found, (staticmethod, classmethod)) or callable(found):
        patch = f"monkeypatch.setitem(vars({owner.__name__}), {name!r}, ...)"
        return "a function", f"call it; to replace it in a test, {patch}"
    # a read-only property, or data such as the flag table
    assignment = example(owner) if isinstance(owner, Namespace) else "backends.cudnn.benchmark = True"
    return "read-only", f"assign a flag instead, e.g. {assignment}" if assignment else f"{owner.__name__} has no flags"


# -- help() ---------------------------------------------------------------------------------
# pydoc documents a module (a namespace is one) by its docstring, its data and its submodules
# only, so the namespace's docstring is written to say the rest: its flags, flags() and functions.


def _cleaned(doc: str | None) -> str:
    """``doc`` as ``inspect.cleandoc`` gives it (without importing ``inspect``, a third of
    ``import backends``' time): stripped, and its lines after the first dedented."""
    first, *rest = (doc or "").strip().splitlines() or [""]
    indent = min((len(line) - len(line.lstrip()) for line in rest if line.strip()), default=0)
    return "\n".join([first, *(line[indent:] for line in rest)])


def _entry(head: str, doc: str | None) -> str:
    """One entry of the help text: ``head``, then ``doc`` indented under it."""
    return head + "".join(f"\n    {line}" if line else "\n" for line in _cleaned(doc).splitlines())


def _help(namespace: Namespace) -> str:
    """The namespace's ``__doc__``: its class's docstring, then each flag and view with what it
    does, takes and defaults to, ``flags()`` with its keywords, and the namespace's functions,
    read-only attributes and child namespaces, each with its docstring."""
    cls = type(namespace)
    parts = [_cleaned(cls.__doc__)]
    entries = []
    for attribute, flag in cls.members.items():
        torch = f" torch's spelling: {attribute}() reads it, {attribute}(value) sets it (as assignment does)."
        entries.append(_entry(attribute, flag.summary + (torch if flag.spelling == "function" else "")))
    for attribute, view in cls._views.items():
        entries.append(_entry(attribute, f"{view.doc} A view of {view.flag}: it has no value of its own."))
    if entries:
        parts += [f"Flags (read one for its value in this context; assign it to set it: {example(namespace)}):"]
    if cls.members:
        keywords = ", ".join(f"{attribute}=None" for attribute in cls.members)
        entries.append(_entry(f"flags(*, {keywords}) -> Scope", cls.flags.__doc__))
    parts += entries
    others = []
    for attribute, value in vars(cls).items():
        function = getattr(value, "__func__", value)  # a staticmethod's function
        if attribute in cls.members or attribute in ("flags", "prefix", "members"):
            continue
        if isinstance(value, Namespace):
            doc = _cleaned(type(value).__doc__).split("\n\n")[0]
            others.append(_entry(f"{attribute}: a namespace, see help({value.__name__})", doc))
        elif isinstance(value, property) and attribute not in cls._views:
            others.append(_entry(f"{attribute} (read-only)", value.__doc__))
        elif callable(function) and (attribute == "__getitem__" or not attribute.startswith("_")):
            code = function.__code__  # its parameters, without importing inspect
            names = ", ".join(n for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] if n != "self")
            head = f"[{names}]" if attribute == "__getitem__" else f"{attribute}({names})"
            others.append(_entry(head, function.__doc__))
    if others:
        parts += [f"Also in {namespace.__name__}:", *others]
    return "\n\n".join(parts)


def patched_by_mock(depth: int) -> str:
    """``"__enter__"`` (patching) or ``"__exit__"`` (putting back) where the caller ``depth`` frames
    above the caller of this (``1``: of the ``__setattr__`` or ``__delattr__`` that calls this) is
    that method of ``unittest.mock``'s patcher; else ``""``."""
    patcher = getattr(sys.modules.get("unittest.mock"), "_patch", None)
    if patcher is None:
        return ""
    code = sys._getframe(depth + 1).f_code
    for method in ("__enter__", "__exit__"):
        if code is getattr(getattr(patcher, method, None), "__code__", None):
            return method
    return ""


def refuse_mock(module: GuardedModule, name: str, value: object) -> bool:
    """For a ``__setattr__`` of the public ``name``: raise ``module._refused_to_mock`` if
    ``unittest.mock`` is patching it; ``True`` if mock is putting it back after that refusal
    (nothing changed: nothing to do)."""
    mocking = patched_by_mock(2)
    if mocking == "__enter__":
        raise module._refused_to_mock(name, value)
    return mocking == "__exit__"


class GuardedModule(ModuleType):
    """A module whose public names are its own: ``backends`` itself and every namespace. Its
    ``__setattr__`` says what may be assigned, no public name is deleted, and ``_refused`` says
    why not. Pickled by reference, as a plain module is (cloudpickle, Dask).

    ``unittest.mock.patch`` of a public name is refused when it patches (``_refused_to_mock``): it
    would have nothing to put back but by deleting the name, which is refused."""

    def __delattr__(self, name: str) -> None:
        name = str.__str__(name)  # a plain str: a subclass's own methods never run
        if not name.startswith("_"):
            if patched_by_mock(1) == "__exit__":
                return  # mock undoing a patch refused at its start: nothing changed, nothing to undo
            raise self._refused(name, "deleted")
        super().__delattr__(name)

    def _refused_to_mock(self, name: str, value: object) -> AttributeError:
        """The error for ``unittest.mock.patch`` of the public ``name`` (with ``value``): what to do instead."""
        text = f"unittest.mock cannot patch {self.__name__}.{name}: {self._refused(name, 'assigned')}"
        found = vars(self).get(name, getattr(type(self), name, None))
        if callable(found) and not isinstance(found, (ModuleType, type)):
            text += f" (with unittest.mock: mock.patch.dict(vars({self.__name__}), {{{name!r}: ...}}))"
        return AttributeError(text, obj=self)

    def _refused(self, name: str, done: str) -> AttributeError:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        import importlib

        return (importlib.import_module, (self.__name__,))


class Namespace(GuardedModule):
    """Base of every flag namespace. Subclasses set ``prefix``."""

    prefix: ClassVar[str] = ""
    #: attribute name -> Flag, for this namespace's own flags
    members: ClassVar[dict[str, Flag]] = {}
    #: attribute name -> View, for this namespace's views
    _views: ClassVar[dict[str, View]] = {}
    #: ``flags(**kwargs) -> Scope``, generated from the table for namespaces with flags
    flags: ClassVar[Callable[..., Scope]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.members = {f.attribute: f for f in FLAGS if f.namespace == cls.prefix}
        cls._views = {v.attribute: v for v in VIEWS if v.namespace == cls.prefix}
        for flag in cls.members.values():
            if flag.spelling == "attribute":
                setattr(cls, flag.attribute, _flag_property(flag))
        for view in cls._views.values():
            setattr(cls, view.attribute, _view_property(view))
        if cls.members and "flags" not in vars(cls):
            # A staticmethod: no bound method to build on each call.
            cls.flags = staticmethod(_flags_builder(cls.prefix, cls.members))
        # Named by their public path (backends.cudnn.is_available) in reprs, help() and pickles.
        for name, value in vars(cls).items():
            function = getattr(value, "__func__", value)
            if not name.startswith("_") and callable(function) and not isinstance(function, (type, ModuleType)):
                function.__module__, function.__qualname__ = f"backends.{cls.prefix}", name

    def __init__(self) -> None:
        super().__init__(f"backends.{self.prefix}")
        self.__doc__ = _help(self)
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
        __tracebackhide__ = True  # see state.assign_checked
        name = str.__str__(name)  # a plain str: a subclass's own methods never run
        if name.startswith("_"):
            super().__setattr__(name, value)  # a private name
            return
        if "unittest.mock" in sys.modules and refuse_mock(self, name, value):  # (the test first: assignments are hot)
            return
        flag = self.members.get(name)
        if flag is not None and flag.spelling == "function":
            assign(flag.name, value)  # e.g. cuda.preferred_linalg_library = "cusolver"
        elif flag is not None or name in self._views:
            super().__setattr__(name, value)  # a flag's or view's property
        elif isinstance(value, Namespace) and vars(type(self)).get(name) is value:
            pass  # the import system binding a child namespace it imported (`import backends.cuda.matmul`)
        else:
            raise self._refused(name, "assigned")

    def _refused_to_mock(self, name: str, value: object) -> AttributeError:
        flag, view = self.members.get(name), self._views.get(name)
        if flag is None and view is None:
            return super()._refused_to_mock(name, value)
        dotted = flag.name if flag is not None else view.flag  # type: ignore[union-attr]
        try:  # the value mock was given, as a keyword of the namespace's flags()
            checked = flag.check(value) if flag is not None else {view.when_true: True, view.when_false: False}[value]  # type: ignore[union-attr]
            shown = repr(checked)
        except Exception:  # a MagicMock (patch.object without a value), or a value the flag refuses
            shown = "..."
        where, _, keyword = f"backends.{dotted}".rpartition(".")
        return AttributeError(
            f"unittest.mock cannot patch {self.__name__}.{name}: it is a flag{' view' if flag is None else ''}, "
            f"which mock would set process-wide and could not put back (it deletes the attribute at the "
            f"end, and a flag cannot be deleted). Use a scope instead: `with {where}.flags({keyword}={shown}):`, "
            f"or @{where}.flags({keyword}={shown}) on the test or its TestCase class; in pytest, the "
            f"backends_flags fixture or @pytest.mark.backends({{{dotted!r}: {shown}}})",
            obj=self,
        )

    def _refused(self, name: str, done: str) -> AttributeError:
        """The error for a public name that cannot be ``done`` (assigned or deleted): a name this
        namespace does not have gets the typo hint; one it has says what it is and what to do."""
        found: object = self.members.get(name) or self._views.get(name)  # deleting a flag or view
        if found is None:
            found = next((vars(k)[name] for k in type(self).__mro__ if name in vars(k)), _MISSING)
            found = self.__dict__.get(name, found)
        if found is _MISSING:
            return self._unknown(name)
        return not_a_flag(self, name, found, done)

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
        return UnknownFlagError(f"backends.{self.prefix} has no flag or attribute {name!r}{hint}", obj=self)

    def __dir__(self) -> list[str]:
        return sorted(set(self._public()) | {n for n in self.__dict__ if not n.startswith("_")})

    def __repr__(self) -> str:
        return f"<namespace backends.{self.prefix}>"
