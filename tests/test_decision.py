"""The decision guide (course_lib.decision, notebook 07.3): its memory, time and cost numbers are the earlier
modules' numbers, its choice is the cheapest feasible one, and it says what to relax when nothing is feasible."""
from __future__ import annotations

import math

import pytest

from course_lib import catalog, compute, cost, decision, memory, widgets
from course_lib.decision import recommend


@pytest.mark.parametrize("n_params", [3e6, 124e6, 1.3e9, 7e9, 70e9])
@pytest.mark.parametrize("precision, optimizer", [("bf16-mixed", "adam"), ("fp32", "adam"), ("fp32", "sgd"),
                                                  ("fp16-mixed", "momentum"), ("bf16-mixed", "adamw")])
def test_memory_equals_the_memory_module(n_params, precision, optimizer):
    """Every candidate's bytes per device are memory.model_states_bytes at its ZeRO stage and device count."""
    rec = recommend(n_params, 1e9, precision=precision, optimizer=optimizer)
    for o in rec.options:
        assert o.memory_bytes == memory.model_states_bytes(int(n_params), precision, optimizer, o.zero_stage, o.devices)
        if o.devices == 1:  # one device: the fit rule is memory.largest_model_that_fits
            assert o.fits == (int(n_params) <= memory.largest_model_that_fits(o.device_bytes, precision, optimizer))
    assert rec.memory_bytes == memory.model_states_bytes(int(n_params), precision, optimizer, rec.zero_stage,
                                                         rec.devices)


def test_fit_boundary_is_the_largest_model_that_fits():
    a100 = catalog.get_accelerator("a100-80gb")
    largest = memory.largest_model_that_fits(a100.memory_gb * 1e9, "bf16-mixed", "adam")
    for n, fits in ((largest, True), (largest + 1, False)):
        row = next(o for o in recommend(n, 1e6).options if (o.hardware, o.where, o.devices) == ("a100-80gb", "cloud", 1))
        assert row.fits is fits and row.memory_bytes == 16 * n


def test_zero_stage_is_the_lowest_that_fits():
    """A 7B model does not fit one 80 GB device with Adam (112 GB of states): it is sharded, at the lowest stage."""
    rec = recommend(7e9, 1e8, framework="jax")
    assert rec.strategy == "fsdp" and rec.devices > 1 and rec.zero_stage >= 1
    usable = decision.STATES_FRACTION * catalog.get_accelerator(rec.hardware).memory_gb * 1e9
    assert rec.memory_bytes <= usable
    lower = memory.model_states_bytes(int(7e9), "bf16-mixed", "adam", rec.zero_stage - 1, rec.devices)
    assert lower > usable, "a lower ZeRO stage would have fitted"
    assert any("ZeRO stage" in m for m in rec.methods) and any("LoRA" in m for m in rec.methods)


def test_activations_equal_the_calculator_and_accumulation_splits_them():
    """With a transformer's activations, bytes = memory.large_model_memory; a batch too big for the room left
    is split into micro-batches (gradient accumulation), and the bytes are those of the smaller batch."""
    shape = dict(seq_len=2048, d_model=768, n_layers=12, n_heads=12)
    acts = memory.transformer_activation_bytes(batch=16, bytes_per_value=2, **shape)
    rec = recommend(124e6, 2.5e9, activation_bytes=acts)
    for o in rec.options:
        if o.fits:
            want = memory.large_model_memory(124e6, zero_stage=o.zero_stage, data_parallel=o.devices,
                                             batch=16 // o.accumulation, **shape)["total"]
            assert o.memory_bytes == want
    l4 = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("l4", "cloud", 1))
    assert l4.accumulation == 4 and l4.fits  # 58.6 GB of activations; 19.6 GB left on a 24 GB L4
    h200 = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("h200", "cloud", 1))
    assert h200.accumulation == 1


def test_time_and_cost_are_the_compute_and_cost_modules():
    rec = recommend(124e6, 2.5e9)
    for o in rec.options:
        if o.devices == 1 and o.where == "cloud":
            peak = catalog.get_accelerator(o.hardware).peak_flops(o.dtype)
            assert o.hours == pytest.approx(compute.time_to_train(124e6, 2.5e9, peak, 0.4) / 3600)
            if o.usd is not None:
                assert o.usd == pytest.approx(max(o.hours, 1 / 60) * cost.cloud_hourly(o.hardware))
        if o.devices > 1:
            assert 0 < o.efficiency < 1
    cpu = next(o for o in rec.options if o.hardware == "cpu")
    assert cpu.hours == pytest.approx(6 * 124e6 * 2.5e9 / (decision.CPU_GFLOPS * 1e9 * 0.4) / 3600)


def test_the_choice_is_the_cheapest_feasible_and_one_device_without_a_deadline():
    rec = recommend(124e6, 2.5e9)
    feasible = [o for o in rec.options if o.feasible]
    assert rec.feasible and rec.devices == 1 and rec.strategy == "single"
    assert rec.usd <= 1.02 * min(o.usd for o in feasible)
    assert any(ch.isdigit() for r in rec.reasons[:5] for ch in r) and all(any(c.isdigit() for c in r)
                                                                           for r in rec.reasons[:5])
    assert "Spot" in " ".join(rec.reasons)
    assert recommend(1e4, 1e6).hardware == "cpu", "a tiny job stays on the machine you have"


