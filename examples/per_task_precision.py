"""Many asyncio tasks on one loop, each with its own precision, interleaving at every await.

    python examples/per_task_precision.py
"""

from __future__ import annotations

import asyncio

import backends


async def handle(request_id: int, precision: str) -> tuple[int, str, str]:
    with backends.cuda.matmul.flags(allow_tf32=precision == "tf32"):
        await asyncio.sleep(0)  # simulated I/O: every other task runs here
        return request_id, precision, backends.cuda.matmul.fp32_precision


async def main() -> None:
    answers = await asyncio.gather(*(handle(i, "tf32" if i % 3 else "ieee") for i in range(30)))
    mismatches = [a for a in answers if a[1] != a[2]]
    print(f"{len(answers)} requests, {len(mismatches)} saw another request's precision")
    assert not mismatches


if __name__ == "__main__":
    asyncio.run(main())
