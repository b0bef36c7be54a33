"""Tests of course_lib.memory: the estimate must match measured training steps within 10%."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from course_lib import memory as M
from course_lib.models import MLP, SmallCNN, TinyTransformer

RATIOS: dict[str, float] = {}


def _mlp():
    return MLP(64, [1024, 1024], 10), torch.randn(256, 64), torch.randint(0, 10, (256,))


def _cnn():
    return SmallCNN(1, 10, width=32, image_size=32), torch.randn(128, 1, 32, 32), torch.randint(0, 10, (128,))


def _transformer():
    return (
        TinyTransformer(vocab_size=32, seq_len=64, d_model=128, n_heads=4, n_layers=2),
        torch.randint(0, 32, (32, 64)),
        torch.randint(0, 2, (32,)),
    )


def _unseen():  # a model the estimator was not developed on: Conv1d, GELU, LayerNorm, residual-free
    model = nn.Sequential(
        nn.Conv1d(8, 64, 5, padding=2),
        nn.GELU(),
        nn.Conv1d(64, 64, 3, padding=1),
        nn.Flatten(1),
        nn.LayerNorm(64 * 48),
        nn.Linear(64 * 48, 300),
        nn.Tanh(),
        nn.Linear(300, 7),
    )
    return model, torch.randn(96, 8, 48), torch.randint(0, 7, (96,))


MODELS = {"mlp": _mlp, "cnn": _cnn, "transformer": _transformer}


@pytest.fixture(scope="module", autouse=True)
def ratio_table():
    yield
    if RATIOS:
        print("\nestimate / measured live-tensor peak (3 training steps)")
        for k, v in RATIOS.items():
            print(f"  {k:<45} {v:.3f}")


def _compare(key, build, optimizer, precision, checkpointing):
    torch.manual_seed(0)
    model, x, y = build()
    if checkpointing:
        M.apply_activation_checkpointing(model)
    est = M.estimate_training_memory(model, x, optimizer, precision, checkpointing, target=y)
    meas = M.measure_training_memory(model, x, y, optimizer, precision, steps=3)
    ratio = est.total / meas.live_bytes
    RATIOS[key] = ratio
    assert sum(b for _, b in est.peak_parts) == est.total, f"{key}: the peak's parts do not add up\n{est.table()}"
    assert 0.9 <= ratio <= 1.1, (
        f"{key}: estimated {est.total / 2**20:.2f} MiB, measured "
        f"{meas.live_bytes / 2**20:.2f} MiB (ratio {ratio:.3f})\n{est.table()}"
    )
    return est, meas


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "ckpt"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("name", list(MODELS))
def test_estimate_matches_measured_steps(name, optimizer, precision, checkpointing):
    _compare(
        f"{name} {optimizer} {precision} {'ckpt' if checkpointing else 'plain'}",
        MODELS[name],
        optimizer,
        precision,
        checkpointing,
    )


@pytest.mark.parametrize("optimizer", ["momentum", "adamw"])
def test_unseen_model(optimizer):
    _compare(f"unseen conv1d/gelu/layernorm {optimizer} fp32", _unseen, optimizer, "fp32", False)
    _compare(f"unseen conv1d/gelu/layernorm {optimizer} bf16 ckpt", _unseen, optimizer, "bf16-mixed", True)


def test_other_mlp_shape_foreach():
    torch.manual_seed(0)
    model, x, y = MLP(32, [512, 256, 128], 5), torch.randn(64, 32), torch.randint(0, 5, (64,))
    est = M.estimate_training_memory(model, x, "adam", target=y, foreach=True)
    meas = M.measure_training_memory(model, x, y, "adam", foreach=True)
    RATIOS["mlp 32-512-256-128-5 adam foreach"] = est.total / meas.live_bytes
    assert 0.9 <= est.total / meas.live_bytes <= 1.1, est.table()


@pytest.mark.slow
def test_estimate_components_and_no_side_effects():
    torch.manual_seed(0)
    model, x, y = _cnn()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    est = M.estimate_training_memory(model, x, "adam", target=y)
    n = sum(p.numel() for p in model.parameters())
    assert est.gradients == 4 * n
    assert est.optimizer_state == 8 * n + 4 * len(list(model.parameters()))
    assert est.parameters >= 4 * n  # plus BatchNorm buffers
    assert est.batch == x.numel() * 4 + y.numel() * 8
    assert est.total == max(est.forward_peak, est.backward_peak, est.step_peak)
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed by the estimate"
    assert "total" in est.table() and "MiB" in str(est) and "alive at that peak" in est.table()
    parts = dict(est.peak_parts)
    assert est.peak_phase == "backward pass" and parts["activation gradients"] > 0, est.table()
    assert sum(parts.values()) == est.total
    sgd = M.estimate_training_memory(model, x, "sgd", target=y)
    assert sgd.optimizer_state == 0 and sgd.temporaries == 0
    bf16 = M.estimate_training_memory(model, x, "adam", "bf16-mixed", target=y)
    assert bf16.activations < est.activations


def test_checkpointing_wraps_blocks_and_keeps_outputs():
    torch.manual_seed(0)
    model, x, _ = _transformer()
    ref = model(x)
    M.apply_activation_checkpointing(model)
    assert sum(isinstance(m, M.CheckpointedBlock) for m in model.modules()) == 2
    torch.testing.assert_close(model(x), ref)
    with pytest.raises(ValueError, match="already"):
        M.apply_activation_checkpointing(model)
    with pytest.raises(ValueError, match="activation_checkpointing"):
        M.estimate_training_memory(model, x, activation_checkpointing=False)
    mlp = M.apply_activation_checkpointing(MLP(8, [16, 16], 2))
    assert sum(isinstance(m, M.CheckpointedBlock) for m in mlp.modules()) == 3


def test_measure_peak_memory_counts_increment_and_include():
    a = torch.zeros(1000)

    def fn():
        b = torch.ones(2000)  # 8000 B
        c = b * 2  # +8000 B
        del b, c
        return torch.ones(10)

    p = M.measure_peak_memory(fn, include=[a, a[:10]])
    assert p.baseline_bytes == 4000
    assert p.live_bytes == 4000 + 16000
    assert p.increment_bytes == 16000
    assert p.device == "cpu"
    if sys.platform.startswith("linux"):  # VmHWM: the whole process, far more than 16 kB of tensors
        assert p.resident_method == "VmHWM" and p.resident_bytes > 100 * p.live_bytes
    assert "MiB" in str(p)
    with pytest.raises(TypeError, match="fn"):
        M.measure_peak_memory(3)


def test_model_states_bytes():
    assert M.model_states_bytes(1000, "fp32", "adam") == 16000
    assert M.model_states_bytes(1000, "bf16-mixed", "adam") == 16000
    assert M.model_states_bytes(1000, "fp32", "sgd") == 8000
    assert M.model_states_bytes(1000, "fp16-mixed", "momentum") == 12000
    assert M.model_states_bytes(1000, "bf16-mixed", "adam", zero_stage=1, data_parallel=4) == 4000 + 3000
    assert M.model_states_bytes(1000, "bf16-mixed", "adam", zero_stage=2, data_parallel=4) == 2000 + 500 + 3000
    assert M.model_states_bytes(1000, "bf16-mixed", "adam", zero_stage=3, data_parallel=4) == 4000


def test_formulas():
    # Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) bytes per layer
    s, b, h, a = 2048, 4, 4096, 32
    assert M.transformer_activation_bytes(s, b, h, 2, a) == 2 * int(s * b * h * (34 + 5 * a * s / h))
    assert M.transformer_activation_bytes(s, b, h, 1, a, bytes_per_value=4) == 2 * int(s * b * h * (34 + 5 * a * s / h))
    assert M.largest_model_that_fits(16e9, "bf16-mixed", "adam", 0.2) == 800_000_000
    assert M.largest_model_that_fits(16e9, "fp32", "sgd", 0.0) == 2_000_000_000
    rows = {key: max_params for key, _, _, max_params in M.largest_model_per_accelerator()}
    # by hand: 80 GB x 0.8 / 16 B per parameter = 4.0 B; 16 GB -> 0.8 B; 141 GB -> 7.05 B
    assert rows["a100-80gb"] == 4_000_000_000 and rows["t4"] == 800_000_000 and rows["h200"] == 7_050_000_000


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: M.estimate_training_memory(MLP(), torch.randn(2, 64), optimizer="lamb"), "optimizer"),
        (lambda: M.estimate_training_memory(MLP(), torch.randn(2, 64), precision="fp8"), "precision"),
        (lambda: M.estimate_training_memory(nn.ReLU(), torch.randn(2, 64)), "no trainable parameters"),
        (lambda: M.measure_training_memory(MLP(), torch.randn(2, 64), optimizer="rmsprop"), "optimizer"),
        (lambda: M.measure_training_memory(MLP(), torch.randn(2, 64), steps=0), "steps"),
        (lambda: M.model_states_bytes(-1), "n_params"),
        (lambda: M.model_states_bytes(10, optimizer="lion"), "optimizer"),
        (lambda: M.model_states_bytes(10, precision="int8"), "precision"),
        (lambda: M.model_states_bytes(10, zero_stage=4), "zero_stage"),
        (lambda: M.model_states_bytes(10, zero_stage=-1), "zero_stage"),
        (lambda: M.model_states_bytes(10, data_parallel=0), "data_parallel"),
        (lambda: M.transformer_activation_bytes(-1, 1, 8, 1, 1), "seq_len"),
        (lambda: M.transformer_activation_bytes(8, 1, 8, 0, 1), "n_layers"),
        (lambda: M.largest_model_that_fits(-5), "memory_bytes"),
        (lambda: M.largest_model_that_fits(1e9, overhead_fraction=1.0), "overhead_fraction"),
        (lambda: M.largest_model_that_fits(1e9, precision="fp64"), "precision"),
        (lambda: M.largest_model_per_accelerator(kind="fpga"), "kind"),
        (lambda: M.apply_activation_checkpointing(nn.Sequential(nn.ReLU())), "no trainable parameters"),
    ],
)
def test_bad_input_value_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: M.estimate_training_memory("mlp", torch.randn(2, 64)), "model"),
        (lambda: M.estimate_training_memory(MLP(), [1, 2]), "example_input"),
        (
            lambda: M.estimate_training_memory(MLP(), torch.randn(2, 64), activation_checkpointing="yes"),
            "activation_checkpointing",
        ),
        (lambda: M.model_states_bytes(1.5), "n_params"),
        (lambda: M.measure_peak_memory(lambda: None, include=["x"]), "include"),
    ],
)
def test_bad_input_type_errors(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_memtracker_agrees_with_our_meter():
    """PyTorch's MemTracker is an independent meter: it must agree with ours within 5 %."""
    from course_lib import memory as mem
    from course_lib import models as mdl

    torch.manual_seed(0)
    m, x, y = mdl.MLP(64, [256, 256], 10), torch.randn(512, 64), torch.randint(0, 10, (512,))
    theirs = mem.memtracker_peak(m, x, y, optimizer="adam")
    torch.manual_seed(0)
    m = mdl.MLP(64, [256, 256], 10)
    ours = mem.measure_training_memory(m, x, y, optimizer="adam").live_bytes
    if theirs is None:
        pytest.skip("this PyTorch has no MemTracker")
    assert abs(theirs - ours) / ours < 0.05, (theirs, ours)


