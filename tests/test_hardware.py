import platform
import sys

import pytest
import torch

from course_lib import hardware, seeds


def test_detect_is_consistent():
    info = hardware.detect()
    assert 1 <= info.cpu.physical_cores <= info.cpu.logical_cores
    assert info.ram_bytes >= info.available_ram_bytes > 0
    assert info.platform in hardware.PLATFORMS
    assert info.torch_version == torch.__version__
    assert info.torch_threads == torch.get_num_threads()
    assert isinstance(info.to_dict()["cpu"]["simd"], (list, tuple))
    report = info.report()
    for word in ("CPU", "Cores", "RAM", "PyTorch", "Accelerator"):
        assert word in report


def test_simd_names():
    assert hardware.simd_features({"avx2", "avx512f", "amx_bf16", "junk"}) == ("AVX2", "AVX-512", "AMX BF16")
    assert hardware.simd_features(set()) == ()


def test_pick_device_default_and_forced(monkeypatch):
    monkeypatch.delenv(hardware._DEVICE_ENV_VAR, raising=False)
    dev = hardware.pick_device()
    assert torch.ones(2, device=dev).sum().item() == 2
    assert hardware.pick_device("cpu") == torch.device("cpu")
    monkeypatch.setenv(hardware._DEVICE_ENV_VAR, "cpu")
    assert hardware.pick_device() == torch.device("cpu")


def test_pick_device_rejects_nonsense(monkeypatch):
    with pytest.raises(ValueError, match="accepted values.*'cuda'"):
        hardware.pick_device("gpu")
    with pytest.raises(ValueError, match="accepted values"):
        hardware.pick_device("GPU:0")
    with pytest.raises(TypeError):
        hardware.pick_device(3)
    monkeypatch.setenv(hardware._DEVICE_ENV_VAR, "quantum")
    with pytest.raises(ValueError, match="COURSE_DEVICE"):
        hardware.pick_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_pick_device_missing_kind():
    with pytest.raises(ValueError, match="no cuda device"):
        hardware.pick_device("cuda")
    with pytest.raises(ValueError, match="available: .*cpu"):
        hardware.pick_device("cuda:7")


def test_a_device_index_beyond_the_machine_is_refused():
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n:
        with pytest.raises(ValueError, match=f"has {n} cuda device"):
            hardware.as_device(f"cuda:{n}")
        assert hardware.as_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="whole number"):
        hardware.as_device("cpu:x")
    assert hardware.as_device(" CPU ") == torch.device("cpu") == hardware.as_device(None)
    with pytest.raises(TypeError, match="torch.device or a str"):
        hardware.as_device(0)


def test_platform_override(monkeypatch):
    monkeypatch.setenv("COURSE_PLATFORM", "colab")
    assert hardware.detect_platform() == "colab"
    monkeypatch.setenv("COURSE_PLATFORM", "mars")
    with pytest.raises(ValueError, match="COURSE_PLATFORM"):
        hardware.detect_platform()


def test_platform_markers(monkeypatch):
    monkeypatch.delenv("COURSE_PLATFORM", raising=False)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert hardware.detect_platform() == "kaggle"


def test_seed_everything_repeats():
    seeds.seed_everything(3)
    a = torch.randn(4)
    seeds.seed_everything(3)
    assert torch.equal(a, torch.randn(4))
    with pytest.raises(ValueError, match="seed"):
        seeds.seed_everything(-1)
    for bad in (1.5, "3", True):
        with pytest.raises(TypeError, match="seed"):
            seeds.seed_everything(bad)


def test_synchronize_checks_its_device():
    assert hardware.synchronize("cpu") is None and hardware.synchronize(None) is None
    with pytest.raises(ValueError, match="'gpu' is not known.*'cuda'"):
        hardware.synchronize("gpu")


def test_usable_cpus_respects_the_affinity_mask():
    import os

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert hardware.usable_cpus() == 1
        assert hardware.detect().cpu.physical_cores == 1  # as under `taskset -c 0`
    finally:
        os.sched_setaffinity(0, before)
    assert 1 <= hardware.usable_cpus() <= len(before)


