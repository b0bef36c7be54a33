"""What runs where: the device, the dtypes, the distributed backend and the demos that cannot run.

Every choice the notebooks make about accelerators is a pure function of a :class:`DeviceFacts`
(what the machine and its PyTorch build have), so each platform a learner may bring is tested here
without the hardware: Colab's T4, an L4, an H100, four GPUs, Apple M1 and M3, a TPU v5e, and a TPU
runtime without ``torch_xla``. ``DeviceFacts.here()`` reads this machine; :func:`device_plan` decides;
:func:`apply` sets full float32 matmul precision on the chosen device. ``course devices`` prints
the decision table for ``EXAMPLES`` (the "Running on a GPU or TPU" page shows it) and this machine's
plan.

What is decided, and why:

* **device**: the first CUDA GPU, else the Apple GPU (MPS), else a TPU through ``torch_xla``, else
  the CPU (``COURSE_DEVICE`` overrides, see ``hardware.pick_device``).
* **float32 means float32**: a TPU computes float32 matmuls as one bf16 pass unless told
  otherwise, and Ampere or newer NVIDIA GPUs may use TF32; the course sets full precision so that
  every "fp32" label is true, and measures the 16-bit path separately.
* **the 16-bit dtype**: bf16 where the hardware computes it (NVIDIA compute capability 8.0+, TPU,
  Apple GPU on macOS 14+, any CPU: the CPU's own bf16 speed is measured by ``course_lib.cpu``);
  fp16 elsewhere. ``torch.cuda.is_bf16_supported()`` is not used: it says True on a T4, where bf16
  runs emulated without tensor cores. fp16 training needs loss scaling (``torch.amp.GradScaler``)
  on CUDA.
* **backend** for one process per GPU: NCCL with 2+ CUDA GPUs and an NCCL build; the course's
  local multi-process demos always run CPU processes over gloo, and say so.
* **skipped demos**, each with the reason the notebook prints: see ``DEMOS``.
* **hints**: an accelerator the hardware has but PyTorch cannot use (a TPU without ``torch_xla``,
  an NVIDIA GPU with a CPU-only torch build), or a platform limit worth knowing.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import platform
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from . import arguments

__all__ = [
    "DEMOS",
    "GPU",
    "DeviceFacts",
    "DevicePlan",
    "device_plan",
    "apply",
    "current_plan",
    "EXAMPLES",
    "EXAMPLE_CHIPS",
    "decision_table",
    "peaks_table",
]

#: Demos that need something not every machine has: key -> what it is.
DEMOS = {
    "memory_cap": "out-of-memory demos in a memory-capped child process (notebook 02)",
    "device_memory": "the memory estimator against the GPU allocator's peak (notebook 02)",
    "host_to_device": "pageable vs pinned host-to-GPU copies (notebook 03)",
    "nccl_allreduce": "all-reduce between GPUs over NCCL (notebook 03; DDP and pipelines on GPUs in 06.1, 06.2)",
    "accelerator_faster": "asserting that the accelerator beats the CPU on a large batch (notebook 01)",
}

# PCI ids: Google's vendor id and its TPU device ids (the same table torch_xla and JAX use to find
# local TPU chips, e.g. jax/_src/hardware_utils.py), and the device nodes an NVIDIA driver creates.
_GOOGLE_PCI_VENDOR = "0x1ae0"
_TPU_PCI_IDS = {"0x0027": "v2/v3", "0x005e": "v4", "0x0062": "v5p", "0x0063": "v5e", "0x006f": "v6e"}
_NVIDIA_DEVICE_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")  # the last: WSL2


@dataclass(frozen=True)
class GPU:
    """One CUDA GPU as PyTorch reports it."""

    name: str
    capability: tuple[int, int]  # compute capability, e.g. (7, 5) for a T4
    memory_bytes: int

    @property
    def native_bf16(self) -> bool:
        """bf16 tensor cores: Ampere (8.0) and newer."""
        return self.capability >= (8, 0)


@dataclass(frozen=True)
class DeviceFacts:
    """What decides the course's choices: the operating system, the accelerators, and what this
    PyTorch build can use. Plain data, so tests and the documentation can describe any machine."""

    system: str = "Linux"  # platform.system()
    macos: tuple[int, int] | None = None  # macOS version on a Mac
    gpus: tuple[GPU, ...] = ()  # CUDA GPUs PyTorch can use
    nccl: bool = False  # this torch build has NCCL
    mps: bool = False  # the Apple GPU is usable through MPS
    xla: bool = False  # torch_xla is installed and gives a device
    tpu_on_pci: str | None = None  # TPU chips on the PCI bus, as "4 x v5e", torch_xla or not
    nvidia_driver: bool = False  # an NVIDIA GPU's device node exists, whatever torch can do with it
    torch_cuda: bool = False  # this torch build was compiled with CUDA
    torch_arch: tuple[
        str, ...
    ] = ()  # the GPU architectures this torch build has kernels for (torch.cuda.get_arch_list)
    cuda_problem: str | None = None  # why torch cannot use the GPU, as torch said it (e.g. a driver too old)

    @classmethod
    def here(cls) -> DeviceFacts:
        """This machine's facts (probes torch, torch_xla and the PCI bus; cached)."""
        return _here()


