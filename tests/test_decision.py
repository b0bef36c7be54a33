"""The decision guide (course_lib.decision, notebook 07.3): its memory, time and cost numbers are the earlier
modules' numbers, its choice is the cheapest feasible one, and it says what to relax when nothing is feasible."""

from __future__ import annotations

import math

import pytest

from course_lib import catalog, compute, cost, decision, memory, widgets
from course_lib.decision import recommend


@pytest.mark.parametrize("n_params", [3e6, 124e6, 1.3e9, 7e9, 70e9])
@pytest.mark.parametrize(
    "precision, optimizer",
    [("bf16-mixed", "adam"), ("fp32", "adam"), ("fp32", "sgd"), ("fp16-mixed", "momentum"), ("bf16-mixed", "adamw")],
)
def test_memory_equals_the_memory_module(n_params, precision, optimizer):
    """Every candidate's bytes per device are memory.model_states_bytes at its ZeRO stage and device count."""
    rec = recommend(n_params, 1e9, precision=precision, optimizer=optimizer)
    for o in rec.options:
        assert o.memory_bytes == memory.model_states_bytes(int(n_params), precision, optimizer, o.zero_stage, o.devices)
        if o.devices == 1:  # one device: the fit rule is memory.largest_model_that_fits
            assert o.fits == (int(n_params) <= memory.largest_model_that_fits(o.device_bytes, precision, optimizer))
    assert rec.memory_bytes == memory.model_states_bytes(
        int(n_params), precision, optimizer, rec.zero_stage, rec.devices
    )


def test_fit_boundary_is_the_largest_model_that_fits():
    a100 = catalog.get_accelerator("a100-80gb")
    largest = memory.largest_model_that_fits(a100.memory_gb * 1e9, "bf16-mixed", "adam")
    for n, fits in ((largest, True), (largest + 1, False)):
        row = next(
            o for o in recommend(n, 1e6).options if (o.hardware, o.where, o.devices) == ("a100-80gb", "cloud", 1)
        )
        assert row.fits is fits and row.memory_bytes == 16 * n


def test_zero_stage_is_the_lowest_that_fits():
    """A 7B model does not fit one 80 GB device with Adam (112 GB of states): it is sharded, at the lowest stage."""
    rec = recommend(7e9, 1e8, framework="jax")
    assert rec.strategy == "fsdp" and rec.devices > 1 and rec.zero_stage >= 1
    usable = decision.STATES_FRACTION * catalog.get_accelerator(rec.hardware).memory_gb * 1e9
    assert rec.memory_bytes <= usable
    lower = memory.model_states_bytes(int(7e9), "bf16-mixed", "adam", rec.zero_stage - 1, rec.devices)
    assert lower > usable, "a lower ZeRO stage would have fitted"
    assert any("ZeRO stage" in m for m in rec.methods)
    assert not any("LoRA" in m for m in rec.methods), "LoRA adapts a pretrained model: not for training from scratch"


def test_activations_equal_the_calculator_and_accumulation_splits_them():
    """With a transformer's activations, bytes = memory.large_model_memory; a batch too big for the room left
    is split into micro-batches (gradient accumulation), and the bytes are those of the smaller batch."""
    shape = dict(seq_len=2048, d_model=768, n_layers=12, n_heads=12)
    acts = memory.transformer_activation_bytes(batch=16, bytes_per_value=2, **shape)
    rec = recommend(124e6, 2.5e9, activation_bytes=acts, batch_size=16)
    for o in rec.options:
        if o.fits:
            assert 16 % o.accumulation == 0
            want = memory.large_model_memory(
                124e6, zero_stage=o.zero_stage, data_parallel=o.devices, batch=16 // o.accumulation, **shape
            )["total"]
            assert o.memory_bytes == want
    l4 = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("l4", "cloud", 1))
    assert l4.accumulation == 4 and l4.fits  # 58.6 GB of activations; 19.6 GB left on a 24 GB L4
    h200 = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("h200", "cloud", 1))
    assert h200.accumulation == 1


GPT_1_3B = dict(seq_len=2048, d_model=2048, n_layers=24, n_heads=16)  # GPT-3 XL's shape, 1.3B parameters


