"""The decision guide's assumptions and constants (notebook 07.3): each one printed with a result, each one a
keyword of ``decision.recommend`` where a learner may want another value."""

from __future__ import annotations

from .. import cost

__all__ = [
    "FRAMEWORKS",
    "PRIVACY",
    "ENERGY",
    "STATES_FRACTION",
    "TOTAL_FRACTION",
    "MICRO_BATCH",
    "STEP_TOKENS",
    "DEVICE_COUNTS",
    "_OWNED_MAX",
    "CLOUD_MIN_HOURS",
    "CPU_GFLOPS",
    "CPU_MEMORY_GB",
    "CPU_WATTS",
    "CPU_NAME",
    "CPU_NAME_GIVEN",
    "ELECTRICITY_ROW",
    "OWNED_PUE_ROW",
    "_LORA_FRACTION",
    "METHODS",
    "FROZEN_BYTES",
    "FLOPS_PER_PARAM_TOKEN",
    "QLORA_SLOWDOWN",
    "PORTING_USD",
    "PURCHASE_SHARE",
    "SENSITIVE_MARKUP",
    "UTILIZATION",
    "DESK_HOST_USD",
    "DESK_HOST_W",
    "DESK_MAX",
]

FRAMEWORKS = ("pytorch", "tensorflow", "jax")
PRIVACY = ("none", "sensitive", "regulated")
ENERGY = ("any", "low")

#: Share of a device's memory the model states may use when no activation estimate is given: the
#: 20 % kept for activations, the framework and fragmentation of ``memory.largest_model_that_fits``.
STATES_FRACTION = 0.8
#: Share states + activations may use when ``activation_bytes`` is given (notebook 02's calculator).
TOTAL_FRACTION = 0.9
#: Work per device per step in the scaling model (one step's compute against its all-reduce): 32 samples,
#: and for jobs counted in tokens at least ``STEP_TOKENS`` tokens (e.g. 16 sequences of 2,048).
MICRO_BATCH, STEP_TOKENS = 32, 32_768
#: Device counts tried: PCIe cards up to one server (8), NVLink GPUs beyond it over InfiniBand NDR,
#: TPUs up to their pod; bought hardware up to one 8-card server (``_OWNED_MAX``).
DEVICE_COUNTS, _OWNED_MAX = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), 8
#: Compute Engine bills vCPUs, GPUs and memory per second after a one-minute minimum (its billing model,
#: https://cloud.google.com/compute/vm-instance-pricing, as published; not re-checked): a tiny job pays a minute.
CLOUD_MIN_HOURS = 1 / 60
#: The CPU baseline, an ASSUMED 2-core cloud VM like Colab's free runtime: ~100 GFLOP/s fp32 (the 2-thread
#: matmul rate measured on such machines, notebook 00), ~12 GB RAM, ~30 W for its share of a server.
#: Not this machine unless you pass its numbers (e.g. ``cpu.calibrate()`` or ``course benchmark``'s
#: matmul_gflops as ``cpu_gflops``).
CPU_GFLOPS, CPU_MEMORY_GB, CPU_WATTS = 100.0, 12.0, 30.0
#: The CPU option's name with the assumed rate (``CPU_GFLOPS``), and with a rate you pass.
CPU_NAME, CPU_NAME_GIVEN = "a 2-core CPU (assumed {gflops:g} GFLOP/s)", "your CPU (given: {gflops:.3g} GFLOP/s)"
#: Hardware you run yourself: the US commercial tariff (a business, a hospital, a lab) and, for the
#: data-centre GPUs the guide can buy (they need a server), an average server room's PUE, the default of
#: ``cost.owned_vs_cloud`` for data-centre cards too. The cloud's rows use the provider's PUE and its
#: price includes electricity.
ELECTRICITY_ROW, OWNED_PUE_ROW = cost.ELECTRICITY["commercial"], cost.SERVER_ROOM_PUE_ROW
_LORA_FRACTION = 0.01  # LoRA adapters: ~0.01-1 % of the weights (Hu et al. 2021); 1 % is the generous end
#: Fine-tuning methods priced when ``finetune=True``: every weight trained, or LoRA adapters over frozen weights.
METHODS = ("full", "lora", "qlora")
#: Bytes per frozen weight under the adapters: 16-bit (LoRA) or 4-bit NF4 plus its quantisation constants
#: (QLoRA, Dettmers et al. 2023, NeurIPS: ~0.5 B, its double quantisation keeps the constants ~0.1 bit).
FROZEN_BYTES = {"full": 0.0, "lora": 2.0, "qlora": 0.5}
#: Training FLOPs per parameter and token: 6 for full training (2 forward + 4 backward); with frozen weights
#: the backward pass still computes the activations' gradients (2) but no weight gradients: 4.
FLOPS_PER_PARAM_TOKEN = {"full": 6.0, "lora": 4.0, "qlora": 4.0}
#: ASSUMED: QLoRA dequantises its 4-bit weights in every pass, about 30 % slower than LoRA per step (Dettmers et
#: al. 2023 report it slower, without one figure for all models); pass ``qlora_slowdown`` to change it.
QLORA_SLOWDOWN = 1.3
#: ASSUMED: porting a PyTorch code base written for CUDA to TPUs (PyTorch/XLA: static shapes, no CUDA kernels or
#: custom ops, a new input pipeline): two engineer-weeks at 125 USD an hour = 10,000 USD, charged to TPU options
#: of a PyTorch team unless ``xla_ready=True`` (the code already runs on XLA). Pass ``porting_usd``.
PORTING_USD = 10_000.0
#: ASSUMED: the share of a purchase (card + host) charged to this one job: 1.0, the job pays for it all. With
#: hardware that serves more projects, pass e.g. 1 - resale (0.7 at ``cost.owned_vs_cloud``'s 30 % resale) or
#: this job's hours over the hardware's life.
PURCHASE_SHARE = 1.0
#: ASSUMED: renting for "sensitive" data (e.g. finance) costs the on-demand price: the provider's standard
#: controls (encryption at rest and in transit, a region you choose, access control, audit logs) and a contract
#: such as a HIPAA business associate agreement come with ordinary instances; such contracts do not require
#: sole tenancy. Where your rules do demand dedicated hosts, pass their extra cost as a fraction of the on-demand
#: price: Compute Engine's sole-tenant nodes bill the whole node (every GPU and vCPU on it, used or not) plus a
#: sole-tenancy premium (https://cloud.google.com/compute/sole-tenant-pricing, as published, not re-checked), so a
#: job that uses one GPU of a node pays for all of them.
SENSITIVE_MARKUP = 0.0
#: The utilisation (model FLOPs utilisation) of each kind when none is passed: one figure, 40 %, for every chip
#: and the CPU, an assumption that makes the ranking one of price per peak FLOP; pass a dict to differ.
UTILIZATION = 0.4
#: ASSUMED (``cost``'s host rule): a consumer or pro card bought for the job goes into a workstation bought with it
#: (CPU, 128 GB RAM, a power supply for up to ``DESK_MAX`` cards): 3,000 USD and 150 W at the desk (PUE 1.0); pass
#: ``desk_host_usd`` (0 for a desktop you have).
DESK_HOST_USD, DESK_HOST_W, DESK_MAX = cost.DESK_HOST_USD, cost.DESK_HOST_W, cost.DESK_MAX
