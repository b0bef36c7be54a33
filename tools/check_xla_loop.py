#!/usr/bin/env python3
"""Check the course's training loop on a real XLA device: one compilation per kind of graph, not one per step.

On a TPU (or torch_xla's CPU device, PJRT_DEVICE=CPU, where no TPU is attached) every operation is traced into a
lazy graph that runs only when the loop cuts it. `train.train_step` cuts once per step and reads the loss after
the cut; this trains a small MLP for 24 steps with 3 evaluations through `train.fit`, counts XLA's compilations,
and does the same with the cut switched off (the loop as it was), so the difference is measured, not assumed.

    PJRT_DEVICE=CPU python3 tools/check_xla_loop.py     # needs torch_xla and its matching torch

Exits 1 if the loop with the cut compiles more than 6 graphs (the first step, the steady step, the last short
batch, evaluation) or if switching the cut off does not make it compile at least 4 times more.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PJRT_DEVICE", "CPU")


def run(train, data, device, metrics) -> dict:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    metrics.clear_all()
    start = time.perf_counter()
    history = train.fit(
        model, data, epochs=3, batch_size=32, eval_data=data, progress=False, optimizer="adam", lr=1e-2, device=device
    )
    compiled = metrics.metric_data("CompileTime")
    return {
        "compilations": compiled[0] if compiled else 0,
        "seconds": time.perf_counter() - start,
        "test_acc": history.epochs[-1]["test_acc"],
    }


def main() -> int:
    try:
        import torch
        import torch_xla
        import torch_xla.debug.metrics as metrics
    except ImportError as exc:
        print(f"torch_xla is not installed here ({exc}): install the release that matches your torch")
        return 2
    from course_lib import devices, train

    device = devices.xla_device()
    torch.manual_seed(0)
    x, y = torch.randn(256, 32), torch.randint(0, 10, (256,))
    data = torch.utils.data.TensorDataset(x, y)
    print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}, device {device}; 24 steps, 3 evaluations")
    cut = run(train, data, device, metrics)
    real_cut = train.step.graph_cut
    train.step.graph_cut = lambda device=None: None  # the loop without its cut
    try:
        uncut = run(train, data, device, metrics)
    finally:
        train.step.graph_cut = real_cut
    for label, r in (("one cut per step", cut), ("no cut (the old loop)", uncut)):
        print(
            f"{label:22s} {r['compilations']:4d} compilations {r['seconds']:7.1f} s  test accuracy {r['test_acc']:.2f}"
        )
    ok = cut["compilations"] <= 6 and uncut["compilations"] >= 4 * max(1, cut["compilations"])
    print("OK" if ok else "FAILED: the loop recompiles per step")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
