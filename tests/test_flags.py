"""Reading and assigning flags, process defaults, derived views, describe() and strict mode."""

from __future__ import annotations

import functools
import importlib
import threading

import numpy as np
import pytest

import backends

from ._helpers import run_threads, state

# Every flag of the contract's table, with its built-in default and the object/attribute
# through which it is read and assigned.
DEFAULTS = {
    "cudnn.enabled": True,
    "cudnn.benchmark": False,
    "cudnn.benchmark_limit": 10,
    "cudnn.deterministic": False,
    "cudnn.allow_tf32": True,
    "cuda.matmul.allow_tf32": False,
    "cuda.matmul.allow_fp16_reduced_precision_reduction": True,
    "cuda.matmul.allow_bf16_reduced_precision_reduction": True,
    "cuda.preferred_linalg_library": "default",
    "cuda.cufft_plan_cache.max_size": 16,
    "algorithms.deterministic": False,
    "algorithms.warn_only": False,
}

# A valid value different from the default, for each flag.
OTHER = {
    "cudnn.enabled": False,
    "cudnn.benchmark": True,
    "cudnn.benchmark_limit": 0,
    "cudnn.deterministic": True,
    "cudnn.allow_tf32": False,
    "cuda.matmul.allow_tf32": True,
    "cuda.matmul.allow_fp16_reduced_precision_reduction": False,
    "cuda.matmul.allow_bf16_reduced_precision_reduction": False,
    "cuda.preferred_linalg_library": "cusolver",
    "cuda.cufft_plan_cache.max_size": 3,
    "algorithms.deterministic": True,
    "algorithms.warn_only": True,
}

ATTRIBUTE_FLAGS = [name for name in DEFAULTS if name != "cuda.preferred_linalg_library"]


def namespace_of(name: str) -> object:
    obj: object = backends
    for part in name.split(".")[:-1]:
        obj = getattr(obj, part)
    return obj


def read(name: str) -> object:
    if name == "cuda.preferred_linalg_library":
        return backends.cuda.preferred_linalg_library()
    return getattr(namespace_of(name), name.rpartition(".")[2])


def assign(name: str, value: object) -> None:
    setattr(namespace_of(name), name.rpartition(".")[2], value)


def sources() -> dict[str, str]:
    return {row.name: row.source for row in backends.describe()}


def values() -> dict[str, object]:
    return {row.name: row.value for row in backends.describe()}


def read_in_new_thread(fn: object) -> object:
    result: list[object] = []
    run_threads(lambda: result.append(fn()))  # type: ignore[operator]
    return result[0]


# -- reading ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_every_flag_reads_its_builtin_default(name: str) -> None:
    value = read(name)
    assert value == DEFAULTS[name]
    assert type(value) is type(DEFAULTS[name])


def test_describe_lists_every_flag_once_with_value_and_default_source() -> None:
    rows = backends.describe()
    assert [row.name for row in rows] == list(DEFAULTS)
    assert {row.name: row.value for row in rows} == DEFAULTS
    assert {row.source for row in rows} == {"default"}


def test_snapshot_keys_are_the_flag_table() -> None:
    assert list(backends.snapshot()) == list(DEFAULTS)
    assert [flag.name for flag in backends.FLAGS] == list(DEFAULTS)


def test_torch_style_module_imports_work() -> None:
    import backends.cudnn  # the statement itself is under test
    from backends.cuda import matmul

    assert matmul is backends.cuda.matmul
    assert importlib.import_module("backends.cudnn") is backends.cudnn
    assert importlib.import_module("backends.cuda.matmul") is backends.cuda.matmul
    assert importlib.import_module("backends.cuda").matmul.allow_tf32 is False


# -- assignment ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ATTRIBUTE_FLAGS)
def test_assignment_outside_a_scope_sets_the_process_default(name: str) -> None:
    assign(name, OTHER[name])
    assert read(name) == OTHER[name]
    assert sources()[name] == "process default"
    assert read_in_new_thread(lambda: read(name)) == OTHER[name]


