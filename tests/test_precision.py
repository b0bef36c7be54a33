import math
import warnings

import pytest
import torch

from course_lib import cpu, data, devices, hardware, models, precision, seeds
from course_lib.hardware import CPUInfo

AVX2 = CPUInfo("AMD EPYC (Zen 3)", "x86_64", 2, 2, ("AVX2", "FMA"), "AVX2", "AVX2", native_bf16=False)
ZEN4 = CPUInfo("AMD EPYC (Zen 4)", "x86_64", 2, 2, ("AVX-512", "AVX-512 BF16"), "AVX512", "AVX-512", native_bf16=True)
SAPPHIRE = CPUInfo(
    "Xeon",
    "x86_64",
    2,
    2,
    ("AVX-512", "AMX BF16", "AVX-512 FP16"),
    "AVX512",
    "AVX-512",
    native_bf16=True,
    native_fp16=True,
)
T4 = devices.GPU("Tesla T4", (7, 5), 15 * 2**30)
A100 = devices.GPU("A100", (8, 0), 40 * 2**30)


# ----------------------------------------------------------------------------------------------
# formats

# (exponent bits, mantissa bits, has_inf) of each format PyTorch has: the layouts on their data sheets
LAYOUTS = {
    "fp32": (8, 23, True),
    "bf16": (8, 7, True),
    "fp16": (5, 10, True),
    "fp8-e4m3": (4, 3, False),
    "fp8-e5m2": (5, 2, True),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_format_from_bits_reproduces_torch_finfo(name):
    e, m, inf = LAYOUTS[name]
    built = precision.format_from_bits(e, m, has_inf=inf, name=name)
    read = precision.number_format(name)
    assert built.numbers() == read.numbers(), (built, read)
    assert built.decimal_digits == pytest.approx(read.decimal_digits)
    # finfo.resolution is 10 ** -(whole decimal digits)
    assert 10.0 ** -math.floor(read.decimal_digits) == pytest.approx(
        torch.finfo(precision.formats._TORCH[name]).resolution
    )


def test_format_from_bits_reproduces_fp64_too():
    f, info = precision.format_from_bits(11, 52), torch.finfo(torch.float64)
    assert (f.bits, f.max, f.smallest_normal, f.eps) == (64, info.max, info.tiny, info.eps)
    assert f.smallest_subnormal == 5e-324


@pytest.mark.parametrize(
    "name, bits, e, m, largest, normal, subnormal, eps, inf",
    [
        ("fp32", 32, 8, 23, (2 - 2**-23) * 2.0**127, 2.0**-126, 2.0**-149, 2.0**-23, True),
        ("tf32", 19, 8, 10, (2 - 2**-10) * 2.0**127, 2.0**-126, 2.0**-136, 2.0**-10, True),
        ("bf16", 16, 8, 7, (2 - 2**-7) * 2.0**127, 2.0**-126, 2.0**-133, 2.0**-7, True),
        ("fp16", 16, 5, 10, 65504.0, 2.0**-14, 2.0**-24, 2.0**-10, True),
        ("fp8-e4m3", 8, 4, 3, 448.0, 2.0**-6, 2.0**-9, 0.125, False),
        ("fp8-e5m2", 8, 5, 2, 57344.0, 2.0**-14, 2.0**-16, 0.25, True),
    ],
)
def test_number_formats_against_hand_values(name, bits, e, m, largest, normal, subnormal, eps, inf):
    f = precision.number_format(name)
    assert (f.bits, f.sign_bits, f.exponent_bits, f.mantissa_bits) == (bits, 1, e, m)
    assert (f.max, f.smallest_normal, f.smallest_subnormal, f.eps, f.has_inf) == (largest, normal, subnormal, eps, inf)
    assert f.decimal_digits == pytest.approx(m * math.log10(2))
    assert f.note


def test_number_formats_order_and_lookup():
    assert tuple(f.name for f in precision.number_formats()) == precision.FORMATS
    assert precision.number_format(torch.float8_e4m3fn).name == "fp8-e4m3"
    assert precision.number_format("HALF").name == "fp16"
    assert precision.number_format("e5m2").torch_dtype == "torch.float8_e5m2"
    assert precision.number_format("tf32").torch_dtype is None
    assert precision.number_format("fp16").overflow_threshold == 65520.0
    assert precision.number_format("fp8-e4m3").overflow_threshold == 464.0
    assert precision.number_format("fp16").range_decades == pytest.approx(math.log10(65504 * 2**24))


@pytest.mark.parametrize("name", precision.STORAGE_FORMATS)
def test_the_limits_hold_when_values_are_really_cast(name):
    f, dtype = precision.number_format(name), precision.formats._TORCH[name]

    def cast(v):
        return torch.tensor([v]).to(dtype).item()

    assert cast(f.smallest_subnormal) == f.smallest_subnormal
    assert cast(f.smallest_subnormal * 0.5) == 0.0  # the tie rounds to even: 0
    assert cast(f.smallest_normal) == f.smallest_normal
    assert cast(1 + f.eps) == 1 + f.eps and cast(1 + f.eps / 4) == 1.0
    assert cast(f.max) == f.max
    if f.has_inf:
        below = torch.nextafter(torch.tensor(f.overflow_threshold), torch.tensor(0.0)).item()  # in fp32
        assert math.isinf(cast(f.overflow_threshold)) and cast(below) == f.max
    else:  # fp8-e4m3 has no infinity: PyTorch 2.13 clips (the spec also allows NaN)
        assert cast(1e6) == f.max or math.isnan(cast(1e6))


def test_format_table_is_markdown_with_one_row_per_format():
    lines = precision.format_table()
    assert lines[0].startswith("| format |") and lines[1].startswith("|---")
    assert len(lines) == 2 + len(precision.FORMATS)
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    fp16 = next(line for line in lines if line.startswith("| fp16 "))
    assert "16 (1/5/10)" in fp16 and "65504" in fp16 and "5.96e-08" in fp16
    assert "| 448 |" in next(line for line in lines if line.startswith("| fp8-e4m3 "))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: precision.format_name("fp8"), ValueError, "fp8-e4m3"),
        (lambda: precision.format_name("int8"), ValueError, "accepted values"),
        (lambda: precision.format_name(torch.float64), ValueError, "accepted values"),
        (lambda: precision.format_name(16), TypeError, "str"),
        (lambda: precision.format_name("tf32", accepted=precision.STORAGE_FORMATS), ValueError, "matmul mode"),
        (lambda: precision.format_from_bits(1, 10), ValueError, "exponent_bits"),
        (lambda: precision.format_from_bits(8, 0), ValueError, "mantissa_bits"),
        (lambda: precision.format_from_bits(8.0, 10), TypeError, "exponent_bits"),
        (lambda: precision.format_from_bits(8, 10, has_inf="no"), TypeError, "has_inf"),
        (lambda: precision.format_from_bits(8, 10, name=3), TypeError, "name"),
    ],
)
def test_format_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ----------------------------------------------------------------------------------------------
# casting values