def test_torch_internals_are_all_there():
    """The estimator's private PyTorch APIs: this fails, naming them, on a torch release that moved one."""
    missing = M.torch_internals.missing()
    assert missing == [], (
        f"torch {torch.__version__} lacks {missing}; the course supports torch "
        f"{M.torch_internals.SUPPORTED_TORCH}: update course_lib/memory/torch_internals.py"
    )
    M.torch_internals.require()


def test_grad_scalers_clean_step_count_goes_through_the_adapter(monkeypatch):
    """GradScaler has no public getter or setter for its count of clean steps: torch_internals reads and sets it,
    and names the internal where a torch release moved it."""
    scaler = torch.amp.GradScaler("cpu")
    M.torch_internals.load_scaler_state(
        scaler, scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3, growth_tracker=2
    )
    assert M.torch_internals.growth_tracker(scaler) == 2 and scaler.get_scale() == 8.0
    monkeypatch.setattr(M.torch_internals, "_GROWTH_TRACKER", "_renamed")
    with pytest.raises(RuntimeError, match="_renamed.*torch_internals"):
        M.torch_internals.growth_tracker(scaler)


def test_a_missing_internal_gives_a_clear_message(monkeypatch):
    monkeypatch.setattr(M.torch_internals, "_tree_flatten", None)
    with pytest.raises(RuntimeError, match=r"torch_internals|tree_flatten.*supports torch"):
        M.estimate_training_memory(MLP(), torch.randn(2, 64))


