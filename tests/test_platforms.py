"""The course on platforms this machine is not: a TPU's lazy graph, Windows, Apple's GPU, a Vertex AI cluster.

Each test fakes only what the platform decides (a graph cut that counts, the operating system's name, a device
without float64, the cluster variables) and runs the course's real code around it.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib import train


def _events(monkeypatch) -> list[str]:
    """'cut' for each graph cut, 'read' for each tensor value read into Python (float, int, item)."""
    events: list[str] = []
    monkeypatch.setattr(train.step, "graph_cut", lambda device=None: events.append("cut"))
    for name in ("__float__", "__int__", "item"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, _real=real: events.append("read") or _real(t))
    return events


def _data(n: int = 32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_a_training_step_cuts_the_lazy_graph_once_and_reads_only_after_the_cut(monkeypatch):
    """On a TPU a value read before the cut splits the step's graph, and a step without a cut makes the next one
    replay it: the old loop read the loss inside the step and never cut, so from notebook 04 on every step
    recompiled all steps before it. Now: one cut per step, every read after it."""
    model, (x, y) = nn.Linear(4, 3), _data(8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    events = _events(monkeypatch)
    for _ in range(3):
        result = train.train_step(model, (x, y), opt, micro_batches=2)
    per_step = ["cut"] + ["read"] * 4  # two slices: each one's loss and its correct count
    assert events == per_step * 3
    assert result.examples == 8 and 0 <= result.correct <= 8


def test_fit_and_evaluate_cut_once_per_step_and_per_batch(monkeypatch):
    x, y = _data(32)
    data = torch.utils.data.TensorDataset(x, y)
    events = _events(monkeypatch)
    history = train.fit(
        nn.Linear(4, 3), data, epochs=2, batch_size=8, eval_data=data, progress=False, optimizer="sgd", lr=0.1
    )
    steps, eval_batches = 2 * (32 // 8), 2 * 1  # evaluation runs 256 per batch: one batch per epoch
    assert events.count("cut") == steps + eval_batches and len(history.epochs) == 2
    events.clear()
    metrics = train.evaluate(nn.Linear(4, 3), data, batch_size=16)
    first = events.index("cut")  # before it, at most the data loader's seed, drawn on the CPU
    assert events[first:] == ["cut", "read", "read"] * 2 and first <= 1 and 0 <= metrics["acc"] <= 1


# --- Windows -------------------------------------------------------------------------------------------------


def test_windows_gets_a_store_without_libuv_and_no_loopback_name(monkeypatch):
    """Windows wheels build TCPStore without libuv, the default everywhere else: asking for it stopped every
    multi-process demo at its first launch."""
    from course_lib.comm import launcher

    made = []
    monkeypatch.setattr(launcher.dist, "TCPStore", lambda *a, **k: made.append(k) or "store")
    assert launcher.tcp_store("127.0.0.1", 0, 2, is_master=True, platform="win32") == "store"
    assert launcher.tcp_store("127.0.0.1", 0, 2, is_master=True, platform="linux") == "store"
    assert made[0]["use_libuv"] is False and "use_libuv" not in made[1]
    assert launcher.loopback_interface("win32") is None


def test_windows_cpu_flags_come_from_is_processor_feature_present(monkeypatch):
    """No /proc/cpuinfo on Windows: the vector width comes from IsProcessorFeaturePresent, and bf16 stays unknown
    (Windows reports no such feature), so notebook 00 does not judge its bf16 claim from flags it cannot read."""
    import ctypes
    import types

    from course_lib import hardware
    from course_lib.hardware import processor

    has = {10, 38, 39, 40}  # SSE2, SSE4.2, AVX, AVX2: an AVX2 laptop
    fake = types.SimpleNamespace(kernel32=types.SimpleNamespace(IsProcessorFeaturePresent=lambda n: n in has))
    monkeypatch.setattr(ctypes, "windll", fake, raising=False)
    flags = processor._windows_flags()
    assert flags == {"sse2", "sse4_2", "avx", "avx2"}
    assert hardware.cpu_capabilities(flags, "AMD64")["vector_isa"] == "AVX2"
    assert not hardware.bf16_flags_known("Windows", flags)
    assert hardware.bf16_flags_known("Linux", {"avx2"}) and not hardware.bf16_flags_known("Linux", set())
    monkeypatch.delattr(ctypes, "windll")
    assert processor._windows_flags() == set()  # not Windows after all: nothing, no error


def test_compiled_timings_are_skipped_with_a_reason_without_a_cxx_compiler(monkeypatch, capsys):
    from course_lib.compression import quantization

    assert quantization._cxx_compiler("win32", which=lambda name: None) is None
    assert quantization._cxx_compiler("win32", which=lambda name: f"C:/VS/{name}.exe") == "C:/VS/cl.exe"
    assert quantization._cxx_compiler("linux", which=lambda name: "/usr/bin/g++" if name == "g++" else None)
    monkeypatch.setattr(quantization, "_cxx_compiler", lambda *a, **k: None)
    assert not quantization.compile_ready("cpu")
    assert "C++ compiler" in capsys.readouterr().out
    assert quantization.compile_ready("cuda")  # a GPU's kernels come from Triton


# --- Apple's GPU (MPS): no float64 -----------------------------------------------------------------------------


class OnMPS(torch.Tensor):
    """A tensor that behaves as one on Apple's GPU in the way that matters here: float64 is refused until it is
    moved to the CPU (MPS has no float64)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cpu:
            return args[0].as_subclass(torch.Tensor).clone()
        to_double = func is torch.Tensor.double or (
            func is torch.Tensor.to and (torch.float64 in args[1:] or kwargs.get("dtype") == torch.float64)
        )
        if to_double:
            raise TypeError("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64")
        return super().__torch_function__(func, types, args, kwargs)


