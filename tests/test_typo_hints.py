"""A typo gets exactly one suggestion, the engine's, on every Python: in the traceback the
interpreter prints for an uncaught error and in ``traceback.format_exception``. (Python 3.12 and
newer add a "Did you mean" of their own to an AttributeError that does not say where it looked.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: (statement, the engine's suggestion, which the message must hold)
TYPOS = [
    ("backends.cudnm", "did you mean 'cudnn'?"),
    ("backends.cudnn.benchmak", "did you mean backends.cudnn.benchmark?"),
    ("backends.cuda.matmul.allow_tf33", "did you mean backends.cuda.matmul.allow_tf32?"),
    ("backends.cudnn.conv.fp32_precison", "did you mean backends.cudnn.conv.fp32_precision?"),
    ("backends.cuda.cufft_plan_cache.max_sise", "did you mean backends.cuda.cufft_plan_cache.max_size?"),
    ("backends.mps.is_availble", "did you mean backends.mps.is_available?"),
    ("getattr(backends.algorithms, 'determinstic')", "did you mean backends.algorithms.deterministic?"),
    ("backends.cudnn.benchmak = True", "did you mean backends.cudnn.benchmark?"),
    ("backends.cuda.matmul.allow_tf_32 = True", "did you mean backends.cuda.matmul.allow_tf32?"),
    ("backends.cudnn.flags(determinstic=True)", "did you mean 'deterministic'?"),
    ("backends.cuda.matmul.flags(allow_tf33=True)", "did you mean 'allow_tf32'?"),
    ("backends.flags({'cudnn.determinstic': True})", "did you mean 'cudnn.deterministic'?"),
]

#: `from X import typo`: the interpreter replaces the engine's AttributeError by an ImportError of
#: its own, with no hook for the engine's hint; 3.12 and newer add their suggestion to it.
FROM_IMPORTS = [
    "from backends import cudnm",
    "from backends.cudnn import benchmak",
    "from backends.cuda import matmull",
]

_PROGRAM = """
import sys, traceback
import backends

try:
    {statement}
except Exception as error:
    formatted = "".join(traceback.format_exception(error))
else:
    raise SystemExit("no error")
print(formatted.lower().count("did you mean"))
print(formatted.strip().splitlines()[-1])
{statement}
"""


def run(statement: str, engine: str) -> tuple[int, str, str]:
    """Run ``statement`` twice in a fresh interpreter: caught and formatted by ``traceback``, then
    uncaught. Return the suggestions ``traceback.format_exception`` gave, its last line, and the
    interpreter's traceback."""
    env = {**os.environ, "BACKENDS_PURE_PYTHON": "1" if engine == "pure" else "0"}
    code = _PROGRAM.format(statement=statement)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    count, last = done.stdout.splitlines()
    return int(count), last, done.stderr


@pytest.mark.parametrize("engine", ["compiled", "pure"])
@pytest.mark.parametrize(("statement", "hint"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_typo_gets_exactly_one_suggestion_the_engines(statement: str, hint: str, engine: str) -> None:
    formatted, last, printed = run(statement, engine)
    assert hint in last, last
    assert formatted == 1, f"traceback.format_exception: {last}"
    assert printed.lower().count("did you mean") == 1, printed
    assert hint in printed


@pytest.mark.parametrize("engine", ["compiled", "pure"])
@pytest.mark.parametrize("statement", FROM_IMPORTS)
def test_from_import_of_a_typo_gets_at_most_one_suggestion(statement: str, engine: str) -> None:
    formatted, last, printed = run(statement, engine)
    assert last.startswith("ImportError: cannot import name"), last
    assert formatted <= 1 and printed.lower().count("did you mean") <= 1, printed
    if statement == "from backends import cudnm" and sys.version_info >= (3, 12):
        assert "Did you mean: 'cudnn'?" in printed  # Python's own, from dir(backends)


def test_an_unknown_name_error_says_where_it_looked_and_leaves_the_name_unset() -> None:
    import backends

    for owner, name in [(backends, "cudnm"), (backends.cudnn, "benchmak"), (backends.cuda.matmul, "allow_tf33")]:
        with pytest.raises(AttributeError) as raised:
            getattr(owner, name)
        assert raised.value.obj is owner
        assert raised.value.name is None  # Python adds its own suggestion where it is set


#: torch's names for what is spelt otherwise here: (statement, what the message says to write instead)
TORCH_NAMES = [
    ("backends.set_float32_matmul_precision('high')",
     "torch.set_float32_matmul_precision() sets torch's own float32 matmul precision; here assign "
     "backends.cuda.matmul.fp32_precision = 'tf32' (torch's 'high' or 'medium') or 'ieee' (torch's 'highest'), "
     "or scope it: with backends.cuda.matmul.flags(allow_tf32=True)"),
    ("backends.get_float32_matmul_precision()", "here read backends.cuda.matmul.fp32_precision ('tf32' or 'ieee'"),
    ("backends.fp32_precision", "torch.backends.fp32_precision sets every library's float32 precision at once; here "
     "each has its own: backends.cuda.matmul.fp32_precision and backends.cudnn.conv.fp32_precision"),
    ("backends.fp32_precision = 'tf32'", "here each has its own: backends.cuda.matmul.fp32_precision"),
    ("backends.flags({'fp32_precision': 'tf32'})", "views of the flags cuda.matmul.allow_tf32 and cudnn.allow_tf32"),
]


@pytest.mark.parametrize("engine", ["compiled", "pure"])
@pytest.mark.parametrize(("statement", "hint"), TORCH_NAMES, ids=[t[0] for t in TORCH_NAMES])
def test_a_torch_name_spelt_otherwise_here_says_the_spelling_and_suggests_nothing_else(
    statement: str, hint: str, engine: str
) -> None:
    formatted, last, printed = run(statement, engine)
    assert last.startswith("backends.UnknownFlagError: ") and hint in last, last
    assert formatted == 0 and "did you mean" not in printed.lower(), printed
