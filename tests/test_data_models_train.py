import pytest
import torch

from course_lib import data, hardware, models, train


def test_digits_split_and_shapes():
    s = data.load_digits()
    assert s.x_train.shape[1] == 64 and len(s.x_train) + len(s.x_test) == 1797
    assert s.x_train.max() <= 1 and s.n_classes == 10
    img = data.load_digits(flat=False)
    assert img.x_train.shape[1:] == (1, 8, 8)
    small = data.load_digits(fraction=0.1)
    assert len(small.x_train) + len(small.x_test) == 179
    assert torch.equal(data.load_digits().x_test, s.x_test)  # seeded


def test_synthetic_sets():
    b = data.make_blobs(400, 8, 3)
    assert b.x_train.shape[1] == 8 and set(b.y_train.tolist()) <= {0, 1, 2}
    r = data.make_regression(100, 4)
    assert r.y_train.shape[1] == 1
    t = data.make_token_task(100, 12, 10)
    assert t.x_train.shape[1] == 12 and t.x_train.max() < 10


@pytest.mark.parametrize(
    "call",
    [
        lambda: data.load_digits(test_fraction=1.5),
        lambda: data.load_digits(fraction=0),
        lambda: data.make_blobs(n_samples=-5),
        lambda: data.make_blobs(n_classes=1),
        lambda: data.make_token_task(vocab_size=2),
        lambda: data.make_regression(noise=-1),
    ],
)
def test_data_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_models_forward_and_params():
    assert models.count_parameters(models.MLP(64, 128, 10)) == 64 * 128 + 128 + 128 * 10 + 10
    assert models.build_model("cnn")(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    tr = models.build_model("transformer", vocab_size=16, seq_len=8)
    assert tr(torch.randint(0, 16, (3, 8))).shape == (3, 2)
    assert models.MLP(8, [16, 16], 2)(torch.randn(5, 8)).shape == (5, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda: models.build_model("resnet"),
        lambda: models.MLP(hidden=0),
        lambda: models.MLP(dropout=1.0),
        lambda: models.TinyTransformer(d_model=10, n_heads=3),
        lambda: models.SmallCNN(image_size=2),
    ],
)
def test_models_bad_input(call):
    with pytest.raises(ValueError):
        call()


def test_tiny_transformer_blocks_are_pre_norm_unless_asked():
    pre, post = models.TinyTransformer(), models.TinyTransformer(norm_first=False)
    assert all(layer.norm_first for layer in pre.encoder.layers)
    assert not any(layer.norm_first for layer in post.encoder.layers)
    with pytest.raises(TypeError, match="norm_first"):
        models.TinyTransformer(norm_first="yes")


@pytest.mark.slow
def test_fit_learns_digits():
    torch.manual_seed(0)
    s = data.load_digits()
    h = train.fit(models.MLP(64, 64, 10), s.train, eval_data=s.test, epochs=8, lr=3e-3, progress=False)
    assert len(h.epochs) == 8 and h["test_acc"][-1] > 0.9
    assert h["train_loss"][-1] < h["train_loss"][0]
    assert train.evaluate(models.MLP(64, 64, 10), s.test)["acc"] < 0.5  # untrained is near chance


@pytest.mark.parametrize("name", train.OPTIMIZERS)
def test_every_optimizer_steps(name):
    m = models.MLP(4, 8, 2)
    before = [p.clone() for p in m.parameters()]
    step = train.make_step_fn(m, torch.randn(16, 4), torch.randint(0, 2, (16,)), optimizer=name, lr=0.1)
    assert step() > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_train_bad_input():
    with pytest.raises(ValueError, match="accepted values"):
        train.make_optimizer("lion", models.MLP().parameters())
    with pytest.raises(ValueError, match="no parameters"):
        train.fit(torch.nn.ReLU(), data.load_digits().train, progress=False)
    with pytest.raises(TypeError):
        train.fit(models.MLP(), [1, 2, 3], progress=False)
    with pytest.raises(ValueError, match="epochs"):
        train.fit(models.MLP(), data.load_digits().train, epochs=0)


