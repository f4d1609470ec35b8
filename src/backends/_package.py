"""The ``backends`` package's own names: ``backends/__init__.py`` re-exports them.

They live here, not in ``__init__.py``, because type checkers read the generated stub
``backends/__init__.pyi`` instead of ``__init__.py``: code in this module is still checked by
``mypy --strict backends``, and ``tests/test_typing.py`` checks that the stub declares exactly
the names this module gives the package.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from types import ModuleType as _ModuleType

# `X as X`: re-exported (the package, and its stub __init__.pyi, import them from here).
from ._engine.errors import UnknownFlagError as UnknownFlagError
from ._engine.namespace import GuardedModule as _GuardedModule
from ._engine.namespace import Namespace as _Namespace
from ._engine.namespace import not_a_flag as _not_a_flag
from ._engine.namespace import refuse_mock as _refuse_mock
from ._engine.scope import Bound as Bound
from ._engine.scope import Scope as Scope
from ._engine.scope import Snapshot as Snapshot
from ._engine.scope import bind as bind
from ._engine.scope import flags as flags
from ._engine.scope import snapshot as snapshot
from ._engine.state import FlagRow as FlagRow
from ._engine.state import assign_checked as _assign_checked
from ._engine.state import describe as _describe
from ._engine.state import is_frozen as _is_frozen
from ._engine.state import read as _read
from ._engine.state import reset_defaults as reset_defaults
from ._engine.state import set_defaults as set_defaults
from ._engine.state import set_frozen as _set_frozen
from ._engine.table import FLAGS as FLAGS
from ._engine.table import Flag as Flag  # public, but not in ALL (below)
from ._public_namespaces import algorithms as algorithms
from ._public_namespaces import cuda as cuda
from ._public_namespaces import cudnn as cudnn
from ._public_namespaces import mkl as mkl
from ._public_namespaces import mkldnn as mkldnn
from ._public_namespaces import mps as mps
from ._public_namespaces import openmp as openmp
from .sync import install_hooks as _install_hooks
from .sync import sync as sync  # public, but not in ALL (below)
from .sync.hooks import when_imported as _when_imported

_PACKAGE = __name__.rpartition(".")[0]  # "backends": being imported, already in sys.modules

# The package's __all__: what `from backends import *` binds. Public names the standard library
# also exports are left out, as is trio (an optional dependency: a star import would fail without
# it), so a star import never replaces a user's own `asyncio`, `threading.Thread`, `ThreadPoolExecutor`,
# `enum.Flag` or `os.sync`: backends.asyncio, backends.trio, backends.Thread,
# backends.ThreadPoolExecutor, backends.Flag and backends.sync stay attributes.
ALL = [
    "FLAGS", "Bound", "FlagRow", "FlagValues", "NondeterministicAlgorithmWarning", "Scope", "Snapshot",
    "UnknownFlagError", "algorithms", "are_deterministic_algorithms_enabled", "bind", "cuda", "cudnn",
    "describe", "deterministic", "disable_global_flags", "enable_global_flags", "flags", "flags_frozen",
    "is_deterministic_algorithms_warn_only_enabled", "mkl", "mkldnn", "mps", "openmp", "reset_defaults",
    "set_defaults", "snapshot", "run_in_executor", "use_deterministic_algorithms", "TorchFlagConflictWarning",
]
_NOT_STARRED = ("Flag", "sync", "asyncio", "trio", "ThreadPoolExecutor", "Thread")

_install_hooks()  # wraps CuPy's launch points when (or if already) CuPy imports them


def _name_bound_flags_in_dask(_dask: _ModuleType) -> None:
    """Once Dask is imported: its tokenizer names a ``Bound`` by its function and flags
    (registered by ``backends.integrations.dask``), so ``client.submit(bind(fn), x)`` under
    other flags is another pure task, never the result of the first."""
    import backends.integrations.dask  # noqa: F401


_when_imported("dask", _name_bound_flags_in_dask)

# `import backends.cudnn` and `from backends.cuda import matmul` work like torch's modules. Each
# namespace is a package whose folder holds its stub for type checkers, and an __init__.py that
# runs only if the namespace's sys.modules entry is dropped (test helpers, reloaders) and it is
# imported again: it puts the namespace back (restore_namespace), so the import gives it.
_NAMESPACES = (cudnn, cudnn.conv, cuda, cuda.matmul, cuda.cufft_plan_cache, algorithms, mps, mkl, mkldnn, openmp)
for _ns in _NAMESPACES:
    _sys.modules[_ns.__name__] = _ns
    _ns.__path__ = [_os.path.join(_folder, *_ns.prefix.split(".")) for _folder in _sys.modules[_PACKAGE].__path__]
del _ns


def restore_namespace(name: str) -> None:
    """Put the namespace ``name`` (``"backends.cuda.matmul"``) back in ``sys.modules``: the object
    the package holds, which cannot be replaced."""
    namespace: object = _sys.modules[_PACKAGE]
    for part in name.split(".")[1:]:
        namespace = vars(namespace)[part] if part in vars(namespace) else vars(type(namespace))[part]
    if namespace not in _NAMESPACES:
        raise ImportError(f"{name} is not a namespace of backends", name=name)
    _sys.modules[name] = namespace

_DETERMINISTIC = Scope(
    {
        "cudnn.deterministic": True,
        "cudnn.benchmark": False,
        "cudnn.allow_tf32": False,
        "cuda.matmul.allow_tf32": False,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
        "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
        "algorithms.deterministic": True,
    },
    "backends.deterministic()",
)


def deterministic(*args: object) -> Scope:
    """A scope for reproducible work: ``cudnn.deterministic=True``, ``cudnn.benchmark=False``,
    both ``allow_tf32`` flags and both reduced-precision-reduction flags ``False``, and
    ``algorithms.deterministic=True`` (CuPy operations known to vary from run to run raise;
    ``algorithms.warn_only`` is left as it is). Other flags are untouched. What it cannot reach
    (user kernels, ``a[idx] = v`` with duplicate indices) is listed in the docs' sync page.
    Takes no arguments (``TypeError`` otherwise)."""
    if args:
        raise TypeError(
            "backends.deterministic() takes no arguments; as a decorator write "
            "@backends.deterministic() with parentheses"
        )
    return _DETERMINISTIC


def _strict_bool(function: str, argument: str, position: str, value: object) -> bool:
    __tracebackhide__ = True  # see _engine/state.py's assign_checked
    # What torch's argument parser takes for a bool: bool and numpy.bool_ (by identity: no import)
    kind = type(value)
    numpy = _sys.modules.get("numpy")
    if numpy is not None and kind is numpy.bool_:
        return bool(value)
    if kind is not bool:
        given = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        raise TypeError(f"{function}(): argument {argument!r}{position} must be bool, not {given}")
    return value is True


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch's ``use_deterministic_algorithms(mode, *, warn_only=False)``, scoped: sets
    ``algorithms.deterministic`` to ``mode`` and ``algorithms.warn_only`` to ``warn_only``
    together, as attribute assignment does (inside a scope, for the rest of that scope in this
    context; outside any scope, the process defaults). Unlike torch, ``mode=False`` also turns
    ``warn_only`` off (torch keeps ``warn_only=True`` with the mode off).

    Raises:
        TypeError: ``mode`` or ``warn_only`` is not a ``bool`` or ``numpy.bool_`` (as torch: ``1``
            is refused).
        RuntimeError: outside a scope while ``disable_global_flags()`` is in force.
    """
    __tracebackhide__ = True  # see _engine/state.py's assign_checked
    mode = _strict_bool("backends.use_deterministic_algorithms", "mode", " (position 1)", mode)
    warn_only = _strict_bool("backends.use_deterministic_algorithms", "warn_only", "", warn_only)
    _assign_checked({"algorithms.deterministic": mode, "algorithms.warn_only": mode and warn_only})


