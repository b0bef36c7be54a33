"""One walk over the public API: a required argument of the wrong kind gets a clear TypeError or ValueError that
names it, at once (before any process starts or any file is written), never an AttributeError from deep inside,
a hang or a crash.

Every public function of every course_lib module (its ``__all__``, or its names without a leading underscore) and
every public class with an ``__init__`` of its own is called with each required argument set to a value of a kind
no function accepts. ``EXEMPT`` lists what is left out, each with its reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import pkgutil
import signal
import threading

import pytest

import course_lib


class Wrong:
    """A value of a kind no function of the course accepts."""

    def __repr__(self) -> str:
        return "<a Wrong object>"


RANK_WORKER = "runs inside a rank that comm.launch started; the function that launches it checks the arguments"

#: Public callables left out of the walk, each with why; a name ending in "." leaves out a whole module.
EXEMPT: dict[str, str] = {
    "course_lib.checks.core.check_value": "compares any value the learner computed with the expected one",
    "course_lib.cli.main": "argparse reports bad command lines with exit status 2 (tests/test_presenting.py)",
    "course_lib.lazy.parts_loader": "called once by each package of the library, with its own globals",
    "course_lib.memory.torch_internals.": "the adapter to torch internals: called by the library only, on objects "
    "torch made",
    "course_lib.parallel.federated.reachable_tensors": "walks any Python object for the tensors it holds",
    "course_lib.comm.aggregation.topk_hook": "a DDP communication hook: torch calls it with its own bucket",
    "course_lib.parallel.federated.fedavg_allreduce_round": RANK_WORKER,
    "course_lib.parallel.pipeline.model_parallel_step": RANK_WORKER,
    "course_lib.parallel.pipeline.measure_schedules": RANK_WORKER,
    "course_lib.parallel.tensor_parallel.tensor_parallel_step": RANK_WORKER,
}


def _exempt(name: str) -> bool:
    return any(name == key or (key.endswith(".") and name.startswith(key)) for key in EXEMPT)


def _callables():
    seen = set()
    for info in sorted(pkgutil.walk_packages(course_lib.__path__, "course_lib."), key=lambda i: i.name):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name, None)
            if getattr(obj, "__module__", None) != info.name or id(obj) in seen:
                continue
            if inspect.isclass(obj) and (
                dataclasses.is_dataclass(obj) or "__init__" not in vars(obj) or issubclass(obj, BaseException)
            ):
                continue  # a record of results, or an exception: nothing to check
            if inspect.isfunction(obj) or inspect.isclass(obj):
                seen.add(id(obj))
                yield f"{info.name}.{name}", obj


def _required(fn) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


CASES = [
    pytest.param(name, obj, id=name.removeprefix("course_lib."))
    for name, obj in _callables()
    if _required(obj) and not _exempt(name)
]


def test_the_walk_finds_the_public_api():
    assert len(CASES) > 200, len(CASES)
    names = {name for name, _ in _callables()}
    gone = [key for key in EXEMPT if not any(n == key or (key.endswith(".") and n.startswith(key)) for n in names)]
    assert not gone, f"exempt names that are gone: {gone}: remove them from EXEMPT"


@pytest.mark.parametrize("name, fn", CASES)
def test_a_wrong_argument_is_a_clear_type_or_value_error(name, fn):
    required = _required(fn)
    args = [Wrong() for p in required if p.kind is not p.KEYWORD_ONLY]
    kwargs = {p.name: Wrong() for p in required if p.kind is p.KEYWORD_ONLY}
    before = threading.active_count()

    def too_slow(*_):
        raise TimeoutError(f"{name} ran for 20 s on a wrong argument instead of refusing it")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(20)
    try:
        with pytest.raises((TypeError, ValueError)) as info:
            made = fn(*args, **kwargs)
            if isinstance(made, contextlib.AbstractContextManager):  # the checks run on entering it
                with made:
                    pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    message = str(info.value)
    assert any(p.name in message for p in required) or "Wrong" in message, (
        f"{name}: {type(info.value).__name__}: {message!r} names none of {[p.name for p in required]}"
    )
    assert threading.active_count() <= before, f"{name} left a thread running after refusing its argument"