@pytest.mark.parametrize("sizes,batch", [([64, 1024, 1024, 10], 64), ([7, 33, 5], 17), ([12, 3], 5)])
def test_mlp_formulas_match_the_model_and_the_estimator(sizes, batch):
    torch.manual_seed(0)
    model = MLP(sizes[0], sizes[1:-1], sizes[-1])
    x, y = torch.randn(batch, sizes[0]), torch.randint(0, sizes[-1], (batch,))
    assert M.mlp_parameters(sizes) == sum(p.numel() for p in model.parameters())
    est = M.estimate_training_memory(model, x, "sgd", target=y)
    assert abs(M.mlp_activation_bytes(sizes, batch) - est.activations) <= 64  # the loss scalars
    budget = M.model_states_bytes(M.mlp_parameters(sizes), "fp32", "adam") + 10 * M.mlp_activation_bytes(sizes, 1) + 3
    assert M.mlp_largest_batch(sizes, "adam", budget) == 10
    assert M.mlp_largest_batch(sizes, "adam", 0) == 0
    with pytest.raises(ValueError, match="sizes"):
        M.mlp_parameters([5])
    with pytest.raises(TypeError, match="sizes"):
        M.mlp_parameters("64,10")


def test_bf16_autocast_keeps_two_thirds_of_fp32_activations():
    """Notebook 04 prints this count: three 1024-wide ReLU outputs per example in fp32 (12 KiB); under bf16 autocast
    the same three in bf16 plus the bf16 copy of the input (8 KiB)."""

    def make(n):
        return torch.randn(n, 1024), torch.randint(0, 10, (n,))

    act = {
        p: M.measure_activation_bytes_per_example(MLP(1024, [1024] * 3, 10), make, precision=p)
        for p in ("fp32", "bf16-mixed")
    }
    assert act["fp32"] == pytest.approx(3 * 1024 * 4, rel=0.02)
    assert act["bf16-mixed"] == pytest.approx(4 * 1024 * 2, rel=0.02)


