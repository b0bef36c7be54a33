"""The checks every exercise ends with: a function against fixed cases and a reference, one value, the largest
number that fits; and the messages a wrong or unfinished answer gets.

    checks.check_function(arithmetic_intensity, cases=[((2, 2, 2), 0.333)],
                          reference=compute.matmul_intensity, random_inputs=make_inputs)

runs small fixed cases with known answers, then compares against a reference on random inputs, and stops at the
first difference with a message saying what was expected, what the function returned, and a hint. An unfinished
exercise (one that still raises NotImplementedError) gets its own friendly message.
"""

from __future__ import annotations

import _thread
import inspect
import math
import random
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch


class CheckFailed(AssertionError):
    """Your function returned a wrong answer (the message says which and why)."""


class ExerciseNotDone(CheckFailed):
    """The exercise still raises NotImplementedError: write your code in place of that line."""


def _close(got: Any, expected: Any, rtol: float, atol: float) -> bool:
    if expected is None:
        return got is None
    if isinstance(expected, torch.Tensor):  # same shape, every value close (NaN matches NaN)
        return (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and bool(
                torch.allclose(
                    got.detach().cpu().double(), expected.detach().cpu().double(), rtol=rtol, atol=atol, equal_nan=True
                )
            )
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(got, (list, tuple))
            and len(got) == len(expected)
            and all(_close(g, e, rtol, atol) for g, e in zip(got, expected))
        )
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and got.keys() == expected.keys()
            and all(_close(got[k], expected[k], rtol, atol) for k in expected)
        )
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return False
        return math.isclose(g, float(expected), rel_tol=rtol, abs_tol=atol)
    return got == expected