def test_cpu_peak_flops_is_cores_clock_and_lanes():
    assert hardware.cpu_peak_flops(2, 2.5, "AVX2") == pytest.approx(160e9)
    assert hardware.cpu_peak_flops(4, 3.0, "avx-512") == pytest.approx(4 * 3e9 * 64)
    with pytest.raises(ValueError, match="vector_isa"):
        hardware.cpu_peak_flops(2, 2.5, "MMX")
    with pytest.raises(ValueError, match="cores"):
        hardware.cpu_peak_flops(0, 2.5, "AVX2")
    with pytest.raises(ValueError, match="ghz"):
        hardware.cpu_peak_flops(2, -1, "AVX2")
    ghz = hardware.cpu_clock_ghz()
    assert ghz is None or 0.2 < ghz < 7


def test_cpu_flags_are_the_raw_names_behind_the_simd_list():
    flags = hardware.cpu_flags()
    assert isinstance(flags, frozenset)
    assert hardware.simd_features(set(flags)) == tuple(
        n for f, n in hardware.processor._SIMD_FLAGS.items() if f in flags
    )
    assert hardware.simd_features({"avx2", "avx_vnni"}) == ("AVX2", "AVX-VNNI")


def test_zen_4_runs_avx_512_at_half_width():
    assert hardware.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 25) == 32  # Zen 4: 512-bit ops on 256-bit units
    assert hardware.fp32_flops_per_cycle("AVX-512", "GenuineIntel", 6) == 64
    assert hardware.fp32_flops_per_cycle("AVX2", "AuthenticAMD", 25) == 32
    assert hardware.cpu_peak_flops(2, 2.5, "AVX-512", flops_per_cycle=32) == pytest.approx(160e9)
    vendor, family = hardware.cpu_vendor_family()
    assert isinstance(vendor, str) and (family is None or family > 0)


def test_torch_kernels_never_wider_than_the_cpu_flags():
    """Notebook 00 prints this consistency: PyTorch's kernels never use a wider ISA than the CPU lists."""
    info = hardware.detect()
    simd = set(info.cpu.simd)
    if info.cpu.torch_capability == "AVX512":
        assert "AVX-512" in simd
    if "AVX-512" in simd:
        assert info.cpu.torch_capability in {"AVX512", "AVX2"}
    assert 1 <= info.torch_threads <= info.cpu.logical_cores


def test_bf16_counts_as_absent_where_onednn_is_held_below_it(monkeypatch):
    flags = {"avx2", "avx512f", "avx512_bf16"}
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert hardware.processor._usable_capabilities(flags)["native_bf16"] is (
        platform.machine().lower() in ("x86_64", "amd64")
    )
    for held in ("avx2", "AVX512_CORE", "AVX512_CORE_VNNI"):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", held)
        assert hardware.processor._usable_capabilities(flags)["native_bf16"] is False
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert hardware.onednn_isa_limit() == "AVX512_CORE_AMX"
    for unlimited in ("ALL", "default", " all "):  # oneDNN's names for no limit: nothing is held
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", unlimited)
        assert hardware.onednn_isa_limit() == ""
        assert hardware.processor._usable_capabilities(flags)["native_bf16"] is (
            platform.machine().lower() in ("x86_64", "amd64")
        )


def test_apple_m_series_neon_peak_counts_four_pipes(monkeypatch):
    assert hardware.fp32_flops_per_cycle("NEON", "Apple") == 32
    assert hardware.fp32_flops_per_cycle("NEON") == 16
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert hardware.cpu_vendor_family() == ("Apple", None)


def test_cache_sizes_read_sysfs_levels_and_skip_instruction_caches(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware.processor.sys, "platform", "linux")
    for i, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"), (3, "Unified", "36M")]
    ):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert hardware.cache_sizes(str(tmp_path)) == {"L1d": 48 * 2**10, "L2": 2 * 2**20, "L3": 36 * 2**20}
    assert hardware.cache_sizes(str(tmp_path / "missing")) == {}, "unknown where the OS reports nothing"
    assert hardware.processor._size_bytes("garbage") is None