def test_bf16_mixed_adam_state_split_is_4_4_8():
    """Notebook 02 prints this as computed: under autocast the weights and gradients stay fp32 (they are the master
    copy) and Adam keeps two fp32 moments, 4 + 4 + 8 = 16 B per parameter; ZeRO's recipe splits the same 16 B as
    2 + 2 + 4 + 8."""
    from course_lib import models as course_models
    from course_lib import train

    torch.manual_seed(0)
    model = MLP(64, [256, 256], 10)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    opt = course_models.make_optimizer("adam", model.parameters())
    with train.autocast("bf16-mixed", "cpu"):
        loss = train.default_loss(model(x), y)
    loss.backward()
    opt.step()
    n = course_models.count_parameters(model)
    moments = [s for st in opt.state.values() for s in st.values() if torch.is_tensor(s) and s.dim() > 0]
    assert M.storage_bytes(list(model.parameters())) == 4 * n
    assert M.storage_bytes([p.grad for p in model.parameters()]) == 4 * n
    assert M.storage_bytes(moments) == 8 * n
    assert M.model_states_bytes(n, "bf16-mixed", "adam") == 16 * n


def test_distributed_paths_that_failed_on_a_release_say_what_to_install(monkeypatch):
    ti = M.torch_internals
    monkeypatch.setattr(torch, "__version__", "2.8.0+cu128")
    with pytest.raises(RuntimeError, match=r"fully_shard training .*torch 2\.8\.0.*pip install -U torch"):
        ti.require_distributed("fully_shard training", "cpu")
    ti.require_distributed("fully_shard", "cpu")  # a checkpoint round trip worked there
    ti.require_distributed("pipelining", "cpu")
    ti.require_distributed("fully_shard training", "meta")  # only CPUs were tested
    monkeypatch.setattr(torch, "__version__", "2.9.1")
    with pytest.raises(RuntimeError, match="gloo aborted"):
        ti.require_distributed("pipelining", torch.device("cpu"))
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    for path in ("fully_shard", "fully_shard training", "pipelining"):
        ti.require_distributed(path)
    with pytest.raises(ValueError, match="path"):
        ti.require_distributed("ring")


