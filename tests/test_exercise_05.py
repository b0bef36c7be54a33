"""Exercise 05 (compression): each plausible wrong answer below must fail its check cell with a
CheckFailed that carries the fitting explanation (the runner is tests/wrong_answers.py)."""

from __future__ import annotations

from pathlib import Path

from wrong_answers import function_name, wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "05_compression.ipynb"

MASK = """
def magnitude_mask(weight, sparsity):
    n_pruned = {count}
    mask = torch.ones(weight.numel(), dtype=torch.bool)
    mask[{order}[:n_pruned]] = False
    return mask.reshape(weight.shape)
"""
MASK_RIGHT = dict(count="round(sparsity * weight.numel())", order="weight.abs().flatten().argsort()")
QUANT = """
def quantize_symmetric(x, bits):
    qmax = {qmax}
    scale = {scale} / qmax
    return {q}, scale
"""
QUANT_RIGHT = dict(
    qmax="2 ** (bits - 1) - 1", scale="x.abs().max().item()", q="torch.clamp(torch.round(x / scale), -qmax, qmax)"
)
DISTILL = """
def distillation_loss(student_logits, teacher_logits, target, temperature, alpha):
    soft = torch.nn.functional.kl_div({student}, {teacher}, reduction="{reduction}")
    hard = torch.nn.functional.cross_entropy(student_logits, target)
    return alpha * {t2} * soft + (1 - alpha) * hard
"""
DISTILL_RIGHT = dict(
    student="torch.log_softmax(student_logits / temperature, dim=1)",
    teacher="torch.softmax(teacher_logits / temperature, dim=1)",
    reduction="batchmean",
    t2="temperature**2",
)
FACTORS = """
def low_rank_factors(weight, rank):
    u, s, vh = torch.linalg.svd(weight, full_matrices=False)
    return {first}, {second}
"""
FACTORS_RIGHT = dict(first="s[:rank, None] * vh[:rank]", second="u[:, :rank]")
CSR = """
def csr_break_even(rows, cols, value_bytes, index_bytes):
    room = rows * cols * value_bytes - {pointers} * index_bytes
    if room {none_when}:
        return None
    return rows * cols - {most}
"""
CSR_RIGHT = dict(pointers="(rows + 1)", none_when="<= 0", most="(room - 1) // (value_bytes + index_bytes)")
RMS = """
def predicted_rms_error(x, bits):
    step = x.abs().max().item() / ({qmax})
    return {rms}
"""
RMS_RIGHT = dict(qmax="2 ** (bits - 1) - 1", rms="step / math.sqrt(12)")
CONV = """
def conv_flops_by_hand(c_in, c_out, k, size, stride, padding):
    side = {side}
    standard = {two} * side * side * c_out * c_in * k * k
    return standard, {two} * ({depthwise} * side * side + c_in * c_out * {pointwise_pixels})
"""
CONV_RIGHT = dict(
    side="(size + 2 * padding - k) // stride + 1", two="2", depthwise="c_in * k * k", pointwise_pixels="side * side"
)

# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    (
        "mask: signed values, not magnitudes",
        MASK.format(**{**MASK_RIGHT, "order": "weight.flatten().argsort()"}),
        "large negative weight",
    ),
    (
        "mask: count rounded down",
        MASK.format(**{**MASK_RIGHT, "count": "int(sparsity * weight.numel())"}),
        "round(1.5) is 2",
    ),
    (
        "mask: halves rounded up",
        MASK.format(**{**MASK_RIGHT, "count": "int(sparsity * weight.numel() + 0.5)"}),
        "round(2.5) is 2",
    ),
    (
        "mask: the largest pruned",
        MASK.format(**{**MASK_RIGHT, "order": "weight.abs().flatten().argsort(descending=True)"}),
        None,
    ),
    (
        "mask: True where pruned",
        MASK.format(**MASK_RIGHT).replace("torch.ones(", "torch.zeros(").replace("] = False", "] = True"),
        None,
    ),
    ("quantize: 2**(bits-1) levels", QUANT.format(**{**QUANT_RIGHT, "qmax": "2 ** (bits - 1)"}), "not -8 to 8"),
    (
        "quantize: scale from the largest value",
        QUANT.format(**{**QUANT_RIGHT, "scale": "x.max().item()"}),
        "largest magnitude",
    ),
    ("quantize: no clamp, no rounding", QUANT.format(**{**QUANT_RIGHT, "q": "x / scale"}), None),
    ("quantize: truncated, not rounded", QUANT.format(**{**QUANT_RIGHT, "q": "torch.trunc(x / scale)"}), None),
    (
        "distill: KL the other way round",
        DISTILL.format(
            **{
                **DISTILL_RIGHT,
                "student": "torch.log_softmax(teacher_logits / temperature, dim=1)",
                "teacher": "torch.softmax(student_logits / temperature, dim=1)",
            }
        ),
        "KL(student || teacher)",
    ),
    ("distill: no T squared", DISTILL.format(**{**DISTILL_RIGHT, "t2": "1"}), "4 times too small"),
    ("distill: T, not T squared", DISTILL.format(**{**DISTILL_RIGHT, "t2": "temperature"}), None),
    ("distill: mean over entries", DISTILL.format(**{**DISTILL_RIGHT, "reduction": "mean"}), "examples of the batch"),
    (
        "distill: probabilities as the input",
        DISTILL.format(**{**DISTILL_RIGHT, "student": "torch.softmax(student_logits / temperature, dim=1)"}),
        None,
    ),
    (
        "distill: teacher not softened",
        DISTILL.format(**{**DISTILL_RIGHT, "teacher": "torch.softmax(teacher_logits, dim=1)"}),
        None,
    ),
    (
        "factors: the smallest singular values",
        FACTORS.format(first="s[-rank:, None] * vh[-rank:]", second="u[:, -rank:]"),
        "FIRST `rank`",
    ),
    ("factors: singular values left out", FACTORS.format(**{**FACTORS_RIGHT, "first": "vh[:rank]"}), None),
    ("factors: shapes swapped", FACTORS.format(first="u[:, :rank].T", second="(s[:rank, None] * vh[:rank]).T"), None),
    ("csr: one row start per row, none for the end", CSR.format(**{**CSR_RIGHT, "pointers": "rows"}), "5 row-start"),
    ("csr: row starts left out", CSR.format(**{**CSR_RIGHT, "pointers": "0"}), "leaves out the row-start"),
    (
        "csr: a tie counted as a saving",
        CSR.format(**{**CSR_RIGHT, "most": "room // (value_bytes + index_bytes)"}),
        "a tie saves nothing",
    ),
    (
        "csr: a float division, rounded",
        CSR.format(**{**CSR_RIGHT, "most": "round(room / (value_bytes + index_bytes))"}),
        None,
    ),
    ("csr: column indices left out", CSR.format(**{**CSR_RIGHT, "most": "(room - 1) // value_bytes"}), None),
    ("csr: None only below zero room", CSR.format(**{**CSR_RIGHT, "none_when": "< 0"}), "row-start indices alone"),
    ("csr: never None", CSR.format(**{**CSR_RIGHT, "none_when": "< -10**30"}), "row-start indices alone"),
    (
        "csr: sparsity, not a count",
        CSR.format(**CSR_RIGHT)
        .replace("return rows * cols - (room", "return 1 - ((room")
        .replace("value_bytes + index_bytes)\n", "value_bytes + index_bytes)) / (rows * cols)\n"),
        None,
    ),
    ("rms: half a step", RMS.format(**{**RMS_RIGHT, "rms": "step / 2"}), "largest error"),
    ("rms: uniform over a whole step each side", RMS.format(**{**RMS_RIGHT, "rms": "step / math.sqrt(3)"}), "NEAREST"),
    ("rms: the mean square", RMS.format(**{**RMS_RIGHT, "rms": "step ** 2 / 12"}), "square root"),
    ("rms: step / 12", RMS.format(**{**RMS_RIGHT, "rms": "step / 12"}), "square root"),
    ("rms: 2**(bits-1) levels", RMS.format(**{**RMS_RIGHT, "qmax": "2 ** (bits - 1)"}), "outermost level is 7"),
    (
        "rms: step / sqrt(12) of the largest value, not magnitude",
        RMS.format(**RMS_RIGHT).replace("x.abs().max()", "x.max()"),
        None,
    ),
    ("conv: a multiply-add as 1 FLOP", CONV.format(**{**CONV_RIGHT, "two": "1"}), "2 FLOPs"),
    (
        "conv: depthwise reads every channel",
        CONV.format(**{**CONV_RIGHT, "depthwise": "c_in * c_in * k * k"}),
        "one input channel",
    ),
    (
        "conv: pointwise on the input image",
        CONV.format(**{**CONV_RIGHT, "pointwise_pixels": "size * size"}),
        "runs on the depthwise output",
    ),
    (
        "conv: partial windows counted",
        CONV.format(**{**CONV_RIGHT, "side": "-(-(size + 2 * padding - k) // stride) + 1"}),
        "stick out past the edge",
    ),
    ("conv: padding left out", CONV.format(**{**CONV_RIGHT, "side": "(size - k) // stride + 1"}), None),
    ("conv: stride left out", CONV.format(**{**CONV_RIGHT, "side": "size + 2 * padding - k + 1"}), None),
]


wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(
    SOLUTION, WRONG, checked_through={"low_rank_factors": "rank_r_product"}
)


def test_every_exercise_has_wrong_answers():
    names = {function_name(code) for _, code, _ in WRONG}
    assert names == {
        "magnitude_mask",
        "csr_break_even",
        "quantize_symmetric",
        "predicted_rms_error",
        "distillation_loss",
        "low_rank_factors",
        "conv_flops_by_hand",
    }
