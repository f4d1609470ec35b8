"""What the torch target adds (issue 35's item 7), with torch imported (the CPU build serves: no GPU
is needed), against the same process with the target's mirror taken out, in alternating pairs of
short runs (without, then with; with, then without; ...), each run timed with this thread's CPU
time, the added time being ``bench_core.paired_difference`` of the pairs:

* ``entry+exit, no torch flag``: ``with backends.cuda.cufft_plan_cache.flags(max_size=8):``, a flag
  that does not reach a torch without CUDA (target: <= 60 ns added);
* ``entry+exit, same value``: ``with backends.cudnn.flags(deterministic=True):`` inside a scope that
  already set it (torch's value does not change; target: <= 60 ns added);
* ``entry+exit, one flag``: ``with backends.cudnn.flags(deterministic=True):`` outside any scope, so
  the entry reads torch's own value and sets the scope's and the exit puts torch's back, minus what
  torch's own calls cost (``torch._C._get_cudnn_deterministic()`` and two
  ``torch._C._set_cudnn_deterministic()``, timed in the same run; target: <= 100 ns added);
* ``task step, nothing changed``: ``backends.sync()``, the call that ``backends.asyncio.install()``'s
  stepper makes before each step (in C, through the engine's capsule, on the compiled engines;
  target: <= 30 ns added).

    python benchmarks/bench_torch.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_core import paired_difference  # noqa: E402

import backends  # noqa: E402
from backends._engine import accelerator, mirror  # noqa: E402

CLOCK = time.thread_time


def run(stmt: str, namespace: dict[str, Any], number: int) -> float:
    """ns per loop of ``stmt`` over ``number`` loops, in this thread's CPU time."""
    code = compile(f"for _ in range({number}):\n    {stmt}\n", "<bench>", "exec")
    start = CLOCK()
    exec(code, namespace)
    return (CLOCK() - start) / number * 1e9


def added(stmt: str, namespace: dict[str, Any], target: Any, pairs: int, number: int) -> tuple[float, float]:
    """(median ns without the mirror, ns the mirror adds) of ``stmt``, in alternating pairs."""
    without, with_ = [], []
    for index in range(pairs):
        for installed in ((False, True) if index % 2 == 0 else (True, False)):
            mirror.install(target if installed else None)
            (with_ if installed else without).append(run(stmt, namespace, number))
    mirror.install(target)
    ordered = sorted(without)
    return ordered[len(ordered) // 2], paired_difference(without, with_)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    args = parser.parse_args(argv)
    import torch

    from backends.sync import compiled
    from backends.sync import torch as torch_target

    compiled()  # the compiled sync layer, as backends.asyncio's stepper uses it
    target = torch_target.mirror
    assert target is not None, "the torch target was not installed"
    C = torch._C
    pairs, number = (6, 20_000) if args.quick else (20, 100_000)
    namespace: dict[str, Any] = {
        "backends": backends,
        "other": backends.cuda.cufft_plan_cache.flags(max_size=8),
        "outer": backends.cudnn.flags(deterministic=True),
        "det": backends.flags({"cudnn.deterministic": True}),
        "get": C._get_cudnn_deterministic,
        "set": C._set_cudnn_deterministic,
        "sync": backends.sync,
    }
    print(f"torch {torch.__version__}, {accelerator.describe()}, Python {sys.version.split()[0]}")
    print(f"{'':36} {'without':>10} {'added':>9}  target")
    rows = [
        ("entry+exit, no torch flag", "with other: pass", 60),
        ("entry+exit, one flag (gross)", "with det: pass", None),
        ("task step, nothing changed", "sync()", 30),
    ]
    results = {}
    for label, stmt, target_ns in rows:
        base, extra = added(stmt, namespace, target, pairs, number)
        results[label] = extra
        print(f"{label:36} {base:8.1f}ns {extra:+7.1f}ns  {'<= ' + str(target_ns) if target_ns else ''}")
    with namespace["outer"]:
        base, extra = added("with det: pass", namespace, target, pairs, number)
    print(f"{'entry+exit, same value':36} {base:8.1f}ns {extra:+7.1f}ns  <= 60")
    torch_own = sorted(run("get(); set(True); set(False)", namespace, number) for _ in range(pairs))[pairs // 2]
    print(f"{'  torch own get + 2 sets':36} {torch_own:8.1f}ns")
    net = results["entry+exit, one flag (gross)"] - torch_own
    print(f"{'entry+exit, one flag (net of torch)':36} {'':10} {net:+7.1f}ns  <= 100")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