def are_deterministic_algorithms_enabled() -> bool:
    """``algorithms.deterministic`` in the current context (torch's function of that name)."""
    return bool(_read("algorithms.deterministic"))


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """``algorithms.warn_only`` in the current context (torch's function of that name)."""
    return bool(_read("algorithms.warn_only"))


def describe() -> list[FlagRow]:
    """One row per flag: dotted ``name``, effective ``value`` in the current context,
    and its ``source``: ``"default"``, ``"environment"``, ``"process default"`` or ``"scope"``."""
    return _describe()


def disable_global_flags() -> None:
    """Freeze bare assignment outside a scope, process-wide (torch's name): it then
    raises ``RuntimeError`` naming the ``flags(`` scope to use. Assignment inside a
    scope and ``set_defaults()`` still work."""
    _set_frozen(True)


def enable_global_flags() -> None:
    """Undo ``disable_global_flags()`` (torch's name), process-wide."""
    _set_frozen(False)


def flags_frozen() -> bool:
    """Whether ``disable_global_flags()`` is in force (torch's name)."""
    return _is_frozen()


_LAZY = {
    # name -> (module, attribute or None for the module itself): imported on first use,
    # so `import backends` does not import asyncio, trio or concurrent.futures.
    "asyncio": ("backends.integrations.asyncio", None),
    "trio": ("backends.integrations.trio", None),
    "ThreadPoolExecutor": ("backends.integrations.executors", "ThreadPoolExecutor"),
    "Thread": ("backends.integrations.executors", "Thread"),
    "run_in_executor": ("backends.integrations.executors", "run_in_executor"),
    "FlagValues": ("backends._flagvalues", "FlagValues"),
    "NondeterministicAlgorithmWarning": ("backends.sync.nondeterministic", "NondeterministicAlgorithmWarning"),
    "TorchFlagConflictWarning": ("backends.sync.torch", "TorchFlagConflictWarning"),  # (imports no torch)
}