def test_the_fake_mps_tensor_refuses_float64():
    t = torch.randn(3, 3).as_subclass(OnMPS)
    import pytest

    with pytest.raises(TypeError, match="float64"):
        t.double()
    assert t.cpu().double().dtype == torch.float64


def test_svd_and_fedavg_move_to_the_cpu_before_float64():
    """05.3's SVD and 06.5's FedAvg compute in float64: on MPS they must move to the CPU first (05.3 stopped)."""
    from course_lib.compression import lowrank
    from course_lib.parallel import federated

    w = torch.randn(8, 6, generator=torch.Generator().manual_seed(0))
    s = lowrank.singular_values(w.as_subclass(OnMPS))
    assert torch.allclose(s, torch.linalg.svdvals(w.double()))
    states = [{"w": (w + i).as_subclass(OnMPS)} for i in range(2)]
    avg = federated.fedavg(states, [1, 3])
    assert torch.allclose(avg["w"].as_subclass(torch.Tensor), w + 0.75)


# --- CUDA: a torch without kernels for the GPU, a driver too old ------------------------------------------------


def test_a_gpu_this_torch_has_no_kernels_for_falls_back_to_the_cpu_with_the_reason():
    """A P100 (6.0) with a current CUDA wheel fails at the first kernel ('no kernel image is available'): the plan
    says so and runs on the CPU."""
    from course_lib import devices

    built = ("sm_75", "sm_80", "sm_86", "sm_90", "compute_90")
    assert devices.runs_on((8, 9), built) and devices.runs_on((7, 5), built) and devices.runs_on((10, 0), built)
    assert not devices.runs_on((6, 0), built) and not devices.runs_on((7, 0), built)
    assert devices.runs_on((6, 1), ("sm_60",)) and not devices.runs_on((6, 0), ("sm_61",))
    p100 = devices.GPU("Tesla P100-PCIE-16GB", (6, 0), 16 * 2**30)
    plan = devices.device_plan(
        devices.DeviceFacts(gpus=(p100,), nccl=True, nvidia_driver=True, torch_cuda=True, torch_arch=built)
    )
    assert plan.device == "cpu" and "no kernel image is available" in " ".join(plan.hints)
    assert "device_memory" in plan.skipped
    t4 = devices.GPU("Tesla T4", (7, 5), 15 * 2**30)
    assert (
        devices.device_plan(
            devices.DeviceFacts(gpus=(t4,), nccl=True, nvidia_driver=True, torch_cuda=True, torch_arch=built)
        ).device
        == "cuda:0"
    )


def test_a_driver_too_old_is_told_apart_from_a_cpu_only_torch():
    from course_lib import devices

    old = "The NVIDIA driver on your system is too old (found version 11040)."
    hints = " ".join(
        devices.device_plan(devices.DeviceFacts(nvidia_driver=True, torch_cuda=True, cuda_problem=old)).hints
    )
    assert old in hints and "Update the NVIDIA driver" in hints
    cpu_only = " ".join(devices.device_plan(devices.DeviceFacts(nvidia_driver=True)).hints)
    assert "CPU-only build" in cpu_only


def test_full_fp32_switches_tf32_off_and_leaves_torch_able_to_read_its_flags():
    """torch 2.9's fp32_precision settings beside the older flags make reading those fail ("mix of the legacy and
    new APIs"), and torch's own code reads them: full_fp32 keeps to the older ones."""
    from course_lib import devices

    devices.full_fp32()
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cudnn.allow_tf32 is False and not torch.backends.cuda.matmul.allow_tf32
    with torch.backends.cudnn.flags(enabled=True):
        pass


def test_the_blas_is_read_from_its_own_line_of_the_build_config():
    from course_lib import hardware

    mac = (
        "  - LAPACK is enabled (usually provided by MKL)\n  - Build settings: BLAS_INFO=accelerate, "
        "BUILD_TYPE=Release, LAPACK_INFO=accelerate, USE_MKL=OFF, USE_MKLDNN=OFF"
    )
    assert hardware.blas_library(mac) == "Accelerate"
    assert (
        hardware.blas_library("BLAS_INFO=open, LAPACK_INFO=open, USE_MKL=OFF (usually provided by MKL)") == "OpenBLAS"
    )
    assert hardware.blas_library("BLAS_INFO=mkl, LAPACK_INFO=mkl") == "MKL"
    assert hardware.blas_library("no such line") == "unknown"
    assert hardware.windows_vendor_family("AMD64 Family 25 Model 97 Stepping 2, AuthenticAMD") == ("AuthenticAMD", 25)
    assert hardware.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 25) == 32  # Zen 4 on Windows too
