"""The error type for unknown names, and the hints every error message shares: the closest valid
name (``did you mean``), and torch settings this project does not scope."""

from __future__ import annotations

from collections.abc import Iterable

from .table import VIEWS, View

# Re-exported for the modules that import them from here (scope.py, backends/__main__.py); they
# live in wording.py, below the table.
from .wording import brief as brief
from .wording import show as show

#: ``torch.backends`` settings that this project does not scope, by namespace (``""`` is
#: ``torch.backends`` itself). Nothing in CuPy or NumPy reads them, so a scoped copy would
#: change nothing; naming them keeps a typo hint ("did you mean ...") from pointing elsewhere.
TORCH_ONLY: dict[str, frozenset[str]] = {
    "": frozenset({"mha", "nnpack", "opt_einsum", "quantized", "xnnpack"}),
    "cuda": frozenset({
        "allow_fp16_bf16_reduction_math_sdp", "cudnn_sdp_enabled", "enable_cudnn_sdp", "enable_flash_sdp",
        "enable_math_sdp", "enable_mem_efficient_sdp", "flash_sdp_enabled", "fp16_bf16_reduction_math_sdp_allowed",
        "math_sdp_enabled", "mem_efficient_sdp_enabled", "preferred_blas_library", "preferred_rocm_fa_library",
        "sdp_kernel",
        # cuBLAS/cuBLASLt workspace sizes for torch's own handles (CuPy sizes its handle's workspace itself)
        "blas_workspace_size", "cublas_workspace_size", "cublaslt_workspace_size",
    }),
    "cuda.matmul": frozenset({
        # fp16 accumulation (torch 2.7+), and the split-K half of torch's (bool, bool) reduction
        # settings: nothing in CuPy's GEMMs to push either into
        "allow_bf16_reduced_precision_reduction_split_k", "allow_fp16_accumulation",
        "allow_fp16_reduced_precision_reduction_split_k",
    }),
    "cudnn": frozenset({"depthwise_kernel", "rnn"}),
    "mkldnn": frozenset({
        "allow_tf32", "conv", "deterministic", "enabled", "flags", "fp32_precision", "matmul", "rnn", "set_flags",
        "verbose",
    }),
}


#: torch's names for what this project spells otherwise, looked up on ``backends`` (or as a name in
#: a mapping): what to write instead. A did-you-mean by spelling alone would point elsewhere.
TORCH_SPELLINGS: dict[str, str] = {
    "set_float32_matmul_precision": (
        "torch.set_float32_matmul_precision() sets torch's own float32 matmul precision; here assign "
        "backends.cuda.matmul.fp32_precision = 'tf32' (torch's 'high' or 'medium') or 'ieee' (torch's "
        "'highest'), or scope it: with backends.cuda.matmul.flags(allow_tf32=True)"
    ),
    "get_float32_matmul_precision": (
        "torch.get_float32_matmul_precision() reads torch's own; here read "
        "backends.cuda.matmul.fp32_precision ('tf32' or 'ieee', in the current context)"
    ),
    "fp32_precision": (
        "torch.backends.fp32_precision sets every library's float32 precision at once; here each has its "
        "own: backends.cuda.matmul.fp32_precision and backends.cudnn.conv.fp32_precision ('tf32' or 'ieee'), "
        "views of the flags cuda.matmul.allow_tf32 and cudnn.allow_tf32"
    ),
}


def torch_spelling(name: str) -> str:
    """``": what to write instead"`` where ``name`` is torch's for something spelt otherwise here
    (``TORCH_SPELLINGS``); else ``""``."""
    return f": {TORCH_SPELLINGS[name]}" if name in TORCH_SPELLINGS else ""