def test_gradient_accumulation_matches_the_full_batch():
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    grads = []
    for micro in (1, 4, 5):  # 5 does not divide 64: slices of 13 and 12 are weighted by size
        torch.manual_seed(0)
        m = models.MLP(8, 16, 3)
        opt = train.make_optimizer("sgd", m.parameters(), lr=0.1)
        seen = []
        loss, _, n = train.train_step(
            m,
            (x, y),
            opt,
            torch.nn.CrossEntropyLoss(),
            micro_batches=micro,
            before_update=lambda model: seen.append([p.grad.clone() for p in model.parameters()]),
        )
        grads.append((loss, seen[0]))
        assert all(p.grad is None for p in m.parameters()), "gradients are released after the update"
    for loss, g in grads[1:]:
        assert loss == pytest.approx(grads[0][0], rel=1e-5)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g, grads[0][1]))
    with pytest.raises(ValueError, match="micro_batches"):
        train.train_step(m, (x, y), opt, torch.nn.CrossEntropyLoss(), micro_batches=0)
    with pytest.raises(ValueError, match="exceed"):
        train.train_step(m, (x[:2], y[:2]), opt, torch.nn.CrossEntropyLoss(), micro_batches=3)


def test_costly_dataset_and_pipeline_measurement():
    ds = data.CostlyTransformDataset(n=16, size=8, passes=2)
    img, label = ds[3]
    assert img.shape == (1, 8, 8) and 0 <= int(label) < 10 and len(ds) == 16
    seen = []
    r = train.measure_input_pipeline(torch.utils.data.DataLoader(ds, batch_size=4), lambda x, y: seen.append(len(x)))
    assert r["batches"] == 4 and seen == [4, 4, 4, 4] and 0 <= r["idle_fraction"] <= 1
    assert r["total_s"] >= r["wait_s"] + r["compute_s"] - 1e-6
    assert (
        train.measure_input_pipeline(torch.utils.data.DataLoader(ds, batch_size=4), lambda x, y: None, max_batches=2)[
            "batches"
        ]
        == 2
    )
    with pytest.raises(ValueError):
        data.CostlyTransformDataset(passes=0)
    with pytest.raises(TypeError):
        train.measure_input_pipeline([1, 2], lambda x, y: None)


def test_train_step_result_and_default_loss():
    torch.manual_seed(0)
    m = models.MLP(8, 16, 3)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    r = train.train_step(m, (x, y), train.make_optimizer("sgd", m.parameters(), lr=0.1))
    assert isinstance(r, train.StepResult) and r.examples == 32 and 0 <= r.correct <= 32
    torch.manual_seed(0)
    fresh = models.MLP(8, 16, 3)  # the same initial weights: the step reports the loss before its update
    with torch.no_grad():
        assert r.loss == pytest.approx(float(torch.nn.functional.cross_entropy(fresh(x), y)), rel=1e-5)
    reg = models.MLP(4, 8, 1)  # a float target is a regression: mean squared error, no accuracy
    r = train.train_step(reg, (torch.randn(16, 4), torch.randn(16, 1)), train.make_optimizer("adam", reg.parameters()))
    assert r.correct == 0 and r.loss > 0
    r = train.train_step(reg, (torch.randn(16, 4), None), train.make_optimizer("adam", reg.parameters()))
    assert r.examples == 16  # no target: the loss is the output's sum


def test_train_step_mixed_precision_runs_and_keeps_fp32_weights():
    torch.manual_seed(0)
    m = models.MLP(8, 16, 3)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    dtypes = []
    r = train.train_step(
        m,
        (x, y),
        train.make_optimizer("adam", m.parameters()),
        precision="bf16-mixed",
        before_update=lambda model: dtypes.extend(p.grad.dtype for p in model.parameters()),
    )
    assert r.examples == 16 and set(dtypes) == {torch.float32}
    assert all(p.dtype == torch.float32 for p in m.parameters())
    with train.autocast("bf16-mixed"):
        assert m(x).dtype == torch.bfloat16  # the matmuls really ran in bf16


