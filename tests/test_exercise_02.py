"""Exercise 02 (memory): each plausible wrong answer below must fail its check cell with a CheckFailed that carries
the fitting explanation (the runner is tests/wrong_answers.py), and an answer that calls the course library, which
computes the same numbers, is refused."""

from __future__ import annotations

from pathlib import Path

from wrong_answers import function_name, wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "02_memory.ipynb"

PARAMS = """
def mlp_parameters(sizes):
    return sum({layer} for a, b in zip({inputs}, {outputs}))
"""
PARAMS_RIGHT = dict(layer="a * b + b", inputs="sizes[:-1]", outputs="sizes[1:]")
STATES = """
def model_state_bytes(n_params, optimizer):
    state = {state}[optimizer]
    return {total}
"""
STATES_RIGHT = dict(state='{"sgd": 0, "momentum": 4, "adam": 8, "adamw": 8}', total="n_params * (4 + 4 + state)")
ACTIVATIONS = """
def mlp_activation_bytes(sizes, batch):
    return {size} * {batch} * ({hidden} + {loss} * sizes[-1])
"""
ACTIVATIONS_RIGHT = dict(size="4", batch="batch", hidden="sum(sizes[1:-1])", loss="2")
# self-contained: a wrong function above stays defined in the kernel
BATCH = """
def largest_batch(sizes, optimizer, memory_bytes):
    n_params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    states = 4 * n_params * {{"sgd": 2, "momentum": 3, "adam": 4}}[optimizer]
    per_example = 4 * (sum(sizes[1:-1]) + 2 * sizes[-1])
    return {result}
"""
MODEL = """
def largest_model(memory_bytes, optimizer, recipe):
    values = {{"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}}[optimizer]
    per_parameter = {{"fp32": {fp32}, "mixed": {mixed}, "bf16": {bf16}}}[recipe]
    return {result}
"""
MODEL_RIGHT = dict(
    fp32="4 + 4 + 4 * values",
    mixed="2 + 2 + 4 + 4 * values",
    bf16="2 + 2 + 2 * values",
    result="int(memory_bytes // per_parameter)",
)
ESTIMATED = """
def largest_estimated_batch(budget):
    fits, too_big = 0, 2 * b
    while too_big - fits > 1:
        mid = (fits + too_big) // 2
        fits, too_big = (mid, too_big) if estimated_peak(mid) <= budget else (fits, mid)
    return {result}
"""

# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    # mlp_parameters
    ("parameters: weights only", PARAMS.format(**{**PARAMS_RIGHT, "layer": "a * b"}), "also has a bias"),
    ("parameters: a + b", PARAMS.format(**{**PARAMS_RIGHT, "layer": "a + b"}), "weights form a 2 x 3 matrix"),
    ("parameters: biases on the inputs", PARAMS.format(**{**PARAMS_RIGHT, "layer": "a * b + a"}), "not its inputs"),
    (
        "parameters: the last layer left out (one pair short)",
        PARAMS.format(**{**PARAMS_RIGHT, "inputs": "sizes[:-2]", "outputs": "sizes[1:-1]"}),
        "The last layer",
    ),
    (
        "parameters: counted on the library's model",
        "def mlp_parameters(sizes):\n"
        "    return sum(p.numel() for p in models.MLP(sizes[0], sizes[1:-1], sizes[-1]).parameters())",
        "calls models.MLP",
    ),
    (
        "parameters: counted on torch layers",
        "def mlp_parameters(sizes):\n"
        "    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]\n"
        "    return sum(p.numel() for layer in layers for p in layer.parameters())",
        "building a torch layer and counting its parameters",
    ),
    # model_state_bytes
    (
        "states: the gradient forgotten",
        STATES.format(**{**STATES_RIGHT, "total": "n_params * (4 + state)"}),
        "the gradient (4 bytes) still exists",
    ),
    (
        "states: the optimizer state forgotten",
        STATES.format(**{**STATES_RIGHT, "total": "n_params * (4 + 4)"}),
        "Adam keeps two moments",
    ),
    (
        "states: Adam with one moment",
        STATES.format(**{**STATES_RIGHT, "state": '{"sgd": 0, "momentum": 4, "adam": 4, "adamw": 4}'}),
        "one of Adam's two moments",
    ),
    (
        "states: momentum with two buffers",
        STATES.format(**{**STATES_RIGHT, "state": '{"sgd": 0, "momentum": 8, "adam": 8, "adamw": 8}'}),
        "not two like Adam",
    ),
    ("states: bytes of one parameter", STATES.format(**{**STATES_RIGHT, "total": "4 + 4 + state"}), "multiply by"),
    ("states: GiB", STATES.format(**{**STATES_RIGHT, "total": "n_params * (4 + 4 + state) / 2**30"}), "in GiB"),
    (
        "states: AdamW forgotten",
        STATES.format(**{**STATES_RIGHT, "state": '{"sgd": 0, "momentum": 4, "adam": 8}'}),
        "KeyError",
    ),
    (
        "states: the library's",
        "def model_state_bytes(n_params, optimizer):\n"
        "    return memory.model_states_bytes(n_params, 'fp32', optimizer)",
        "memory.formulas.model_states_bytes",
    ),
    # mlp_activation_bytes
    ("activations: ReLU outputs only", ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "loss": "0"}), "ReLU outputs only"),
    (
        "activations: the logits only",
        ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "loss": "1"}),
        "One tensor with a value per class is missing",
    ),
    (
        "activations: before and after each ReLU",
        ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "hidden": "2 * sum(sizes[1:-1])"}),
        "ReLU saves only its output",
    ),
    (
        "activations: both sides of each ReLU, one value per class",
        ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "hidden": "2 * sum(sizes[1:-1])", "loss": "1"}),
        "ReLU saves only its output",
    ),
    (
        "activations: a ReLU after the last layer",
        ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "loss": "3"}),
        "A ReLU after the last layer?",
    ),
    ("activations: values, not bytes", ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "size": "1"}), "Bytes, not values"),
    (
        "activations: the input counted",
        ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "hidden": "sum(sizes[:-1])"}),
        "Leave out sizes[0]",
    ),
    ("activations: one example", ACTIVATIONS.format(**{**ACTIVATIONS_RIGHT, "batch": "1"}), "multiply by the batch"),
    (
        "activations: the library's",
        "def mlp_activation_bytes(sizes, batch):\n    return memory.mlp_activation_bytes(sizes, batch)",
        "mlp_activation_bytes",
    ),
    # largest_batch
    (
        "batch: the model states forgotten",
        BATCH.format(result="max(0, memory_bytes // per_example)"),
        "the model states come first",
    ),
    (
        "batch: rounded up",
        BATCH.format(result="max(0, -(-(memory_bytes - states) // per_example))"),
        "round down",
    ),
    (
        "batch: an exact fit refused",
        BATCH.format(result="max(0, (memory_bytes - states - 1) // per_example)"),
        "fill the memory to the byte",
    ),
    ("batch: negative", BATCH.format(result="(memory_bytes - states) // per_example"), "not a negative batch"),
    (
        "batch: the library's",
        "def largest_batch(sizes, optimizer, memory_bytes):\n"
        "    return memory.mlp_largest_batch(sizes, optimizer, memory_bytes)",
        "mlp_largest_batch",
    ),
    # largest_model
    ("model: the weights alone", MODEL.format(**{**MODEL_RIGHT, "fp32": "4"}), "counts the weights alone"),
    ("model: fp32 without the optimizer", MODEL.format(**{**MODEL_RIGHT, "fp32": "4 + 4"}), "what else does Adam keep"),
    ("model: mixed halves fp32", MODEL.format(**{**MODEL_RIGHT, "mixed": "2 + 2 + 2 * values"}), "That halves every"),
    (
        "model: mixed without the master copy",
        MODEL.format(**{**MODEL_RIGHT, "mixed": "2 + 2 + 4 * values"}),
        "A float32 master copy is missing",
    ),
    (
        "model: mixed with bf16 optimizer values",
        MODEL.format(**{**MODEL_RIGHT, "mixed": "2 + 2 + 4 + 2 * values"}),
        "A float32 master copy is missing",
    ),
    (
        "model: mixed with float32 gradients",
        MODEL.format(**{**MODEL_RIGHT, "mixed": "2 + 4 + 4 + 4 * values"}),
        "The gradients are bf16",
    ),
    (
        "model: bf16 copies of weights and gradients on top of float32",
        MODEL.format(**{**MODEL_RIGHT, "mixed": "4 + 4 + 2 + 2 + 4 * values"}),
        "bf16 copies of the weights only",
    ),
    (
        "model: no master copy for SGD",
        MODEL.format(**{**MODEL_RIGHT, "mixed": "2 + 2 + (4 if values else 0) + 4 * values"}),
        "still keeps the float32 master copy",
    ),
    (
        "model: bf16 with a master copy",
        MODEL.format(**{**MODEL_RIGHT, "bf16": "2 + 2 + 4 + 4 * values"}),
        "no master copy: count the values, 2 bytes each",
    ),
    ("model: not whole", MODEL.format(**{**MODEL_RIGHT, "result": "memory_bytes / per_parameter"}), "come whole"),
    (
        "model: rounded up",
        MODEL.format(**{**MODEL_RIGHT, "result": "-(-memory_bytes // per_parameter)"}),
        "round down",
    ),
    (
        "model: an exact fit refused",
        MODEL.format(**{**MODEL_RIGHT, "result": "max(0, (memory_bytes - 1) // per_parameter)"}),
        "at most the memory",
    ),
    ("model: billions", MODEL.format(**{**MODEL_RIGHT, "result": "memory_bytes // per_parameter / 1e9"}), "billions"),
    (
        "model: the library's",
        "def largest_model(memory_bytes, optimizer, recipe):\n"
        "    return memory.largest_model_that_fits(memory_bytes, recipe, optimizer, overhead_fraction=0)",
        "largest_model_that_fits",
    ),
    # largest_estimated_batch
    ("estimated: the plan's batch", "def largest_estimated_batch(budget):\n    return b", "does not fit"),
    ("estimated: one too many", ESTIMATED.format(result="too_big"), "does not fit"),
    ("estimated: one too few", ESTIMATED.format(result="fits - 1"), "it is not the largest"),
    ("estimated: not a whole number", ESTIMATED.format(result="float(fits)"), "whole number"),
    (
        "estimated: the answer typed in, no search",
        "def largest_estimated_batch(budget):\n    return 1570  # typed in: this torch release's estimate",
        "asked about 0 number",
    ),
    (
        "estimated: the library called around the counted probe",
        "def largest_estimated_batch(budget):\n"
        "    def peak(n):\n"
        "        x, y = torch.randn(n, 512), torch.randint(0, 10, (n,))\n"
        "        net = models.MLP(512, [1024] * 3, 10)\n"
        "        return memory.estimate_training_memory(net, x, optimizer='adam', target=y).total\n"
        "    fits, too_big = 0, max(1, b)\n"
        "    while peak(too_big) <= budget:\n"
        "        fits, too_big = too_big, 2 * too_big\n"
        "    while too_big - fits > 1:\n"
        "        mid = (fits + too_big) // 2\n"
        "        fits, too_big = (mid, too_big) if peak(mid) <= budget else (fits, mid)\n"
        "    return fits",
        "ask through the probe",
    ),
]

wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)


def test_every_exercise_function_has_wrong_answers():
    names = {function_name(code) for _, code, _ in WRONG}
    assert names == {
        "mlp_parameters",
        "model_state_bytes",
        "mlp_activation_bytes",
        "largest_batch",
        "largest_model",
        "largest_estimated_batch",
    }


def test_the_guess_is_locked_before_the_check_that_would_show_its_answer():
    """The largest_model check shows its expected values on failure (10 billion for an 80 GB A100 with Adam, all in
    bf16), so the guess of that number must be locked before the check cell runs, not after it."""
    import nbformat

    for folder in ("solutions", "exercises"):
        cells = nbformat.read(ROOT / folder / "02_memory.ipynb", as_version=4).cells
        code = [c.source for c in cells if c.cell_type == "code"]
        lock = next(i for i, s in enumerate(code) if "guess_first(guess_24gb_momentum_bf16_billions" in s)
        check = next(i for i, s in enumerate(code) if 'checks.check("02/largest_model"' in s)
        assert lock < check, folder
