"""course_lib.cpu and the CPU facts in course_lib.hardware, tried on made-up machines.

The decisions (threads, bf16 handling, what the learner is told) are pure functions of the CPU's
flags, the load and the calibration, so every kind of machine a learner brings can be tested here:
an AVX2-only laptop, AVX-512 without bf16, AMX, Arm, one core, a busy machine.
"""

from __future__ import annotations

import torch
import pytest

from course_lib import cpu, doctor, hardware

FLAGS = {
    "zen3 (AVX2 only)": {"sse4_2", "avx", "avx2", "fma"},
    "skylake-x (AVX-512, no bf16)": {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni"},
    "zen4 (AVX-512 + bf16)": {"avx2", "fma", "avx512f", "avx512_bf16"},
    "sapphire rapids (AMX)": {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"},
    "graviton3 (Arm, bf16)": {"fp", "asimd", "fphp", "asimdhp", "bf16", "sve"},
    "raspberry pi (Arm)": {"fp", "asimd"},
}


def fake_cpu(kind: str, physical: int = 2, logical: int | None = None) -> hardware.CPUInfo:
    flags = FLAGS[kind]
    arch = "aarch64" if "asimd" in flags else "x86_64"
    return hardware.CPUInfo(
        model=kind,
        architecture=arch,
        physical_cores=physical,
        logical_cores=logical or physical,
        simd=hardware.simd_features(flags),
        torch_capability="X",
        usable_cores=logical or physical,
        **hardware.cpu_capabilities(flags, arch),
    )


def calib(ratio: float) -> cpu.Calibration:
    return cpu.Calibration(fp32_flops=100e9, bf16_flops=ratio * 100e9, size=128, threads=2, seconds=0.1)


@pytest.mark.parametrize(
    "kind, isa, bf16, fp16",
    [
        ("zen3 (AVX2 only)", "AVX2", False, False),
        ("skylake-x (AVX-512, no bf16)", "AVX-512", False, False),
        ("zen4 (AVX-512 + bf16)", "AVX-512", True, False),
        ("sapphire rapids (AMX)", "AVX-512", True, True),
        ("graviton3 (Arm, bf16)", "SVE", True, True),
        ("raspberry pi (Arm)", "NEON", False, False),
    ],
)
def test_capabilities_from_flags(kind, isa, bf16, fp16):
    c = fake_cpu(kind)
    assert (c.vector_isa, c.native_bf16, c.native_fp16) == (isa, bf16, fp16)
    assert c.architecture in c.kind


@pytest.mark.parametrize(
    "kind, ratio, mode",
    [
        ("zen3 (AVX2 only)", 0.03, "emulated"),  # measured here: 0.03 at 128x128, 0.003 at 2048
        ("skylake-x (AVX-512, no bf16)", 0.4, "slow"),  # converted to fp32 inside oneDNN's kernels
        ("zen4 (AVX-512 + bf16)", 2.2, "native"),
        ("sapphire rapids (AMX)", 6.0, "native"),
        ("graviton3 (Arm, bf16)", 1.5, "native"),
    ],
)
def test_bf16_decision_follows_the_measurement(kind, ratio, mode):
    p = cpu.thread_plan(fake_cpu(kind), calibration=calib(ratio))
    assert p.bf16 == mode and p.bf16_ratio == pytest.approx(ratio)
    text = " ".join(p.notes)
    bf16_notes = [n for n in p.notes if "fp32" in n]  # notebook 00 hides these until after its bf16 guess,
    assert all(n.startswith("bf16 matrix products") for n in bf16_notes)  # by this prefix
    if mode == "emulated":
        assert p.bf16_scale < 1 and "fallback code" in text and "saves memory" in text
    elif mode == "slow":
        assert "saves memory here, not time" in text
    else:
        assert p.bf16_scale == 1 and "saves time and memory" in text


def test_slow_bf16_is_blamed_on_the_kernels_not_the_chip():
    # a chip with bf16 instructions whose kernels are held to AVX2 (as the atlas does): the chip is not to blame
    p = cpu.thread_plan(fake_cpu("zen4 (AVX-512 + bf16)"), calibration=calib(0.02))
    text = " ".join(p.notes)
    assert p.bf16 == "emulated" and "PyTorch's kernels here" in text and "This CPU has no" not in text
    fast = cpu.thread_plan(fake_cpu("zen3 (AVX2 only)"), calibration=calib(1.1))
    assert "bf16 instructions" not in " ".join(fast.notes)  # fast without them: not credited to instructions


def test_measurement_beats_the_flags():
    # a CPU that lists bf16 but whose PyTorch build runs it slowly is treated as slow
    assert cpu.thread_plan(fake_cpu("zen4 (AVX-512 + bf16)"), calibration=calib(0.3)).bf16 == "slow"
    # without a calibration the flags decide
    assert cpu.thread_plan(fake_cpu("zen4 (AVX-512 + bf16)")).bf16 == "native"
    assert cpu.thread_plan(fake_cpu("zen3 (AVX2 only)")).bf16 == "unknown"


@pytest.mark.parametrize(
    "busy, physical, threads",
    [(0.0, 2, 2), (0.3, 2, 2), (1.0, 2, 1), (1.9, 2, 1), (3.0, 8, 5), (0.0, 1, 1), (1.0, 1, 1)],
)
def test_threads_are_the_free_physical_cores(busy, physical, threads):
    load = cpu.Load(busy_cores=busy, usable_cores=physical, interval_s=0.25)
    p = cpu.thread_plan(fake_cpu("zen3 (AVX2 only)", physical=physical), load=load)
    assert p.threads == p.free_cores == threads
    assert p.busy == (busy >= 0.5)
    assert ("busy" in " ".join(p.notes)) == p.busy
    assert ("One physical core" in " ".join(p.notes)) == (physical == 1)


def test_the_learner_is_told_what_the_course_does():
    info = hardware.detect()
    busy = cpu.Load(busy_cores=1.0, usable_cores=2, interval_s=0.25)
    c = fake_cpu("zen3 (AVX2 only)")
    rows = dict(doctor.adaptations(info, cpu.thread_plan(c, busy, calib(0.03))))
    assert (
        "emulated" in rows["Mixed precision on the CPU"]
        and "busy" in rows["CPU demos (matmul, roofline, threads, classical ML)"]
    )
    rows = dict(doctor.adaptations(info, cpu.thread_plan(fake_cpu("sapphire rapids (AMX)"), None, calib(6.0))))
    assert "speed-up" in rows["Mixed precision on the CPU"]
    with pytest.raises(TypeError, match="CPUInfo"):
        cpu.thread_plan("zen3")


def test_load_is_measured_and_bounded():
    load = cpu.measure_load(0.1)
    assert 0 <= load.busy_cores <= load.usable_cores + 0.5
    assert 1 <= load.free_cores(2) <= 2
    with pytest.raises(ValueError, match="interval"):
        cpu.measure_load(0)


def test_calibration_compares_fp32_and_bf16_here():
    cal = cpu.calibrate(threads=1)
    assert cal.fp32_flops > 0 and cal.bf16_flops > 0 and cal.size in (128, 256) and cal.threads == 1
    assert cpu.thread_plan(hardware.detect().cpu, calibration=cal).bf16 in ("native", "slow", "emulated")


@pytest.mark.skipif(hardware.detect().cpu.native_bf16, reason="this CPU has bf16 instructions: bf16 may be faster")
def test_without_bf16_instructions_bf16_is_not_faster():
    cal = cpu.calibrate(threads=1)  # measured: 0.03x on an AVX2-only Zen 3
    assert cal.bf16_ratio < 1.2, cal
    assert cpu.thread_plan(hardware.detect().cpu, calibration=cal).bf16 in ("slow", "emulated")


def test_set_threads_limits_other_blas_pools_and_restores():
    from threadpoolctl import threadpool_info

    import numpy  # noqa: F401 - loads numpy's OpenBLAS

    before = torch.get_num_threads()
    try:
        cpu.set_threads(1)
        assert torch.get_num_threads() == 1
        blas = [p for p in cpu.thread_pools() if p.api == "blas" and p.owner != "torch"]
        if not blas:
            pytest.skip("no BLAS pool outside PyTorch is loaded in this process")
        assert all(p.threads == 1 for p in blas), blas
        assert len(threadpool_info()) == len(cpu.thread_pools())
    finally:
        torch.set_num_threads(before)
    with pytest.raises(TypeError):
        cpu.set_threads("2")
    with cpu.limit_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_profile_is_cached_and_summarised():
    p = cpu.profile(apply=False)
    assert cpu.profile() is p
    text = p.summary()
    for word in ("CPU", "Cores", "Threads", "Matmul"):
        assert word in text
    hidden = p.summary(rates=False)  # before a guess on bf16's speed: no rate, no verdict on bf16
    assert "Matmul" not in hidden and "bf16 matrix products" not in hidden and "Cores" in hidden
    with pytest.raises(TypeError):
        p.summary(rates="no")


def test_pool_note_counts_only_the_pools_outside_pytorch():
    pools = [
        cpu.ThreadPool("torch", "openmp", "openmp", 2, "/x/torch/lib/libgomp.so"),
        cpu.ThreadPool("numpy", "blas", "openblas", 1, "/x/numpy.libs/libopenblas.so"),
    ]
    text = " ".join(cpu.thread_plan(fake_cpu("zen3 (AVX2 only)"), pools=pools).notes)
    assert "other libraries loaded 1 (numpy's openblas)" in text, text
    assert "torch's" not in text
    assert not any("thread pool" in n for n in cpu.thread_plan(fake_cpu("zen3 (AVX2 only)"), pools=pools[:1]).notes)
