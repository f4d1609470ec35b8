"""The flag table: the single source of truth for every flag.

Namespaces, ``describe()``, ``snapshot()`` keys, environment variable names and
the docs' flag reference are all derived from ``FLAGS`` and ``VIEWS``. Adding a
flag is adding one row here. (Rows are NamedTuples rather than dataclasses because
``dataclasses`` imports ``inspect``, a third of ``import backends``' time.)
"""

from __future__ import annotations

import operator
import sys

from .record import Record
from .wording import show

#: A flag's value: flags are ``bool``, ``int`` or ``str`` (a choice).
Value = bool | int | str


class Flag(Record):
    """One flag: its dotted name, type, default and what the sync layer feeds.

    ``name`` is relative to the package (``"cudnn.deterministic"``) and its last
    part is the attribute spelling, the same as ``torch.backends``.
    """

    name: str
    type: type
    default: Value
    doc: str
    pushed_into: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    #: ``"attribute"`` for a descriptor; ``"function"`` where torch spells the
    #: flag as a getter/setter function (``cuda.preferred_linalg_library()``).
    spelling: str = "attribute"

    @property
    def namespace(self) -> str:
        return self.name.rpartition(".")[0]

    @property
    def attribute(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def env_var(self) -> str:
        return "BACKENDS_" + self.name.upper().replace(".", "_")

    @property
    def allowed(self) -> str:
        """What the flag accepts, in words, for error messages and docs."""
        if self.type is bool:
            return "a bool (True or False)"
        if self.type is int:
            return "an int" + (f" >= {self.minimum}" if self.minimum is not None else "")
        return "one of " + ", ".join(repr(c) for c in self.choices)

    @property
    def summary(self) -> str:
        """What the flag does, what it takes and its default: its docstring, and its entry in ``help()``."""
        return f"{self.doc} Takes {self.allowed}; default {self.default!r}."

    def check(self, value: object) -> Value:
        """Return ``value`` as this flag's plain type, or raise.

        Raises ``TypeError`` for a wrong type and ``ValueError`` for a value out of
        range; both messages name the flag, the value and what is allowed.
        """
        __tracebackhide__ = True  # see state.assign_checked
        kind = type(value)
        numpy = sys.modules.get("numpy")  # numpy.bool_ by identity: no import, no look-alikes
        is_bool = kind is bool or (numpy is not None and kind is numpy.bool_)
        if self.type is bool:
            if is_bool:
                return bool(value)
        elif self.type is int:
            number = None if is_bool else self._integer(value)  # a bool is an int; numpy.bool_ has __index__
            if number is not None:
                if self.minimum is not None and number < self.minimum:
                    raise ValueError(f"{self.name} must be {self.allowed}, got {show(value)}")
                if number > sys.maxsize:  # the value goes into C (Py_ssize_t) in CuPy
                    raise ValueError(f"{self.name} must be {self.allowed} and <= {sys.maxsize}, got {show(value)}")
                return number
        elif issubclass(kind, str):
            text = str.__str__(value)
            if text in self.choices:
                return text
            raise ValueError(f"{self.name} must be {self.allowed}, got {show(value)}")
        raise TypeError(f"{self.name} must be {self.allowed}, got {show(value)}")

    def _integer(self, value: object) -> int | None:
        """``value`` as a plain int if it is an exact integer (an int, a NumPy integer, anything with
        ``__index__``, as torch takes them; an int subclass's own ``__index__`` never runs), else
        ``None``. An ``__index__`` that raises gets a ``TypeError`` naming the flag."""
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            return None  # no __index__ (a float, a str, None)
        except Exception as error:
            raise TypeError(
                f"{self.name} must be {self.allowed}, got {show(value)}, whose __index__ raised "
                f"{type(error).__qualname__}"
            ) from error


class View(Record):
    """A derived, stateless spelling of a bool flag (torch's ``fp32_precision``)."""

    name: str
    flag: str
    when_true: str
    when_false: str
    doc: str

    @property
    def namespace(self) -> str:
        return self.name.rpartition(".")[0]

    @property
    def attribute(self) -> str:
        return self.name.rpartition(".")[2]


FLAGS: tuple[Flag, ...] = (
    Flag("cudnn.enabled", bool, True,
         "Whether cuDNN is used at all.",
         "cuDNN use at all (cuDNN frontend graphs, CuPy 13 cupyx.cudnn)"),
    Flag("cudnn.benchmark", bool, False,
         "Autotune the cuDNN engine choice for each new shape.",
         "autotuning of cuDNN engine choice"),
    Flag("cudnn.benchmark_limit", int, 10,
         "How many engine configs autotuning tries (0 = all).",
         "how many engine configs autotuning tries", minimum=0),
    Flag("cudnn.deterministic", bool, False,
         "Use only deterministic cuDNN engines.",
         "excluding non-deterministic cuDNN engines"),
    Flag("cudnn.allow_tf32", bool, True,
         "Allow TF32 tensor-core math in cuDNN convolutions.",
         "TF32 tensor-core math in cuDNN convolutions"),
    Flag("cuda.matmul.allow_tf32", bool, False,
         "Allow TF32 tensor-core math in float32 GEMMs.",
         "cuBLAS math mode / compute type for float32 GEMMs"),
    Flag("cuda.matmul.allow_fp16_reduced_precision_reduction", bool, True,
         "Allow reduced-precision reductions in float16 GEMMs.",
         "cuBLAS DISALLOW_REDUCED_PRECISION_REDUCTION bit, fp16 GEMMs"),
    Flag("cuda.matmul.allow_bf16_reduced_precision_reduction", bool, True,
         "Allow reduced-precision reductions in bfloat16 GEMMs.",
         "cuBLAS DISALLOW_REDUCED_PRECISION_REDUCTION bit, bf16 GEMMs"),
    Flag("cuda.preferred_linalg_library", str, "default",
         "Preferred solver library (CuPy ships only cuSOLVER: a preference, as in torch).",
         "solver choice (cuSOLVER)", choices=("default", "cusolver", "magma"),
         spelling="function"),
    Flag("cuda.cufft_plan_cache.max_size", int, 16,
         "Capacity of CuPy's per-thread, per-device cuFFT plan cache (plans; 0: no caching, -1: unlimited).",
         "capacity of CuPy's cuFFT plan cache (pushed only where set: else CuPy's own size stands)", minimum=-1),
    Flag("algorithms.deterministic", bool, False,
         "Refuse CuPy operations whose results can vary run to run; use a deterministic path where CuPy has one.",
         "CuPy's atomics-based operations (raise or warn), CUB scans (CuPy's own scan), cuDNN engines"),
    Flag("algorithms.warn_only", bool, False,
         "With algorithms.deterministic: warn instead of raise.",
         "what a refused operation does: warn (True) or raise (False)"),
)

VIEWS: tuple[View, ...] = (
    View("cuda.matmul.fp32_precision", "cuda.matmul.allow_tf32", "tf32", "ieee",
         'torch 2.9+ spelling of cuda.matmul.allow_tf32: "tf32" or "ieee".'),
    View("cudnn.conv.fp32_precision", "cudnn.allow_tf32", "tf32", "ieee",
         'torch 2.9+ spelling of cudnn.allow_tf32: "tf32" or "ieee".'),
)

BY_NAME: dict[str, Flag] = {f.name: f for f in FLAGS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