def package_getattr(name: str) -> object:
    # The package's __getattr__ (PEP 562; __init__.py binds it under that name): only called for
    # names the package does not have. (Not this module's: backends._package has no lazy names.)
    name = str.__str__(name)  # a plain str: a subclass's own methods never run
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            # An AttributeError, so hasattr(), help(backends) and dir()-walkers skip a name
            # whose optional dependency is missing; `from backends import trio` still raises
            # ImportError (Python turns the AttributeError into one).
            needs = error.name or "a module"
            raise AttributeError(f"backends.{name} needs {needs}, which does not import: {error}") from error
        value = module if attribute is None else getattr(module, attribute)
        vars(_sys.modules[_PACKAGE])[name] = value  # the next look-up finds it there
        return value
    if name.startswith("__"):
        raise AttributeError(name)
    raise _unknown(name)


def package_dir() -> list[str]:
    """The package's ``__dir__`` (``__init__.py`` binds it under that name)."""
    return sorted({*ALL, *_NOT_STARRED, "__version__"})


def _unknown(name: str, assigning: bool = False) -> UnknownFlagError:
    """The error for reading (or assigning) a name ``backends`` does not have: why, where torch
    has it and this project does not scope it, else the closest public name."""
    from ._engine.errors import did_you_mean, not_scoped, torch_spelling

    hint = not_scoped(name) or torch_spelling(name)
    if not hint:
        hint = did_you_mean(name, package_dir())
        if assigning:
            hint += " (flags are assigned on their namespace, e.g. backends.cudnn.benchmark = True)"
    return UnknownFlagError(
        f"module 'backends' has no attribute {name!r}{' to assign' if assigning else ''}{hint}",
        obj=_sys.modules[_PACKAGE],
    )


class _Package(_GuardedModule):
    """``backends`` itself: assigning or deleting a public name raises ``AttributeError`` (a name
    it does not have, ``backends.cudnn_benchmark = True``, gets the closest one) and changes
    nothing. Private names stay assignable, and the import system still binds the submodules it
    imports (``import backends.sync``)."""

    def __setattr__(self, name: str, value: object) -> None:
        name = str.__str__(name)  # a plain str: a subclass's own methods never run
        if name.startswith("_"):
            super().__setattr__(name, value)
            return
        if "unittest.mock" in _sys.modules and _refuse_mock(self, name, value):
            return
        # The import system binding the submodule it imported (`import backends.sync`); a namespace
        # only to itself (`import backends.cudnn` after its sys.modules entry was dropped).
        current = vars(self).get(name)
        if (
            isinstance(value, _ModuleType)
            and _sys.modules.get(f"{_PACKAGE}.{name}") is value
            and (current is value or not isinstance(current, _Namespace))
        ):
            super().__setattr__(name, value)
            return
        raise self._refused(name, "assigned")

    def _refused(self, name: str, done: str) -> AttributeError:
        if name in _LAZY:  # said the same before and after its first use (which imports it)
            module, attribute = _LAZY[name]
            what = f"{module}.{attribute}" if attribute else f"the module {module}"
            return _not_a_flag(self, name, None, done, what=what)
        if name in vars(self):
            return _not_a_flag(self, name, vars(self)[name], done)
        return _unknown(name, assigning=done == "assigned")


# Defined here or in the engine, public as the package's: named by their public path in reprs,
# tracebacks (backends.UnknownFlagError: ...), help() and pickles by reference.
for _defined in (
    deterministic, describe, disable_global_flags, enable_global_flags, flags_frozen, use_deterministic_algorithms,
    are_deterministic_algorithms_enabled, is_deterministic_algorithms_warn_only_enabled,
    Bound, Flag, FlagRow, Scope, Snapshot, UnknownFlagError, bind, flags, reset_defaults, set_defaults, snapshot,
):
    _defined.__module__ = _PACKAGE
del _defined


def _deterministic_signature() -> Scope:  # deterministic()'s, for help() and inspect.signature()
    raise NotImplementedError


# It takes *args only to say what to write instead of @backends.deterministic without parentheses.
deterministic.__wrapped__ = _deterministic_signature  # type: ignore[attr-defined]

_sys.modules[_PACKAGE].__class__ = _Package