def test_before_update_sees_gradients_and_can_change_them():
    torch.manual_seed(0)
    m = models.MLP(4, 8, 2)
    before = [p.detach().clone() for p in m.parameters()]
    zero = lambda model: [p.grad.zero_() for p in model.parameters()]  # noqa: E731 - a "compression" to nothing
    train.train_step(
        m,
        (torch.randn(8, 4), torch.randint(0, 2, (8,))),
        train.make_optimizer("sgd", m.parameters()),
        before_update=zero,
    )
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters())), "zeroed gradients: no SGD update"


def test_train_step_checks_its_arguments():
    m = models.MLP(4, 8, 2)
    opt = train.make_optimizer("sgd", m.parameters())
    batch = (torch.randn(8, 4), torch.randint(0, 2, (8,)))
    with pytest.raises(TypeError, match="optimizer"):
        train.train_step(m, batch, "sgd")
    with pytest.raises(ValueError, match="precision"):
        train.train_step(m, batch, opt, precision="fp8")
    with pytest.raises(ValueError, match="'gpu' is not known"):
        train.train_step(m, batch, opt, device="gpu")
    with pytest.raises(TypeError, match="micro_batches"):
        train.train_step(m, batch, opt, micro_batches=2.0)
    with pytest.raises(TypeError, match="batch"):
        train.train_step(m, 5, opt)


def test_make_optimizer_respects_an_explicit_weight_decay():
    params = list(models.MLP(4, 8, 2).parameters())
    assert train.make_optimizer("adamw", params).defaults["weight_decay"] == 0.01  # AdamW's own default
    assert train.make_optimizer("adamw", params, weight_decay=0.0).defaults["weight_decay"] == 0.0
    assert train.make_optimizer("ADAM", params).defaults["weight_decay"] == 0.0  # names ignore case
    assert train.make_optimizer(" Momentum ", params).defaults["momentum"] == 0.9
    with pytest.raises(TypeError, match="lr"):
        train.make_optimizer("sgd", params, lr="0.1")
    with pytest.raises(ValueError, match="lr"):
        train.make_optimizer("sgd", params, lr=0)
    with pytest.raises(ValueError, match="weight_decay"):
        train.make_optimizer("sgd", params, weight_decay=-1)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: data.make_blobs(spread="1"), TypeError, "spread"),
        (lambda: data.make_blobs(n_samples=10.0), TypeError, "n_samples"),
        (lambda: data.load_digits(fraction="0.1"), TypeError, "fraction"),
        (lambda: data.make_regression(noise=float("nan")), ValueError, "noise"),
        (lambda: models.MLP(hidden="128"), TypeError, "hidden"),
        (lambda: models.build_model("MLP", hidden=8)(torch.randn(2, 64)), None, None),
        (
            lambda: train.fit(models.MLP(), data.load_digits().train, epochs=1, device="gpu", progress=False),
            ValueError,
            "'gpu' is not known",
        ),
    ],
)
def test_wrong_kinds_of_input(call, error, match):
    if error is None:
        call()  # names are case-insensitive everywhere
        return
    with pytest.raises(error, match=match):
        call()