def _tpu_generation(pci_root: str = "/sys/bus/pci/devices") -> str | None:
    """TPU chips attached to this machine as '<count> x <generation>', from the PCI bus; None if none.

    Works without torch_xla, which is what lets the course say "this is a TPU runtime, but PyTorch
    cannot use it yet" instead of silently running on the CPU.
    """
    found = []
    for vendor in glob.glob(os.path.join(pci_root, "*", "vendor")):
        try:
            if Path(vendor).read_text().strip() != _GOOGLE_PCI_VENDOR:
                continue
            device = (Path(vendor).parent / "device").read_text().strip()
        except OSError:
            continue
        if device in _TPU_PCI_IDS:
            found.append(_TPU_PCI_IDS[device])
    return f"{len(found)} x {found[0]}" if found else None


def runs_on(capability: tuple[int, int], arch_list: tuple[str, ...]) -> bool:
    """Whether a torch built for ``arch_list`` ("sm_75", "compute_90", ...) has kernels a GPU of ``capability`` can
    run: a cubin for sm_XY runs on the same major X at minor Y or newer; PTX (compute_XY) is compiled on the fly
    for XY or newer. An empty list (not reported) counts as yes."""
    if not arch_list:
        return True
    for arch in arch_list:
        kind, _, digits = arch.partition("_")
        if not digits.isdigit() or len(digits) < 2:
            continue
        built = (int(digits[:-1]), int(digits[-1]))
        if (kind == "sm" and built[0] == capability[0] and built[1] <= capability[1]) or (
            kind == "compute" and built <= capability
        ):
            return True
    return False


@functools.lru_cache(maxsize=1)
def _here() -> DeviceFacts:
    import warnings

    gpus, problem = (), None
    with warnings.catch_warnings(record=True) as said:  # a driver too old for this torch's CUDA warns here
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if not available and torch.version.cuda is not None:
        try:  # torch warns about an old driver only once per process: ask again, the error says it each time
            torch.cuda.init()
        except Exception as exc:  # noqa: BLE001 - the reason is what we want
            problem = str(exc).strip().splitlines()[0] if str(exc).strip() else None
        if problem is None and said:
            problem = str(said[-1].message).strip().splitlines()[0]
    if available:
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        gpus = tuple(GPU(p.name, (p.major, p.minor), int(p.total_memory)) for p in props)
    mac = platform.mac_ver()[0]
    mps = getattr(torch.backends, "mps", None)
    return DeviceFacts(
        system=platform.system(),
        macos=tuple(int(x) for x in (mac.split(".") + ["0"])[:2]) if mac else None,
        gpus=gpus,
        nccl=bool(torch.distributed.is_available() and torch.distributed.is_nccl_available()),
        mps=bool(mps is not None and mps.is_available()),
        xla=_xla_device() is not None,
        tpu_on_pci=_tpu_generation(),
        nvidia_driver=any(os.path.exists(p) for p in _NVIDIA_DEVICE_NODES),
        torch_cuda=torch.version.cuda is not None,
        torch_arch=tuple(torch.cuda.get_arch_list()) if available else (),
        cuda_problem=problem,
    )