def test_underflow_subnormal_and_overflow_of_known_values():
    v = torch.tensor([0.0, 0.0, 1e-8, 1.0])  # zeros are not counted
    r = precision.underflow(v, "fp16")
    assert (r.dtype, r.scale, r.nonzero, r.underflow, r.subnormal, r.overflow) == ("fp16", 1.0, 2, 0.5, 0.0, 0.0)
    assert r.normal == 0.5 and "50.00% of 2 non-zero values become 0" in str(r)
    assert precision.underflow(v, torch.bfloat16).underflow == 0.0  # bf16 has fp32's range
    assert precision.underflow(torch.tensor([1e-6, -1e-6, 1e-3]), "fp16").subnormal == pytest.approx(2 / 3)
    assert precision.underflow(torch.tensor([70000.0, -70000.0, 1.0]), "fp16").overflow == pytest.approx(2 / 3)
    assert precision.underflow(torch.tensor([70000.0]), "bf16").overflow == 0.0
    assert precision.underflow(torch.tensor([65519.0]), "fp16").overflow == 0.0  # rounds down to 65504
    assert precision.underflow(torch.tensor([1e-8]), "fp32").underflow == 0.0
    assert precision.underflow(torch.tensor([1e-8], dtype=torch.float64), "fp32").subnormal == 0.0