def test_train_step_measures_time_throughput_and_peak_memory():
    torch.manual_seed(0)
    m = models.MLP(8, 16, 3)
    opt = train.make_optimizer("sgd", m.parameters(), lr=0.1)
    batch = (torch.randn(32, 8), torch.randint(0, 3, (32,)))
    r = train.train_step(m, batch, opt, measure=True)
    assert r.seconds > 0 and r.examples_per_s == pytest.approx(32 / r.seconds)
    if hardware.proc_status_bytes("VmHWM") is not None:  # Linux: the process's resident peak
        assert r.peak_bytes >= hardware.current_rss_bytes() * 0.5
    assert train.train_step(m, batch, opt).peak_bytes is None, "no memory reading unless asked"
    loss, correct, n = r  # still unpacks as before
    assert (loss, correct, n) == (r.loss, r.correct, r.examples)
    row = train.train_epoch(
        m,
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*batch), batch_size=8),
        opt,
        progress=False,
        measure=True,
    )
    assert len(row["steps"]) == 4 and row["examples_per_s"] > 0
    assert row["peak_bytes"] == max((s.peak_bytes for s in row["steps"]), default=None)


def test_fp16_compute_on_a_cpu_is_refused_with_the_reason_and_bf16_offered():
    m = models.MLP(4, 8, 2)
    with pytest.raises(ValueError, match="hundreds of times slower.*bf16-mixed"):
        train.train_step(
            m,
            (torch.randn(8, 4), torch.randint(0, 2, (8,))),
            train.make_optimizer("sgd", m.parameters()),
            precision="fp16-mixed",
        )


def test_loss_scaling_skips_the_update_on_an_overflow_and_lowers_the_scale():
    torch.manual_seed(0)
    m = models.MLP(4, 8, 2)
    opt = train.make_optimizer("sgd", m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    batch = (torch.randn(8, 4), torch.randint(0, 2, (8,)))
    before = [p.detach().clone() for p in m.parameters()]
    huge = lambda out, y: out.float().sum() * 1e35  # noqa: E731 - times the scale 2**16: inf gradients
    r = train.train_step(m, batch, opt, huge, scaler=scaler)
    assert r.skipped and r.scale == 2.0**16 and scaler.get_scale() == 2.0**15
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters())), "a skipped step changes nothing"
    r = train.train_step(m, batch, opt, scaler=scaler)
    assert not r.skipped and not all(torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_a_loss_that_wants_the_inputs_gets_them():
    """A loss with wants_inputs = True is called as loss_fn(out, target, inputs), per micro-batch, and by evaluate."""
    seen = []

    class LooksAtInputs:
        wants_inputs = True

        def __call__(self, out, target, inputs):
            seen.append(len(inputs[0]))
            assert len(inputs) == 1 and len(inputs[0]) == len(target) == len(out)
            return torch.nn.functional.cross_entropy(out, target)

    torch.manual_seed(0)
    m = models.MLP()
    x, y = torch.randn(12, 64), torch.randint(0, 10, (12,))
    opt = train.make_optimizer("sgd", m.parameters(), lr=0.1)
    train.train_step(m, (x, y), opt, LooksAtInputs(), micro_batches=3)
    assert seen == [4, 4, 4]
    train.evaluate(m, torch.utils.data.TensorDataset(x, y), loss_fn=LooksAtInputs(), batch_size=5)
    assert seen[3:] == [5, 5, 2]


def test_unscaled_accumulation_is_k_times_the_full_batch_gradient():
    """Notebook 04 prints this as computed: backward() on each of 8 micro-batches' mean losses, unscaled, piles up
    exactly 8 times the full batch's gradient (the chain rule is linear)."""
    torch.manual_seed(0)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    full, naive = models.MLP(), models.MLP()
    naive.load_state_dict(full.state_dict())
    torch.nn.functional.cross_entropy(full(x), y).backward()
    for xb, yb in zip(x.tensor_split(8), y.tensor_split(8)):
        torch.nn.functional.cross_entropy(naive(xb), yb).backward()
    flat = lambda m: torch.cat([p.grad.flatten() for p in m.parameters()])  # noqa: E731
    assert torch.allclose(flat(naive), 8 * flat(full), rtol=1e-4, atol=1e-7)


def test_accumulation_changes_a_batchnorm_models_gradient():
    """Notebook 04 prints this as computed: with BatchNorm each micro-batch is normalised with its own statistics, so
    8 accumulated micro-batches no longer give the full batch's gradient; without it they do, to float32 rounding."""
    x, y = torch.randn(256, 64, generator=torch.Generator().manual_seed(0)), torch.randint(0, 10, (256,))

    def gradient(with_bn, micro_batches):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(64, 128)] + ([torch.nn.BatchNorm1d(128)] if with_bn else [])
        m = torch.nn.Sequential(*layers, torch.nn.ReLU(), torch.nn.Linear(128, 10))
        opt, seen = torch.optim.SGD(m.parameters(), lr=0.1), []
        train.train_step(
            m,
            (x, y),
            opt,
            torch.nn.CrossEntropyLoss(),
            micro_batches=micro_batches,
            before_update=lambda mm: seen.append(torch.cat([p.grad.flatten() for p in mm.parameters()])),
        )
        return seen[0]

    gap = {bn: ((gradient(bn, 1) - gradient(bn, 8)).norm() / gradient(bn, 1).norm()).item() for bn in (False, True)}
    assert gap[False] < 1e-5 and gap[True] > 0.01, gap