def test_cache_sizes_here_are_plausible():
    sizes = hardware.cache_sizes()
    assert all(2**10 <= b <= 2**31 for b in sizes.values()), sizes
    levels = [sizes[k] for k in ("L1d", "L2", "L3") if k in sizes]
    assert levels == sorted(levels), f"each level is at least as large as the one before: {sizes}"


def test_blas_flops_per_cycle_caps_mkl_on_amd_at_avx2(monkeypatch):
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    assert hardware.blas_flops_per_cycle(64, "AuthenticAMD", "MKL") == 32  # Zen 5: MKL runs its AVX2 code
    assert hardware.blas_flops_per_cycle(32, "AuthenticAMD", "MKL") == 32  # Zen 4: already 32
    assert hardware.blas_flops_per_cycle(64, "AuthenticAMD", "OpenBLAS") == 64
    assert hardware.blas_flops_per_cycle(64, "GenuineIntel", "MKL") == 64
    assert hardware.blas_flops_per_cycle(0, "AuthenticAMD", "MKL") == 0  # no vector unit known
    with pytest.raises(ValueError, match="flops_per_cycle"):
        hardware.blas_flops_per_cycle(-1, "AuthenticAMD", "MKL")


def test_mkl_held_by_its_own_setting_counts_the_held_width(monkeypatch):
    """MKL_ENABLE_INSTRUCTIONS reaches MKL's float32 products, which PyTorch's own settings do not: an AVX-512 Xeon
    held to AVX2 is counted at AVX2's 32 FLOPs a cycle, and its 8 lanes are said to come from the hold."""
    from course_lib.hardware import peak

    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "avx2")
    assert peak.mkl_hold() == "AVX2"
    assert peak.blas_flops_per_cycle(64, "GenuineIntel", "MKL") == 32
    assert peak.blas_flops_per_cycle(64, "GenuineIntel", "OpenBLAS") == 64  # the setting is MKL's alone
    assert peak.library_flops_per_cycle("AVX-512", "GenuineIntel", 6, blas="MKL") == 32
    assert peak.library_flops_per_cycle("AVX-512", "GenuineIntel", 6, blas="OpenBLAS") == 64
    monkeypatch.setattr(peak, "cpu_vendor_family", lambda: ("GenuineIntel", 6))
    monkeypatch.setattr(peak, "cpu_clock_ghz", lambda: 2.0)
    sheet = peak.sheet_peak(2, "AVX-512", "Intel(R) Xeon(R) Platinum 8480+", "MKL")
    assert (sheet.per_cycle, sheet.lanes) == (32, 8) and "MKL_ENABLE_INSTRUCTIONS" in sheet.why
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX512")  # allows the chip's full width: no hold
    assert peak.mkl_hold() == "" and peak.blas_flops_per_cycle(64, "GenuineIntel", "MKL") == 64
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS")
    assert peak.library_flops_per_cycle("AVX-512", "AuthenticAMD", 26, blas="MKL") == 64  # Zen 5: the chip's count


def test_bf16_dot_model_is_twice_the_blas_width_share():
    from course_lib.hardware.peak import bf16_dot_over_fp32

    zen4 = bf16_dot_over_fp32("AVX-512", "AMD EPYC 9654", "MKL", vendor="AuthenticAMD", family=25)
    zen5 = bf16_dot_over_fp32("AVX-512", "AMD EPYC 9655", "MKL", vendor="AuthenticAMD", family=26)
    xeon = bf16_dot_over_fp32("AVX-512", "Intel(R) Xeon(R) Gold 6348", "MKL", vendor="GenuineIntel", family=6)
    assert (zen4, zen5, xeon) == (2.0, 4.0, 2.0)  # Zen 5: MKL's AVX2 path leaves its 512-bit units half idle
    assert bf16_dot_over_fp32("AVX-512", "AMD EPYC 9655", "OpenBLAS", vendor="AuthenticAMD", family=26) == 2.0
    with pytest.raises(ValueError, match="vector_isa"):
        bf16_dot_over_fp32("AVX-1024", vendor="GenuineIntel", family=6)
    assert bf16_dot_over_fp32("AVX-512", blas="MKL") in (2.0, 4.0)  # this CPU, detected


