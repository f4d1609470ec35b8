"""ContextVar-scoped numeric backend flags with the ``torch.backends`` API.

Every flag is read from the current thread's and asyncio/trio task's context:
an override made in a scope is seen only there, and assignment outside any
scope sets the process default. See the contract page, ``docs/contract.md``, and the docs.
"""

# Only names here: they are defined in _package.py, which mypy checks. Type checkers read the
# generated stub __init__.pyi instead of this file (scripts/typing_stubs.py writes it from the
# flag table and these names; tests/test_typing.py checks that the two agree).
from . import _package
from ._package import FLAGS as FLAGS
from ._package import Bound as Bound
from ._package import Flag as Flag
from ._package import FlagRow as FlagRow
from ._package import Scope as Scope
from ._package import Snapshot as Snapshot
from ._package import UnknownFlagError as UnknownFlagError
from ._package import algorithms as algorithms
from ._package import are_deterministic_algorithms_enabled as are_deterministic_algorithms_enabled
from ._package import bind as bind
from ._package import cuda as cuda
from ._package import cudnn as cudnn
from ._package import describe as describe
from ._package import deterministic as deterministic
from ._package import disable_global_flags as disable_global_flags
from ._package import enable_global_flags as enable_global_flags
from ._package import flags as flags
from ._package import flags_frozen as flags_frozen
from ._package import is_deterministic_algorithms_warn_only_enabled as is_deterministic_algorithms_warn_only_enabled
from ._package import mkl as mkl
from ._package import mkldnn as mkldnn
from ._package import mps as mps
from ._package import openmp as openmp
from ._package import reset_defaults as reset_defaults
from ._package import set_defaults as set_defaults
from ._package import snapshot as snapshot
from ._package import sync as sync
from ._package import use_deterministic_algorithms as use_deterministic_algorithms

__all__ = _package.ALL
__getattr__ = _package.package_getattr  # PEP 562: the lazy names, and a did-you-mean for the rest
__dir__ = _package.package_dir
__version__ = "0.2.0"