def _show(value: Any) -> str:
    """``repr``, except that a tensor of more than 8 values shows its shape and first values, and a
    model or an optimizer its class: a failing check's message stays a few lines long."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().flatten().cpu()
        if flat.numel() <= 8:
            return repr(value.detach().cpu())
        first = ", ".join(f"{float(v):.4g}" for v in flat[:4])
        return f"tensor(shape {list(value.shape)}, {str(value.dtype).removeprefix('torch.')}: {first}, ...)"
    if isinstance(value, torch.nn.Module):
        return f"<{type(value).__name__} model>"
    if isinstance(value, torch.optim.Optimizer):
        return f"<{type(value).__name__} optimizer>"
    if isinstance(value, (list, tuple)) and any(
        isinstance(v, (torch.Tensor, torch.nn.Module, list, tuple)) for v in value
    ):
        inner = ", ".join(_show(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


def _call(
    fn: Callable,
    args: tuple,
    name: str,
    hint: str,
    *,
    own_code: bool = False,
    forbid: Mapping[str, str] | None = None,
    why: str = "",
) -> Any:
    """``fn(*args)``, with a wrong or unfinished answer turned into a message (``why``, the case's explanation,
    goes into the message of an error ``fn`` raises, as it would into a wrong answer's); ``own_code``: refused when a
    function of the course library ran inside it (see ``_library_entered``), or when it switched off the watcher that
    sees this or ran code in another thread, where the watcher cannot see; ``forbid``: {package: why} whose code must
    not run inside it either (``{"torch.nn": "..."}``: no torch module built to count its parameters)."""
    tip = f"\nHint: {hint}" if hint else ""
    if own_code:
        got, entered = _library_entered(lambda: _call(fn, args, name, hint, why=why), forbid or {})
        if entered is None:
            return got
        kind, what = entered
        if kind == "evaded":
            raise CheckFailed(
                f"{name} {what}: the check watches what your function calls, and cannot see past that, so it "
                "refuses. Write the computation itself, in plain Python." + tip
            )
        if kind in (forbid or {}):
            raise CheckFailed(f"{name} ran {what}: {forbid[kind]}" + tip)
        raise CheckFailed(
            f"{name} called {what}, a function of the course library: the library computes answers like this "
            "one, so the check would pass whatever you wrote. Write the computation yourself, with your own "
            "functions of this notebook." + tip
        )
    try:
        return fn(*args)
    except NotImplementedError as exc:
        nudge = str(exc)  # the stub's own nudge; the check's hint is for wrong answers
        if "Hint:" not in nudge and "# Hint:" in _source(fn):  # the hints stand as comments: point there, not twice
            nudge += " Hint: read the `# Hint:` comments above that line."
        raise ExerciseNotDone(
            f"{name} is not written yet: replace the `raise NotImplementedError(...)` line with your code."
            + (f"\n({nudge.strip()})" if nudge.strip() else "")
        ) from None
    except Exception as exc:
        said = f"\n{why}" if why else ""
        raise CheckFailed(f"{name}{_show(args)} raised {type(exc).__name__}: {exc}" + said + tip) from exc


def _source(fn: Callable) -> str:
    """The source of ``fn`` where Python can find it (a notebook cell's function: yes), else ``""``."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _explanation(explain: Any, got: Any, rtol: float, atol: float) -> str:
    """What a wrong answer tells about the mistake: a case's explanation text, or the entry of a
    {wrong answer: explanation} mapping that matches what the function returned."""
    if explain is None:
        return ""
    if isinstance(explain, str):
        return f"\n{explain}"
    for wrong, why in dict(explain).items():
        if _close(got, wrong, rtol, atol):
            return f"\n{why}"
    return ""


class Checked(int):
    """How many checks passed: an int that a notebook cell does not echo (the check prints its own line)."""

    def _ipython_display_(self) -> None:
        pass


def _names_used(fn: Callable) -> set[str]:
    """Every global and attribute name the code of ``fn`` (and the functions defined inside it) refers to."""
    code, names, todo = getattr(fn, "__code__", None), set(), []
    if code is not None:
        todo.append(code)
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


_LIBRARY = __name__.split(".")[0]  # course_lib
_CHECKS = __name__.rpartition(".")[0]  # course_lib.checks
_CATALOG = _LIBRARY + ".catalog"  # data sheets: reading a chip's peak is no answer


def _in(frame: Any, package: str) -> bool:
    """Whether ``frame`` runs code of ``package`` or of one of its modules."""
    module = (frame.f_globals.get("__name__") or "") if frame is not None else ""
    return module == package or module.startswith(package + ".")


# what a function could do to hide a call from the watcher: switch it off, or run code in a thread or process
_EVASIVE_NAMES = frozenset(
    {
        "setprofile",
        "settrace",
        "setprofile_all_threads",
        "settrace_all_threads",
        "_setprofileallthreads",
        "_settraceallthreads",
        "Thread",
        "ThreadPoolExecutor",
        "ProcessPoolExecutor",
        "start_new_thread",
        "_start_new_thread",
        "multiprocessing",
    }
)
# work handed to another thread or process (an executor's workers may be running already): (package, function or
# None for any of its functions)
_EVASIVE_CALLS = (("concurrent.futures", "submit"), ("concurrent.futures", "map"), ("multiprocessing", None))
_EVASIVE_BUILTINS = (sys.setprofile, sys.settrace, _thread.start_new_thread)


def _refuse_evasion(fn: Callable, name: str, hint: str) -> None:
    """Refuse ``fn`` before it runs when its code names a way around the watcher of ``_library_entered``."""
    named = sorted(_names_used(fn) & _EVASIVE_NAMES)
    if named:
        raise CheckFailed(
            f"{name} uses {', '.join(named)}: the check watches what your function calls and cannot see past a "
            "switched-off watcher or into another thread, so it refuses. Write the computation itself, in plain "
            "Python." + (f"\nHint: {hint}" if hint else "")
        )


def _library_entered(
    run: Callable[[], Any], forbid: Mapping[str, str] | None = None
) -> tuple[Any, tuple[str, str] | None]:
    """``(run(), what it did that the check refuses, or None)``: ``("library", the first function of the course
    library that ran inside it)``; ``(package, its function)`` for the first function of a package of ``forbid``
    that ran; ``("evaded", how)`` when it switched off the watcher or ran code in another thread or process. The
    catalog's functions (a chip's peak, a link's bandwidth) are data, not answers, and do not count.

    Watches every Python call while ``run`` runs (``sys.setprofile``, and ``threading.setprofile`` for threads it
    starts): a learner's function that reaches the library by any route (an alias, ``getattr``, a helper of theirs,
    ``functools.partial``) is seen. The error ``run`` raises, if any, is raised only when nothing was refused."""
    found: list[tuple[str, str]] = []
    forbid = dict(forbid or {})

    def watch(frame, event, arg):
        if found:
            return
        if event == "c_call":
            if any(arg is b for b in _EVASIVE_BUILTINS) and not _in(frame, _CHECKS):
                found.append(("evaded", f"called {arg.__name__}"))
            return
        if event != "call":
            return
        caller = frame.f_back
        for package in forbid:
            if _in(frame, package) and not _in(caller, package):
                found.append((package, f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}"))
                return
        for package, function in _EVASIVE_CALLS:
            if _in(frame, package) and function in (None, frame.f_code.co_name) and not _in(caller, package):
                found.append(("evaded", f"ran {frame.f_globals.get('__name__')}.{frame.f_code.co_name}"))
                return
        if not _in(frame, _LIBRARY) or _in(frame, _CATALOG):
            return
        # count where code outside the library enters it, or where the checks' machinery (this function, ``_call``)
        # calls into the rest of the library: ``fn`` itself is a library function, or a ``functools.partial`` of one
        if not _in(caller, _LIBRARY) or (_in(caller, _CHECKS) and not _in(frame, _CHECKS)):
            found.append(("library", f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"))

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    threading.setprofile(watch)
    sys.setprofile(watch)
    switched_off = False
    try:
        got = run()
    except CheckFailed:
        switched_off = sys.getprofile() is not watch
        if found or switched_off:
            return None, found[0] if found else ("evaded", "switched off the check's watcher")
        raise
    finally:
        switched_off = switched_off or sys.getprofile() is not watch
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
    if switched_off and not found:
        found.append(("evaded", "switched off the check's watcher"))
    return got, (found[0] if found else None)


def _refuse(fn: Callable, refuse: Sequence[Callable], name: str, hint: str) -> None:
    """Refuse ``fn`` before it runs when it is one of the library functions ``refuse`` (those that compute the
    answer), or names one of them in its code: ``compute.days_to_train(...)``, ``from ... import time_to_train``. A
    name that the notebook binds to a function of its own (the learner's ``roofline``, called by their
    ``memory_bound_names``) is theirs, not the library's."""
    tip = f"\nHint: {hint}" if hint else ""
    module = getattr(fn, "__module__", None) or ""
    if any(fn is r for r in refuse) or module == _LIBRARY or module.startswith(_LIBRARY + "."):
        raise CheckFailed(
            f"{name} is a function of the course library, not yours: write the computation yourself.{tip}"
        )
    glob = getattr(fn, "__globals__", {})
    used = _names_used(fn)
    named = []
    for r in refuse:
        r_name = getattr(r, "__name__", None)
        if not r_name or r_name not in used:
            continue
        bound = glob.get(r_name)
        if bound is not fn and hasattr(bound, "__code__") and getattr(bound, "__globals__", None) is glob:
            continue  # the notebook's own function of that name
        named.append(f"{getattr(r, '__module__', _LIBRARY).removeprefix(_LIBRARY + '.')}.{r_name}")
    if named:
        raise CheckFailed(
            f"{name} calls {', '.join(named)}, the course library's own answer to this exercise, so it would pass "
            f"whatever it computes: write the computation yourself.{tip}"
        )


def check_function(
    fn: Callable,
    cases: Sequence[tuple[tuple, Any]] = (),
    *,
    reference: Callable | None = None,
    random_inputs: Callable[[random.Random], tuple] | None = None,
    n_random: int = 25,
    rtol: float = 1e-6,
    atol: float = 0.0,
    hint: str = "",
    seed: int = 0,
    quiet: bool = False,
    reveal: bool = True,
    refuse: Sequence[Callable] = (),
    own_code: bool = False,
    forbid: Mapping[str, str] | None = None,
) -> int:
    """Check ``fn`` on fixed ``cases`` and on random inputs against ``reference``.

    A case is ``(args, expected)`` or ``(args, expected, explanation)``, where the explanation is
    a text shown when the case fails, or a mapping from plausible wrong answers to what each one
    means ("12 bytes: the gradient is missing"), so a learner's mistake gets a message that teaches.

    ``random_inputs(rng)`` returns one args tuple. ``reveal=False`` keeps the expected value of a fixed
    case out of the message (for a prediction whose answer is a choice among a few, where showing it would
    hand it over). Returns the number of cases checked; raises ``ExerciseNotDone`` or ``CheckFailed`` with
    an explanation otherwise. A ``fn`` that calls ``reference`` itself is refused.

    ``refuse``: the functions of the course library that compute this answer (those ``reference`` wraps, and any
    other route to it, ``compute.time_to_train`` beside ``compute.days_to_train``): ``fn`` is refused before it runs
    when it is one of them or names one in its code. ``own_code`` (implied by ``refuse``): ``fn`` is also refused
    when any function of the course library runs while it runs, whatever the route; for exercises whose answer is a
    few lines of arithmetic, all of them the learner's own. Such a ``fn`` is also refused when its code names a way
    around that watcher (``sys.setprofile``, a thread), or when it switches the watcher off or hands work to another
    thread while it runs. ``forbid`` ({package: why}, implies ``own_code``): packages whose code must not run inside
    ``fn`` either, with the reason a learner reads.
    """
    if not callable(fn):
        raise TypeError(f"fn must be the function you wrote, got {type(fn).__name__}")
    if (reference is None) != (random_inputs is None):
        raise ValueError("reference and random_inputs go together: give both or neither")
    if not cases and reference is None:
        raise ValueError("give fixed cases, a reference with random_inputs, or both")
    name = getattr(fn, "__name__", "your function")
    ref_name = getattr(reference, "__name__", None)
    used = _names_used(fn)
    aliases = {k for k in used if getattr(fn, "__globals__", {}).get(k) is reference}  # avg = federated.fedavg
    if (
        reference is not None
        and ref_name
        and ref_name != "<lambda>"
        and (fn is reference or ref_name in used or aliases)
    ):
        raise CheckFailed(
            f"{name} is or calls {ref_name}, the function this check compares it with, so it would pass "
            "whatever it computes: write the computation yourself." + (f"\nHint: {hint}" if hint else "")
        )
    own_code = own_code or bool(refuse) or bool(forbid)
    if own_code:
        _refuse_evasion(fn, name, hint)
        _refuse(fn, tuple(refuse) + ((reference,) if ref_name and ref_name != "<lambda>" else ()), name, hint)
    checked = 0
    for case in cases:
        if len(case) not in (2, 3):
            raise ValueError("each case is (args, expected) or (args, expected, explanation)")
        args, expected, explain = tuple(case[0]), case[1], (case[2] if len(case) == 3 else None)
        why = explain if isinstance(explain, str) else ""  # a {wrong answer: why} mapping has no entry for an error
        got = _call(fn, args, name, hint, own_code=own_code, forbid=forbid, why=why)
        if not _close(got, expected, rtol, atol):
            said = f"expected {_show(expected)}, got {_show(got)}" if reveal else f"got {_show(got)}, which is not it"
            raise CheckFailed(
                f"{name}{_show(args)}: {said}"
                + _explanation(explain, got, rtol, atol)
                + (f"\nHint: {hint}" if hint else "")
            )
        checked += 1
    if reference is not None:
        rng = random.Random(seed)
        for _ in range(n_random):
            args = tuple(random_inputs(rng))
            expected = reference(*args)
            got = _call(fn, args, name, hint, own_code=own_code, forbid=forbid)
            if not _close(got, expected, rtol, atol):
                raise CheckFailed(
                    f"{name}{_show(args)}: expected {_show(expected)} (from the reference), "
                    f"got {_show(got)}" + (f"\nHint: {hint}" if hint else "")
                )
            checked += 1
    if not quiet:
        print(f"\u2713 {name}: all {checked} checks passed")
    return Checked(checked)


def check_value(
    name: str, got: Any, expected: Any, *, rtol: float = 1e-6, atol: float = 0.0, hint: str = "", quiet: bool = False
) -> None:
    """Check one computed value (for exercises that ask for a number rather than a function)."""
    if got is NotImplemented or got is None:
        raise ExerciseNotDone(
            f"{name} is not computed yet: assign your answer to it." + (f"\nHint: {hint}" if hint else "")
        )
    if not _close(got, expected, rtol, atol):
        raise CheckFailed(f"{name}: expected {expected!r}, got {got!r}" + (f"\nHint: {hint}" if hint else ""))
    if not quiet:
        print(f"\u2713 {name} is right: {got!r}")


def search_budget(answer: int) -> int:
    """How many numbers a search for ``answer`` may ask about: doubling from 1 to pass it, then halving the gap
    (each about log2(answer) asks), with room for a start far from it."""
    if isinstance(answer, bool) or not isinstance(answer, int) or answer < 0:
        raise ValueError(f"answer must be a whole number >= 0, got {answer!r}")
    return 2 * math.ceil(math.log2(answer + 2)) + 8


def check_largest(
    fn: Callable[..., Any],
    fits: Callable[[int], bool],
    *args: Any,
    hint: str = "",
    quiet: bool = False,
    asked: list | None = None,
    behind: Callable[..., Any] | None = None,
) -> int:
    """Check that ``fn(*args)`` returns the largest whole number for which ``fits`` holds: it fits, one more
    does not. Returns that number.

    For answers such as "the largest batch that fits in 64 MiB", where the check tests the property
    without knowing how the learner found the number. ``asked``: a list that the costly function the learner's
    search calls appends each number it is asked about to; the check empties it first, and fails a search that
    asked far more often than halving the gap needs (``search_budget``), or fewer than twice (one number that fits
    and one that does not: a number typed in asked nothing). ``behind``: the library function that costly probe
    calls once per ask (a module-level function, looked up at each call); the check counts its calls while ``fn``
    runs, and fails a search that called it more often than it asked (around the probe, so uncounted).
    """
    if not callable(fn):
        raise TypeError(f"fn must be the function you wrote, got {type(fn).__name__}")
    if asked is not None and not isinstance(asked, list):
        raise TypeError(f"asked must be the list your probe function appends to, got {type(asked).__name__}")
    if behind is not None and (not callable(behind) or asked is None):
        raise TypeError("behind must be a library function, given with asked (the list the probe appends to)")
    name = getattr(fn, "__name__", "your function")
    if asked is not None:
        asked.clear()
    calls = [0]
    holders = (  # every course module that names it: a package re-exports what its file defines
        [
            m
            for k, m in list(sys.modules.items())
            if k.split(".")[0] == "course_lib" and getattr(m, behind.__name__, None) is behind
        ]
        if behind is not None
        else []
    )

    def counted(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return behind(*a, **k)

    for m in holders:
        setattr(m, behind.__name__, counted)
    try:
        value = _call(fn, args, name, hint)
    finally:
        for m in holders:
            setattr(m, behind.__name__, behind)
    tries = len(asked) if asked is not None else 0
    shown = f"{name}({', '.join(map(repr, args))})"
    more = f"\nHint: {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckFailed(f"{shown} must return a whole number (an int), got {value!r}" + more)
    if not fits(value):
        raise CheckFailed(f"{shown} = {value} does not fit: aim lower." + more)
    if fits(value + 1):
        raise CheckFailed(f"{shown} = {value} fits, but so does {value + 1}: it is not the largest." + more)
    if holders and calls[0] > tries:
        raise CheckFailed(
            f"{shown} = {value}, but your search called {behind.__name__} {calls[0]} times and asked through the probe "
            f"only {tries}: ask through the probe the exercise gives, which counts each ask." + more
        )
    if asked is not None and tries < 2:
        raise CheckFailed(
            f"{shown} = {value}, but your search asked about {tries} number(s): the largest that fits is known only "
            "once one number fits and the next does not. Search with the probe the exercise gives, which counts "
            "each ask." + more
        )
    if asked is not None and tries > search_budget(value):
        raise CheckFailed(
            f"{shown} = {value} is right, but your search asked about {tries} numbers. Keep one that fits and one "
            f"that does not, and try the middle of the gap each time: about {search_budget(value)} asks at most "
            "for this answer (doubling to find one that does not fit, then halving the gap)." + more
        )
    if not quiet:
        print(f"\u2713 {shown} = {value} is the largest that fits")
    return value