def test_progress_by_examples_records_held_out_metrics_against_examples_seen():
    split = data.load_digits()
    curve = train.progress_by_examples(
        models.MLP, split.train, split.test, batch_size=64, lr=0.5, epochs=2, evals_per_epoch=2, seed=0
    )
    per_epoch = len(split.train) // 64  # the last partial batch is dropped
    assert curve.steps == 2 * per_epoch == len(curve.step_losses)
    assert curve.examples[0] == 0 and curve.examples[-1] == 2 * per_epoch * 64 and len(curve.examples) == 5
    assert curve.test_acc[-1] > curve.test_acc[0] + 0.3, curve.test_acc  # it learns
    assert curve.peak_loss == max(curve.step_losses)
    assert curve.at(per_epoch * 64)["examples"] == per_epoch * 64 and curve.at(10)["examples"] == 0
    same = train.progress_by_examples(models.MLP, split.train, split.test, batch_size=64, lr=0.5, epochs=2, seed=0)
    assert same.test_acc == curve.test_acc  # seeded


def test_progress_by_examples_with_accumulation_equals_the_large_batch():
    split = data.load_digits()
    whole = train.progress_by_examples(models.MLP, split.train, split.test, batch_size=128, lr=0.5, epochs=1)
    pieces = train.progress_by_examples(
        models.MLP, split.train, split.test, batch_size=128, micro_batches=8, lr=0.5, epochs=1
    )
    assert whole.steps == pieces.steps and pieces.micro_batches == 8
    assert max(abs(a - b) for a, b in zip(whole.test_loss, pieces.test_loss)) < 1e-4


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"batch_size": 0, "lr": 0.1}, ValueError, "batch_size"),
        ({"batch_size": 10_000, "lr": 0.1}, ValueError, "larger than the training set"),
        ({"batch_size": 8, "lr": -1}, ValueError, "lr"),
        ({"batch_size": 8, "lr": 0.1, "micro_batches": 16}, ValueError, "micro_batches"),
        ({"batch_size": 8, "lr": 0.1, "optimizer": "lbfgs"}, ValueError, "optimizer"),
        ({"batch_size": 8, "lr": 0.1, "evals_per_epoch": 0}, ValueError, "evals_per_epoch"),
    ],
)
def test_progress_by_examples_bad_input(kwargs, error, match):
    split = data.load_digits()
    with pytest.raises(error, match=match):
        train.progress_by_examples(models.MLP, split.train, split.test, epochs=1, **kwargs)


def test_progress_by_examples_wrong_kinds():
    split = data.load_digits()
    with pytest.raises(TypeError, match="train_data"):
        train.progress_by_examples(models.MLP, split.x_train, split.test, batch_size=8, lr=0.1)
    with pytest.raises(TypeError, match="make_model"):
        train.progress_by_examples(lambda: "mlp", split.train, split.test, batch_size=8, lr=0.1)


