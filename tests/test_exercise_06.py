"""Exercise 06 (distributed training): each plausible wrong answer below must fail its check cell with a
CheckFailed that carries the fitting explanation (the runner is tests/wrong_answers.py)."""

from __future__ import annotations

from pathlib import Path

from wrong_answers import wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "06_distributed.ipynb"

BUBBLE = """
def bubble_fraction(stages, micro_batches):
    return {formula}
"""
NEEDED = """
def micro_batches_needed(stages, max_bubble):
    return {formula}
"""
RESUME = """
def make_checkpoint(model, optimizer, step):
    return {{"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(), "step": step}}


def resume(checkpoint, model, optimizer):
    {model}
    {optimizer}
    {rng}
    return {step}
"""
RESUME_RIGHT = dict(
    model='model.load_state_dict(checkpoint["model"])',
    optimizer='optimizer.load_state_dict(checkpoint["optimizer"])',
    rng='torch.set_rng_state(checkpoint["rng"])',
    step='checkpoint["step"]',
)
FEDAVG = """
def fedavg(states, weights):
    total = {total}
    return {{name: sum({w} * state[name] for w, state in zip(weights, states)) for name in {names}}}
"""
FEDAVG_RIGHT = dict(total="sum(weights)", w="w / total", names="states[0]")

# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    ("bubble: idle over busy time", BUBBLE.format(formula="(stages - 1) / micro_batches"), "compares the idle time"),
    ("bubble: m + p slots", BUBBLE.format(formula="(stages - 1) / (micro_batches + stages)"), "not m + p"),
    ("bubble: 1 / m", BUBBLE.format(formula="1 / micro_batches"), None),
    (
        "needed: rounded down",
        NEEDED.format(formula="max(1, int((stages - 1) * (1 - max_bubble) / max_bubble))"),
        "round up",
    ),
    (
        "needed: zero for one stage",
        NEEDED.format(formula="math.ceil((stages - 1) * (1 - max_bubble) / max_bubble)"),
        "One stage has no bubble",
    ),
    ("needed: (p - 1) / b", NEEDED.format(formula="math.ceil((stages - 1) / max_bubble)"), None),
    (
        "needed: floor + 1",
        NEEDED.format(formula="max(1, math.floor((stages - 1) * (1 - max_bubble) / max_bubble) + 1)"),
        "16 is enough",
    ),
    (
        "needed: a bare ceil of a float",
        NEEDED.format(formula="max(1, math.ceil((stages - 1) * (1 - max_bubble) / max_bubble))"),
        "2.0000000000000004",
    ),
    ("resume: weights not loaded", RESUME.format(**{**RESUME_RIGHT, "model": "pass"}), "model's weights"),
    ("resume: optimizer not loaded", RESUME.format(**{**RESUME_RIGHT, "optimizer": "pass"}), "Adam keeps"),
    ("resume: generator not restored", RESUME.format(**{**RESUME_RIGHT, "rng": "pass"}), "random number generator"),
    (
        "resume: generator reseeded",
        RESUME.format(**{**RESUME_RIGHT, "rng": "torch.manual_seed(0)"}),
        "random number generator",
    ),
    (
        "resume: one step too far",
        RESUME.format(**{**RESUME_RIGHT, "step": 'checkpoint["step"] + 1'}),
        "Steps would be skipped",
    ),
    ("resume: not a number", RESUME.format(**{**RESUME_RIGHT, "step": "None"}), "as an int"),
    (
        "resume: a checkpoint weights_only cannot load",
        RESUME.replace('"step": step', '"step": step, "model_object": model').format(**RESUME_RIGHT),
        "weights_only",
    ),
    ("fedavg: unweighted mean", FEDAVG.format(**{**FEDAVG_RIGHT, "w": "1 / len(states)"}), "3 times as much"),
    ("fedavg: weights not normalised", FEDAVG.format(**{**FEDAVG_RIGHT, "w": "w"}), None),
    (
        "fedavg: only the first tensor",
        FEDAVG.format(**{**FEDAVG_RIGHT, "names": "list(states[0])[:1]"}),
        "every tensor of it",
    ),
]

wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)