def test_accumulation_never_splits_a_batch_below_one_sample():
    """Batch 8 of a 1.3B transformer at 2,048 tokens: one sample's activations (11.5 GB) do not fit next to the
    20.8 GB of Adam states on a 32 GB TPU v6e, so one chip must not fit (64 micro-batches of 1/8 sample did)."""
    acts = memory.transformer_activation_bytes(batch=8, bytes_per_value=2, **GPT_1_3B)
    rec = recommend(1.3e9, 2e9, activation_bytes=acts, batch_size=8, framework="jax")
    v6e = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("tpu-v6e", "cloud", 1))
    assert not v6e.fits and not v6e.feasible and "one sample per micro-batch" in v6e.why_not
    assert v6e.memory_bytes == memory.large_model_memory(1.3e9, batch=8, **GPT_1_3B)["total"]
    for o in rec.options:
        assert 1 <= o.accumulation <= 8 and 8 % o.accumulation == 0
        if o.fits:  # the guide's bytes are notebook 02's calculator at the micro-batch it chose
            want = memory.large_model_memory(
                1.3e9, zero_stage=o.zero_stage, data_parallel=o.devices, batch=8 // o.accumulation, **GPT_1_3B
            )["total"]
            assert o.memory_bytes == want
            assert o.memory_bytes <= decision.TOTAL_FRACTION * o.device_bytes
    assert rec.feasible and (rec.devices > 1 or rec.accumulation > 1 or rec.memory_bytes < 32e9)
    if rec.accumulation > 1:
        assert any(f"micro-batches of {8 // rec.accumulation} samples" in m for m in rec.methods)


def test_a_small_batch_uses_only_its_divisors():
    acts = memory.transformer_activation_bytes(
        batch=6, bytes_per_value=2, seq_len=2048, d_model=768, n_layers=12, n_heads=12
    )
    rec = recommend(124e6, 2.5e9, activation_bytes=acts, batch_size=6)
    assert {o.accumulation for o in rec.options} <= {1, 2, 3, 6}
    l4 = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("l4", "cloud", 1))
    assert l4.fits and l4.accumulation == 2  # 22 GB for 6 samples do not fit in the 19.6 GB left, 11 GB for 3 do


def test_notebook_cases_memory_is_the_memory_module():
    """Notebook 07.3's three worked cases: the guide's bytes per device are memory.model_states_bytes."""
    cases = (
        dict(n_params=301_066, n_samples=1348, epochs=20),
        dict(n_params=7e9, n_samples=1e6, tokens_per_sample=512, budget_usd=2000, deadline_hours=72),
        dict(n_params=1e9, n_samples=2e7, tokens_per_sample=1000, deadline_hours=168),
    )
    for kw in cases:
        rec = recommend(**kw)
        assert rec.memory_bytes == memory.model_states_bytes(
            int(kw["n_params"]), "bf16-mixed", "adam", rec.zero_stage, rec.devices
        )


def test_regulated_clinic_never_rents():
    """Notebook 07.3's clinic: with regulated data no cloud option may be feasible or chosen."""
    clinic = dict(n_params=350e6, n_samples=2e6, tokens_per_sample=256, budget_usd=20000, deadline_hours=240)
    for budget in (20000, 40000, None):
        rec = recommend(**{**clinic, "budget_usd": budget}, privacy="regulated")
        assert rec.where in ("owned", "cpu")
        assert all(not o.feasible for o in rec.options if o.where == "cloud")
        assert all(
            o.why_not == "regulated data may not leave the premises"
            for o in rec.options
            if o.where == "cloud" and o.fits and o.usd is not None
        )
    assert recommend(**clinic, privacy="none").where == "cloud"


def test_owned_options_pay_for_their_server_share_in_a_server_room():
    """A bought data-centre GPU costs its card + cost.host_share's assumed server share, and its energy counts
    the server's watts at the server room's PUE: the same defaults as cost.owned_vs_cloud."""
    rec = recommend(1.3e9, 2e9, privacy="regulated")
    a100 = next(o for o in rec.options if (o.hardware, o.where, o.devices) == ("a100-80gb", "owned", 2))
    host = cost.host_share("a100-80gb")
    assert host["usd"] == cost.SERVER_USD_PER_GPU > 0 and host["where"] == "server room"
    assert host["pue"] == catalog.get_price(decision.OWNED_PUE_ROW).value
    acc = catalog.get_accelerator("a100-80gb")
    kwh = 2 * a100.hours * (acc.power_w + host["watts"]) * host["pue"] / 1000
    assert a100.kwh == pytest.approx(kwh)
    elec = catalog.get_price(decision.ELECTRICITY_ROW).value
    assert a100.usd == pytest.approx(2 * (cost.purchase_price("a100-80gb") + host["usd"]) + kwh * elec)
    r = cost.owned_vs_cloud("a100-80gb", hours_per_month=100, months=12)
    assert r["pue"] == host["pue"] and r["host_usd"] == host["usd"] and r["host_w"] == host["watts"]