def test_gradient_noise_scale_by_hand():
    """A linear model with a squared loss: per-example gradients are known in closed form, so tr(Sigma) and |G|^2
    can be computed by hand and compared with the per-example gradients torch.func computes."""
    torch.manual_seed(0)
    x, y = torch.randn(200, 3), torch.randn(200, 1)
    model = torch.nn.Linear(3, 1, bias=False)
    w = model.weight.detach()
    per = 2 * ((x @ w.T) - y) * x  # d/dw (w.x - y)^2
    mean = per.mean(0)
    trace = float(((per - mean) ** 2).sum(1).sum() / 199)
    g2 = float(mean.pow(2).sum()) - trace / 200
    got = train.gradient_noise_scale(model, (x, y), lambda out, t: ((out - t) ** 2).mean())
    assert got["examples"] == 200
    assert got["trace_sigma"] == pytest.approx(trace, rel=1e-5) and got["grad_norm_sq"] == pytest.approx(g2, rel=1e-5)
    assert got["b_simple"] == pytest.approx(trace / g2, rel=1e-5)


def test_gradient_noise_scale_of_the_untrained_digits_mlp():
    """Measured: about 83 at initialisation (seed 0), from either half of the training set within 2x; during
    training it swings with the learning rate (a run bouncing across a valley has a large |G|), so notebook 04
    reads it at the start only."""
    split = data.load_digits()
    torch.manual_seed(0)
    model = models.MLP()
    whole = train.gradient_noise_scale(model, split.train)
    half = train.gradient_noise_scale(model, (split.x_train[:674], split.y_train[:674]))
    assert 40 < whole["b_simple"] < 200 and whole["examples"] == len(split.train), whole
    assert 0.5 < half["b_simple"] / whole["b_simple"] < 2, (half, whole)
    capped = train.gradient_noise_scale(model, split.train, max_examples=100)
    assert capped["examples"] == 100


def test_gradient_noise_scale_bad_input():
    x, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    with pytest.raises(TypeError, match="nn.Module"):
        train.gradient_noise_scale("m", (x, y))
    with pytest.raises(TypeError, match="TensorDataset"):
        train.gradient_noise_scale(torch.nn.Linear(3, 2), x)
    with pytest.raises(ValueError, match="BatchNorm"):
        train.gradient_noise_scale(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)), (x, y))
    with pytest.raises(ValueError, match="max_examples"):
        train.gradient_noise_scale(torch.nn.Linear(3, 2), (x, y), max_examples=1)
    with pytest.raises(ValueError, match="at least 2"):
        train.gradient_noise_scale(torch.nn.Linear(3, 2), (x[:1], y[:1]))


def test_fit_and_evaluate_take_what_train_step_takes():
    """A regression (float targets) trains with the default loss, mean squared error, not cross-entropy, which
    would see one class and give zero loss and zero gradient; evaluate takes (inputs..., target) batches."""
    torch.manual_seed(0)
    x = torch.randn(128, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
    net = torch.nn.Linear(3, 1)
    before = train.evaluate(net, torch.utils.data.TensorDataset(x, y))
    assert before["loss"] == pytest.approx(float(torch.nn.functional.mse_loss(net(x), y).detach()), rel=1e-5)
    history = train.fit(net, torch.utils.data.TensorDataset(x, y), epochs=20, lr=0.05, batch_size=16, progress=False)
    assert history.epochs[-1]["train_loss"] < 0.01 * before["loss"] and before["acc"] == 0

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 10)

        def forward(self, a, b):
            return self.lin(a + b)

    labels = torch.randint(0, 10, (128,))
    got = train.evaluate(Two(), torch.utils.data.TensorDataset(x, x, labels), batch_size=32)
    assert 0 <= got["acc"] <= 1 and got["loss"] > 0
    with pytest.raises(TypeError, match="model"):
        train.evaluate("not a model", torch.utils.data.TensorDataset(x, labels))
