"""Exercise 04's checks are real: plausible wrong answers fail them, with the explanation that fits.

The solution notebook runs once in a kernel; then, for each wrong answer below, the function is
redefined the wrong way and its check cell is run again. Every such check must raise CheckFailed
(not pass, not ExerciseNotDone, not a traceback from the check itself), and where the check has an
explanation for that mistake, the message must carry it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wrong_answers import function_name, wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "04_training_tricks.ipynb"

ACCUMULATE = """
def accumulate_gradients(model, x, y, micro_batches):
    model.zero_grad(set_to_none=True)
    for xs, ys in zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches)):
        ({loss}).backward()
    return precision.gradient_values(model)
"""
SCALE = """
def loss_scale_step(grads, scale, good_steps, growth_interval):
    if {bad}:
        return {on_overflow}
    good_steps += 1
    if good_steps {grow} growth_interval:
        return [g / scale for g in grads], scale * 2.0, 0
    return [g / scale for g in grads], scale, good_steps
"""
FINITE = "not all(bool(torch.isfinite(g).all()) for g in grads)"
TOPK = """
def topk_with_feedback(grad, residual, ratio):
    acc = grad + residual
    k = {k}
    keep = ({chosen}).topk(k).indices
    sent = torch.zeros_like(acc)
    sent[keep] = acc[keep]
    return sent, {left}
"""
PAYLOAD = """
def payload_bytes(method, shapes, ratio, rank):
    numel = sum(math.prod(s) for s in shapes)
    if method in ("none", "fp16"):
        return (4 if method == "none" else 2) * numel
    if method == "topk":
        return {topk_bytes} * max(1, math.ceil(ratio * numel))
    total = 0
    for s in shapes:
        n, m = s[0], math.prod(s[1:])
        r = min(n, m, rank)
        total += (n + m) * r if {compress} else n * m
    return 4 * total
