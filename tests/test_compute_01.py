"""Unit tests of notebook 01's step-on-the-roofline models and the data-sheet peak's caveats."""

import pytest

from course_lib import compute
from course_lib.hardware import peak


def test_training_step_bytes_and_intensity():
    assert compute.training_step_bytes(1000) == 24_000  # 6 touches x 4 bytes
    assert compute.training_step_intensity(8) == pytest.approx(2.0)  # batch / 4 in fp32
    assert compute.training_step_intensity(8, dtype="bf16") == pytest.approx(4.0)
    with pytest.raises(ValueError):
        compute.training_step_intensity(0)


def test_step_time_models_pick_the_slower_roof():
    m = compute.step_time_models(1e6, 2, 1e-4, peak_flops=1e11, bandwidth=1e10)
    assert m["overhead only"] == pytest.approx(1e-4)
    assert m["compute only"] == pytest.approx(1e-4 + 12e6 / 1e11)
    assert m["roofline"] == pytest.approx(1e-4 + 24e6 / 1e10)  # memory-bound at batch 2
    big = compute.step_time_models(1e6, 4096, 0.0, peak_flops=1e11, bandwidth=1e10)
    assert big["roofline"] == pytest.approx(big["compute only"])


def test_worst_miss_counts_both_ways():
    assert compute.worst_miss([1.0, 4.0], [2.0, 2.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        compute.worst_miss([], [])


def test_one_fma_chips_and_caveats():
    assert peak.fp32_flops_per_cycle("AVX-512", "GenuineIntel", 6, model="11th Gen Intel(R) Core(TM) i7-1165G7") == 32
    assert peak.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 26, model="AMD Ryzen AI 9 HX 370") == 32
    assert peak.fp32_flops_per_cycle("AVX-512", "AuthenticAMD", 26, model="AMD Ryzen 9 9950X") == 64
    assert peak.fp32_flops_per_cycle("AVX-512", "GenuineIntel", 6, model="Intel(R) Xeon(R) Platinum 8480+") == 64
    assert peak.sheet_peak_caveat("Linux", False, 2.5, 32) == ""
    assert "base clock" in peak.sheet_peak_caveat("Windows", False, 2.5, 32)
    assert "efficiency" in peak.sheet_peak_caveat("Linux", True, 2.5, 32)
    assert peak.sheet_peak_caveat("Linux", False, None, 32)