def test_fp8_e4m3_overflow_is_counted_although_the_cast_clips():
    r = precision.underflow(torch.tensor([460.0, 500.0, 5e-4, 1.0]), "fp8-e4m3")
    # 460 rounds to 448, 500 is past 464; 5e-4 is below 2**-10, half the smallest subnormal
    assert (r.overflow, r.underflow, r.subnormal) == (0.25, 0.25, 0.0)
    assert precision.underflow(torch.tensor([500.0]), "fp8-e5m2").overflow == 0.0


def test_loss_scaling_rescues_small_values_and_can_overflow_large_ones():
    v = torch.tensor([1e-8, 1.0])
    assert precision.loss_scale_rescue(v, "fp16", 2.0**10).underflow == 0.0  # 1e-8 * 1024 ~ 1e-5: subnormal
    assert precision.loss_scale_rescue(v, "fp16", 2.0**10).subnormal == 0.5
    rescued = precision.loss_scale_rescue(v, "fp16", 2.0**13)  # 8.2e-5: normal
    assert (rescued.underflow, rescued.subnormal, rescued.overflow, rescued.normal) == (0.0, 0.0, 0.0, 1.0)
    assert precision.loss_scale_rescue(v, "fp16", 2.0**16).overflow == 0.5  # 1 * 65536 > 65504
    assert precision.loss_scale_rescue(v, "fp16", 1.0) == precision.underflow(v, "fp16")


@pytest.mark.parametrize(
    "values, dtype, kwargs, expected",
    [
        ([1.0], "fp16", {}, 2.0**15),  # 2**16 = 65536 rounds past 65504
        ([3.0, -1e-9], "fp16", {}, 2.0**14),  # 3 * 2**15 = 98304 overflows
        ([65504.0], "fp16", {}, 1.0),
        ([70000.0], "fp16", {}, 0.5),
        ([1.0], "fp8-e4m3", {}, 256.0),  # 512 > 448 (it would clip)
        ([1.0], "bf16", {}, 2.0**127),  # the scale itself must stay a finite fp32
        ([1.0], "fp16", {"max_scale": 1000}, 512.0),
    ],
)
def test_largest_safe_scale(values, dtype, kwargs, expected):
    v = torch.tensor(values)
    scale = precision.largest_safe_scale(v, dtype, **kwargs)
    assert scale == expected
    assert precision.loss_scale_rescue(v, dtype, scale).overflow == 0.0
    if not kwargs and scale < 2.0**127:
        assert precision.loss_scale_rescue(v, dtype, 2 * scale).overflow > 0


def test_gradient_values_gathers_every_gradient():
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="backward"):
        precision.gradient_values(model)
    model(torch.ones(4, 3)).sum().backward()
    g = precision.gradient_values(model)
    assert g.dtype == torch.float32 and g.shape == (3 * 2 + 2,)
    assert torch.equal(g, torch.cat([model.weight.grad.flatten(), model.bias.grad]))
    assert torch.equal(g, torch.tensor([4.0] * 6 + [4.0] * 2))  # d(sum)/dW = sum of inputs, d/db = batch size


@pytest.fixture(scope="module")
def digits_gradients():
    """The digits MLP trained full-batch with Adam: gradients at the first step and after 100 steps."""
    with cpu.limit_threads(1):  # a tiny model: one thread is fastest and deterministic
        seeds.seed_everything(0)
        split = data.load_digits()
        model = models.MLP(64, 128, 10)
        return precision.gradients_while_training(model, (split.x_train, split.y_train), [0, 100])


def test_real_gradients_shrink_and_fp16_loses_some_of_them(digits_gradients):
    early, late = digits_gradients[0], digits_gradients[100]
    assert set(digits_gradients) == {0, 100} and early.numel() == late.numel() == 64 * 128 + 128 + 128 * 10 + 10
    assert late.abs().max() < early.abs().max() / 10, "gradients should shrink as the loss falls"
    first, last = precision.underflow(early, "fp16"), precision.underflow(late, "fp16")
    # measured with 1 and 2 threads: 0.05% at step 0, 4.7% at step 100 (78% subnormal)
    assert last.underflow > 0.01 and last.underflow > 5 * first.underflow, (first, last)
    assert last.subnormal > 0.5, last
    assert precision.underflow(late, "bf16").underflow == 0.0, "bf16 has fp32's range"
    # fp8-e4m3 (smallest subnormal 2**-9) loses nearly all of them without a per-tensor scale
    assert precision.underflow(late, "fp8-e4m3").underflow > 0.9


