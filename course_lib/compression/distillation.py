"""Knowledge distillation: a small student learns from a large teacher's soft targets (notebook 05.3).

A trained classifier's output says more than its top answer: "mostly a 7, a little like a 1, not at
all like a 0". Softening the teacher's logits with a temperature ``T`` (``softmax(logits / T)``)
makes those small probabilities visible, and a student trained to match them learns how the
teacher generalises, not only the labels (Hinton, Vinyals and Dean 2015, "Distilling the Knowledge
in a Neural Network").

The convention used throughout the course (and by exercise 05's reference)::

    loss = alpha * T**2 * KL(softmax(teacher / T) || softmax(student / T))    # soft part, batch mean
         + (1 - alpha) * cross_entropy(student, target)                       # hard part

* ``KL(p || q) = sum p * (log p - log q)``, summed over classes and averaged over the batch
  (``torch.nn.functional.kl_div(..., reduction="batchmean")``), teacher ``p``, student ``q``.
* The soft part's gradient shrinks as ``1 / T**2``; multiplying by ``T**2`` keeps its weight
  against the hard part the same whatever the temperature.
* ``alpha = 1`` uses the teacher only, ``alpha = 0`` is ordinary training on the labels.

``DistillationLoss`` wraps this for the shared training step: it has ``wants_inputs = True``, so
``course_lib.train.train_step`` calls it as ``loss_fn(output, target, inputs)`` and it runs the
teacher on the same inputs (eval mode, no gradients). ``compare_students`` is notebook 05.3's
experiment: teacher, student alone and distilled student over several seeds.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from .. import arguments, seeds
from ..cpu import limit_threads
from ..data import Split
from ..models import MLP, count_parameters
from ..train import evaluate, fit

__all__ = [
    "distillation_loss",
    "soft_targets",
    "DistillationLoss",
    "StudentRun",
    "shuffled_batches",
    "compare_students",
    "summary",
]


def _temperature(temperature: float) -> float:
    return arguments.positive("temperature", temperature)


def _alpha(alpha: float) -> float:
    return arguments.number("alpha", alpha, minimum=0, maximum=1)


def _logits(name: str, value: torch.Tensor) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (batch, classes), got {type(value).__name__}")
    if value.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, classes), got shape {tuple(value.shape)}")
    return value


def soft_targets(logits: torch.Tensor, temperature: float = 4.0) -> torch.Tensor:
    """``softmax(logits / temperature)``: the softened class probabilities a teacher hands its student
    (notebook 05.3, section 1: what the temperature does). T = 1 is the ordinary softmax; larger T
    flattens it, lifting the small probabilities that carry "what else it looks like"."""
    return torch.softmax(_logits("logits", logits) / _temperature(temperature), dim=-1)


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    target: torch.Tensor,
    temperature: float = 4.0,
    alpha: float = 0.5,
) -> torch.Tensor:
    """``alpha * T^2 * KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) * CE(student, target)``.

    KL is summed over classes and averaged over the batch ("batchmean"); the cross-entropy is the
    batch mean. Gradients flow into ``student_logits`` only (the teacher's are detached). Notebook
    05.3 (section 1) and exercise 05's reference. ``temperature`` must be > 0 and ``alpha`` in [0, 1].
    """
    student_logits = _logits("student_logits", student_logits)
    teacher_logits = _logits("teacher_logits", teacher_logits)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student_logits {tuple(student_logits.shape)} and teacher_logits "
            f"{tuple(teacher_logits.shape)} must have the same shape"
        )
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"target must be a tensor of class indices, got {type(target).__name__}")
    t, a = _temperature(temperature), _alpha(alpha)
    log_q = F.log_softmax(student_logits.float() / t, dim=-1)
    log_p = F.log_softmax(teacher_logits.detach().float() / t, dim=-1)
    soft = F.kl_div(log_q, log_p, reduction="batchmean", log_target=True)
    hard = F.cross_entropy(student_logits.float(), target)
    return a * t * t * soft + (1 - a) * hard


class DistillationLoss:
    """A loss for ``course_lib.train`` (``fit``/``train_step``/``evaluate``) that distils ``teacher``.

    ``train_step`` calls it as ``loss_fn(student_output, target, inputs)`` because ``wants_inputs``
    is true; it runs ``teacher(*inputs)`` in eval mode under ``torch.no_grad`` and returns
    ``distillation_loss(student_output, teacher_output, target, temperature, alpha)``. The teacher is
    never updated.
    """

    wants_inputs = True

    def __init__(self, teacher: nn.Module, temperature: float = 4.0, alpha: float = 0.5) -> None:
        if not isinstance(teacher, nn.Module):
            raise TypeError(f"teacher must be a torch.nn.Module (a trained model), got {type(teacher).__name__}")
        self.teacher = teacher
        self.temperature = _temperature(temperature)
        self.alpha = _alpha(alpha)

    def __call__(
        self, student_logits: torch.Tensor, target: torch.Tensor, inputs: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        if isinstance(inputs, torch.Tensor):
            inputs = (inputs,)
        self.teacher.eval()
        with torch.no_grad():
            teacher_logits = self.teacher(*inputs)
        return distillation_loss(student_logits, teacher_logits, target, self.temperature, self.alpha)

    def __repr__(self) -> str:
        return (
            f"DistillationLoss(teacher={type(self.teacher).__name__}, temperature={self.temperature:g}, "
            f"alpha={self.alpha:g})"
        )


@dataclass(frozen=True)
class StudentRun:
    """One seed of ``compare_students``: held-out accuracy of the teacher, of the student trained
    alone on the labels, and of the same student (same seed, same initial weights, same batches)
    trained with the teacher's soft targets; and both models' parameter counts."""

    seed: int
    teacher_acc: float
    alone_acc: float
    distilled_acc: float
    teacher_params: int
    student_params: int

    @property
    def gain(self) -> float:
        """Distilled minus alone accuracy (fraction: 0.03 is 3 points)."""
        return self.distilled_acc - self.alone_acc


def shuffled_batches(dataset: torch.utils.data.TensorDataset, batch_size: int, seed: int) -> DataLoader:
    """A DataLoader of seeded random batches that indexes the tensors once per batch (a
    ``BatchSampler``) instead of once per example: on tiny models the default per-example collation
    costs more than the step. The same seed gives the same batches, so two students can see
    exactly the same data in the same order."""
    arguments.positive_int("batch_size", batch_size)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(arguments.nonnegative_int("seed", seed)))
    return DataLoader(dataset, batch_size=None, sampler=BatchSampler(sampler, batch_size, drop_last=False))


def compare_students(
    split: Split,
    *,
    seeds: Iterable[int] = range(5),
    teacher_hidden: int | list[int] = 256,
    student_hidden: int | list[int] = 12,
    epochs: int = 200,
    lr: float = 1e-2,
    batch_size: int = 32,
    temperature: float = 4.0,
    alpha: float = 0.5,
    teacher_epochs: int = 300,
    teacher_batch_size: int | None = None,
    threads: int | None = 1,
    device: torch.device | str = "cpu",
) -> list[StudentRun]:
    """Teacher, student alone, student distilled: one ``StudentRun`` per seed (notebook 05.3, section 1).

    For each seed: a teacher ``MLP(hidden=teacher_hidden)`` trains on ``split.train`` with the labels
    for ``teacher_epochs`` with batches of ``teacher_batch_size`` (None: the whole training set, one
    step per epoch, which is cheap on a small set);
    then two copies of one freshly initialised student ``MLP(hidden=student_hidden)`` train for the
    same ``epochs`` with Adam at ``lr``, on the same shuffled batches: one on the labels
    (cross-entropy), one with ``DistillationLoss(teacher, temperature, alpha)``. Everything goes
    through ``course_lib.train.fit``. Accuracies are measured on ``split.test``. The models are tiny, so by default
    they train on one thread
    (``threads=1``; None keeps torch's setting): on 2 threads each step would pay more for starting
    and joining the threads than for its arithmetic (and far more when another program holds a core).
    """
    if not isinstance(split, Split):
        raise TypeError(f"split must be a course_lib.data.Split (data.load_digits(...)), got {type(split).__name__}")
    seeds = arguments.int_list("seeds", seeds, minimum=0)
    arguments.positive_int("epochs", epochs)
    arguments.positive_int("teacher_epochs", teacher_epochs)
    teacher_batch = (
        len(split.train)
        if teacher_batch_size is None
        else arguments.positive_int("teacher_batch_size", teacher_batch_size)
    )
    _temperature(temperature), _alpha(alpha)
    arguments.optional(arguments.positive_int, "threads", threads)
    with limit_threads(threads) if threads is not None else contextlib.nullcontext():
        return [
            _one_seed(
                split,
                seed,
                teacher_hidden,
                student_hidden,
                epochs,
                teacher_epochs,
                teacher_batch,
                lr,
                batch_size,
                temperature,
                alpha,
                device,
            )
            for seed in seeds
        ]


def _one_seed(
    split: Split,
    seed: int,
    teacher_hidden: int | list[int],
    student_hidden: int | list[int],
    epochs: int,
    teacher_epochs: int,
    teacher_batch: int,
    lr: float,
    batch_size: int,
    temperature: float,
    alpha: float,
    device: torch.device | str,
) -> StudentRun:
    features = split.x_train.shape[1]
    torch.manual_seed(seed)
    teacher = MLP(features, teacher_hidden, split.n_classes).to(device)
    fit(
        teacher,
        shuffled_batches(split.train, teacher_batch, seed),
        epochs=teacher_epochs,
        lr=lr,
        device=device,
        progress=False,
    )
    torch.manual_seed(seeds.derive(seed, "student"))
    start = MLP(features, student_hidden, split.n_classes).to(device)
    accs = []
    for loss_fn in (None, DistillationLoss(teacher, temperature, alpha)):
        student = MLP(features, student_hidden, split.n_classes).to(device)
        student.load_state_dict(start.state_dict())
        fit(
            student,
            shuffled_batches(split.train, batch_size, seed),
            epochs=epochs,
            lr=lr,
            device=device,
            progress=False,
            loss_fn=loss_fn,
        )
        accs.append(evaluate(student, split.test, device)["acc"])
    return StudentRun(
        seed,
        evaluate(teacher, split.test, device)["acc"],
        accs[0],
        accs[1],
        count_parameters(teacher),
        count_parameters(start),
    )


def summary(runs: Sequence[StudentRun], field: str) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds of one accuracy field of ``compare_students``'
    runs ("teacher_acc", "alone_acc", "distilled_acc" or "gain"); the spread is 0 for a single run."""
    field = arguments.choice("field", field, ("teacher_acc", "alone_acc", "distilled_acc", "gain"))
    if not runs:
        raise ValueError("runs must not be empty")
    values = [getattr(r, field) for r in runs]
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