"""
TOPK_RIGHT = dict(k="max(1, math.ceil(ratio * acc.numel()))", chosen="acc.abs()", left="acc - sent")
PAYLOAD_RIGHT = dict(topk_bytes="8", compress="2 * (n + m) * r < n * m")

# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    (
        "accumulate: every slice's mean loss, unweighted",
        ACCUMULATE.format(loss="torch.nn.functional.cross_entropy(model(xs), ys)"),
        "3 times too large",
    ),
    (
        "accumulate: divided by the number of slices",
        ACCUMULATE.format(loss="torch.nn.functional.cross_entropy(model(xs), ys) / micro_batches"),
        "dividing by the number of slices",
    ),
    (
        "accumulate: summed losses",
        ACCUMULATE.format(loss="torch.nn.functional.cross_entropy(model(xs), ys, reduction='sum')"),
        None,
    ),
    (
        "scale: updates despite an inf",
        SCALE.format(bad=FINITE, on_overflow="[g / scale for g in grads], scale * 0.5, 0", grow="=="),
        "One inf anywhere",
    ),
    (
        "scale: skips but keeps the scale",
        SCALE.format(bad=FINITE, on_overflow="None, scale, 0", grow="=="),
        "halve the scale",
    ),
    (
        "scale: skips but keeps counting",
        SCALE.format(bad=FINITE, on_overflow="None, scale * 0.5, good_steps", grow="=="),
        "restart the count",
    ),
    (
        "scale: looks for inf only, misses NaN",
        SCALE.format(
            bad="any(bool(torch.isinf(g).any()) for g in grads)", on_overflow="None, scale * 0.5, 0", grow="=="
        ),
        "NaN",
    ),
    (
        "scale: grows one step late",
        SCALE.format(bad=FINITE, on_overflow="None, scale * 0.5, 0", grow=">"),
        "doubles the scale",
    ),
    (
        "scale: keeps counting after growing",
        SCALE.format(bad=FINITE, on_overflow="None, scale * 0.5, 0", grow="==").replace(
            "scale * 2.0, 0", "scale * 2.0, good_steps"
        ),
        "count starts again at 0",
    ),
    (
        "top-k: no error feedback (residual ignored)",
        TOPK.format(**{**TOPK_RIGHT, "chosen": "grad.abs()", "left": "grad - sent"}),
        None,
    ),
    (
        "top-k: residual added, but dropped afterwards",
        TOPK.format(**{**TOPK_RIGHT, "left": "torch.zeros_like(acc)"}),
        None,
    ),
    ("top-k: k rounded down", TOPK.format(**{**TOPK_RIGHT, "k": "max(1, int(ratio * acc.numel()))"}), "round up"),
    ("top-k: largest values, not magnitudes", TOPK.format(**{**TOPK_RIGHT, "chosen": "acc"}), "by magnitude"),
    (
        "scale: multiplied by the scale instead of divided",
        SCALE.format(bad=FINITE, on_overflow="None, scale * 0.5, 0", grow="==").replace("g / scale", "g * scale"),
        None,
    ),
    ("bytes: top-k counts values only", PAYLOAD.format(**{**PAYLOAD_RIGHT, "topk_bytes": "4"}), "int32 index"),
    ("bytes: top-k with int64 indices", PAYLOAD.format(**{**PAYLOAD_RIGHT, "topk_bytes": "12"}), None),
    (
        "bytes: PowerSGD compresses every tensor",
        PAYLOAD.format(**{**PAYLOAD_RIGHT, "compress": "True"}),
        "would not shrink it",
    ),
    (
        "bytes: PowerSGD compresses at exactly twofold",
        PAYLOAD.format(**{**PAYLOAD_RIGHT, "compress": "2 * (n + m) * r <= n * m"}),
        "not more than twofold",
    ),
    (
        "bytes: a convolution viewed from its last dimension",
        PAYLOAD.format(**{**PAYLOAD_RIGHT}).replace("n, m = s[0], math.prod(s[1:])", "n, m = s[-1], math.prod(s[:-1])"),
        "16 x 72",
    ),
]


wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)


def test_every_wrong_answer_has_a_check():
    names = {function_name(code) for _, code, _ in WRONG}
    assert names == {"accumulate_gradients", "loss_scale_step", "topk_with_feedback", "payload_bytes"}


def test_checks_compare_tensors_and_show_them_briefly():
    import torch

    from course_lib import checks
    from course_lib.checks import core

    assert core._close(torch.tensor([1.0, float("nan")]), torch.tensor([1.0 + 1e-9, float("nan")]), 1e-6, 0.0)
    assert not core._close(torch.tensor([1.0, 2.0]), torch.tensor([[1.0, 2.0]]), 1e-6, 0.0)  # shape matters
    assert not core._close([1.0, 2.0], torch.tensor([1.0, 2.0]), 1e-6, 0.0)  # a list is not a tensor
    assert core._close(None, None, 0, 0) and not core._close(torch.zeros(1), None, 0, 0)
    shown = core._show((torch.nn.Linear(3, 2), torch.zeros(100, 3), [torch.ones(2)], 4))
    assert shown == "(<Linear model>, tensor(shape [100, 3], float32: 0, 0, 0, 0, ...), [tensor([1., 1.])], 4)"
    assert core._show((1, "a")) == repr((1, "a"))  # everything else as before
    with pytest.raises(checks.CheckFailed, match=r"expected tensor\(\[2\.\]\), got tensor\(\[1\.\]\)"):
        checks.check_function(lambda t: t, [((torch.tensor([1.0]),), torch.tensor([2.0]))])


def test_gradscaler_step_follows_torch_rules():
    import torch

    from course_lib import checks

    out, scale, good = checks.gradscaler_step([torch.tensor([4.0, 8.0])], 4.0, 1, 2)
    assert torch.equal(out[0], torch.tensor([1.0, 2.0])) and (scale, good) == (8.0, 0)
    assert checks.gradscaler_step([torch.tensor([4.0, 8.0])], 4.0, 0, 2)[1:] == (4.0, 1)
    assert checks.gradscaler_step([torch.tensor([1.0]), torch.tensor([float("nan")])], 4.0, 1, 2) == (None, 2.0, 0)


def test_topk_step_keeps_what_it_does_not_send():
    import torch

    from course_lib import checks

    g = torch.Generator().manual_seed(0)
    grad, residual = torch.randn(50, generator=g), torch.randn(50, generator=g)
    sent, left = checks.topk_step(grad, residual, 0.1)
    assert int((sent != 0).sum()) == 5 and torch.allclose(sent + left, grad + residual)
    assert float(sent.abs().min(dim=0).values) == 0 and float(sent.abs().max()) == float((grad + residual).abs().max())