def test_the_cpu_option_says_whether_its_speed_is_assumed():
    assert recommend(1e4, 1e6).name == f"a 2-core CPU (assumed {decision.CPU_GFLOPS:g} GFLOP/s)"
    assert "assumed 100 GFLOP/s" in recommend(1e4, 1e6).headline()
    assert "given: 250 GFLOP/s" in recommend(1e4, 1e6, cpu_gflops=250).headline()


def test_time_and_cost_are_the_compute_and_cost_modules():
    rec = recommend(124e6, 2.5e9)
    for o in rec.options:
        if o.devices == 1 and o.where == "cloud":
            peak = catalog.get_accelerator(o.hardware).peak_flops(o.dtype)
            assert o.hours == pytest.approx(compute.time_to_train(124e6, 2.5e9, peak, 0.4) / 3600)
            if o.usd is not None:
                porting = decision.PORTING_USD if catalog.get_accelerator(o.hardware).kind == "tpu" else 0.0
                assert o.extra_usd == porting  # a PyTorch code base (the default) pays to port to TPUs
                assert o.usd == pytest.approx(max(o.hours, 1 / 60) * cost.cloud_hourly(o.hardware) + porting)
        if o.devices > 1:
            assert 0 < o.efficiency < 1
    cpu = next(o for o in rec.options if o.hardware == "cpu")
    assert cpu.hours == pytest.approx(6 * 124e6 * 2.5e9 / (decision.CPU_GFLOPS * 1e9 * 0.4) / 3600)


def test_the_choice_is_the_cheapest_feasible_and_one_device_without_a_deadline():
    rec = recommend(124e6, 2.5e9)
    feasible = [o for o in rec.options if o.feasible]
    assert rec.feasible and rec.devices == 1 and rec.strategy == "single"
    assert rec.usd <= 1.02 * min(o.usd for o in feasible)
    assert any(ch.isdigit() for r in rec.reasons[:5] for ch in r) and all(
        any(c.isdigit() for c in r) for r in rec.reasons[:5]
    )
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


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        (dict(n_params=-1), "n_params"),
        (dict(n_samples=0), "n_samples"),
        (dict(tokens_per_sample=0), "tokens_per_sample"),
        (dict(epochs=-1), "epochs"),
        (dict(framework="caffe"), "framework"),
        (dict(privacy="secret"), "privacy"),
        (dict(energy="green"), "energy"),
        (dict(precision="fp8"), "precision"),
        (dict(optimizer="lion"), "optimizer"),
        (dict(budget_usd=-5), "budget_usd"),
        (dict(deadline_hours=0), "deadline_hours"),
        (dict(grid="mars"), "grid"),
        (dict(flops_per_sample=-1), "flops_per_sample"),
        (dict(utilization=1.5), "utilization"),
        (dict(activation_bytes=-1, batch_size=4), "activation_bytes"),
        (dict(cpu_gflops=0), "cpu_gflops"),
        (dict(n_params=0.5), "n_params"),
        (dict(activation_bytes=1e9), "batch_size"),
        (dict(batch_size=8), "activation_bytes"),
        (dict(activation_bytes=1e9, batch_size=0), "batch_size"),
    ],
)
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
    assert len(keys) == len(set(keys)) and ("cpu", "a CPU you have") in keys
    assert {"fits", "hours", "usd", "kwh", "memory_gb", "feasible", "why_not"} <= set(rows[0])
    assert not any(math.isnan(r["hours"]) for r in rows)


# ----------------------------------------------------------------------------- weighing: framework, fine-tune,
# owned cards, printed assumptions and what flips them (notebook 07.3, exercise 07)


