"""What the course will do on this machine, in words (notebook 00 and ``course doctor``)."""

from __future__ import annotations

from . import devices
from .cpu import Plan
from .cpu import thread_plan
from .hardware import HardwareInfo, detect

_GET_AN_ACCELERATOR = {
    "colab": "Runtime > Change runtime type > pick a GPU (T4 on the free tier) or a TPU, then re-run from the top.",
    "kaggle": "Notebook sidebar > Session options > Accelerator > GPU T4 x2 or TPU (needs a verified phone number).",
    "vertex-ai-workbench": "Stop the instance, then Hardware > Modify: attach a GPU (T4, L4, V100, A100) "
    "and restart; TPUs are used from a TPU VM rather than a Workbench instance.",
    "local": "Run the notebooks on Google Colab (the badge at the top) and choose a GPU runtime, or on a "
    "machine with an NVIDIA GPU and a CUDA build of PyTorch (or Apple silicon, which uses MPS).",
}


def adaptations(
    info: HardwareInfo | None = None, decided: Plan | None = None, device_plan: devices.DevicePlan | None = None
) -> list[tuple[str, str]]:
    """(topic, what happens here) pairs describing how the demos adapt to this machine.

    ``decided`` is ``course_lib.cpu.profile().plan`` (free cores, measured bf16 speed); without it
    the plan is made from the CPU's flags alone. ``device_plan`` is ``devices.current_plan()``
    unless given (the device, dtypes, backend, skipped demos). A pure function of its inputs.
    """
    info = info or detect()
    decided = decided or thread_plan(info.cpu)
    dp = device_plan or devices.current_plan()
    cores = info.cpu.physical_cores
    busy = (
        f"; other programs keep {cores - decided.free_cores} busy, so PyTorch uses the {decided.free_cores} free "
        "one(s) and timings are noisier"
        if decided.busy
        else ""
    )
    rows = [
        (
            "CPU demos (matmul, roofline, threads, classical ML)",
            f"run on {decided.threads} PyTorch thread(s), {cores} physical core(s){busy}",
        )
    ]
    if dp.kind == "cpu":
        rows.append(("GPU demos", "skipped with an explanation; the catalog shows what a GPU would do"))
    else:
        rows.append(
            (
                "Accelerator demos",
                f"use {dp.device}: {dp.description}; float32 matmuls in {dp.fp32_matmul}, "
                f"16-bit demos in {dp.half}" + (" with a GradScaler" if dp.grad_scaler else ""),
            )
        )
    ratio = f" (measured: {decided.bf16_ratio:.2g}x fp32's speed)" if decided.bf16_ratio is not None else ""
    rows.append(
        (
            "Mixed precision on the CPU",
            {
                "native": f"bf16 ran {'faster than' if (decided.bf16_ratio or 0) > 1.2 else 'about as fast as'} fp32 "
                f"here{ratio}: bf16 demos run full size"
                + (" and show a speed-up" if (decided.bf16_ratio or 0) > 1.2 else ""),
                "slow": f"bf16 works but runs slower than fp32 here{ratio}: demos show its memory saving; the speed-up "
                "needs a CPU with bf16 units, or a GPU with bf16 tensor cores (NVIDIA since Ampere; a T4: fp16 only)",
                "emulated": f"bf16 goes through slow fallback (emulated) compute routines here{ratio}: bf16 demos "
                f"run at {decided.bf16_scale:g}x size and show why bf16 does not pay here",
                "unknown": "bf16 speed not measured here: bf16 saves memory; cpu.profile() measures whether it is "
                "faster",
            }[decided.bf16],
        )
    )
    if cores < 2:
        rows.append(
            (
                "Threads and processes",
                "one physical core: thread-scaling and worker-process demos report "
                "what they measure instead of asserting a speed-up",
            )
        )
    ram_gib = info.ram_bytes / 2**30
    rows.append(
        (
            "Memory demos",
            f"{ram_gib:.1f} GiB RAM; out-of-memory runs only inside a capped subprocess"
            + ("" if dp.runs("memory_cap") else ", which this system cannot do: those demos are skipped"),
        )
    )
    local = "2-4 local CPU processes, one thread each, talking over gloo (PyTorch's CPU communication library) on " + (
        "127.0.0.1"
        + (f" (more processes than the {cores} free core(s) take turns: slower, still correct)" if cores < 4 else "")
    )
    rows.append(("Distributed demos", local + (f"; NCCL across {dp.gpu_ranks} GPUs as well" if dp.gpu_ranks else "")))
    if dp.kind != "cpu":  # on a CPU the "GPU demos" row above says it
        rows += [("Skipped here", f"{devices.DEMOS[k]}: {why}") for k, why in dp.skipped.items() if k != "memory_cap"]
    rows += [("Note", hint) for hint in dp.hints]
    if ram_gib < 4:
        rows.append(("Warning", "less than 4 GiB of RAM: close other programs; some demos shrink their sizes"))
    if dp.kind == "cpu":
        rows.append(("Want an accelerator?", _GET_AN_ACCELERATOR.get(info.platform, _GET_AN_ACCELERATOR["local"])))
    return rows


def adaptations_text(
    info: HardwareInfo | None = None, decided: Plan | None = None, device_plan: devices.DevicePlan | None = None
) -> str:
    """``adaptations`` as aligned text."""
    rows = adaptations(info, decided, device_plan)
    width = max(len(topic) for topic, _ in rows)
    return "\n".join(f"{topic:<{width}} : {text}" for topic, text in rows)
