"""course_lib.devices: what runs where, decided from descriptions of hardware this machine lacks.

Each platform a learner may bring is a ``DeviceFacts``; the decisions (device, dtypes, backend,
skipped demos, hints) are checked for a T4, an L4, an H100, 2 and 4 GPUs, an M1 and an M3, a TPU
v5e, a TPU runtime without torch_xla, an NVIDIA GPU with a CPU-only torch, and Windows.
"""

from __future__ import annotations

import os

import pytest
import torch

from course_lib import cli, devices, doctor, hardware, timing
from course_lib.devices import DeviceFacts, GPU

EX = devices.EXAMPLES
ALL_DEMOS = set(devices.DEMOS)

# platform -> (device, 16-bit dtype, GradScaler, NCCL ranks, skipped demos)
EXPECTED = {
    "Laptop, CPU only": ("cpu", "bf16", False, 0, ALL_DEMOS - {"memory_cap"}),
    "Colab T4": ("cuda:0", "fp16", True, 0, {"nccl_allreduce"}),
    "Kaggle 2 x T4": ("cuda:0", "fp16", True, 2, set()),
    "Colab / Workbench L4": ("cuda:0", "bf16", False, 0, {"nccl_allreduce"}),
    "H100": ("cuda:0", "bf16", False, 0, {"nccl_allreduce"}),
    "4 x A100": ("cuda:0", "bf16", False, 4, set()),
    "GPU, CPU-only torch": ("cpu", "bf16", False, 0, ALL_DEMOS - {"memory_cap"}),
    "M1, macOS 13": ("mps", "fp16", False, 0, ALL_DEMOS),
    "M3, macOS 14": ("mps", "bf16", False, 0, ALL_DEMOS),
    "TPU v5e (torch_xla)": ("xla", "bf16", False, 0, {"device_memory", "host_to_device", "nccl_allreduce"}),
    "TPU v5e, no torch_xla": ("cpu", "bf16", False, 0, ALL_DEMOS - {"memory_cap"}),
    "Windows laptop": ("cpu", "bf16", False, 0, ALL_DEMOS),
}


def test_every_example_is_covered():
    assert set(EXPECTED) == set(EX)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_decisions_per_platform(name):
    device, half, scaler, ranks, skipped = EXPECTED[name]
    p = devices.device_plan(EX[name])
    assert (p.device, p.half, p.mixed_precision, p.grad_scaler, p.gpu_ranks) == (
        device,
        half,
        f"{half}-mixed",
        scaler,
        ranks,
    )
    assert set(p.skipped) == skipped
    assert p.backend == ("nccl" if ranks else "gloo")
    assert all(len(why) > 20 for why in p.skipped.values()), "every skip says why"
    assert all(p.runs(d) == (d not in skipped) for d in devices.DEMOS)
    assert p.device in p.report() and all(why in p.report() for why in p.skipped.values())


def test_fp32_means_fp32_where_the_hardware_would_round():
    assert "bf16 pass" in devices.device_plan(EX["TPU v5e (torch_xla)"]).fp32_matmul
    assert "TF32 switched off" in devices.device_plan(EX["H100"]).fp32_matmul
    assert "no TF32" in devices.device_plan(EX["Colab T4"]).fp32_matmul


def test_hints_name_the_fix():
    tpu = " ".join(devices.device_plan(EX["TPU v5e, no torch_xla"]).hints)
    assert "torch_xla is not installed" in tpu and "1 x v5e" in tpu and "restart" in tpu
    gpu = " ".join(devices.device_plan(EX["GPU, CPU-only torch"]).hints)
    assert "CPU-only build" in gpu and "TORCH_INDEX_URL" in gpu
    seen = devices.device_plan(DeviceFacts(nvidia_driver=True, torch_cuda=True)).hints
    assert "CUDA_VISIBLE_DEVICES" in " ".join(seen)
    t4 = " ".join(devices.device_plan(EX["Colab T4"]).hints)
    assert "no bf16" in t4 and "is_bf16_supported" in t4
    assert "macOS 14" in " ".join(devices.device_plan(EX["M1, macOS 13"]).hints)
    assert not devices.device_plan(EX["H100"]).hints and not devices.device_plan(EX["M3, macOS 14"]).hints