def test_sheet_peak_is_cores_x_clock_x_flops_per_cycle_or_caveated(monkeypatch):
    from course_lib.hardware import peak

    monkeypatch.setattr(peak, "cpu_clock_ghz", lambda: 2.5)
    monkeypatch.setattr(peak, "cpu_vendor_family", lambda: ("GenuineIntel", 6))
    monkeypatch.setattr(peak.platform, "system", lambda: "Linux")
    monkeypatch.setattr("course_lib.hardware.processor.hybrid_cpu", lambda: False)
    s = peak.sheet_peak(2, "AVX2", model="Intel Xeon", blas="MKL")
    assert s.flops == pytest.approx(2 * 2.5e9 * 32) and s.caveat == ""
    assert "160 GFLOP/s" in s.line(1.6e11) and "boost" not in s.line(1.6e11)
    assert "boost" in s.line(2e11)
    assert peak.sheet_peak(2, "AVX2", blas="Accelerate").caveat  # Apple's matrix unit is outside the count
    monkeypatch.setattr(peak, "cpu_clock_ghz", lambda: None)
    none = peak.sheet_peak(2, "AVX2")
    assert none.flops is None and none.caveat and "no data-sheet peak" in none.line(1e11)
    with pytest.raises(ValueError):
        peak.sheet_peak(0, "AVX2")


def test_fma_layout_multiplies_to_the_flops_per_cycle():
    from course_lib.hardware import peak

    assert peak.fma_layout("AVX-512", "GenuineIntel", 6, model="Intel Xeon Platinum 8480") == (16, 2)
    assert peak.fma_layout("AVX-512", "GenuineIntel", 6, model="Intel Xeon Silver 4214") == (16, 1)
    assert peak.fma_layout("AVX-512", "AuthenticAMD", 25, model="AMD EPYC 9654") == (8, 2)  # Zen 4: two halves
    assert peak.fma_layout("AVX-512", "AuthenticAMD", 26, model="AMD EPYC 9555", blas="MKL") == (8, 2)  # AVX2 count
    assert peak.fma_layout("AVX-512", "AuthenticAMD", 26, model="AMD EPYC 9555") == (16, 2)
    assert peak.fma_layout("AVX2") == (8, 2) and peak.fma_layout("NEON", "Apple") == (4, 4)
    for isa in peak.FP32_FLOPS_PER_CYCLE:
        lanes, units = peak.fma_layout(isa)
        assert lanes * units * 2 == peak.fp32_flops_per_cycle(isa)
    s = peak.SheetPeak(1.6e11, 2, 2.5, 32, "", 8)
    assert "8 fp32 lanes x 2 FMA units x 2 FLOP per FMA (fused multiply-add, a x b + c) = 32 FLOP" in s.line(1.6e11)


def test_a_container_memory_limit_caps_the_ram_reported(monkeypatch):
    from course_lib.hardware import machine

    files = {"/sys/fs/cgroup/memory.max": "2147483648\n", "/sys/fs/cgroup/memory.current": "536870912\n"}
    monkeypatch.setattr(machine, "_read", lambda path: files.get(path, ""))
    assert machine.container_memory_limit() == (2**31, 2**29)
    files["/sys/fs/cgroup/memory.stat"] = "anon 1000\ninactive_file 268435456\n"  # page cache the kernel can drop
    assert machine.container_memory_limit() == (2**31, 2**28)
    info = machine.detect()
    assert info.ram_bytes <= 2**31 and info.available_ram_bytes <= 2**31 - 2**28  # the limit less what is in use
    files["/sys/fs/cgroup/memory.max"] = "max\n"  # cgroup v2 without a limit, and no v1 files: the host's RAM
    assert machine.container_memory_limit() is None