def xla_device():
    """torch_xla's device: ``torch_xla.device()`` (torch_xla 2.4 and newer), else the older
    ``xla_model.xla_device()``, which newer releases deprecate."""
    import torch_xla  # type: ignore[import-not-found]

    if hasattr(torch_xla, "device"):
        return torch_xla.device()
    import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]

    return xm.xla_device()


def _xla_device():
    """torch_xla's device, or None where torch_xla is missing or finds no device."""
    if importlib.util.find_spec("torch_xla") is None:
        return None
    try:
        return xla_device()
    except Exception:  # noqa: BLE001 - torch_xla installed but no TPU attached
        return None


@dataclass(frozen=True)
class DevicePlan:
    """What the course does on a machine (:func:`device_plan`). ``skipped`` maps a key of ``DEMOS`` to the
    reason the notebook prints; ``hints`` are things the learner should know or fix."""

    device: str  # "cuda:0", "mps", "xla" or "cpu"
    description: str
    fp32_matmul: str  # what float32 matmuls compute in, as set by apply()
    half: str  # the 16-bit dtype this device computes in hardware: "bf16" or "fp16"
    mixed_precision: str  # "bf16-mixed" or "fp16-mixed"
    grad_scaler: bool  # fp16-mixed training needs torch.amp.GradScaler here
    backend: str  # for one process per accelerator: "nccl" or "gloo"
    gpu_ranks: int  # processes an NCCL demo can run (one per GPU); 0 without NCCL
    skipped: dict[str, str] = field(default_factory=dict)
    hints: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return self.device.split(":")[0]

    def runs(self, demo: str) -> bool:
        """Whether the demo ``demo`` (a key of ``DEMOS``) runs here."""
        if demo not in DEMOS:
            raise ValueError(f"demo must be one of {sorted(DEMOS)}, got {demo!r}")
        return demo not in self.skipped

    def check(self, demo: str) -> bool:
        """``runs(demo)``, and where it does not, print ``Skipped: <the reason>`` for the learner: the
        guard of every notebook cell that needs particular hardware (``if device_plan.check(...):``)."""
        if self.runs(demo):
            return True
        print(f"Skipped: {self.skipped[demo]}")
        return False

    def report(self) -> str:
        """The plan in words."""
        lines = [
            f"Device        : {self.device} ({self.description})",
            f"float32       : {self.fp32_matmul}",
            f"16-bit        : {self.half}; mixed precision {self.mixed_precision}"
            + (" with a GradScaler" if self.grad_scaler else ""),
            "Multi-GPU     : "
            + (
                f"NCCL on {self.gpu_ranks} GPUs"
                if self.gpu_ranks
                else "none; multi-process demos are CPU processes over gloo"
            ),
        ]
        lines += [f"Skipped       : {DEMOS[k]}: {why}" for k, why in self.skipped.items()]
        lines += [f"Note          : {h}" for h in self.hints]
        return "\n".join(lines)


def device_plan(facts: DeviceFacts) -> DevicePlan:
    """Decide device, dtypes, backend, skipped demos and hints from ``facts`` (a pure function)."""
    if not isinstance(facts, DeviceFacts):
        raise TypeError(f"facts must be a DeviceFacts, got {type(facts).__name__}")
    skipped, hints = _hardware_skips(facts), []
    gpu_ranks = len(facts.gpus) if len(facts.gpus) >= 2 and facts.nccl else 0
    unusable = [g for g in facts.gpus if not runs_on(g.capability, facts.torch_arch)]
    if unusable:  # everything runs on the CPU
        hints.append(_no_kernels_hint(unusable[0], facts.torch_arch))
        facts = replace(facts, gpus=())
        skipped["device_memory"] = "needs a CUDA GPU this torch has kernels for"
        skipped["host_to_device"] = "needs a CUDA GPU this torch has kernels for"
        skipped["nccl_allreduce"] = "needs 2 or more CUDA GPUs this torch has kernels for"
        gpu_ranks = 0
    device, kind, description, fp32, half = _device_and_dtypes(facts, skipped, hints)
    hints += _install_hints(facts, kind, bool(unusable))
    return DevicePlan(
        device=device,
        description=description,
        fp32_matmul=fp32,
        half=half,
        mixed_precision=f"{half}-mixed",
        grad_scaler=kind == "cuda" and half == "fp16",
        backend="nccl" if gpu_ranks else "gloo",
        gpu_ranks=gpu_ranks,
        skipped=skipped,
        hints=tuple(hints),
    )


