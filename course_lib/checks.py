"""Checks for the exercise notebooks: does your function give the right answers?

Each exercise ends with a call such as::

    checks.check_function(arithmetic_intensity, cases=[((2, 2, 2), 0.333)],
                          reference=compute.matmul_intensity, random_inputs=make_inputs)

It runs small fixed cases with known answers, then compares against a reference on random
inputs, and stops at the first difference with a message saying what was expected, what your
function returned, and a hint. An unfinished exercise (one that still raises
NotImplementedError) gets its own friendly message.
"""
from __future__ import annotations

import copy
import io
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
        return (isinstance(got, torch.Tensor) and got.shape == expected.shape
                and bool(torch.allclose(got.detach().cpu().double(), expected.detach().cpu().double(),
                                        rtol=rtol, atol=atol, equal_nan=True)))
    if isinstance(expected, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(_close(g, e, rtol, atol) for g, e in zip(got, expected)))
    if isinstance(expected, dict):
        return (isinstance(got, dict) and got.keys() == expected.keys()
                and all(_close(got[k], expected[k], rtol, atol) for k in expected))
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
    if isinstance(value, (list, tuple)) and any(isinstance(v, (torch.Tensor, torch.nn.Module, list, tuple))
                                                 for v in value):
        inner = ", ".join(_show(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


def _call(fn: Callable, args: tuple, name: str, hint: str) -> Any:
    try:
        return fn(*args)
    except NotImplementedError as exc:
        raise ExerciseNotDone(
            f"{name} is not written yet: replace the `raise NotImplementedError(...)` line with your code."
            + (f"\n({exc})" if str(exc) else "")  # the stub's own nudge; the check's hint is for wrong answers
        ) from None
    except Exception as exc:
        raise CheckFailed(f"{name}{_show(args)} raised {type(exc).__name__}: {exc}"
                          + (f"\nHint: {hint}" if hint else "")) from exc


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


def check_function(fn: Callable, cases: Sequence[tuple[tuple, Any]] = (), *, reference: Callable | None = None,
                   random_inputs: Callable[[random.Random], tuple] | None = None, n_random: int = 25,
                   rtol: float = 1e-6, atol: float = 0.0, hint: str = "", seed: int = 0,
                   quiet: bool = False, reveal: bool = True) -> int:
    """Check ``fn`` on fixed ``cases`` and on random inputs against ``reference``.

    A case is ``(args, expected)`` or ``(args, expected, explanation)``, where the explanation is
    a text shown when the case fails, or a mapping from plausible wrong answers to what each one
    means ("12 bytes: the gradient is missing"), so a learner's mistake gets a message that teaches.

    ``random_inputs(rng)`` returns one args tuple. ``reveal=False`` keeps the expected value of a fixed
    case out of the message (for a prediction whose answer is a choice among a few, where showing it would
    hand it over). Returns the number of cases checked; raises ``ExerciseNotDone`` or ``CheckFailed`` with
    an explanation otherwise. A ``fn`` that calls ``reference`` itself is refused.
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
    if reference is not None and ref_name and ref_name != "<lambda>" \
            and (fn is reference or ref_name in used or aliases):
        raise CheckFailed(f"{name} is or calls {ref_name}, the function this check compares it with, so it would pass "
                          "whatever it computes: write the computation yourself."
                          + (f"\nHint: {hint}" if hint else ""))
    checked = 0
    for case in cases:
        if len(case) not in (2, 3):
            raise ValueError("each case is (args, expected) or (args, expected, explanation)")
        args, expected, explain = tuple(case[0]), case[1], (case[2] if len(case) == 3 else None)
        got = _call(fn, args, name, hint)
        if not _close(got, expected, rtol, atol):
            said = f"expected {_show(expected)}, got {_show(got)}" if reveal else f"got {_show(got)}, which is not it"
            raise CheckFailed(f"{name}{_show(args)}: {said}"
                              + _explanation(explain, got, rtol, atol) + (f"\nHint: {hint}" if hint else ""))
        checked += 1
    if reference is not None:
        rng = random.Random(seed)
        for _ in range(n_random):
            args = tuple(random_inputs(rng))
            expected = reference(*args)
            got = _call(fn, args, name, hint)
            if not _close(got, expected, rtol, atol):
                raise CheckFailed(f"{name}{_show(args)}: expected {_show(expected)} (from the reference), "
                                  f"got {_show(got)}"
                                  + (f"\nHint: {hint}" if hint else ""))
            checked += 1
    if not quiet:
        print(f"\u2713 {name}: all {checked} checks passed")
    return Checked(checked)


def check_value(name: str, got: Any, expected: Any, *, rtol: float = 1e-6, atol: float = 0.0, hint: str = "",
                quiet: bool = False) -> None:
    """Check one computed value (for exercises that ask for a number rather than a function)."""
    if got is NotImplemented or got is None:
        raise ExerciseNotDone(f"{name} is not computed yet: assign your answer to it."
                              + (f"\nHint: {hint}" if hint else ""))
    if not _close(got, expected, rtol, atol):
        raise CheckFailed(f"{name}: expected {expected!r}, got {got!r}" + (f"\nHint: {hint}" if hint else ""))
    if not quiet:
        print(f"\u2713 {name} is right: {got!r}")


def check_largest(fn: Callable[..., Any], fits: Callable[[int], bool], *args: Any, hint: str = "",
                  quiet: bool = False) -> int:
    """Check that ``fn(*args)`` returns the largest whole number for which ``fits`` holds: it fits, one more
    does not. Returns that number.

    For answers such as "the largest batch that fits in 64 MiB", where the check tests the property
    without knowing how the learner found the number.
    """
    if not callable(fn):
        raise TypeError(f"fn must be the function you wrote, got {type(fn).__name__}")
    name = getattr(fn, "__name__", "your function")
    value = _call(fn, args, name, hint)
    shown = f"{name}({', '.join(map(repr, args))})"
    more = f"\nHint: {hint}" if hint else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckFailed(f"{shown} must return a whole number (an int), got {value!r}" + more)
    if not fits(value):
        raise CheckFailed(f"{shown} = {value} does not fit: aim lower." + more)
    if fits(value + 1):
        raise CheckFailed(f"{shown} = {value} fits, but so does {value + 1}: it is not the largest." + more)
    if not quiet:
        print(f"\u2713 {shown} = {value} is the largest that fits")
    return value


# --- the learner's predictions --------------------------------------------------------------------
# Before a measurement the learner writes a number (``my_guess = None  # GB/s?``); the cell after
# the measurement scores it with ``score_guess``. Ratios, not differences: a guess of 10 GB/s for
# 20 GB/s is as far off as 40 GB/s (a factor of 2 either way).

def _fmt(x: float) -> str:
    return f"{x:.3g}" if x == 0 or 0.01 <= abs(x) < 1e5 else f"{x:.2e}"


@dataclass(frozen=True)
class GuessScore:
    """A learner's guess set against the measurement and the analytic model (``score_guess``)."""
    what: str
    unit: str
    guess: float | None
    measured: float
    model: float | None
    model_name: str
    name: str
    answer_name: str = "measured here"

    @staticmethod
    def _factor(value: float, reference: float) -> float | None:
        """How many times ``value`` is off ``reference`` (>= 1), or None where a ratio means nothing."""
        if value > 0 and reference > 0:
            return max(value / reference, reference / value)
        return None

    @property
    def factor(self) -> float | None:
        """How many times the guess is off the measurement (1.0 is exact); None without a guess."""
        return None if self.guess is None else self._factor(self.guess, self.measured)

    @property
    def model_factor(self) -> float | None:
        """How many times the model is off the measurement; None without a model."""
        return None if self.model is None else self._factor(self.model, self.measured)

    @property
    def direction(self) -> str | None:
        """"high", "low" or "exact" (the guess against the measurement); None without a guess."""
        if self.guess is None:
            return None
        return "exact" if self.guess == self.measured else ("high" if self.guess > self.measured else "low")

    @property
    def verdict(self) -> str:
        f = self.factor
        if self.guess is None:
            return "no guess"
        if f is None:
            return "off by " + _fmt(abs(self.guess - self.measured)) + (f" {self.unit}" if self.unit else "")
        if f <= 1.25:
            return "spot on"
        if f <= 2:
            return "close (within 2x)"
        if f <= 10:
            return "right order of magnitude"
        return "off by more than 10x"

    @property
    def _width(self) -> int:
        """The label column: wide enough for the longest label, at least 24 characters."""
        return max(24, len(self.model_name) + 2, len(self.answer_name) + 2, len(f"your guess ({self.name})") + 2)

    def _line(self, label: str, value: float) -> str:
        u = f" {self.unit}" if self.unit else ""
        f = self._factor(value, self.measured)
        answer = "the measurement" if self.answer_name == "measured here" else "the answer"
        if value == self.measured or (f is not None and f < 1.005):
            rel = f"equal to {answer}"
        elif f is not None:
            rel = f"{f:.2f}x" if f < 10 else f"{f:.3g}x"
            rel += f" {'above' if value > self.measured else 'below'} {answer}"
        else:
            rel = f"{_fmt(value - self.measured)}{u} from {answer}"
        return f"  {label:<{self._width}}{_fmt(value)}{u}  ({rel})"

    def text(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        lines = [f"{self.what}:", f"  {self.answer_name:<{self._width}}{_fmt(self.measured)}{u}"]
        if self.model is not None:
            lines.append(self._line(self.model_name, self.model))
        if self.guess is None:
            lines.append(f"  No guess yet. Set `{self.name}` to a number in the prediction cell, rerun it and this "
                         "cell, and see how close you were.")
        else:
            lines.append(self._line(f"your guess ({self.name})", self.guess))
            lines.append(f"  Verdict: {self.verdict}.")
            if self.model is not None and self.factor is not None and self.model_factor is not None:
                if self.model_factor < self.factor:
                    lines.append(f"  The {self.model_name} was closer than your guess: work it through by hand "
                                 "and see which input you had wrong.")
                else:
                    lines.append(f"  Your guess beat the {self.model_name}: ask what it leaves out.")
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()


def _as_number(value: Any, name: str, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(f"{name} must be a number{' or None' if allow_none else ''}, got {type(value).__name__}"
                        f" {value!r}" + (" (write it without quotes, e.g. 20 not '20')" if isinstance(value, str)
                                         else ""))
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return x


def score_guess(guess: float | None, measured: float, *, model: float | None = None, unit: str = "",
                what: str = "Your prediction", model_name: str = "model", name: str = "my_guess",
                answer_name: str = "measured here") -> GuessScore:
    """Score the learner's ``guess`` against ``measured`` (and the analytic ``model``, if any).

    Used after every prediction cell in the notebooks. Returns a ``GuessScore`` that displays as a
    short report: the measurement, what the model said and how far off it was, the guess and how far
    off it was (a factor, and which way), or, with ``guess=None``, how to make one. ``name`` is the
    variable the learner fills in, so the message can point at it; ``answer_name`` labels the answer (a
    computed one, such as a cost model's, says so instead of "measured here").
    """
    g = _as_number(guess, "guess", allow_none=True)
    m = _as_number(measured, "measured", allow_none=False)
    mo = _as_number(model, "model", allow_none=True)
    for arg, value in (("unit", unit), ("what", what), ("model_name", model_name), ("name", name),
                       ("answer_name", answer_name)):
        if not isinstance(value, str):
            raise TypeError(f"{arg} must be a string, got {type(value).__name__}")
    return GuessScore(what=what, unit=unit, guess=g, measured=m, model=mo, model_name=model_name, name=name,
                      answer_name=answer_name)


# --- references that the library keeps inside stateful objects ------------------------------------
# Exercise 04 asks for one step of two things the library runs as objects (torch's GradScaler, the
# TopKCompressor). These run exactly one step of those objects, as a function of plain inputs, so a
# check can compare the learner's function with them.

def gradscaler_step(grads: Sequence[torch.Tensor], scale: float, good_steps: int,
                    growth_interval: int) -> tuple[list[torch.Tensor] | None, float, int]:
    """One step of ``torch.amp.GradScaler`` (growth 2, backoff 0.5) on the gradients ``grads`` of a loss
    multiplied by ``scale``, after ``good_steps`` clean steps in a row. Exercise 04's reference.

    Returns ``(unscaled gradients, or None when the step is skipped, new scale, new good_steps)``,
    read off a real GradScaler (on the CPU) and an SGD step on parameters holding ``grads``.
    """
    params = [torch.nn.Parameter(torch.zeros_like(g, dtype=torch.float32)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.detach().float().clone()
    opt = torch.optim.SGD(params, lr=1.0)
    scaler = torch.amp.GradScaler("cpu", growth_interval=growth_interval)
    scaler.load_state_dict({"scale": float(scale), "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": growth_interval, "_growth_tracker": good_steps})
    scaler.scale(torch.zeros(()))  # the scaler creates its state on first use
    scaler.unscale_(opt)
    unscaled = [p.grad.clone() for p in params]
    scaler.step(opt)
    scaler.update()
    new_scale = float(scaler.get_scale())
    skipped = new_scale < scale  # it lowers the scale only when it skips
    return (None if skipped else unscaled), new_scale, int(scaler.state_dict()["_growth_tracker"])


def topk_step(grad: torch.Tensor, residual: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of ``comm.aggregation.TopKCompressor`` holding ``residual``: ``(sent, new residual)``,
    ``sent`` as a dense tensor shaped like ``grad`` (zeros where nothing is sent). Exercise 04's reference."""
    from .comm.aggregation import TopKCompressor

    compressor = TopKCompressor(ratio)
    compressor.residuals[0] = residual.detach().flatten().clone()
    values, indices = compressor.compress(grad.detach().flatten().clone(), 0)
    sent = TopKCompressor.decompress(values, indices, grad.numel())
    return sent.view_as(grad), compressor.residuals[0].view_as(grad)


# --- resuming from a checkpoint (exercise 06) -----------------------------------------------------
# A resume is right when training goes on exactly as if it had never stopped. The check trains a
# small model with dropout (so the random number generator matters) and Adam (so the optimizer's
# state matters) on batches drawn at random, stops, saves the learner's checkpoint through a file
# format (torch.save, then torch.load with weights_only=True), rebuilds everything as a new process
# would, resumes, and compares the losses with an uninterrupted run.

def _resume_setup(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))
    return model, torch.optim.Adam(model.parameters(), lr=0.05), x, y


def _resume_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    batch = torch.randint(0, len(x), (16,))  # the data order comes from torch's generator
    loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _states_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and bool(torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_states_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_states_equal(u, v) for u, v in zip(a, b))
    return a == b


def _resumed_losses(make_checkpoint: Callable, resume: Callable, steps: int, stop_at: int, hint: str) -> list[float]:
    """Train ``stop_at`` steps, checkpoint, rebuild, resume, train to ``steps``; the losses after the stop."""
    model, optimizer, x, y = _resume_setup(0)
    for _ in range(stop_at):
        _resume_step(model, optimizer, x, y)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = copy.deepcopy(optimizer.state_dict())
    rng = torch.get_rng_state()
    name = getattr(make_checkpoint, "__name__", "make_checkpoint")
    checkpoint = _call(make_checkpoint, (model, optimizer, stop_at), name, hint)
    buffer = io.BytesIO()
    try:
        torch.save(checkpoint, buffer)
        buffer.seek(0)
        checkpoint = torch.load(buffer, weights_only=True)
    except Exception as exc:
        raise CheckFailed(f"{name}(...) returned something torch.save and torch.load(weights_only=True) cannot carry "
                          f"({type(exc).__name__}: {exc}). Keep to dicts, lists, numbers and tensors."
                          f"\nHint: {hint}") from None
    model, optimizer, x, y = _resume_setup(1)  # a new process: other initial weights
    torch.rand(7)  # ... and a generator that has moved on
    rname = getattr(resume, "__name__", "resume")
    start = _call(resume, (checkpoint, model, optimizer), rname, hint)
    where = f"after a stop at step {stop_at}"
    if not _states_equal(weights, model.state_dict()):
        raise CheckFailed(f"{where}, the model's weights are not the ones saved: the checkpoint must carry them "
                          "and the resume must put them into the new model.\nHint: " + hint)
    if not _states_equal(opt_state["state"], optimizer.state_dict()["state"]):
        raise CheckFailed(f"{where}, the optimizer's state differs from the saved one: Adam keeps two running "
                          "averages and a step count per parameter, and without them the first steps after resuming "
                          "take different sizes. The optimizer, like the model, can hand over its whole state and take it back."
                          "\nHint: " + hint)
    if not torch.equal(rng, torch.get_rng_state()):
        raise CheckFailed(f"{where}, torch's random number generator is not where it was: the next batches and "
                          "dropout masks will differ. A generator's state can be read and set, like a model's.\nHint: " + hint)
    if isinstance(start, bool) or not isinstance(start, int):
        raise CheckFailed(f"{rname} must return the number of the next step as an int, got {start!r}.\nHint: {hint}")
    if start != stop_at:
        raise CheckFailed(f"{rname} returned {start} {where}: {stop_at} steps were done (numbered 0 to "
                          f"{stop_at - 1}), so the next step is {stop_at}. "
                          f"{'Steps would be repeated.' if start < stop_at else 'Steps would be skipped.'}"
                          f"\nHint: {hint}")
    return [_resume_step(model, optimizer, x, y) for _ in range(start, steps)]


def _fewest_micro_batches(stages: int, max_bubble: float) -> int:
    """Exercise 06's reference: count micro-batches up from 1 until the bubble is at most ``max_bubble``."""
    from .parallel import pipeline

    m = 1
    while pipeline.bubble_fraction(stages, m) > max_bubble:
        m += 1
    return m


def check_resume(make_checkpoint: Callable, resume: Callable, *, steps: int = 8, stops: Sequence[int] = (3, 5),
                 hint: str = "", quiet: bool = False) -> int:
    """Check a learner's ``make_checkpoint(model, optimizer, step)`` and ``resume(checkpoint, model, optimizer)``
    (exercise 06): for each stop in ``stops``, a run stopped there and resumed in freshly built objects must give
    exactly the losses of a run that never stopped. Returns the number of stops checked."""
    for fn in (make_checkpoint, resume):
        if not callable(fn):
            raise TypeError(f"make_checkpoint and resume must be the functions you wrote, got {type(fn).__name__}")
    steps = int(steps)
    if not stops or any(not 0 < s < steps for s in stops):
        raise ValueError(f"stops must be step numbers between 1 and steps - 1 = {steps - 1}, got {list(stops)}")
    caller_rng = torch.get_rng_state()  # the check draws random numbers: leave the caller's generator as it was
    try:
        model, optimizer, x, y = _resume_setup(0)
        reference = [_resume_step(model, optimizer, x, y) for _ in range(steps)]
        for stop in stops:
            got = _resumed_losses(make_checkpoint, resume, steps, stop, hint)
            if got != reference[stop:]:
                raise CheckFailed(f"resumed at step {stop}: losses {[round(v, 6) for v in got]}, but the run that "
                                  f"never stopped had {[round(v, 6) for v in reference[stop:]]}.\nHint: {hint}")
    finally:
        torch.set_rng_state(caller_rng)
    if not quiet:
        print(f"\u2713 make_checkpoint and resume: training resumed at steps {', '.join(map(str, stops))} "
              "went on exactly as if it had never stopped")
    return len(stops)


# --------------------------------------------------------------------------------------
# Exercise 07: picking hardware for a job, with the course's estimators
# --------------------------------------------------------------------------------------

#: The rules of exercise 07's search (the decision guide of notebook 07.3 uses richer ones).
PICK_DEVICE_COUNTS = (1, 2, 4, 8)
PICK_STATES_FRACTION = 0.8  # model states may fill 80 % of a device (memory.largest_model_that_fits)
PICK_UTILIZATION = 0.4
_SCENARIO_KEYS = ("name", "n_params", "tokens", "precision", "optimizer", "deadline_hours", "budget_usd", "privacy",
                  "kinds")
_PICK_KEYS = ("hardware", "devices", "zero_stage", "memory_gb", "hours", "usd")


def pick_dtype(accelerator: str) -> str:
    """The 16-bit dtype exercise 07 times an accelerator at: bf16 where the chip has it, else fp16 (a T4)."""
    from . import catalog

    return "bf16" if "bf16" in catalog.get_accelerator(accelerator).peak_tflops else "fp16"


def _scenario(scenario: Any) -> dict:
    if not isinstance(scenario, dict) or set(_SCENARIO_KEYS) - set(scenario):
        raise TypeError(f"a scenario is a dict with the keys {', '.join(_SCENARIO_KEYS)}, got {scenario!r}")
    return scenario


def _hardware_option(scenario: dict, hardware: str, devices: int) -> dict:
    """Exercise 07's reference numbers for ``devices`` x ``hardware`` on ``scenario``.

    ``zero_stage``: the lowest ZeRO stage whose model states per device (``memory.model_states_bytes``)
    fill at most ``PICK_STATES_FRACTION`` of the device (None when none does); ``memory_gb`` (10^9
    bytes) at that stage (stage 3 when none fits); ``hours`` and, rented, ``usd`` from
    ``cost.training_footprint`` (6 x parameters x tokens FLOPs at ``PICK_UTILIZATION``, perfect scaling);
    a regulated scenario buys its cards: ``usd`` = devices x ``cost.purchase_price`` + what they need around them,
    ``cost.host_share(hardware, devices)["usd"]`` (a server share per data-centre card, one workstation per
    ``cost.DESK_MAX`` desk cards). ``feasible`` adds the deadline, the budget and a known price.
    """
    from . import catalog, compute, cost
    from .memory import model_states_bytes

    _count_outside_call()
    s = _scenario(scenario)
    acc = catalog.get_accelerator(hardware)
    if acc.kind not in s["kinds"]:
        raise ValueError(f"{acc.key} is a {acc.kind.upper()}, and this team's framework runs on: {', '.join(s['kinds'])}")
    capacity = PICK_STATES_FRACTION * acc.memory_gb * 1e9
    stages = (0,) if devices == 1 else (0, 1, 2, 3)
    per_stage = {z: model_states_bytes(int(s["n_params"]), s["precision"], s["optimizer"], z, devices) for z in stages}
    zero = next((z for z in stages if per_stage[z] <= capacity), None)
    flops = compute.training_flops(s["n_params"], s["tokens"])
    foot = cost.training_footprint(flops, acc.key, chips=devices, utilization=PICK_UTILIZATION, dtype=pick_dtype(acc.key))
    owned = s["privacy"] == "regulated"
    try:
        usd = (devices * cost.purchase_price(acc.key) + cost.host_share(acc.key, devices)["usd"]) if owned \
            else foot["usd"]
    except ValueError:
        usd = None
    feasible = (zero is not None and usd is not None and foot["hours"] <= s["deadline_hours"]
                and usd <= s["budget_usd"])
    return {"hardware": acc.key, "devices": devices, "zero_stage": zero,
            "memory_gb": per_stage[stages[-1] if zero is None else zero] / 1e9, "hours": foot["hours"], "usd": usd,
            "where": "owned" if owned else "cloud", "feasible": feasible}


def _hardware_options(scenario: dict) -> list[dict]:
    """Every option exercise 07 considers: each catalog accelerator of the scenario's ``kinds`` ("gpu",
    "tpu": the framework decides) with a price for it (rented on demand, or bought when the data may not
    leave the premises), on 1, 2, 4 or 8 devices."""
    from . import catalog, cost

    _count_outside_call()
    s = _scenario(scenario)
    out = []
    for acc in catalog.accelerators():
        if acc.kind not in s["kinds"]:
            continue
        if s["privacy"] == "regulated":
            try:
                cost.purchase_price(acc.key)
            except ValueError:
                continue
        elif acc.key not in cost.priced_accelerators():
            continue
        out += [_hardware_option(s, acc.key, n) for n in PICK_DEVICE_COUNTS]
    return out


def _refuse_references(fn: Callable, name: str, hint: str) -> None:
    """Refuse a learner's ``fn`` that is, or calls (itself or through functions of the notebook it calls), a
    function of this module that computes exercise 07's answers: it would pass whatever the learner wrote."""
    tip = f"\nHint: {hint}" if hint else ""
    if getattr(fn, "__module__", None) == __name__ or fn in (_hardware_option, _hardware_options):
        raise CheckFailed(f"{name} is one of course_lib.checks' own functions, not yours: write the computation "
                          f"yourself.{tip}")
    private = {k for k, v in globals().items() if callable(v) and k.startswith("_") and not k.startswith("__")}
    private |= {"check_hardware_choice", "check_option_numbers"}
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        used = _names_used(f)
        if used & private:
            raise CheckFailed(f"{name} calls {', '.join(sorted(used & private))} of course_lib.checks, the code that "
                              f"checks it, so it would pass whatever it computes: write the computation yourself "
                              f"(the definitions above say what to compute).{tip}")
        glob = getattr(f, "__globals__", {})
        todo.extend(g for k in used for g in (glob.get(k),)  # the notebook's own functions that it calls
                    if hasattr(g, "__code__") and getattr(g, "__globals__", None) is glob)


#: Calls of exercise 07's reference functions from outside this module (a learner's code reaching them by a
#: route the name check above does not see); the checks reset it and refuse an answer that made any.
_OUTSIDE_CALLS = [0]


def _count_outside_call() -> None:
    if sys._getframe(2).f_globals.get("__name__") != __name__:
        _OUTSIDE_CALLS[0] += 1


def _call_refusing_references(fn: Callable, args: tuple, name: str, hint: str) -> Any:
    """``_call(fn, args)``, refused when ``fn`` reached exercise 07's reference functions while it ran."""
    _OUTSIDE_CALLS[0] = 0
    got = _call(fn, args, name, hint)
    if _OUTSIDE_CALLS[0]:
        raise CheckFailed(f"{name} called the reference functions of course_lib.checks, the code that checks it: "
                          f"write the computation yourself (the definitions above say what to compute)."
                          + (f"\nHint: {hint}" if hint else ""))
    return got


def check_hardware_choice(pick: Callable[[dict], dict], scenarios: Sequence[dict], *, hint: str = "",
                          quiet: bool = False) -> int:
    """Check a learner's ``pick(scenario) -> dict`` (exercise 07) on each scenario.

    The pick names ``hardware`` (a catalog key) and ``devices``, and defends it with ``zero_stage``,
    ``memory_gb``, ``hours`` and ``usd``. The check recomputes those numbers with the course's estimators
    (kept inside this module, out of the learner's reach; 2 % tolerance), then requires that the choice fits in memory, meets the
    deadline and the budget, and costs at most 2 % more than the cheapest option that does. Returns the
    number of scenarios checked; raises ``ExerciseNotDone`` or ``CheckFailed`` saying what is wrong.
    """
    if not callable(pick):
        raise TypeError(f"pick must be the function you wrote, got {type(pick).__name__}")
    _refuse_references(pick, "pick", hint)
    tip = f"\nHint: {hint}" if hint else ""
    edges = []  # each scenario again with its budget and deadline set to the cheapest option's: targets met exactly
    for s in scenarios:
        best = min((o for o in _hardware_options(s) if o["feasible"]), key=lambda o: o["usd"], default=None)
        if best is not None:
            edges.append({**s, "name": f"{s['name']}, budget and deadline met exactly", "budget_usd": best["usd"],
                          "deadline_hours": best["hours"]})
    poor = None  # a team whose budget no option meets: the answer is None
    if scenarios:
        poor = {**scenarios[0], "name": f"{scenarios[0]['name']}, with a budget of one cent", "budget_usd": 0.01}
        if any(o["feasible"] for o in _hardware_options(poor)):
            poor = None
        else:
            edges.append(poor)
    for s in [*scenarios, *edges]:
        got = _call_refusing_references(pick, (s,), "pick", hint + (" A deadline or budget met exactly is met "
                                                                    "(<=, not <)." if s in edges else ""))
        if got is None or s is poor:
            nothing = not any(o["feasible"] for o in _hardware_options(s))
            if got is None and nothing:
                continue
            if got is None:
                raise CheckFailed(f"pick({s['name']!r}) returned None, but some option meets every constraint{tip}")
            raise CheckFailed(f"pick({s['name']!r}) returned {got.get('devices') if isinstance(got, dict) else got!r} "
                              f"x {got.get('hardware') if isinstance(got, dict) else ''}, but no option meets every "
                              f"constraint here: return None{tip}")
        if not isinstance(got, dict) or set(_PICK_KEYS) - set(got):
            raise CheckFailed(f"pick({s['name']!r}) must return a dict with the keys {', '.join(_PICK_KEYS)}, "
                              f"got {got!r}{tip}")
        try:
            ref = _hardware_option(s, got["hardware"], int(got["devices"]))
        except (ValueError, TypeError) as exc:
            raise CheckFailed(f"pick({s['name']!r}): {exc}{tip}") from None
        for key in ("zero_stage", "memory_gb", "hours", "usd"):
            if not _close(got[key], ref[key], 0.02, 1e-9):
                raise CheckFailed(f"pick({s['name']!r}) chose {got['devices']} x {got['hardware']}: {key} should be "
                                  f"{_show(ref[key])} by the course's estimators, you said {_show(got[key])}{tip}")
        best = min((o for o in _hardware_options(s) if o["feasible"]), key=lambda o: o["usd"], default=None)
        if not ref["feasible"]:
            why = ("no ZeRO stage fits the model states in 80 % of its memory" if ref["zero_stage"] is None else
                   f"it takes {ref['hours']:.3g} h (deadline {s['deadline_hours']} h)"
                   if ref["hours"] > s["deadline_hours"] else f"it costs ${ref['usd']:,.0f} (budget ${s['budget_usd']:,})")
            better = "; another option meets every constraint" if best else ""
            raise CheckFailed(f"pick({s['name']!r}): {got['devices']} x {got['hardware']} does not work: {why}{better}{tip}")
        if best is not None and ref["usd"] > best["usd"] * 1.02:  # the message does not name the cheaper option
            raise CheckFailed(f"pick({s['name']!r}): {got['devices']} x {got['hardware']} works but costs "
                              f"${ref['usd']:,.2f}; another option also meets every constraint for less: did you try "
                              f"every accelerator the team may use, on every device count?{tip}")
    if not quiet:
        print(f"\u2713 pick: the choice for each of the {len(scenarios)} scenarios (and {len(edges)} more: budgets and "
              "deadlines met exactly, and one budget nothing meets) fits, meets its deadline and budget, and is the "
              "cheapest that does")
    return Checked(len(scenarios) + len(edges))


def check_option_numbers(option_numbers: Callable, scenarios: Sequence[dict], cases: Sequence[tuple] = (), *,
                         hint: str = "", quiet: bool = False) -> int:
    """Check exercise 07's ``option_numbers(scenario, hardware, devices)`` against the course's numbers,
    computed inside this module (no reference callable is handed to the learner). ``cases``: (args,
    explanation) pairs from the notebook; added here: a model whose states fill exactly
    ``PICK_STATES_FRACTION`` of the device (it fits: at most, not less than) and 25 random jobs and options.
    """
    from . import cost

    if not callable(option_numbers):
        raise TypeError(f"option_numbers must be the function you wrote, got {type(option_numbers).__name__}")
    _refuse_references(option_numbers, "option_numbers", hint)

    def ref(s, hardware, devices):
        r = _hardware_option(s, hardware, devices)
        return {k: r[k] for k in _PICK_KEYS}

    exact = {**scenarios[0], "name": "states fill exactly 80 %", "n_params": 4e9, "precision": "bf16-mixed",
             "optimizer": "adam", "privacy": "none", "kinds": ("gpu", "tpu")}  # 16 B x 4e9 = 64 GB = 0.8 x 80 GB
    fixed = [(args, ref(*args), why) for args, why in cases]
    fixed.append(((exact, "h100-sxm", 1), ref(exact, "h100-sxm", 1),
                  "16 B x 4e9 parameters = 64 GB, exactly 80 % of an H100's 80 GB: at most 80 % fits (<=, not <)."))

    def random_option(rng):
        s = dict(name="random", n_params=10 ** rng.uniform(7, 10.5), tokens=10 ** rng.uniform(8, 11),
                 precision=rng.choice(["fp32", "bf16-mixed"]), optimizer=rng.choice(["sgd", "momentum", "adam"]),
                 deadline_hours=100, budget_usd=1e6, privacy=rng.choice(["none", "regulated"]), kinds=("gpu", "tpu"))
        pool = (sorted(o["hardware"] for o in _hardware_options(s) if o["devices"] == 1)
                if s["privacy"] == "regulated" else cost.priced_accelerators())
        return s, rng.choice(pool), rng.choice(PICK_DEVICE_COUNTS)

    _OUTSIDE_CALLS[0] = 0
    refused = CheckFailed("option_numbers called the reference functions of course_lib.checks, the code that checks "
                          "it: write the computation yourself (the definitions above say what to compute)."
                          + (f"\nHint: {hint}" if hint else ""))
    try:
        checked = check_function(option_numbers, fixed, reference=ref, random_inputs=random_option, rtol=1e-6,
                                 hint=hint, quiet=True)
    except CheckFailed:
        if _OUTSIDE_CALLS[0]:
            raise refused from None
        raise
    if _OUTSIDE_CALLS[0]:
        raise refused
    if not quiet:
        print(f"\u2713 {getattr(option_numbers, '__name__', 'option_numbers')}: all {checked} checks passed")
    return checked