def test_demo_models_and_tables():
    from course_lib.memory import demos

    for name in demos.DEMO_MODELS:
        model, x, y = M.demo_model(name, scale=1 / 128)
        assert len(x) == len(y) >= 1 and model(x).shape[0] == len(x)
    assert len(M.demo_model("MLP")[1]) == 2048
    with pytest.raises(ValueError, match="name"):
        M.demo_model("ResNet")
    with pytest.raises(ValueError, match="scale"):
        M.demo_model("MLP", 2.0)
    model, x, y = M.demo_model("MLP", 1 / 64)
    est = M.estimate_training_memory(model, x, "sgd", target=y)
    text = M.estimate_table([("MLP sgd fp32", est, est.total)])
    assert "MLP sgd fp32" in text and "1.000" in text and est.peak_phase in text
    with pytest.raises(ValueError, match="allocated"):
        M.estimate_table([("x", est, 0)])
    table = M.largest_model_table([("h100-sxm", "H100", 80, 4e9)])
    assert "h100-sxm" in table and "4.00 B" in table


def test_state_bytes_per_parameter_counts_weights_gradients_and_adams_moments():
    model, x, y = M.demo_model("MLP", 1 / 256)
    from course_lib.models import make_optimizer

    per, dtypes = M.state_bytes_per_parameter(model, x, y, make_optimizer("adam", model.parameters()), "bf16-mixed")
    assert per == 16.0 and dtypes == "weights float32, gradients float32"  # autocast: float32 states, 4 + 4 + 8
    model, x, y = M.demo_model("MLP", 1 / 256)
    assert M.state_bytes_per_parameter(model, x, y, make_optimizer("sgd", model.parameters()), "fp32")[0] == 8.0
    with pytest.raises(TypeError, match="optimizer"):
        M.state_bytes_per_parameter(model, x, y, "adam")


def test_peaks_against_batch_and_activation_bytes_per_example():
    def make(b):
        torch.manual_seed(0)
        return MLP(16, [32], 4), torch.randn(b, 16), torch.randint(0, 4, (b,))

    ests, peaks = M.peaks_against_batch(make, [8, 32])
    assert len(ests) == len(peaks) == 2 and peaks[1] > peaks[0] > 0
    assert all(abs(e.total / p - 1) < 0.1 for e, p in zip(ests, peaks))
    with pytest.raises(ValueError, match="batch"):
        M.peaks_against_batch(make, [0])
    measured, estimated = M.activation_bytes_per_example(*make(8), "fp32")
    assert measured == pytest.approx(estimated, rel=0.15) and measured > 0  # a tiny model: the loss's 4 floats show


def test_epochs_say_why_they_cannot_be_judged():
    from course_lib.memory import streaming

    ok = streaming.EpochTimes(100, 0.02, 0.09, 1000.0, 10000.0, "posix_fadvise", True, 0.0)
    assert ok.why_not_judged() == ""
    assert "Windows" in streaming.EpochTimes(100, 0.02, 0.02, 1000.0, 1e4, None, False, None).why_not_judged()
    assert "cached" in streaming.EpochTimes(100, 0.02, 0.02, 1000.0, 1e4, "posix_fadvise", False, 0.9).why_not_judged()
    assert "fast" in streaming.EpochTimes(100, 0.5, 0.5, 1000.0, 1e4, "posix_fadvise", True, 0.0).why_not_judged()