def _hardware_skips(facts: DeviceFacts) -> dict[str, str]:
    """The demos ``facts`` rule out before any GPU is checked for kernels: by operating system and GPU count."""
    skipped = {}
    if facts.system != "Linux":
        skipped["memory_cap"] = (
            f"capping a process's memory needs Linux (RLIMIT_AS); {facts.system} "
            + ("does not enforce it" if facts.system == "Darwin" else "has no such limit")
            + ", and an uncapped out-of-memory demo could freeze the machine"
        )
    if not facts.gpus:
        skipped["device_memory"] = "needs a CUDA GPU (torch.cuda.max_memory_allocated)"
        skipped["host_to_device"] = "needs a CUDA GPU (pinned memory is page-locked for a GPU's copy engine)"
    if not (len(facts.gpus) >= 2 and facts.nccl):
        skipped["nccl_allreduce"] = (
            f"needs 2 or more CUDA GPUs and an NCCL build; this machine has "
            f"{len(facts.gpus)} GPU(s)" + ("" if facts.nccl or not facts.gpus else ", no NCCL")
        )
    return skipped


def _no_kernels_hint(gpu: GPU, torch_arch: tuple[str, ...]) -> str:
    built = sorted(torch_arch)
    return (
        f"This torch has no kernels for the {gpu.name} (compute capability {gpu.capability[0]}."
        f"{gpu.capability[1]}; it was built for {', '.join(built)}): its first GPU operation would fail "
        "with 'no kernel image is available'. Everything runs on the CPU. For the GPU, install a torch "
        "build that still lists this architecture (pytorch.org/get-started/previous-versions), or pick "
        "a newer GPU."
    )


def _device_and_dtypes(facts: DeviceFacts, skipped: dict[str, str], hints: list[str]) -> tuple[str, str, str, str, str]:
    """(device, kind, description, what fp32 matmuls compute in, the 16-bit dtype) of the first usable of a CUDA
    GPU, an Apple GPU, a TPU and the CPU; adds that device's skipped demos and hints."""
    if facts.gpus:
        gpu = facts.gpus[0]
        cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
        description = f"{gpu.name}, compute capability {cc}, {gpu.memory_bytes / 2**30:.0f} GiB"
        if len(facts.gpus) > 1:
            description += f"; {len(facts.gpus)} GPUs in all"
        half = "bf16" if gpu.native_bf16 else "fp16"
        fp32 = "full float32 (TF32 switched off)" if gpu.native_bf16 else "full float32 (no TF32 on this GPU)"
        if not gpu.native_bf16:
            units = "fp16 tensor cores but no bf16 ones" if gpu.capability >= (7, 0) else "fast fp16 but no bf16"
            hints.append(
                f"{gpu.name} (compute capability {cc}) has {units}: mixed precision runs as fp16 with a "
                "GradScaler. torch.cuda.is_bf16_supported() may still say True, because bf16 runs "
                "emulated there, far slower."
            )
        return "cuda:0", "cuda", description, fp32, half
    if facts.mps:
        half = "bf16" if facts.macos and facts.macos >= (14, 0) else "fp16"
        if half == "fp16":
            hints.append(
                f"bf16 on the Apple GPU needs macOS 14 or newer (this is macOS "
                f"{'.'.join(map(str, facts.macos or ()))}): the 16-bit demos use fp16."
            )
        skipped["accelerator_faster"] = (
            "an Apple GPU shares memory with a CPU that has matrix units of its "
            "own, so either may win on this step: the notebook shows both times"
        )
        return "mps", "mps", "Apple GPU through Metal (MPS), memory shared with the CPU", "float32", half
    if facts.xla:
        description = f"TPU through torch_xla ({facts.tpu_on_pci or 'chips not listed on the PCI bus'})"
        return "xla", "xla", description, "full float32 (set to 'highest'; a TPU's default is one bf16 pass)", "bf16"
    skipped["accelerator_faster"] = "there is no accelerator"
    return "cpu", "cpu", "no accelerator PyTorch can use", "float32", "bf16"