def test_a_tight_deadline_adds_devices_and_says_why():
    loose = recommend(124e6, 2.5e9, framework="jax")
    tight = recommend(124e6, 2.5e9, framework="jax", deadline_hours=loose.hours / 3)
    assert tight.feasible and tight.devices > 1 and tight.hours <= loose.hours / 3
    assert any(m.startswith("data parallel") and "for the deadline" in m for m in tight.methods)
    assert not any(m.startswith("data parallel") for m in loose.methods)


def test_energy_low_picks_the_fewest_kwh():
    rec = recommend(124e6, 2.5e9, energy="low")
    known = [o.kwh for o in rec.options if o.feasible and o.kwh is not None]
    assert rec.kwh == min(known)
    assert "Lowest energy" in " ".join(rec.reasons)


def test_regulated_data_stays_on_the_premises():
    rec = recommend(25.6e6, 5e4, flops_per_sample=3 * 8.2e9, epochs=30, privacy="regulated", deadline_hours=72)
    assert rec.where in ("cpu", "owned") and rec.feasible
    assert "may not leave the premises" in " ".join(rec.reasons)
    assert all(not o.feasible for o in rec.options if o.where == "cloud")
    slow = recommend(25.6e6, 5e4, flops_per_sample=3 * 8.2e9, epochs=30, privacy="healthcare")
    assert slow.hardware == "cpu", "with no deadline, the machine you have is the cheapest"


def test_framework_flags_tpus_for_pytorch():
    rec = recommend(124e6, 2.5e9, framework="pytorch")
    text = " ".join(rec.reasons)
    if catalog.get_accelerator(rec.hardware).kind == "tpu":
        assert "PyTorch/XLA" in text and "Without PyTorch/XLA the cheapest" in text
    assert "PyTorch/XLA" not in " ".join(recommend(124e6, 2.5e9, framework="jax").reasons)


def test_fp32_suggests_mixed_precision_with_its_speed_up():
    rec = recommend(124e6, 2.5e9, precision="fp32", framework="tensorflow", privacy="regulated", deadline_hours=1e4)
    assert rec.methods[0].startswith(("bf16 mixed precision (instead of fp32", "fp32 on the CPU"))


def test_nothing_feasible_says_the_smallest_change():
    rec = recommend(124e6, 2.5e9, budget_usd=0.5)
    assert not rec.feasible and "raise the budget" in rec.relax
    assert rec.usd == pytest.approx(min(o.usd for o in rec.options if o.fits and o.usd is not None))
    rec = recommend(124e6, 2.5e9, deadline_hours=1e-3, budget_usd=1e9)
    assert not rec.feasible and "allow" in rec.relax and "h instead of 0.001 h" in rec.relax
    assert rec.hours == min(o.hours for o in rec.options if o.fits and o.usd is not None)
    assert "Nothing meets every constraint" in rec.headline()
    big = recommend(1e12, 1e9, privacy="regulated")
    assert big.hardware == "none" and not big.feasible and "LoRA" in big.relax and big.hours is None


@pytest.mark.parametrize("kwargs, arg", [
    (dict(n_params=-1), "n_params"), (dict(n_samples=0), "n_samples"), (dict(tokens_per_sample=0), "tokens_per_sample"),
    (dict(epochs=-1), "epochs"), (dict(framework="caffe"), "framework"), (dict(privacy="secret"), "privacy"),
    (dict(energy="green"), "energy"), (dict(precision="fp8"), "precision"), (dict(optimizer="lion"), "optimizer"),
    (dict(budget_usd=-5), "budget_usd"), (dict(deadline_hours=0), "deadline_hours"), (dict(grid="mars"), "grid"),
    (dict(flops_per_sample=-1), "flops_per_sample"), (dict(utilization=1.5), "utilization"),
    (dict(activation_bytes=-1), "activation_bytes"), (dict(cpu_gflops=0), "cpu_gflops"),
])
def test_bad_input_names_the_argument(kwargs, arg):
    args = {"n_params": 124e6, "n_samples": 1e9, **kwargs}
    with pytest.raises(ValueError, match=arg) as info:
        recommend(args.pop("n_params"), args.pop("n_samples"), **args)
    if arg in ("framework", "privacy", "energy", "precision", "optimizer", "grid"):
        assert "accepted values" in str(info.value)
    with pytest.raises(TypeError, match="n_params"):
        recommend("7e9", 1e9)


def test_widget_text_is_the_recommendation():
    args = (124e6, 2.5e9, 1.0, 1, "pytorch", 1000.0, 168.0, "none", "any", "bf16-mixed", "adam")
    text = widgets.decision_guide_text(*args)
    rec = recommend(124e6, 2.5e9, budget_usd=1000.0, deadline_hours=168.0)
    assert text.startswith(rec.headline()) and "Methods, lightest first: bf16 mixed precision" in text
    assert "<" not in text and "&" not in text and "$" not in text  # shown as HTML: no markup, no TeX
    with pytest.raises(ValueError, match="privacy"):
        widgets.decision_guide_text(*args[:7], "secret", *args[8:])


def test_table_has_one_row_per_hardware_and_place():
    rows = recommend(124e6, 2.5e9).table()
    keys = [(r["hardware"], r["where"]) for r in rows]
    assert len(keys) == len(set(keys)) and ("cpu", "this machine") in keys
    assert {"fits", "hours", "usd", "kwh", "memory_gb", "feasible", "why_not"} <= set(rows[0])
    assert not any(math.isnan(r["hours"]) for r in rows)