def test_bf16_follows_the_compute_capability():
    assert [GPU("x", cc, 1).native_bf16 for cc in ((6, 0), (7, 0), (7, 5), (8, 0), (8, 9), (9, 0))] == [
        False,
        False,
        False,
        True,
        True,
        True,
    ]
    p = devices.device_plan(DeviceFacts(gpus=(GPU("Tesla V100", (7, 0), 16 * 2**30),) * 2, nccl=False))
    assert p.half == "fp16" and p.gpu_ranks == 0 and "no NCCL" in p.skipped["nccl_allreduce"]
    assert "fp16 tensor cores" in p.hints[0]
    p100 = devices.device_plan(DeviceFacts(gpus=(GPU("Tesla P100-PCIE-16GB", (6, 0), 16 * 2**30),)))
    assert p100.half == "fp16" and p100.grad_scaler and "tensor cores" not in p100.hints[0]


def test_decision_table_and_cli(capsys):
    table = devices.decision_table()
    assert table.count("\n") == len(EX) + 1 and "| Colab T4 | cuda:0 |" in table
    assert "gloo (CPU processes) + NCCL on 4 GPUs" in table
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "TPU v5e, no torch_xla" in out and "This machine" in out


def test_check_prints_the_reason(capsys):
    p = devices.device_plan(EX["Colab T4"])
    assert p.check("host_to_device") and capsys.readouterr().out == ""
    assert not p.check("nccl_allreduce")
    assert capsys.readouterr().out == f"Skipped: {p.skipped['nccl_allreduce']}\n"


def test_bad_input():
    with pytest.raises(TypeError, match="DeviceFacts"):
        devices.device_plan("T4")
    with pytest.raises(ValueError, match="demo must be one of"):
        devices.device_plan(DeviceFacts()).runs("warp_drive")


def test_tpu_found_on_the_pci_bus(tmp_path):
    for i, (vendor, device) in enumerate(
        [("0x1ae0", "0x0063"), ("0x1ae0", "0x0063"), ("0x10de", "0x20b0"), ("0x1ae0", "0x1234")]
    ):
        d = tmp_path / f"0000:00:0{i}.0"
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
    assert devices._tpu_generation(str(tmp_path)) == "2 x v5e"
    assert devices._tpu_generation(str(tmp_path / "missing")) is None


def test_this_machine():
    facts = DeviceFacts.here()
    p = devices.current_plan()
    assert p.device == hardware.pick_device().type + (":0" if p.kind == "cuda" else "")
    assert devices.current_plan("cpu").device == "cpu"
    assert (not facts.gpus) == ("host_to_device" in p.skipped)
    rows = dict(doctor.adaptations(device_plan=devices.device_plan(EX["4 x A100"])))
    assert "NCCL across 4 GPUs" in rows["Distributed demos"] and "Want an accelerator?" not in rows
    rows = doctor.adaptations(device_plan=devices.device_plan(EX["TPU v5e, no torch_xla"]))
    assert any("torch_xla is not installed" in text for topic, text in rows if topic == "Note")


def test_pick_device_sets_full_float32(monkeypatch):
    monkeypatch.delenv(hardware._DEVICE_ENV_VAR, raising=False)
    torch.set_float32_matmul_precision("medium")
    try:
        hardware.pick_device()
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_copy_kernel_copies():
    src, dst = torch.arange(10.0), torch.zeros(10)
    timing.copy_kernel(src, dst)()
    assert torch.equal(src, dst)
    with pytest.raises(TypeError, match="tensors"):
        timing.copy_kernel([1.0], dst)


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="gloo needs a POSIX host here")
def test_ring_uses_paired_sends_on_three_ranks():
    from course_lib import comm

    rows = comm.launch(comm.check_ring_against_library, 3, [1, 2, 1000, 2**12 + 1])[0]
    assert all(r["allclose"] for r in rows)


def test_grad_scaler_only_where_fp16_needs_it():
    from course_lib import train

    assert train.grad_scaler("fp16-mixed", "cpu") is None and train.grad_scaler("bf16-mixed", "cpu") is None
    assert train.grad_scaler("fp32") is None
    with pytest.raises(ValueError):
        train.grad_scaler("fp12")


def test_the_gpu_and_tpu_page_shows_the_current_tables():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "gpu-and-tpu.md").read_text()
    assert devices.decision_table() in page, "docs/gpu-and-tpu.md: paste the output of devices.decision_table()"
    assert devices.peaks_table() in page, "docs/gpu-and-tpu.md: paste the output of devices.peaks_table()"
    assert all(f"`{demo}`" in page for demo in devices.DEMOS)
    assert set(devices.EXAMPLE_CHIPS) <= set(devices.EXAMPLES)
