"""Benchmarking this machine, watching a run, and judging a model (module 07: notebooks 07.1-07.3).

================  ============================================================================
``suite``         ``course benchmark``: an MLPerf-style benchmark of this machine (time to a
                  target accuracy on the digits data, training throughput, inference latency
                  p50/p95, matmul and memory-bandwidth ceilings, all-reduce bus bandwidth, energy
                  where the machine reports it), over 5 fresh processes (cold time-to-accuracy
                  runs from their own seeds), interleaved rounds, device synchronisation
``settings``      what a benchmark run measures (``FULL``, ``QUICK``, the task) and how it
                  differs from the MLPerf Training rules
``combine``       one result from the processes: trimmed means as MLPerf scores, the
                  coefficient of variation flagged above 5 %
``results``       the result's schema as dataclasses and its JSON; ``save_result`` (atomic)
                  and ``load_result``
``summary``       a result as a readable table
``energy``        energy over a run: RAPL counters on Linux (wrap-around and permissions handled),
                  ``nvidia-smi`` power on a GPU, or a clear "not available" with the reason
``discipline``    what goes wrong without warm-up, synchronisation or repeats, and on a busy
                  machine, each shown by a measurement (notebook 07.1)
``monitor``       a ``torch.profiler`` trace with its bottleneck, resource use sampled during a
                  run, TensorBoard logging (notebook 07.2)
``quality``       quality metrics on held-out data (accuracy, precision, F1; MSE, MAE),
                  cross-validation and a stress test with outliers (notebook 07.1)
================  ============================================================================

The parts load on first use (``benchmark.suite`` imports ``suite``), so importing the package stays
light; the all-reduce part of the suite runs its ranks through ``course_lib.comm.launch``.
"""

from __future__ import annotations

from ..lazy import parts_loader

PARTS = ("suite", "settings", "combine", "results", "summary", "energy", "discipline", "monitor", "quality")
__all__ = list(PARTS)
__getattr__, __dir__ = parts_loader(__name__, PARTS, globals())