def _install_hints(facts: DeviceFacts, kind: str, unusable: bool) -> list[str]:
    """What to install where hardware is present that this torch cannot use: TPUs without torch_xla, an NVIDIA
    driver without a GPU torch sees (not repeated where the GPU was seen but lacks kernels)."""
    hints = []
    if kind != "xla" and facts.tpu_on_pci:
        hints.append(
            f"This machine has TPU chips ({facts.tpu_on_pci}) but torch_xla is not installed, so "
            "everything runs on the CPU. Install the torch_xla release that matches your torch "
            f"(pip install 'torch_xla[tpu]=={torch.__version__.split('+')[0]}', see github.com/pytorch/xla), then "
            "restart the runtime."
        )
    if not facts.gpus and facts.nvidia_driver and not unusable:
        hints.append(
            "An NVIDIA GPU driver is present but PyTorch sees no GPU: "
            + (
                f"torch says: {facts.cuda_problem} Update the NVIDIA driver, or install a torch built for an "
                "older CUDA (pytorch.org/get-started/previous-versions)."
                if facts.cuda_problem
                else "check nvidia-smi and CUDA_VISIBLE_DEVICES."
                if facts.torch_cuda
                else "this torch is a CPU-only build. Install a CUDA build (pytorch.org/get-started), "
                "e.g. with TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 python3 bootstrap.py "
                "setup after deleting .venv."
            )
        )
    return hints


def apply(kind: str) -> None:
    """Make float32 matmuls on devices of ``kind`` ('cuda', 'xla', ...) compute in float32, so that
    every "fp32" label is true (see ``DevicePlan.fp32_matmul``). ``hardware.pick_device`` calls it."""
    kind = arguments.text("kind", kind)
    full_fp32()
    if kind == "xla":
        _xla_full_precision()