def test_loss_scaling_rescues_the_real_gradients(digits_gradients):
    late = digits_gradients[100]
    plain = precision.underflow(late, "fp16")
    scale = precision.largest_safe_scale(late, "fp16")
    assert scale >= 2.0**16, scale  # measured 2**26: the largest gradient is ~6e-4
    rescued = precision.loss_scale_rescue(late, "fp16", scale)
    assert rescued.overflow == 0.0 and rescued.underflow < plain.underflow / 10, (plain, rescued)
    at_init = precision.loss_scale_rescue(late, "fp16", 2.0**16)  # GradScaler's initial scale
    assert at_init.underflow < plain.underflow / 10 and at_init.subnormal < plain.subnormal / 10, (plain, at_init)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: precision.underflow([1e-8], "fp16"), TypeError, "torch.Tensor"),
        (lambda: precision.underflow(torch.tensor([1, 2]), "fp16"), TypeError, "floating-point"),
        (lambda: precision.underflow(torch.tensor([1.0, float("inf")]), "fp16"), ValueError, "inf or NaN"),
        (lambda: precision.underflow(torch.tensor([float("nan")]), "fp16"), ValueError, "inf or NaN"),
        (lambda: precision.underflow(torch.zeros(3), "fp16"), ValueError, "non-zero"),
        (lambda: precision.underflow(torch.tensor([]), "fp16"), ValueError, "non-zero"),
        (lambda: precision.underflow(torch.ones(2), "tf32"), ValueError, "matmul mode"),
        (lambda: precision.underflow(torch.ones(2), "fp64"), ValueError, "accepted values"),
        (lambda: precision.underflow(torch.ones(2), "fp8"), ValueError, "fp8-e5m2"),
        (lambda: precision.loss_scale_rescue(torch.ones(2), "fp16", 0), ValueError, "scale"),
        (lambda: precision.loss_scale_rescue(torch.ones(2), "fp16", -2.0), ValueError, "scale"),
        (lambda: precision.loss_scale_rescue(torch.ones(2), "fp16", "1024"), TypeError, "scale"),
        (lambda: precision.largest_safe_scale(torch.ones(2), "fp16", max_scale=0), ValueError, "max_scale"),
        (lambda: precision.largest_safe_scale(torch.zeros(2), "fp16"), ValueError, "non-zero"),
        (lambda: precision.gradient_values("model"), TypeError, "nn.Module"),
        (lambda: precision.gradients_while_training("model", (torch.ones(2, 2),), [0]), TypeError, "nn.Module"),
        (
            lambda: precision.gradients_while_training(torch.nn.Linear(2, 2), (torch.ones(2, 2), None), []),
            ValueError,
            "at_steps",
        ),
        (
            lambda: precision.gradients_while_training(torch.nn.Linear(2, 2), (torch.ones(2, 2), None), [-1]),
            ValueError,
            "at_steps",
        ),
        (
            lambda: precision.gradients_while_training(
                torch.nn.Linear(2, 2), (torch.ones(2, 2), None), [0], optimizer="rmsprop"
            ),
            ValueError,
            "optimizer",
        ),
    ],
)
def test_casting_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_gradients_while_training_on_a_tiny_model():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    g = precision.gradients_while_training(model, (torch.ones(4, 2), None), [2, 0], optimizer="sgd", lr=0.1)
    assert sorted(g) == [0, 2]
    assert torch.equal(g[0], torch.tensor([4.0, 4.0, 4.0]))  # loss = sum of outputs: d/dw = sum of inputs
    assert torch.equal(g[2], g[0])  # a linear loss has the same gradient everywhere


# ----------------------------------------------------------------------------------------------
# compute dtype guard


def test_fp16_on_a_cpu_without_fp16_units_is_refused_with_the_reason_and_bf16_offered():
    with pytest.raises(ValueError, match="no fp16 arithmetic units") as err:
        precision.check_compute_dtype("fp16", "cpu", cpu=AVX2)
    assert "bf16-mixed" in str(err.value) and "hundreds of times slower" in str(err.value)
    with pytest.raises(ValueError, match="fp16 arithmetic units"):
        precision.check_compute_dtype(torch.float16, torch.device("cpu"), cpu=ZEN4)


