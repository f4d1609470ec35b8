"""Error messages a new user met that said too little: each says what was wrong and what to do,
keeps its type, and changes no flag (on either engine: the suite runs under both)."""

from __future__ import annotations

import asyncio
import pickle
import traceback

import pytest

import backends

from ._helpers import state

# -- backends.asyncio.install() / uninstall() --------------------------------------------------------

NO_LOOP = (
    "backends.asyncio.{}() found no running event loop: call it from code running in the loop "
    "(e.g. first thing in the async def that asyncio.run() runs), or pass loop="
)


@pytest.mark.parametrize("function", ["install", "uninstall"])
def test_install_with_no_running_loop_says_where_to_call_it(function: str) -> None:
    before = state()
    with pytest.raises(RuntimeError) as raised:
        getattr(backends.asyncio, function)()
    assert str(raised.value) == NO_LOOP.format(function)
    assert raised.value.__suppress_context__  # asyncio's bare "no running event loop" is not shown too
    assert state() == before


@pytest.mark.parametrize("function", ["install", "uninstall"])
@pytest.mark.parametrize(("loop", "shown"), [("notaloop", "'notaloop' (str)"), (asyncio, "<module 'asyncio' from ")])
def test_install_of_what_is_not_an_event_loop_says_what_it_takes(function: str, loop: object, shown: str) -> None:
    async def main() -> None:
        running = asyncio.get_running_loop()
        with pytest.raises(TypeError) as raised:
            getattr(backends.asyncio, function)(loop)
        message = str(raised.value)
        assert message.startswith(f"backends.asyncio.{function}() takes an asyncio event loop or None, got {shown}")
        assert running.get_task_factory() is None  # the running loop was not touched instead

    before = state()
    asyncio.run(main())
    assert state() == before


def test_install_of_a_string_names_it_exactly() -> None:
    with pytest.raises(TypeError) as raised:
        backends.asyncio.install("notaloop")  # type: ignore[arg-type]
    assert str(raised.value) == "backends.asyncio.install() takes an asyncio event loop or None, got 'notaloop' (str)"


# -- a view given to flags() ------------------------------------------------------------------------

VIEW_KEYWORD = (
    "backends.cuda.matmul.flags() got 'fp32_precision', a view, not a flag: "
    "use allow_tf32=True for 'tf32' or allow_tf32=False for 'ieee'"
)


@pytest.mark.parametrize(
    "kwargs",
    [{"fp32_precision": "tf32"}, {"fp32_precision": True}, {"allow_tf32": True, "fp32_precision": "ieee"}],
    ids=["tf32", "a bool (the one-bool-keyword path)", "beside a flag"],
)
def test_a_view_as_a_flags_keyword_says_which_keyword_to_use(kwargs: dict[str, object]) -> None:
    before = state()
    with pytest.raises(TypeError) as raised:
        backends.cuda.matmul.flags(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value) == VIEW_KEYWORD
    assert state() == before


def test_a_view_in_a_mapping_says_the_same_in_a_mappings_spelling() -> None:
    before = state()
    with pytest.raises(KeyError) as raised:
        backends.flags({"cuda.matmul.fp32_precision": "tf32"})
    assert str(raised.value) == (
        "'cuda.matmul.fp32_precision' is a view, not a flag: "
        "use {'cuda.matmul.allow_tf32': True} for 'tf32' or {'cuda.matmul.allow_tf32': False} for 'ieee'"
    )
    assert state() == before


# -- torch's cuda.matmul.allow_fp16_accumulation ----------------------------------------------------

FP16_ACCUMULATION = (
    "torch has torch.backends.cuda.matmul.allow_fp16_accumulation, but this project does not scope it "
    "(nothing in CuPy or NumPy reads it)"
)