def test_half_width_avx2_cores_and_the_boost_clock_are_told_apart(monkeypatch):
    """Zen/Zen+ and Gracemont run AVX2 on 128-bit units (16 FLOPs a cycle); Zen 2 does not. Only Linux's pstate
    drivers report the boost limit as the maximum clock; acpi-cpufreq's maximum may be the base."""
    from types import SimpleNamespace

    import psutil

    from course_lib.hardware import peak

    assert peak.half_width_avx2("AuthenticAMD", 23, 0x11) and peak.half_width_avx2("GenuineIntel", 6, 0xBE)
    assert not peak.half_width_avx2("AuthenticAMD", 23, 0x31) and not peak.half_width_avx2("AuthenticAMD", 25, 0x11)
    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(max=4500.0, current=3000.0))
    assert peak.cpu_clock_source("intel_pstate") == "maximum (boost)"
    assert peak.cpu_clock_source("acpi-cpufreq") == "base or current"
    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(max=0.0, current=0.0))
    assert peak.cpu_clock_source("intel_pstate") == ""


def test_avx512_over_avx2_times_two_fresh_processes_and_rejects_bad_input(monkeypatch):
    """Notebook 00's FMA-unit measurement: each rate comes from a child process with its own setting, the free one
    without any MKL hold the parent has, and the ratio is their quotient."""
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")  # the parent's hold must not reach the free child
    seen = []

    class Done:
        returncode, stderr = 0, ""

        def __init__(self, stdout):
            self.stdout = stdout

    def fake_run(cmd, env, **kwargs):
        seen.append(env.get("MKL_ENABLE_INSTRUCTIONS"))
        return Done("100.0\n" if env.get("MKL_ENABLE_INSTRUCTIONS") else "160.0\n")

    monkeypatch.setattr("subprocess.run", fake_run)
    out = hardware.peak.avx512_over_avx2(64, rounds=2)
    assert seen == [None, "AVX2", None, "AVX2"]  # alternating, two rounds
    assert out == {"avx512_gflops": 160.0, "avx2_gflops": 100.0, "ratio": 1.6}
    for bad in ({"size": 0}, {"rounds": -1}, {"size": "big"}):
        with pytest.raises((ValueError, TypeError)):
            hardware.peak.avx512_over_avx2(**bad)


@pytest.mark.slow
def test_avx512_over_avx2_runs_the_product_in_child_processes():
    out = hardware.peak.avx512_over_avx2(128, rounds=1)
    assert out["avx512_gflops"] > 0 and out["avx2_gflops"] > 0
    assert out["ratio"] == pytest.approx(out["avx512_gflops"] / out["avx2_gflops"])


def test_a_cpu_name_without_a_model_number_is_hidden():
    assert hardware.peak.model_name_hidden("Intel(R) Xeon(R) Processor")
    assert hardware.peak.model_name_hidden("Intel(R) Xeon(R) CPU @ 2.20GHz")  # the clock is not a model number
    assert not hardware.peak.model_name_hidden("Intel(R) Xeon(R) Platinum 8480+")
    assert not hardware.peak.model_name_hidden("AMD EPYC 9R14 96-Core Processor")
    with pytest.raises(TypeError, match="model"):
        hardware.peak.model_name_hidden(None)


def test_hyperthread_pairs_counts_usable_cpus_that_share_a_core(tmp_path, monkeypatch):
    import os

    for cpu, siblings in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2}, raising=False)
    assert hardware.hyperthread_pairs(str(tmp_path)) == 1  # CPUs 0 and 2: one core's two threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert hardware.hyperthread_pairs(str(tmp_path)) == 0  # two cores
    assert hardware.hyperthread_pairs(str(tmp_path / "none")) is None  # the OS does not say