def test_emulated_bf16_warns_and_native_is_quiet():
    with pytest.warns(precision.EmulatedDtypeWarning, match="emulated"):
        note = precision.check_compute_dtype("bf16", "cpu", cpu=AVX2)
    assert "AVX2" in note
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert precision.check_compute_dtype("bf16", "cpu", cpu=AVX2, warn=False) == note
        assert precision.check_compute_dtype("bfloat16", "cpu", cpu=ZEN4) == ""
        assert precision.check_compute_dtype("fp32", "cpu", cpu=AVX2) == ""
        assert precision.check_compute_dtype("fp16", "cuda:0", gpu=T4) == ""
        assert precision.check_compute_dtype("bf16", "cuda", gpu=A100) == ""
    with pytest.warns(precision.EmulatedDtypeWarning, match="few kernels"):
        precision.check_compute_dtype("fp16", "cpu", cpu=SAPPHIRE)
    with pytest.warns(precision.EmulatedDtypeWarning, match="Tesla T4.*fp16 with a GradScaler"):
        precision.check_compute_dtype("bf16", "cuda", gpu=T4)


def test_check_compute_dtype_reads_this_machine_by_default():
    here = hardware.detect().cpu
    note = precision.check_compute_dtype("bf16", warn=False)
    assert bool(note) == (not here.native_bf16)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: precision.check_compute_dtype("fp13"), ValueError, "accepted values"),
        (lambda: precision.check_compute_dtype("int8"), ValueError, "accepted values"),
        (lambda: precision.check_compute_dtype(torch.float64), ValueError, "accepted values"),
        (lambda: precision.check_compute_dtype(torch.float8_e5m2), ValueError, "accepted values"),
        (lambda: precision.check_compute_dtype(None), TypeError, "dtype"),
        (lambda: precision.check_compute_dtype("bf16", "gpu"), ValueError, "cuda"),
        (lambda: precision.check_compute_dtype("bf16", 0), TypeError, "device"),
        (lambda: precision.check_compute_dtype("bf16", "cuda:x"), ValueError, "index"),
        (lambda: precision.check_compute_dtype("bf16", cpu="avx2"), TypeError, "cpu"),
        (lambda: precision.check_compute_dtype("bf16", "cuda", gpu="T4"), TypeError, "gpu"),
        (lambda: precision.check_compute_dtype("bf16", warn="no"), TypeError, "warn"),
    ],
)
def test_check_compute_dtype_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bf16_flushes_no_normal_fp32_value():
    """Notebook 04 prints this as computed: bf16 has fp32's 8 exponent bits, so nothing fp32 holds as a normal
    number underflows to zero in bf16."""
    v = torch.logspace(-37.9, 37.9, 2000)
    assert precision.underflow(v, "bf16").underflow == 0 == precision.underflow(-v, "bf16").underflow


# ----------------------------------------------------------------------------------------------
# fp16 inside the backward pass


def _trained_digits_mlp():
    with cpu.limit_threads(1):
        seeds.seed_everything(0)
        split = data.load_digits()
        model = models.MLP(64, 128, 10)
        precision.gradients_while_training(model, (split.x_train, split.y_train), [100])
        return model, (split.x_train, split.y_train)


def test_the_fp16_backward_flushes_activation_gradients_and_loss_scaling_saves_them():
    """Measured inside autocast's backward pass (not a cast of finished gradients): late in training the
    logits' gradient, (softmax - one-hot) / batch, is far below fp16's smallest subnormal for most entries."""
    model, batch = _trained_digits_mlp()
    before = [p.detach().clone() for p in model.parameters()]
    with cpu.limit_threads(1):
        plain = precision.backward_underflow(model, batch, "fp16")
        scaled = precision.backward_underflow(model, batch, "fp16", scale=2.0**16)
        bf16 = precision.backward_underflow(model, batch, "bf16")
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before)), "the passes must not train the model"
    assert [name for name, _, _ in plain.layers] == ["0", "2"]  # both Linear layers, input side first
    # measured: weight gradients 4.8 % lost, activation gradients 45 % (hidden) and 77 % (logits)
    assert plain.param_lost > 0.01 and plain.activation_lost > 0.2, plain
    assert scaled.param_lost < plain.param_lost / 10 and scaled.activation_lost < plain.activation_lost / 5, scaled
    # bf16 has fp32's exponent range: what it "loses" is a ReLU that its rounded forward pass switched off
    assert bf16.param_lost < 1e-3 and bf16.activation_lost < 1e-3, bf16
    assert "weight gradients lost" in str(plain) and plain.dtype == "fp16" and scaled.scale == 2.0**16