def test_pytorch_pays_to_port_to_tpus_unless_the_code_runs_on_xla():
    """A CUDA code base is not given a TPU headline for free; JAX, and PyTorch code already on XLA, pay nothing."""
    torch_rec = recommend(124e6, 2.5e9, budget_usd=1000, deadline_hours=168)
    assert catalog.get_accelerator(torch_rec.hardware).kind == "gpu"
    xla = recommend(124e6, 2.5e9, budget_usd=1000, deadline_hours=168, xla_ready=True)
    jax = recommend(124e6, 2.5e9, budget_usd=1000, deadline_hours=168, framework="jax")
    assert catalog.get_accelerator(xla.hardware).kind == "tpu" and (jax.hardware, jax.usd) == (xla.hardware, xla.usd)
    tpu = [
        o for o in torch_rec.options if o.hardware == xla.hardware and o.devices == xla.devices and o.where == "cloud"
    ][0]
    assert tpu.extra_usd == decision.PORTING_USD and tpu.usd == pytest.approx(xla.usd + decision.PORTING_USD)
    assert any("xla_ready=True" in f and "TPU" in f for f in torch_rec.flips)
    assert recommend(124e6, 2.5e9, porting_usd=0).hardware == xla.hardware  # no porting cost: the TPU again


def test_finetune_prices_full_lora_and_qlora_side_by_side():
    rec = recommend(7e9, 1e6, tokens_per_sample=512, budget_usd=2000, deadline_hours=72, finetune=True)
    assert {o.method for o in rec.options} == set(decision.METHODS)
    assert rec.method in ("lora", "qlora") and any("Fine-tune priced three ways" in r for r in rec.reasons)
    one = {
        m: next(
            o
            for o in rec.options
            if o.method == m and o.hardware == "h100-sxm" and o.devices == 1 and o.where == "cloud"
        )
        for m in decision.METHODS
    }
    n = int(7e9)
    assert one["full"].memory_bytes == memory.model_states_bytes(n, "bf16-mixed", "adam")
    assert one["lora"].memory_bytes == 2 * n + memory.model_states_bytes(int(n * 0.01), "bf16-mixed", "adam")
    assert one["qlora"].memory_bytes == n // 2 + memory.model_states_bytes(int(n * 0.01), "bf16-mixed", "adam")
    assert one["lora"].hours == pytest.approx(one["full"].hours * 4 / 6)  # no weight gradients: 4 FLOPs, not 6
    assert one["qlora"].hours == pytest.approx(one["lora"].hours * decision.QLORA_SLOWDOWN)
    assert not one["full"].fits and one["lora"].fits  # 112 GB of full states; 15 GB with LoRA


def test_training_from_scratch_lists_no_lora():
    rec = recommend(7e9, 1e8, framework="jax")
    assert {o.method for o in rec.options} == {"full"} and rec.method == "full"
    assert not any("LoRA" in m or "QLoRA" in m for m in rec.methods)


def test_every_purchasable_card_with_a_peak_is_considered_and_the_clinic_is_feasible():
    rec = recommend(
        350e6, 2e6, tokens_per_sample=256, epochs=3, budget_usd=20000, deadline_hours=240, privacy="regulated"
    )
    owned = {o.hardware for o in rec.options if o.where == "owned"}
    assert {p.accelerator for p in catalog.prices("purchase") if p.accelerator} == owned
    assert {"rtx-4090", "rtx-6000-ada"} <= owned
    assert rec.feasible and rec.where == "owned" and rec.usd <= 20000
    desk = next(o for o in rec.options if o.hardware == "rtx-6000-ada" and o.where == "owned" and o.devices == 1)
    assert desk.usd == pytest.approx(
        6800 + decision.DESK_HOST_USD + desk.kwh * decision.catalog.get_price(decision.ELECTRICITY_ROW).value
    )
    half = recommend(
        350e6,
        2e6,
        tokens_per_sample=256,
        epochs=3,
        budget_usd=20000,
        deadline_hours=240,
        privacy="regulated",
        purchase_share=0.5,
    )
    desk2 = next(o for o in half.options if o.hardware == "rtx-6000-ada" and o.where == "owned" and o.devices == 1)
    assert desk2.usd == pytest.approx(
        0.5 * (6800 + decision.DESK_HOST_USD) + desk2.kwh * decision.catalog.get_price(decision.ELECTRICITY_ROW).value
    )