def full_fp32() -> None:
    """float32 matmuls and convolutions in full float32 (no TF32): ``set_float32_matmul_precision("highest")`` and
    ``cudnn.allow_tf32 = False``. torch 2.9 added ``fp32_precision = "ieee"`` settings for the same, but setting
    those beside the older flags makes reading the older ones fail ("mix of the legacy and new APIs"), and torch's
    own code (``cudnn.flags``, inductor's autotuning) still reads them; so the course keeps the older flags while
    they exist. The launcher's and the training script's GPU processes call it too: a fresh process lets cuDNN
    convolutions use TF32."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False


def _xla_full_precision() -> None:  # pragma: no cover - needs torch_xla
    try:
        import torch_xla.backends  # type: ignore[import-not-found]  # torch_xla 2.8+

        torch_xla.backends.set_mat_mul_precision("highest")
        return
    except (ImportError, AttributeError):
        pass
    import torch_xla  # type: ignore[import-not-found]

    # releases before torch_xla.backends have the setting only in torch_xla's private C bindings
    xlac = torch_xla._XLAC  # noqa: SLF001
    setter = getattr(xlac, "_xla_set_mat_mul_precision", None)
    if setter is not None:
        setter("highest")
    else:  # older releases
        xlac._xla_set_use_full_mat_mul_precision(use_full_mat_mul_precision=True)  # noqa: SLF001


def current_plan(device: torch.device | str | None = None) -> DevicePlan:
    """The plan for this machine (``device_plan(DeviceFacts.here())``). Pass the device a notebook actually
    uses: forced onto the CPU (``COURSE_DEVICE=cpu``), the plan is the one for a machine whose
    accelerators PyTorch does not use, so no demo expects one."""
    facts = DeviceFacts.here()
    if device is not None and torch.device(device).type == "cpu":
        facts = replace(facts, gpus=(), mps=False, xla=False)
    return device_plan(facts)


_T4, _L4 = GPU("Tesla T4", (7, 5), 15 * 2**30), GPU("NVIDIA L4", (8, 9), 22 * 2**30)
_H100, _A100 = GPU("NVIDIA H100 80GB HBM3", (9, 0), 79 * 2**30), GPU("NVIDIA A100-SXM4-40GB", (8, 0), 39 * 2**30)

#: Made-up but faithful descriptions of the platforms learners bring (tests and the docs page).
EXAMPLES: dict[str, DeviceFacts] = {
    "Laptop, CPU only": DeviceFacts(),
    "Colab T4": DeviceFacts(gpus=(_T4,), nccl=True, nvidia_driver=True, torch_cuda=True),
    "Kaggle 2 x T4": DeviceFacts(gpus=(_T4, _T4), nccl=True, nvidia_driver=True, torch_cuda=True),
    "Colab / Workbench L4": DeviceFacts(gpus=(_L4,), nccl=True, nvidia_driver=True, torch_cuda=True),
    "H100": DeviceFacts(gpus=(_H100,), nccl=True, nvidia_driver=True, torch_cuda=True),
    "4 x A100": DeviceFacts(gpus=(_A100,) * 4, nccl=True, nvidia_driver=True, torch_cuda=True),
    "GPU, CPU-only torch": DeviceFacts(nvidia_driver=True),
    "M1, macOS 13": DeviceFacts(system="Darwin", macos=(13, 6), mps=True),
    "M3, macOS 14": DeviceFacts(system="Darwin", macos=(14, 5), mps=True),
    "TPU v5e (torch_xla)": DeviceFacts(xla=True, tpu_on_pci="1 x v5e"),
    "TPU v5e, no torch_xla": DeviceFacts(tpu_on_pci="1 x v5e"),
    "Windows laptop": DeviceFacts(system="Windows"),
}


def decision_table(examples: dict[str, DeviceFacts] | None = None) -> str:
    """A Markdown table: platform -> device, 16-bit dtype, backend, skipped demos, hints (their first
    sentence)."""
    rows = [
        "| platform | device | float32 matmul | 16-bit / mixed precision | distributed backends | skipped demos "
        "| hint |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, facts in (EXAMPLES if examples is None else examples).items():
        p = device_plan(facts)
        hint = " ".join(h.split(". ")[0].rstrip(".") + "." for h in p.hints)  # first sentences
        rows.append(
            f"| {name} | {p.device} | {p.fp32_matmul} | {p.mixed_precision}"
            f"{' + GradScaler' if p.grad_scaler else ''} | "
            f"gloo (CPU processes){f' + NCCL on {p.gpu_ranks} GPUs' if p.gpu_ranks else ''} | "
            f"{', '.join(sorted(p.skipped)) or '-'} | {hint or '-'} |"
        )
    return "\n".join(rows)


#: Which catalog chip each example platform has (for ``peaks_table``).
EXAMPLE_CHIPS = {
    "Colab T4": "t4",
    "Colab / Workbench L4": "l4",
    "H100": "h100-sxm",
    "4 x A100": "a100-40gb",
    "TPU v5e (torch_xla)": "tpu-v5e",
}


def peaks_table() -> str:
    """A Markdown table of what to expect on the example accelerators: the catalog's data-sheet peaks in
    fp32 and in the 16-bit dtype the plan picks there (labelled as catalog figures, not measurements)."""
    from .catalog import get_accelerator

    rows = [
        "| platform | chip (catalog key) | fp32 TFLOP/s | 16-bit dtype the course uses | its TFLOP/s | memory GB "
        "| memory GB/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, key in EXAMPLE_CHIPS.items():
        chip, half = get_accelerator(key), device_plan(EXAMPLES[name]).half
        fp32 = chip.peak_tflops.get("fp32")
        rows.append(
            f"| {name} | {chip.name} (`{key}`) | {f'{fp32:g}' if fp32 else '-'} | {half} | "
            f"{chip.peak_tflops[half]:g} | {chip.memory_gb:g} | {chip.memory_bandwidth_gbs:g} |"
        )
    return "\n".join(rows)