def test_backward_underflow_bad_input():
    lin = torch.nn.Linear(4, 2)
    batch = (torch.randn(3, 4), torch.tensor([0, 1, 0]))
    with pytest.raises(TypeError, match="nn.Module"):
        precision.backward_underflow("model", batch)
    with pytest.raises(ValueError, match="accepted values"):
        precision.backward_underflow(lin, batch, "fp8-e4m3")
    with pytest.raises(ValueError, match="scale"):
        precision.backward_underflow(lin, batch, scale=0)
    with pytest.raises(TypeError, match="pair"):
        precision.backward_underflow(lin, batch[0])
    big = torch.nn.Linear(4096, 4096)  # 1.7e7 parameters x 8 examples: the slow CPU fp16 path is refused
    with pytest.raises(ValueError, match="slow fp16 fallback"):
        precision.backward_underflow(big, (torch.randn(8, 4096), torch.zeros(8, dtype=torch.long)))


# ----------------------------------------------------------------------------------------------
# master weights


def test_bf16_weights_ignore_small_updates_that_fp32_master_weights_keep():
    """Adam moves each weight by about lr per step; at lr 1e-4 that is below 2^-8 of most weights of the
    digits MLP (|w| up to 1/8), so a bf16 weight rounds it away. Measured: 84 % ignored, the loss barely moves."""
    split = data.load_digits()
    with cpu.limit_threads(1):
        runs = {w: precision.weights_run(w, models.MLP, split.train.tensors, steps=60) for w in ("fp32", "bf16")}
    assert runs["fp32"]["ignored"] < 0.01 and runs["bf16"]["ignored"] > 0.5, runs
    drop = {w: r["loss_start"] - r["loss_end"] for w, r in runs.items()}
    assert drop["fp32"] > 0.05 and drop["bf16"] < 0.5 * drop["fp32"], drop
    assert runs["fp32"]["loss_start"] == pytest.approx(runs["bf16"]["loss_start"], abs=0.01)  # the same model


def test_one_bf16_addition_loses_updates_below_half_a_gap():
    """The rule weights_run measures, in one addition: 1 + u in bf16 stays 1 for u <= 2^-8 (half of bf16's
    gap 2^-7 above 1; a tie rounds to even) and moves for u a little above it."""
    one = torch.ones((), dtype=torch.bfloat16)
    assert one + torch.tensor(2.0**-8, dtype=torch.bfloat16) == one
    assert one + torch.tensor(2.0**-8 * 1.01, dtype=torch.bfloat16) != one
    assert torch.tensor(1.0) + 2.0**-20 != torch.tensor(1.0)  # fp32 keeps it


def test_weights_run_bad_input():
    x = (torch.randn(8, 4), torch.zeros(8, dtype=torch.long))
    with pytest.raises(ValueError, match="accepted values"):
        precision.weights_run("fp16", lambda: torch.nn.Linear(4, 2), x)
    with pytest.raises(TypeError, match="make_model"):
        precision.weights_run("bf16", "mlp", x)
    with pytest.raises(TypeError, match="nn.Module"):
        precision.weights_run("bf16", lambda: 3, x)
    with pytest.raises(ValueError, match="steps"):
        precision.weights_run("bf16", lambda: torch.nn.Linear(4, 2), x, steps=0)
    with pytest.raises(TypeError, match="pair"):
        precision.weights_run("bf16", lambda: torch.nn.Linear(4, 2), x[0])


# ----------------------------------------------------------------------------------------------
# where the step's time goes


