"""Communication: processes that talk through ``torch.distributed``, and what their messages cost.

Module 03 (interconnect) meets most of it; modules 04, 06 and 07 use it too.

================  ============================================================================
``alpha_beta``    the alpha-beta cost of collectives (``allreduce_time``, ``fit_alpha_beta``, ``busbw``) and
                  data-parallel speed-up, over the cited link table (``catalog.links``, ``catalog.get_link``)
``launcher``      ``launch`` (run an importable function on N ranks), ``rank_info``, ``RankError``,
                  ``LaunchTimeout``, ``last_launch_stats``, ``port_is_free``, ``max_world_size``
``collectives``   ``allreduce_benchmark``, ``ring_all_reduce`` (written by hand), the controls
                  ``naive_all_reduce`` and ``root_all_reduce``, ``check_ring_against_library``,
                  ``bytes_per_message_byte`` and ``allreduce_table`` (reading the rows)
``scaling``       ``data_parallel_benchmark`` (a real data-parallel step, timed in parts) and
                  ``measure_data_parallel`` (its speed-up over one rank); ``ddp_benchmark`` and ``measure_ddp``
                  (the same job under PyTorch's DistributedDataParallel)
``feeding``       a trainer starved for bytes (``read_starvation``: a file from disk or the page cache,
                  ``drop_from_page_cache``) and for compute (``worker_epochs``: DataLoader workers)
``caches``        where the bytes live (notebook 03, section 2): ``working_set_bandwidth`` (one thread
                  reading working sets from 32 KiB to past the last-level cache), ``working_set_sizes``,
                  ``cache_over_memory``
``demos``         small workers that show what ``launch`` does: ``demo_rank_sum``,
                  ``demo_raise_on_rank``, ``demo_sleep_on_rank``, ``demo_dataloader_sum``, ...
``aggregation``   gradient aggregation on thin links (notebook 04): DDP hooks (fp16, PowerSGD,
                  ``topk_hook`` with error feedback), local SGD, ``compare_methods``; beside it
                  ``aggregation_bytes`` (what each method sends: ``bytes_per_step``, collective
                  calls, seconds on a link), ``aggregation_counter`` (``CollectiveCounter``: the
                  bytes a run really hands over) and ``aggregation_variants`` (options, checked)
``async_sgd``     asynchronous SGD beside synchronous (notebook 06.1): ``run_hogwild`` (Hogwild! on
                  shared memory, staleness counted), ``run_sync`` (DDP on the same updates),
                  ``sgd_batches``, ``accuracy``
================  ============================================================================

Scripts that call ``launch`` run unchanged under ``torchrun`` on one machine or many: inside a
worker, ``rank_info()`` reads the same process group either way.
"""

from __future__ import annotations

from . import alpha_beta, caches, feeding
from .alpha_beta import *  # noqa: F403  (the cost model's names, listed once, in alpha_beta.__all__)
from .collectives import (
    ALLREDUCE_ALGORITHMS,
    ALLREDUCE_SIZES,
    allreduce_benchmark,
    allreduce_table,
    allreduce_with_controls,
    bytes_per_message_byte,
    check_ring_against_library,
    naive_all_reduce,
    ring_all_reduce,
    root_all_reduce,
)
from .demos import (
    demo_dataloader_sum,
    demo_raise_on_rank,
    demo_rank_info,
    demo_rank_sum,
    demo_sleep_on_rank,
    demo_subprocess_then_hang,
    demo_workers_then_hang,
)
from .scaling import data_parallel_benchmark, ddp_benchmark, measure_data_parallel, measure_ddp
from .async_sgd import run_hogwild, run_sync
from .launcher import (
    BACKENDS,
    LaunchTimeout,
    RankError,
    default_threads_per_rank,
    last_launch_stats,
    launch,
    max_world_size,
    port_is_free,
    rank_info,
)

__all__ = [
    "alpha_beta",
    *alpha_beta.__all__,
    "ALLREDUCE_SIZES",
    "ALLREDUCE_ALGORITHMS",
    "feeding",
    "caches",
    "launch",
    "rank_info",
    "RankError",
    "LaunchTimeout",
    "BACKENDS",
    "max_world_size",
    "default_threads_per_rank",
    "last_launch_stats",
    "port_is_free",
    "allreduce_benchmark",
    "allreduce_with_controls",
    "ring_all_reduce",
    "naive_all_reduce",
    "root_all_reduce",
    "check_ring_against_library",
    "bytes_per_message_byte",
    "allreduce_table",
    "demo_rank_sum",
    "demo_raise_on_rank",
    "demo_sleep_on_rank",
    "demo_rank_info",
    "demo_dataloader_sum",
    "demo_subprocess_then_hang",
    "demo_workers_then_hang",
    "data_parallel_benchmark",
    "measure_data_parallel",
    "measure_ddp",
    "ddp_benchmark",
    "run_hogwild",
    "run_sync",
]