def test_allow_fp16_accumulation_says_torch_has_it_and_it_is_not_scoped_here() -> None:
    before = state()
    with pytest.raises(AttributeError) as read:
        backends.cuda.matmul.allow_fp16_accumulation  # type: ignore[attr-defined]  # noqa: B018
    where = "backends.cuda.matmul has no flag or attribute 'allow_fp16_accumulation'"
    assert str(read.value) == f"{where}: {FP16_ACCUMULATION}"
    with pytest.raises(AttributeError) as assigned:
        backends.cuda.matmul.allow_fp16_accumulation = True  # type: ignore[attr-defined]
    assert str(assigned.value) == str(read.value)
    with pytest.raises(KeyError) as mapped:
        backends.flags({"cuda.matmul.allow_fp16_accumulation": True})
    assert str(mapped.value) == f"unknown flag 'cuda.matmul.allow_fp16_accumulation': {FP16_ACCUMULATION}"
    assert state() == before


# -- a Snapshot's keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("cudnn.benchmak", "unknown flag 'cudnn.benchmak'; did you mean 'cudnn.benchmark'?"),
        ("cuda.matmul.fp32_precision",
         "unknown flag 'cuda.matmul.fp32_precision'; did you mean 'cuda.matmul.allow_tf32'? "
         "('cuda.matmul.fp32_precision' is its view)"),
        ("zzz", "unknown flag 'zzz'"),
        (1, "flag names are dotted strings such as 'cudnn.deterministic', got 1 (int)"),
    ],
)
def test_a_snapshot_lookup_of_an_unknown_name_is_a_key_error_with_a_hint(name: object, message: str) -> None:
    snap = backends.snapshot()
    with pytest.raises(KeyError) as raised:
        snap[name]  # type: ignore[index]
    assert str(raised.value) == message
    # Mapping's protocol is unchanged: `in` and get() answer without raising
    assert name not in snap
    assert snap.get(name) is None  # type: ignore[arg-type]
    assert snap.get(name, "default") == "default"  # type: ignore[arg-type]


def test_a_snapshot_still_answers_for_its_flags() -> None:
    snap = backends.snapshot()
    assert "cudnn.benchmark" in snap
    assert snap["cudnn.benchmark"] is snap.get("cudnn.benchmark", "default") is backends.cudnn.benchmark
    assert dict(snap) == snap.to_dict() and snap == snap.to_dict()
    with pytest.raises(TypeError, match="unhashable"):
        [1] in snap  # noqa: B015  (as a dict answers)


# -- Snapshot.from_dict() -----------------------------------------------------------------------------


def test_from_dict_of_what_is_not_a_mapping_names_from_dict() -> None:
    before = state()
    with pytest.raises(TypeError) as raised:
        backends.Snapshot.from_dict("x")  # type: ignore[arg-type]
    takes = "takes a mapping of dotted flag names to values, got 'x' (str)"
    assert str(raised.value) == f"backends.Snapshot.from_dict() {takes}"
    with pytest.raises(TypeError) as constructed:
        backends.Snapshot("x")  # type: ignore[arg-type]
    assert str(constructed.value) == f"backends.Snapshot() {takes}"
    assert state() == before


MISSING = "a Snapshot needs every flag; missing {} (for a partial override use backends.flags(mapping))"


def test_from_dict_missing_flags_is_a_key_error_whose_message_reads_plainly() -> None:
    before = state()
    data = backends.snapshot().to_dict()
    del data["cudnn.benchmark"], data["algorithms.warn_only"]
    for build in (backends.Snapshot.from_dict, backends.Snapshot):
        with pytest.raises(KeyError) as raised:
            build(data)
        expected = MISSING.format("'cudnn.benchmark', 'algorithms.warn_only'")
        assert str(raised.value) == expected  # not inside quotes, as KeyError's own str() would put it
        last = traceback.format_exception_only(raised.value)[-1]
        assert last.endswith(f"MissingFlagsError: {expected}\n")
        # it pickles (Dask and Ray send a worker's errors back) and reads the same after
        loaded = pickle.loads(pickle.dumps(raised.value))
        assert type(loaded) is type(raised.value) and str(loaded) == expected
    assert state() == before
