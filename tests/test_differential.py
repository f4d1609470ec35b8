"""Differential test of the two engines: the compiled accelerator against the pure-Python reference.

tests/_programs.py writes random programs (fixed seeds) over the public API: flag reads and views,
good and bad assignments in and out of scopes, set_defaults/reset_defaults, scopes of every
spelling entered and exited in order, out of order, in another context, nested in themselves and
with an exception in flight, every kind of decorated callable (read inside and between steps),
snapshots as mappings and scopes, bind() in another thread, threads (joined one at a time, or
barrier-stepped so that several are alive at once), asyncio tasks (create_task, gather, cancel,
to_thread; with and without backends.asyncio.install()), describe(), and disable/enable_global_flags().
Each batch runs in one subprocess per engine (BACKENDS_PURE_PYTHON=0 and =1), and every observation
(values, exception types and messages, refusals of exits included) must be the same, in the same order.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import backends
from backends._engine import accelerator
from tests import _programs

RUNNER = Path(_programs.__file__)
#: (seed, number of programs): a batch takes about 1 s of CPU per engine (2-3 s of wall time here).
#: Every batch covers every construct (the check below); a plain run takes two, CI all four.
BATCHES = [
    (20240601, 150),
    pytest.param(7, 150, marks=pytest.mark.slow),
    pytest.param(31337, 150, marks=pytest.mark.slow),
    pytest.param(424242, 150, marks=pytest.mark.slow),
]

pytestmark = pytest.mark.skipif(
    not backends._engine.ACCELERATED,
    reason=f"backends._engine.ACCELERATED is False in this process ({accelerator.reason}): only the pure engine "
    "is in use here, so there is no compiled engine to compare it with",
)


def _environment(pure: bool) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BACKENDS_") and k != "CUPY_TF32"}
    environment["BACKENDS_PURE_PYTHON"] = "1" if pure else "0"
    # the backends this process imported, whatever the subprocess's working directory
    package_root = str(Path(backends.__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, environment.get("PYTHONPATH")]))
    return environment


def _run_batch(seed: int, count: int, folder: Path) -> tuple[list[str], dict, dict]:
    """The batch ``seed`` run once per engine, both at once (one core each):
    (sources, compiled output, pure output)."""
    sources = _programs.generate(seed, count)
    programs = folder / "programs.json"
    programs.write_text(json.dumps(sources), encoding="utf-8")
    outputs, processes = {}, {}
    for pure in (False, True):
        outputs[pure] = folder / f"{'pure' if pure else 'compiled'}.json"
        processes[pure] = subprocess.Popen(
            [sys.executable, str(RUNNER), str(programs), str(outputs[pure])],
            env=_environment(pure),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    for pure, process in processes.items():
        engine = "pure" if pure else "compiled"
        try:
            _, stderr = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
            pytest.fail(f"the {engine} runner of seed {seed} hung:\n{stderr[-4000:]}")
        assert process.returncode == 0, (
            f"the {engine} runner of seed {seed} exited {process.returncode}:\n{stderr[-4000:]}"
        )
    compiled, pure_output = (json.loads(outputs[p].read_text(encoding="utf-8")) for p in (False, True))
    return sources, compiled, pure_output


def _numbered(source: str) -> str:
    return "\n".join(f"{n:4} | {line}" for n, line in enumerate(source.splitlines(), 1))


# What each batch must exercise for the comparison to mean something: a change to the generator
# that stopped making one of these would otherwise pass unnoticed.
def _label(needle: str) -> Callable[[list[str]], bool]:
    return lambda observation: needle in observation[0]


def _message(needle: str) -> Callable[[list[str]], bool]:
    return lambda observation: any(needle in part for part in observation[1:])


def _raised(kind: str) -> Callable[[list[str]], bool]:
    return lambda observation: len(observation) > 2 and observation[1] == "raised" and observation[2] == kind


EXPECTED = {
    "an exit refused as out of order": _message("the innermost scope active in this context is"),
    "an exit refused as not entered here": _message("it is not active in this context"),
    "an exit refused in a task that inherited the entry": _message("it was entered in a different context"),
    "an exit refused through a copy": _message("a different Scope object with the same overrides (object 0x?)"),
    "an exit with an exception in flight": _label(" with Boom"),
    "an assignment refused while frozen": _message("global flags are disabled"),
    "a bad value": _message("must be a bool (True or False), got"),
    "an unknown name": _message("did you mean"),
    "an exception through a scope": _raised("Boom"),
    "a cancelled task": _raised("CancelledError"),
    "a generator between its steps": _label(" between"),
    "a generator's values": _label(" yielded"),
    "a decorated function": _label(" fu"),
    "a decorated method": _label("().m()"),
    "a decorated coroutine function": _label(" await co"),
    "a decorated async generator function": _label(" async for as"),
    "a thread": _label(" in_thread"),
    "barrier-stepped threads": _label(" thread 1 phase "),
    "bind in a thread": _label(" bound in a thread"),
    "a task": _label(" starts"),
    "a loop with backends.asyncio.install()": _label(" install"),
    "asyncio.to_thread": _label(" to_thread"),
    "a snapshot as a mapping": _label(" snap"),
    "a snapshot as a scope": _label(" with snap"),
    "a scope nested in itself": _label(" nested in itself"),
    "describe() rows": _message("str:'scope')"),
}


@pytest.mark.parametrize(("seed", "count"), BATCHES)
def test_both_engines_observe_the_same(seed: int, count: int, tmp_path: Path) -> None:
    sources, compiled, pure = _run_batch(seed, count, tmp_path)

    # Each subprocess used the engine it was asked for, from this checkout.
    here = str(Path(backends.__file__).resolve())
    for output in (compiled, pure):
        assert str(Path(output["engine"].pop("file")).resolve()) == here
    assert compiled["engine"] == {
        "ACCELERATED": True,
        "describe": "compiled accelerator (C, backends._engine._speedups)",
        "enter is a Python function": False,
        "stepper base": ["StepperCore"],
    }
    assert pure["engine"] == {
        "ACCELERATED": False,
        "describe": "pure Python (BACKENDS_PURE_PYTHON is set)",
        "enter is a Python function": True,
        "stepper base": ["_Steps"],
    }

    # The same observations, program by program.
    assert len(compiled["programs"]) == len(pure["programs"]) == len(sources)
    for index, (source, mine, reference) in enumerate(
        zip(sources, compiled["programs"], pure["programs"], strict=True)
    ):
        if mine == reference:
            continue
        first = next(
            (k for k, (a, b) in enumerate(zip(mine, reference, strict=False)) if a != b), min(len(mine), len(reference))
        )
        context = "\n".join(f"    {o}" for o in reference[max(0, first - 5) : first])
        pytest.fail(
            f"the engines differ in program {index} of seed {seed}, at observation {first}:\n"
            f"  compiled: {mine[first] if first < len(mine) else '(no more observations)'}\n"
            f"  pure:     {reference[first] if first < len(reference) else '(no more observations)'}\n"
            f"after these observations (both engines):\n{context}\n"
            f"the program (run by tests/_programs.py; `from tests import _programs; "
            f"print(_programs.generate({seed}, {count})[{index}])` prints it):\n{_numbered(source)}",
            pytrace=False,
        )

    # The batch exercised what the comparison is meant to cover, and went wrong nowhere on its own.
    seen: collections.Counter[str] = collections.Counter()
    suspicious = []
    for index, program in enumerate(pure["programs"]):
        seen.update(what for what, shows in EXPECTED.items() if any(shows(o) for o in program))
        for observation in program:  # the generator's own mistakes, or a program cut short
            if (
                observation[0] == "program aborted"
                or _raised("NameError")(observation)
                or _raised("UnboundLocalError")(observation)
                or (observation[0] == "threads left" and observation[1] != "1")
            ):
                suspicious.append((index, observation))
    missing = sorted(what for what in EXPECTED if seen[what] < 3)
    assert not missing, f"fewer than 3 programs of seed {seed} show: {missing} ({dict(seen)})"
    assert not suspicious, f"programs of seed {seed} that went wrong on their own: {suspicious[:10]}"
    # Object addresses (an id in a repr or a refusal message) were normalised, or the engines
    # would differ in them alone.
    text = json.dumps(compiled["programs"])
    assert "0x?" in text and not re.search(r"0x[0-9a-fA-F]", text)