def test_record_matmuls_lists_a_linear_stacks_forward_and_backward_products():
    from course_lib import train

    model = models.MLP(32, [16, 16], 4)  # 32 -> 16 -> 16 -> 4
    step = train.make_step_fn(model, torch.randn(8, 32), torch.randint(0, 4, (8,)), "sgd")
    found = precision.record_matmuls(step)
    # forward: 3 products; backward: the first layer's weight gradient only (its input needs none), 2 for the others
    assert len(found) == 3 + 1 + 2 * 2
    assert [(p.m, p.k, p.n) for p in found[:3]] == [(8, 32, 16), (8, 16, 16), (8, 16, 4)]
    assert all(p.b_t for p in found[:3]) and not any(p.a_t for p in found[:3])  # x @ W.T
    weight_grads = sorted((p.m, p.k, p.n) for p in found[3:] if p.a_t)  # dY.T @ X
    assert weight_grads == [(4, 8, 16), (16, 8, 16), (16, 8, 32)]
    assert sum(p.flops for p in found) == 2 * 8 * (3 * 32 * 16 + 3 * 16 * 16 + 3 * 16 * 4) - 2 * 8 * 32 * 16
    bmm = precision.record_matmuls(lambda: torch.bmm(torch.randn(3, 4, 5), torch.randn(3, 5, 6)))
    assert bmm == [precision.Product(3, 4, 5, 6, False, False)]


def test_products_fn_replays_shapes_and_layouts():
    prods = [precision.Product(1, 8, 16, 4, False, True), precision.Product(2, 3, 5, 7, True, False)]
    seen = precision.record_matmuls(precision.products_fn(prods, "bf16"))
    assert seen == prods
    with pytest.raises(ValueError, match="non-empty"):
        precision.products_fn([], "fp32")
    with pytest.raises(TypeError, match="Product"):
        precision.products_fn([(1, 2, 3, 4)], "fp32")
    with pytest.raises(ValueError, match="accepted values"):
        precision.products_fn(prods, "fp8-e5m2")
    with pytest.raises(ValueError, match="every size"):
        precision.products_fn([precision.Product(1, 0, 2, 2, False, False)], "fp32")


def test_predicted_step_ratio_is_amdahls_law():
    assert precision.predicted_step_ratio(0.0, 0.25) == 1.0  # no products: nothing to gain
    assert precision.predicted_step_ratio(1.0, 0.25) == 0.25  # all products: their ratio
    assert precision.predicted_step_ratio(0.1, 0.25) == pytest.approx(0.925)  # 10 % products gain 7.5 %
    assert precision.predicted_step_ratio(0.1, 40.0) == pytest.approx(4.9)  # emulated bf16: 40x slower products
    assert precision.predicted_step_ratio(0.5, 0.5, rest_ratio=1.2) == pytest.approx(0.85)
    for bad, match in (((1.5, 0.5), "share"), ((0.5, 0.0), "product_ratio"), ((0.5, 1.0, -1.0), "rest_ratio")):
        with pytest.raises(ValueError, match=match):
            precision.predicted_step_ratio(*bad)
    with pytest.raises(TypeError, match="share"):
        precision.predicted_step_ratio("0.5", 1.0)


def test_step_decomposition_times_five_things_and_derives_the_model():
    torch.manual_seed(0)
    batch = (torch.randn(64, 256), torch.randint(0, 10, (64,)))
    with cpu.limit_threads(1):
        d = precision.step_decomposition(lambda: models.MLP(256, [256, 256], 10), batch, rounds=1, min_run_time=0.01)
    assert d.batch == 64 and d.low == "bf16-mixed" and d.products == 3 + 1 + 2 * 2
    assert 0 < d.share <= 1 and d.step_fp32 > 0 and d.products_low > 0
    assert d.predicted == pytest.approx(d.share * d.product_ratio + 1 - d.share)
    assert d.predicted_with_casts == pytest.approx(d.predicted + d.casts_low / d.step_fp32) and d.casts_low > 0
    assert d.measured == pytest.approx(d.step_low / d.step_fp32)
    with pytest.raises(ValueError, match="mixed precision"):
        precision.step_decomposition(lambda: models.MLP(), batch, low="fp32")
    with pytest.raises(TypeError, match="pair"):
        precision.step_decomposition(lambda: models.MLP(), batch[0])
    with pytest.raises(TypeError, match="make_model must return"):
        precision.step_decomposition(lambda: "mlp", batch)
    with pytest.raises(ValueError, match="no matrix products"):
        precision.step_decomposition(lambda: torch.nn.LayerNorm(3), (torch.randn(4, 3), None))
