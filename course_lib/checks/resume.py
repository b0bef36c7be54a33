"""Exercise 06's resume check: training resumed from the learner's checkpoint goes on as if it never stopped.

A resume is right when training goes on exactly as if it had never stopped. The check trains a small model with
dropout (so the random number generator matters) and Adam (so the optimizer's state matters) on batches drawn at
random, stops, saves the learner's checkpoint through a file format (torch.save, then torch.load with
weights_only=True), rebuilds everything as a new process would, resumes, and compares the losses with an
uninterrupted run.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .core import CheckFailed, _call


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
        raise CheckFailed(
            f"{name}(...) returned something torch.save and torch.load(weights_only=True) cannot carry "
            f"({type(exc).__name__}: {exc}). Keep to dicts, lists, numbers and tensors."
            f"\nHint: {hint}"
        ) from None
    model, optimizer, x, y = _resume_setup(1)  # a new process: other initial weights
    torch.rand(7)  # ... and a generator that has moved on
    rname = getattr(resume, "__name__", "resume")
    start = _call(resume, (checkpoint, model, optimizer), rname, hint)
    where = f"after a stop at step {stop_at}"
    if not _states_equal(weights, model.state_dict()):
        raise CheckFailed(
            f"{where}, the model's weights are not the ones saved: the checkpoint must carry them "
            "and the resume must put them into the new model.\nHint: " + hint
        )
    if not _states_equal(opt_state["state"], optimizer.state_dict()["state"]):
        raise CheckFailed(
            f"{where}, the optimizer's state differs from the saved one: Adam keeps two running "
            "averages and a step count per parameter, and without them the first steps after resuming "
            "take different sizes. The optimizer, like the model, can hand over its whole state and take it back."
            "\nHint: " + hint
        )
    if not torch.equal(rng, torch.get_rng_state()):
        raise CheckFailed(
            f"{where}, torch's random number generator is not where it was: the next batches and "
            "dropout masks will differ. A generator's state can be read and set, like a model's.\nHint: " + hint
        )
    if isinstance(start, bool) or not isinstance(start, int):
        raise CheckFailed(f"{rname} must return the number of the next step as an int, got {start!r}.\nHint: {hint}")
    if start != stop_at:
        raise CheckFailed(
            f"{rname} returned {start} {where}: {stop_at} steps were done (numbered 0 to "
            f"{stop_at - 1}), so the next step is {stop_at}. "
            f"{'Steps would be repeated.' if start < stop_at else 'Steps would be skipped.'}"
            f"\nHint: {hint}"
        )
    return [_resume_step(model, optimizer, x, y) for _ in range(start, steps)]


def check_resume(
    make_checkpoint: Callable,
    resume: Callable,
    *,
    steps: int = 8,
    stops: Sequence[int] = (3, 5),
    hint: str = "",
    quiet: bool = False,
) -> int:
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
                raise CheckFailed(
                    f"resumed at step {stop}: losses {[round(v, 6) for v in got]}, but the run that "
                    f"never stopped had {[round(v, 6) for v in reference[stop:]]}.\nHint: {hint}"
                )
    finally:
        torch.set_rng_state(caller_rng)
    if not quiet:
        print(
            f"\u2713 make_checkpoint and resume: training resumed at steps {', '.join(map(str, stops))} "
            "went on exactly as if it had never stopped"
        )
    return len(stops)