@pytest.mark.parametrize("name", ATTRIBUTE_FLAGS)
def test_assignment_inside_a_scope_is_undone_at_exit(name: str) -> None:
    with backends.flags({}):
        assign(name, OTHER[name])
        assert read(name) == OTHER[name]
        assert sources()[name] == "scope"
        assert read_in_new_thread(lambda: read(name)) == DEFAULTS[name]
    assert read(name) == DEFAULTS[name]
    assert sources()[name] == "default"


def test_assignment_inside_a_scope_lasts_for_the_rest_of_that_scope_only() -> None:
    with backends.cudnn.flags(deterministic=True):
        with backends.cuda.matmul.flags(allow_tf32=True):
            backends.cudnn.benchmark = True
            assert backends.cudnn.benchmark is True
        # the inner scope that saw the assignment has exited
        assert backends.cudnn.benchmark is False
        backends.cudnn.benchmark = True
        assert backends.cudnn.benchmark is True
        assert backends.cudnn.deterministic is True
    assert backends.cudnn.benchmark is False
    assert backends.cudnn.deterministic is False


def test_process_default_set_outside_is_seen_by_a_thread_started_afterwards() -> None:
    backends.cudnn.benchmark = True
    seen = read_in_new_thread(lambda: backends.cudnn.benchmark)
    assert seen is True


def test_process_default_is_seen_at_once_by_a_running_thread_without_override() -> None:
    started, assigned = threading.Event(), threading.Event()
    seen: list[bool] = []

    def worker() -> None:
        seen.append(backends.cudnn.benchmark)
        started.set()
        assert assigned.wait(10)
        seen.append(backends.cudnn.benchmark)

    def main() -> None:
        assert started.wait(10)
        backends.cudnn.benchmark = True
        assigned.set()

    run_threads(worker, main, unblock=[started, assigned])
    assert seen == [False, True]


def test_process_default_does_not_hide_an_active_scope_override() -> None:
    with backends.cudnn.flags(benchmark=False):
        backends.set_defaults({"cudnn.benchmark": True})
        assert backends.cudnn.benchmark is False
    assert backends.cudnn.benchmark is True


def test_numpy_bool_is_accepted_and_stored_as_bool() -> None:
    backends.cudnn.deterministic = np.bool_(True)
    assert backends.cudnn.deterministic is True