def test_assumptions_are_printed_and_flips_say_what_changes():
    rec = recommend(124e6, 2.5e9, budget_usd=1000, deadline_hours=168)
    text = str(rec)
    for key in (
        "utilization = 0.4",
        "purchase_share = 1",
        "spot = False",
        "host_power_ratio = 1",
        "xla_ready = False",
        "finetune = False",
        "desk_host_usd",
    ):
        assert key in text, key
    assert "What flips the choice" in text and len(rec.flips) >= 4
    flipped = recommend(124e6, 2.5e9, budget_usd=1000, deadline_hours=168, flips=False)
    assert flipped.flips == () and flipped.hardware == rec.hardware


def test_utilization_by_kind_and_sensitive_markup_and_one_host_power_rule():
    base = recommend(124e6, 2.5e9)
    slow_gpu = recommend(124e6, 2.5e9, utilization={"gpu": 0.2}, flips=False)
    a = next(o for o in base.options if o.hardware == "l4" and o.devices == 1 and o.where == "cloud")
    b = next(o for o in slow_gpu.options if o.hardware == "l4" and o.devices == 1 and o.where == "cloud")
    assert b.hours == pytest.approx(2 * a.hours)
    cpu_a = next(o for o in base.options if o.hardware == "cpu")
    cpu_b = next(o for o in slow_gpu.options if o.hardware == "cpu")
    assert cpu_a.hours == cpu_b.hours  # the CPU keeps the default
    sens = recommend(124e6, 2.5e9, privacy="sensitive", flips=False)
    c = next(o for o in sens.options if o.hardware == "l4" and o.devices == 1 and o.where == "cloud")
    assert decision.SENSITIVE_MARKUP == 0 and c.usd == pytest.approx(a.usd)  # ordinary on-demand instances
    dedicated = recommend(124e6, 2.5e9, privacy="sensitive", sensitive_markup=0.5, flips=False)
    e = next(o for o in dedicated.options if o.hardware == "l4" and o.devices == 1 and o.where == "cloud")
    assert e.usd == pytest.approx(1.5 * a.usd)
    assert any("sole-tenant" in r for r in sens.reasons)
    # one host rule: a rented chip draws host_power_ratio x its TDP of host power (72 W for an L4, not a flat 400 W)
    bare = recommend(124e6, 2.5e9, host_power_ratio=0, flips=False)
    d = next(o for o in bare.options if o.hardware == "l4" and o.devices == 1 and o.where == "cloud")
    l4_w = catalog.get_accelerator("l4").power_w
    assert a.kwh == pytest.approx(
        d.kwh + a.hours * cost.HOST_POWER_RATIO * l4_w * catalog.get_price("pue-google").value / 1e3
    )
    assert a.kwh == pytest.approx(d.kwh * (1 + cost.HOST_POWER_RATIO))  # the host doubles the chip's energy
    # a bought data-centre card by the same rule, a bought desk card its workstation's watts
    reg = recommend(124e6, 2.5e9, privacy="regulated", flips=False)
    reg0 = recommend(124e6, 2.5e9, privacy="regulated", host_power_ratio=0, flips=False)
    pick = lambda r, hw: next(o for o in r.options if (o.hardware, o.where, o.devices) == (hw, "owned", 1))
    assert pick(reg, "a100-80gb").kwh == pytest.approx(2 * pick(reg0, "a100-80gb").kwh)
    assert pick(reg, "rtx-4090").kwh == pytest.approx(pick(reg0, "rtx-4090").kwh)  # not a server: unchanged
    rtx = pick(reg, "rtx-4090")
    assert rtx.kwh == pytest.approx(rtx.hours * (450 + decision.DESK_HOST_W) / 1e3)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(finetune="yes"), TypeError, "finetune"),
        (dict(xla_ready=1), TypeError, "xla_ready"),
        (dict(porting_usd=-1), ValueError, "porting_usd"),
        (dict(purchase_share=1.5), ValueError, "purchase_share"),
        (dict(purchase_share=0), ValueError, "purchase_share"),
        (dict(host_power_ratio=-5), ValueError, "host_power_ratio"),
        (dict(sensitive_markup=-0.1), ValueError, "sensitive_markup"),
        (dict(qlora_slowdown=0.5), ValueError, "qlora_slowdown"),
        (dict(desk_host_usd=-1), ValueError, "desk_host_usd"),
        (dict(utilization={"fpga": 0.3}), ValueError, "utilization"),
        (dict(utilization={"gpu": 1.5}), ValueError, "utilization"),
    ],
)
def test_new_assumptions_reject_bad_input(kwargs, error, words):
    with pytest.raises(error, match=words):
        recommend(124e6, 2.5e9, **kwargs)
