"""Helper library for the course "Training ML models on the hardware you have".

Modules, by layer (imports only go down this list):

1. facts and basics: ``hardware`` (what is this machine), ``catalog`` (cited accelerator and storage tables),
   ``bench`` (timing, FLOP counting), ``data`` (digits and synthetic sets), ``models``.
2. cost models and measurement: ``compute`` (roofline, training FLOPs, time to train),
   ``memory`` (training-memory estimator and meters), ``memlimit`` (capped subprocess runs),
   ``streaming`` (data sets larger than memory), ``comm`` (communication cost models, link table).
3. doing the work: ``train`` (one small training loop), ``distributed`` (multi-process launcher,
   collectives written by hand).
4. presenting it: ``plots``, ``widgets``, ``checks`` (exercise checks), ``report``, ``cli`` (``course doctor``).

``import course_lib`` stays light: it imports torch but not matplotlib or ipywidgets.
"""
from __future__ import annotations

from .hardware import detect, pick_device, seed_everything

__version__ = "0.1.0"
__all__ = ["detect", "pick_device", "seed_everything", "__version__"]