class Index:
    """An exact integer that is not an int: it has ``__index__``, as NumPy's integers do."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


INT_FLAGS = ["cudnn.benchmark_limit", "cuda.cufft_plan_cache.max_size"]
INTEGERS = [
    pytest.param(lambda n: np.int64(n), id="numpy.int64"),
    pytest.param(lambda n: np.int32(n), id="numpy.int32"),
    pytest.param(lambda n: np.uint8(n), id="numpy.uint8"),
    pytest.param(lambda n: np.array(n), id="numpy 0-d array"),
    pytest.param(Index, id="__index__"),
]
# Every way a value reaches a flag: each sets `name` to `value` and returns the value read back.
WAYS = {
    "assignment": lambda name, value: (assign(name, value), read(name))[1],
    "flags()": lambda name, value: _in_scope(
        namespace_of(name).flags(**{name.rpartition(".")[2]: value}), name  # type: ignore[attr-defined]
    ),
    "backends.flags()": lambda name, value: _in_scope(backends.flags({name: value}), name),
    "set_defaults()": lambda name, value: (backends.set_defaults({name: value}), read(name))[1],
    "Snapshot.from_dict()": lambda name, value: backends.Snapshot.from_dict(
        {**backends.snapshot().to_dict(), name: value}
    )[name],
}


def _in_scope(scope: backends.Scope, name: str) -> object:
    with scope:
        return read(name)


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("make", INTEGERS)
@pytest.mark.parametrize("name", INT_FLAGS)
def test_an_int_flag_takes_any_exact_integer_and_stores_a_plain_int(name: str, make: object, way: str) -> None:
    got = WAYS[way](name, make(7))  # type: ignore[operator]
    assert got == 7 and type(got) is int
    assert type(backends.snapshot()[name]) is int
    assert {type(row.value) for row in backends.describe() if row.name == name} == {int}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_an_int_flag_still_checks_the_range_of_an_exact_integer(way: str) -> None:
    before = state()
    with pytest.raises(ValueError, match=r"cudnn\.benchmark_limit must be an int >= 0, got \S*-1\b"):
        WAYS[way]("cudnn.benchmark_limit", np.int64(-1))
    assert state() == before


def test_concurrent_process_default_writes_from_many_threads_are_all_applied() -> None:
    names = ATTRIBUTE_FLAGS
    barrier = threading.Barrier(len(names))

    def writer(name: str) -> None:
        barrier.wait(10)
        for _ in range(200):
            assign(name, OTHER[name])
            assign(name, DEFAULTS[name])
        assign(name, OTHER[name])

    run_threads(*(functools.partial(writer, name) for name in names), unblock=[barrier])
    for name in names:
        assert read(name) == OTHER[name]
        assert sources()[name] == "process default"


# -- set_defaults / reset_defaults ----------------------------------------------------------


def test_set_defaults_sets_process_defaults_by_dotted_name() -> None:
    backends.set_defaults({"cudnn.deterministic": True, "cuda.preferred_linalg_library": "magma"})
    assert backends.cudnn.deterministic is True
    assert backends.cuda.preferred_linalg_library() == "magma"
    assert sources()["cudnn.deterministic"] == "process default"
    assert sources()["cudnn.benchmark"] == "default"
    assert read_in_new_thread(lambda: backends.cudnn.deterministic) is True


def test_set_defaults_inside_a_scope_sets_the_process_default_not_the_scope() -> None:
    with backends.flags({"cuda.cufft_plan_cache.max_size": 4}):
        backends.set_defaults({"cudnn.deterministic": True})
        assert backends.cudnn.deterministic is True
        assert sources()["cudnn.deterministic"] == "process default"
    assert backends.cudnn.deterministic is True


def test_reset_defaults_restores_every_builtin_default() -> None:
    backends.set_defaults(OTHER)
    assert values() == OTHER
    backends.reset_defaults()
    assert values() == DEFAULTS
    assert set(sources().values()) == {"default"}


def test_reset_defaults_does_not_touch_an_active_scope() -> None:
    backends.set_defaults({"cudnn.benchmark": True})
    with backends.cudnn.flags(deterministic=True):
        backends.reset_defaults()
        assert backends.cudnn.deterministic is True
        assert backends.cudnn.benchmark is False
    assert backends.cudnn.deterministic is False


# -- derived fp32_precision views -----------------------------------------------------------


@pytest.mark.parametrize(
    ("view_owner", "view", "flag_owner", "flag"),
    [
        ("cuda.matmul", "fp32_precision", "cuda.matmul", "allow_tf32"),
        ("cudnn.conv", "fp32_precision", "cudnn", "allow_tf32"),
    ],
)
def test_fp32_precision_view_reads_and_writes_the_underlying_flag(
    view_owner: str, view: str, flag_owner: str, flag: str
) -> None:
    view_ns = namespace_of(view_owner + ".x")
    flag_ns = namespace_of(flag_owner + ".x")
    setattr(flag_ns, flag, True)
    assert getattr(view_ns, view) == "tf32"
    setattr(flag_ns, flag, False)
    assert getattr(view_ns, view) == "ieee"
    setattr(view_ns, view, "tf32")
    assert getattr(flag_ns, flag) is True
    setattr(view_ns, view, "ieee")
    assert getattr(flag_ns, flag) is False
    with backends.flags({f"{flag_owner}.{flag}": True}):
        assert getattr(view_ns, view) == "tf32"
        setattr(view_ns, view, "ieee")
        assert getattr(flag_ns, flag) is False
    assert getattr(flag_ns, flag) is False


def test_fp32_precision_views_have_no_state_of_their_own() -> None:
    names = {row.name for row in backends.describe()}
    assert "cuda.matmul.fp32_precision" not in names
    assert "cudnn.conv.fp32_precision" not in names
    assert "cuda.matmul.fp32_precision" not in backends.snapshot()


def test_mixing_legacy_and_view_assignment_never_makes_a_read_raise() -> None:
    matmul = backends.cuda.matmul
    sequence: list[tuple[str, object]] = [
        ("allow_tf32", True),
        ("fp32_precision", "ieee"),
        ("allow_tf32", True),
        ("fp32_precision", "tf32"),
        ("allow_tf32", False),
        ("fp32_precision", "ieee"),
    ]
    for attribute, value in sequence:
        setattr(matmul, attribute, value)
        assert matmul.fp32_precision == ("tf32" if matmul.allow_tf32 else "ieee")
    with backends.cuda.matmul.tf32(True):
        matmul.fp32_precision = "ieee"
        assert (matmul.allow_tf32, matmul.fp32_precision) == (False, "ieee")
        matmul.allow_tf32 = True
        assert (matmul.allow_tf32, matmul.fp32_precision) == (True, "tf32")
    assert (matmul.allow_tf32, matmul.fp32_precision) == (False, "ieee")
    # the cuDNN pair too
    backends.cudnn.allow_tf32 = False
    backends.cudnn.conv.fp32_precision = "tf32"
    assert (backends.cudnn.allow_tf32, backends.cudnn.conv.fp32_precision) == (True, "tf32")


# -- describe() sources ---------------------------------------------------------------------


def test_describe_sources_default_process_default_and_scope() -> None:
    backends.cudnn.benchmark = True
    with backends.cudnn.flags(deterministic=True):
        rows = {row.name: row for row in backends.describe()}
        assert (rows["cudnn.deterministic"].value, rows["cudnn.deterministic"].source) == (True, "scope")
        assert (rows["cudnn.benchmark"].value, rows["cudnn.benchmark"].source) == (True, "process default")
        assert (rows["cudnn.enabled"].value, rows["cudnn.enabled"].source) == (True, "default")
    rows = {row.name: row for row in backends.describe()}
    assert (rows["cudnn.deterministic"].value, rows["cudnn.deterministic"].source) == (False, "default")


def test_describe_in_another_thread_does_not_see_this_threads_scope() -> None:
    with backends.cudnn.flags(deterministic=True):
        other = read_in_new_thread(lambda: {row.name: row.source for row in backends.describe()})
    assert other["cudnn.deterministic"] == "default"  # type: ignore[index]


# -- strict mode -----------------------------------------------------------------------------


def names_a_flags_scope(message: str) -> bool:
    """Whether ``message`` points at a ``flags(`` scope (not just at ``disable_global_flags()``)."""
    return "flags(" in message.replace("disable_global_flags(", "").replace("enable_global_flags(", "")


def test_disable_global_flags_refuses_assignment_outside_a_scope_and_names_flags() -> None:
    backends.disable_global_flags()
    assert backends.flags_frozen() is True
    before = state()
    with pytest.raises(RuntimeError) as info:
        backends.cudnn.deterministic = True
    assert names_a_flags_scope(str(info.value))
    assert "cudnn" in str(info.value)
    assert "deterministic" in str(info.value)
    assert state() == before
    assert backends.cudnn.deterministic is False


@pytest.mark.parametrize("name", list(DEFAULTS))
def test_strict_mode_refuses_every_flag_outside_a_scope(name: str) -> None:
    backends.disable_global_flags()
    before = state()
    with pytest.raises(RuntimeError) as info:
        if name == "cuda.preferred_linalg_library":
            backends.cuda.preferred_linalg_library(OTHER[name])
        else:
            assign(name, OTHER[name])
    assert names_a_flags_scope(str(info.value))
    assert state() == before


def test_strict_mode_still_allows_scope_assignment_and_set_defaults() -> None:
    backends.disable_global_flags()
    with backends.cudnn.flags(deterministic=True):
        backends.cudnn.benchmark = True
        assert backends.cudnn.benchmark is True
    assert backends.cudnn.benchmark is False
    backends.set_defaults({"cudnn.benchmark": True})
    assert backends.cudnn.benchmark is True
    assert backends.flags_frozen() is True


def test_strict_mode_is_process_wide() -> None:
    backends.disable_global_flags()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            backends.cudnn.deterministic = True
        except RuntimeError as error:
            errors.append(error)

    run_threads(worker)
    assert len(errors) == 1
    assert backends.cudnn.deterministic is False


def test_enable_global_flags_allows_assignment_again() -> None:
    backends.disable_global_flags()
    backends.enable_global_flags()
    assert backends.flags_frozen() is False
    backends.cudnn.deterministic = True
    assert backends.cudnn.deterministic is True


# -- preferred_linalg_library(backend) -----------------------------------------------------


def test_preferred_linalg_library_reads_with_no_argument() -> None:
    assert backends.cuda.preferred_linalg_library() == "default"
    with backends.flags({"cuda.preferred_linalg_library": "cusolver"}):
        assert backends.cuda.preferred_linalg_library() == "cusolver"
    assert backends.cuda.preferred_linalg_library() == "default"


def test_preferred_linalg_library_with_an_argument_assigns_and_returns_it() -> None:
    assert backends.cuda.preferred_linalg_library("magma") == "magma"
    assert backends.cuda.preferred_linalg_library() == "magma"
    assert sources()["cuda.preferred_linalg_library"] == "process default"
    assert read_in_new_thread(backends.cuda.preferred_linalg_library) == "magma"


def test_preferred_linalg_library_assignment_inside_a_scope_is_scoped() -> None:
    with backends.cudnn.flags(deterministic=True):
        assert backends.cuda.preferred_linalg_library("cusolver") == "cusolver"
        assert backends.cuda.preferred_linalg_library() == "cusolver"
    assert backends.cuda.preferred_linalg_library() == "default"


def test_preferred_linalg_library_attribute_assignment_is_a_flag_assignment() -> None:
    backends.cuda.preferred_linalg_library = "cusolver"  # type: ignore[assignment,method-assign]
    assert callable(backends.cuda.preferred_linalg_library)
    assert backends.cuda.preferred_linalg_library() == "cusolver"


# -- unknown attributes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "typo", "suggestion"),
    [
        ("cudnn", "benchmak", "backends.cudnn.benchmark"),
        ("cudnn", "determinstic", "backends.cudnn.deterministic"),
        ("cuda.matmul", "allow_tf33", "backends.cuda.matmul.allow_tf32"),
        ("cuda", "preferred_linalg_libary", "backends.cuda.preferred_linalg_library"),
        ("cuda.cufft_plan_cache", "max_sise", "backends.cuda.cufft_plan_cache.max_size"),
    ],
)
def test_unknown_attribute_read_raises_attribute_error_with_did_you_mean(
    namespace: str, typo: str, suggestion: str
) -> None:
    ns = namespace_of(namespace + ".x")
    with pytest.raises(AttributeError) as info:
        getattr(ns, typo)
    assert repr(typo) in str(info.value)
    assert suggestion in str(info.value)
    assert "did you mean" in str(info.value)
    assert not hasattr(ns, typo)


@pytest.mark.parametrize(
    ("namespace", "typo", "suggestion"),
    [
        ("cudnn", "benchmak", "backends.cudnn.benchmark"),
        ("cuda.matmul", "allow_tf32_", "backends.cuda.matmul.allow_tf32"),
        ("cuda.cufft_plan_cache", "maxsize", "backends.cuda.cufft_plan_cache.max_size"),
    ],
)
def test_unknown_attribute_assignment_raises_attribute_error_and_stores_nothing(
    namespace: str, typo: str, suggestion: str
) -> None:
    ns = namespace_of(namespace + ".x")
    before = state()
    with pytest.raises(AttributeError) as info:
        setattr(ns, typo, True)
    assert suggestion in str(info.value)
    assert state() == before
    with pytest.raises(AttributeError):
        getattr(ns, typo)


def test_a_flag_spelled_one_namespace_too_high_suggests_where_it_lives() -> None:
    with pytest.raises(AttributeError, match=r"did you mean backends\.cuda\.matmul\.allow_tf32\?"):
        backends.cuda.allow_tf32  # noqa: B018
