"""Training curves in TensorBoard: write a run's scalars, read them back, open them (notebook 07.2)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from ... import arguments, data, models, train
from ...hardware import as_device, synchronize
from ...seeds import seed_everything
from .resources import MIB, data_dir


def _summary_writer():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # tensorboard is a course dependency; a hand-made environment may lack it
        raise ImportError(
            "TensorBoard logging needs the tensorboard package: pip install tensorboard "
            "(Colab, Kaggle and Vertex AI Workbench already have it)"
        ) from e
    return SummaryWriter


@dataclass
class LoggedRun:
    """What ``tensorboard_log`` wrote: the run's folder and every scalar as (step, value) pairs."""

    run_dir: Path
    scalars: dict[str, list[tuple[int, float]]]
    seconds: float
    steps: int


def tensorboard_log(
    logdir: str | Path | None = None,
    *,
    run_name: str = "digits-mlp",
    epochs: int = 8,
    batch_size: int = 64,
    hidden: int = 64,
    lr: float = 0.05,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> LoggedRun:
    """Train a small MLP on the digits data and log it to TensorBoard (notebook 07.2, "TensorBoard").

    Writes to ``logdir/run_name`` (default ``data_dir("tensorboard")``; event files left there by an
    earlier run are removed first, so the folder holds this run only): the training loss every step
    (``train/loss``), per epoch the training and test accuracy (``train/accuracy``, ``test/accuracy``),
    the throughput (``speed/examples_per_s``), the process's CPU use over the epoch (CPU seconds / wall seconds, in %
    of one core, from ``time.process_time``: ``resources/cpu_percent``) and its resident memory at the epoch's end
    (``resources/rss_mib``; on a GPU also ``resources/gpu_allocated_mib``). Returns what was logged, for comparison
    with ``read_scalars``.
    """
    epochs = arguments.positive_int("epochs", epochs)
    batch_size = arguments.positive_int("batch_size", batch_size)
    lr = arguments.positive("lr", lr)
    if not isinstance(run_name, str) or not re.fullmatch(r"[\w.-]+", run_name):
        raise ValueError(f"run_name must be a plain folder name (letters, digits, _ . -), got {run_name!r}")
    device = as_device(device) if device is not None else torch.device("cpu")
    writer_cls = _summary_writer()
    run_dir = Path(logdir if logdir is not None else data_dir("tensorboard")) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("events.out.tfevents.*"):
        old.unlink()
    seed_everything(seed)
    split = data.load_digits(seed=seed)
    train_loader, test_loader = split.loaders(batch_size=batch_size, seed=seed)
    model = models.MLP(split.x_train.shape[1], hidden, split.n_classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    logged: dict[str, list[tuple[int, float]]] = {}
    writer = writer_cls(log_dir=str(run_dir))

    def log(tag: str, value: float, step: int) -> None:
        writer.add_scalar(tag, value, step)
        logged.setdefault(tag, []).append((step, float(value)))

    proc = psutil.Process()
    step, start = 0, time.perf_counter()
    try:
        for epoch in range(1, epochs + 1):
            model.train()
            # time.process_time: this process's CPU time, to the nanosecond on Linux (an epoch here lasts ~30 ms, and
            # /proc's counters advance in 10 ms ticks: one tick more would read 30 % high)
            t0, cpu0, correct, seen = time.perf_counter(), time.process_time(), 0, 0
            for batch in train_loader:
                r = train.train_step(model, batch, opt, device=device)
                step += 1
                correct, seen = correct + r.correct, seen + r.examples
                log("train/loss", r.loss, step)
            synchronize(device)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            log("speed/examples_per_s", seen / wall, epoch)
            log("train/accuracy", correct / seen, epoch)
            log("test/accuracy", train.evaluate(model, test_loader, device)["acc"], epoch)
            log("resources/cpu_percent", 100 * cpu / wall, epoch)
            log("resources/rss_mib", proc.memory_info().rss / MIB, epoch)
            if device.type == "cuda":
                log("resources/gpu_allocated_mib", torch.cuda.memory_allocated(device) / MIB, epoch)
    finally:
        writer.close()
    return LoggedRun(run_dir, logged, time.perf_counter() - start, step)


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a run folder's event files, read with TensorBoard's own ``EventAccumulator``:
    tag -> [(step, value), ...] (notebook 07.2: what TensorBoard will show). Values come back as the
    float32 TensorBoard stores."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not list(run_dir.glob("events.out.tfevents.*")):
        raise ValueError(f"run_dir must be a folder holding TensorBoard event files; {run_dir} has none")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_instructions(logdir: str | Path) -> str:
    """How to open the logs in ``logdir``: a terminal, Colab and Vertex AI Workbench (notebook 07.2)."""
    arguments.path("logdir", logdir)
    logdir = str(logdir)
    return "\n".join(
        [
            f"Logs are in {logdir}. To look at them:",
            f"  on your machine, in a terminal : tensorboard --logdir {logdir}   then open http://localhost:6006",
            "  in Colab or Vertex AI Workbench (a notebook cell):",
            "      %load_ext tensorboard",
            f"      %tensorboard --logdir {logdir}",
            "  (Workbench also lists TensorBoard in its launcher; a Vertex AI custom job can write to a",
            "   gs:// folder that Vertex AI TensorBoard reads.)",
            "The SCALARS tab shows train/loss per step and the accuracy, speed and resource curves per epoch.",
        ]
    )
