"""Helper library for the course "Training ML models on the hardware you have".

Modules, by layer (imports only go down this list; CONTRIBUTING.md maps every notebook to them):

0. vocabulary and checks: ``validate`` (argument checks, one wording), ``names`` (dtypes,
   precisions, optimizers, device kinds), ``lazy`` (packages whose parts load on first use),
   ``claims`` (a lesson's live checks: a measurement, its bound, and the no-effect case it rejects).
1. facts and basics: ``hardware`` (what is this machine), ``devices`` (what runs where: device,
   dtypes, backend and skipped demos, decided from a hardware description), ``cpu`` (free cores, thread pools, fp32
   and bf16 speed measured now), ``procs`` (child processes that never outlive their caller),
   ``catalog`` (cited data tables in ``tables/*.json``), ``bench`` (timing, FLOP counting),
   ``data``, ``models``, ``train`` (the one training step, and a small loop).
2. cost models and measurement: ``compute`` (roofline, training FLOPs, time to train),
   ``memory`` (estimator, meters, checkpointing, formulas), ``memlimit`` (capped subprocess runs),
   ``streaming`` (data sets larger than memory), ``comm`` (communication cost models),
   ``precision`` (number formats from ``torch.finfo``, gradient underflow and loss scaling, a guard
   against compute dtypes that would run far slower than fp32; module 04), ``cost`` (prices, energy
   and CO2 of a training job, owned vs cloud, the storage price ladder and RAID; module 07),
   ``decision`` (the decision guide: from a job and its constraints to the hardware; module 07).
3. doing the work: ``distributed`` (multi-process launcher, collectives written by hand, gradient
   aggregation: compressed and local updates with the bytes they send), ``compression`` (module 05:
   ``size``, ``pruning``, ``quantization`` by hand and through torchao, ``distillation``, ``lowrank``,
   efficient ``layers``, and ``compare``: every technique on one model), ``parallel`` (module 06:
   ``data_parallel``, ``pipeline``, ``tensor_parallel``, ``fault_tolerance``, the ``train_script`` for
   ``torchrun``, ``orchestration``, ``federated``), ``benchmark`` (module 07: ``suite`` behind ``course benchmark``, ``energy``,
   ``discipline``, ``quality``, ``monitor``).
4. presenting it: ``plots``, ``widgets``, ``checks`` (exercise checks), ``report``, ``report_card``
   (machines compared side by side, ``course report-card``), ``cli``.

``import course_lib`` stays light: it imports torch but not matplotlib or ipywidgets.
"""
from __future__ import annotations

from .hardware import detect, pick_device, seed_everything

__version__ = "0.5.0"
__all__ = ["detect", "pick_device", "seed_everything", "__version__"]