def closest(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The candidate most like ``name`` (difflib ratio >= ``cutoff``), or ``None``."""
    import difflib  # only on the error path: keeps `import backends` fast

    found = difflib.get_close_matches(name, list(candidates), n=1, cutoff=cutoff)
    return found[0] if found else None


def nearest(name: str, names: Iterable[str]) -> str | None:
    """The dotted name in ``names`` that a mistyped dotted ``name`` most likely means, or ``None``.

    Judged on the last part, as attribute access is, in this order: the same last part lower
    in the same namespace (``cuda.allow_tf32`` -> ``cuda.matmul.allow_tf32``); a close last part
    in the same namespace (difflib ratio >= 0.6); a nearly equal one (>= 0.8) elsewhere, from the
    namespace closest to ``name``'s among namesakes (``cudnn.conv.allow_tf32`` ->
    ``cudnn.allow_tf32``); a nearly equal whole name (a stray dot). Whole names at 0.6 would
    match ``cuda.enable_flash_sdp`` to ``cudnn.enabled`` for sharing "cud" and "enable".
    """
    names = list(names)
    head, _, last = name.rpartition(".")
    for candidate in names:
        if candidate.startswith(f"{head}.") and candidate.endswith(f".{last}"):
            return candidate
    here = {n.rpartition(".")[2]: n for n in names if n.rpartition(".")[0] == head}
    if (part := closest(last, here)) is not None:
        return here[part]
    elsewhere: dict[str, dict[str, str]] = {}  # last part -> namespace -> name
    for candidate in names:
        space, _, part = candidate.rpartition(".")
        elsewhere.setdefault(part, {})[space] = candidate
    if (part := closest(last, elsewhere, cutoff=0.8)) is not None:
        spaces = elsewhere[part]
        return spaces[closest(head, spaces, cutoff=0.0) or next(iter(spaces))]
    return closest(name, names, cutoff=0.8)


def not_scoped(name: str) -> str:
    """``": torch has torch.backends.X, ..."`` where the dotted ``name`` is, or lies under, a
    torch setting this project does not scope (``TORCH_ONLY``); else ``""``."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in TORCH_ONLY.get(".".join(parts[:i]), ()):
            torch_name = ".".join(["torch.backends", *parts[: i + 1]])
            return f": torch has {torch_name}, but this project does not scope it (nothing in CuPy or NumPy reads it)"
    return ""


def use_the_flag(view: View, keyword_of: str = "") -> str:
    """What to write instead of ``view`` where a flag is wanted: its flag, as a dotted name in a
    mapping, or as a keyword of ``backends.{keyword_of}.flags()`` (the namespace whose ``flags()``
    got the view's name)."""
    space, _, attribute = view.flag.rpartition(".")
    if not keyword_of:
        spelt = [f"{{{view.flag!r}: {value}}}" for value in (True, False)]
    elif space == keyword_of:
        spelt = [f"{attribute}={value}" for value in (True, False)]
    else:
        spelt = [f"backends.{space}.flags({attribute}={value})" for value in (True, False)]
    return f"use {spelt[0]} for {view.when_true!r} or {spelt[1]} for {view.when_false!r}"


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    best = closest(name, candidates)
    return f"; did you mean {best!r}?" if best else ""


class _PlainKeyError(KeyError):
    """A ``KeyError`` whose ``str()`` is its message as written (``KeyError``'s quotes it, as it does
    a key, so a traceback would show a sentence inside quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingFlagsError(_PlainKeyError):
    """A mapping that must name every flag (``Snapshot.from_dict()``) lacks some: a ``KeyError``."""


class UnknownFlagError(_PlainKeyError, AttributeError):
    """An unknown flag name: a ``KeyError`` for dotted names and an ``AttributeError``
    for attribute access, so either ``except`` catches it. The message names the
    closest valid flag. ``obj`` is the namespace (or package) the name was looked up on, for
    attribute access; ``name`` stays unset: Python, which sets both only where neither is set,
    leaves them be, and a traceback then adds no "Did you mean" of its own after the message's."""

    def __init__(self, *args: object, obj: object = None) -> None:
        super().__init__(*args)
        self.obj = obj


def unknown_name(name: object, candidates: Iterable[str], what: str = "flag") -> UnknownFlagError:
    """The error for an unknown dotted name in a mapping: why, where it is a torch setting
    this project does not scope; else the nearest of ``candidates``, or the flag behind the
    nearest view (a mapping takes flags, not views)."""
    if not issubclass(type(name), str):
        return UnknownFlagError(f"flag names are dotted strings such as 'cudnn.deterministic', got {show(name)}")
    name = str.__str__(name)  # a plain str: a subclass's __eq__/__repr__ never runs
    hint = not_scoped(name) or torch_spelling(name)
    if not hint:
        views = {view.name: view.flag for view in VIEWS}
        best = nearest(name, [*candidates, *views])
        if best in views:
            hint = f"; did you mean {views[best]!r}? ({best!r} is its view)"
        elif best is not None:
            hint = f"; did you mean {best!r}?"
    return UnknownFlagError(f"unknown {what} {name!r}{hint}")
