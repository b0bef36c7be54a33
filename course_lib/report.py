"""What the course will do on this machine, in words (notebook 00 and ``course doctor``)."""
from __future__ import annotations

from .hardware import HardwareInfo, detect

GET_AN_ACCELERATOR = {
    "colab": "Runtime > Change runtime type > pick a GPU (T4 on the free tier) or a TPU, then re-run from the top.",
    "kaggle": "Notebook sidebar > Session options > Accelerator > GPU T4 x2 or TPU (needs a verified phone number).",
    "vertex-ai-workbench": "Stop the instance, then Hardware > Modify: attach a GPU (T4, L4, V100, A100) "
                           "and restart; TPUs are used from a TPU VM rather than a Workbench instance.",
    "local": "Run the notebooks on Google Colab (the badge at the top) and choose a GPU runtime, or on a "
             "machine with an NVIDIA GPU and a CUDA build of PyTorch (or Apple silicon, which uses MPS).",
}


def plan(info: HardwareInfo | None = None) -> list[tuple[str, str]]:
    """(topic, what happens here) pairs describing how the demos adapt to this machine."""
    info = info or detect()
    kinds = {a.kind for a in info.accelerators}
    gpu = next((a for a in info.accelerators if a.kind == "cuda"), None)
    n_gpus = sum(a.kind == "cuda" for a in info.accelerators)
    simd = set(info.cpu.simd)
    cores = info.cpu.physical_cores
    rows = [("CPU demos (matmul, roofline, threads, classical ML)",
             f"run on {cores} physical core(s) with {info.torch_threads} PyTorch thread(s)")]
    if gpu:
        rows.append(("GPU demos (CPU vs GPU step time, fp16 autocast, pinned copies, GPU memory)",
                     f"use {gpu.name}"))
    elif "mps" in kinds:
        rows.append(("GPU demos", "use the Apple GPU through MPS; CUDA-only parts (pinned copies, NCCL) are skipped"))
    elif "xla" in kinds:
        rows.append(("TPU", "torch_xla is present: the device is XLA; CUDA-only parts are skipped"))
    else:
        rows.append(("GPU demos", "skipped with an explanation; the catalog shows what a GPU would do"))
    if "AVX-512 BF16" in simd or "AMX BF16" in simd or "BF16 (Arm)" in simd:
        rows.append(("Mixed precision on the CPU", "bf16 has hardware support here: expect a real speed-up"))
    else:
        rows.append(("Mixed precision on the CPU", "no native bf16 on this CPU: bf16 saves memory but may not be faster"))
    ram_gib = info.ram_bytes / 2**30
    rows.append(("Memory demos", f"{ram_gib:.0f} GiB RAM; out-of-memory runs only inside a capped subprocess"))
    if n_gpus >= 2:
        rows.append(("Distributed demos", f"NCCL across {n_gpus} GPUs, gloo on the CPU as well"))
    else:
        rows.append(("Distributed demos", "2-4 local CPU processes talking over gloo on 127.0.0.1"
                                          + (" (one core: slower, still correct)" if cores < 2 else "")))
    if ram_gib < 4:
        rows.append(("Warning", "less than 4 GiB of RAM: close other programs; some demos shrink their sizes"))
    rows.append(("Want an accelerator?", GET_AN_ACCELERATOR.get(info.platform, GET_AN_ACCELERATOR["local"])))
    return rows


def plan_text(info: HardwareInfo | None = None) -> str:
    """``plan`` as aligned text."""
    rows = plan(info)
    width = max(len(topic) for topic, _ in rows)
    return "\n".join(f"{topic:<{width}} : {text}" for topic, text in rows)
