"""The checks of exercise 02 (memory), for ``registry.check``: each ``_02_name()`` returns the keyword arguments of
``check_function``, and each ``_ref_name`` is the exercise's reference.
"""

from __future__ import annotations

import random

_NO_TORCH_MODULES = (
    "building a torch layer and counting its parameters measures the answer instead of working it out. Count "
    "them yourself, from the sizes."
)


def _random_mlp(rng: random.Random) -> list[int]:
    """Layer sizes [inputs, hidden..., classes] of a random small MLP."""
    return [rng.randint(4, 128)] + [rng.randint(8, 256) for _ in range(rng.randint(1, 3))] + [rng.randint(2, 10)]


def _ref_mlp_parameters(sizes) -> int:
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def _02_mlp_parameters() -> dict:
    from .. import memory, models

    return dict(
        cases=[
            (
                ([2, 3],),
                9,
                {
                    6: "6 is the 2 x 3 weights alone: each of the 3 outputs also has a bias.",
                    5: "5 = 2 + 3: every input connects to every output, so the weights form a 2 x 3 matrix.",
                    8: "Biases belong to a layer's outputs (3 here), not its inputs.",
                    0: "The last layer is missing: [2, 3] is one layer, one per pair of neighbouring sizes.",
                },
            ),
            (
                ([32, 512, 256, 10],),
                150_794,
                {
                    150_816: "Biases belong to a layer's outputs, not its inputs.",
                    148_224: "The last layer, 256 -> 10, is missing: 4 sizes make 3 layers, one per neighbouring pair.",
                },
            ),
        ],
        reference=_ref_mlp_parameters,
        random_inputs=lambda rng: (_random_mlp(rng),),
        n_random=15,
        refuse=[models.MLP, memory.mlp_parameters],
        forbid={"torch.nn": _NO_TORCH_MODULES},
        hint="How many layers do the sizes describe? How many weights join a layer's inputs to its outputs, and "
        "how many biases does it have: one per input or one per output?",
    )


_STATE_VALUES = {"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}  # float32 values the optimizer keeps per parameter


def _ref_model_state_bytes(n_params: int, optimizer: str) -> int:
    return n_params * 4 * (2 + _STATE_VALUES[optimizer])


def _02_model_state_bytes() -> dict:
    from .. import memory

    return dict(
        cases=[
            (
                (1000, "sgd"),
                8000,
                {
                    4000: "Plain SGD keeps no state, but the gradient (4 bytes) still exists.",
                    8: "That is one parameter's bytes: multiply by the number of parameters.",
                    8000 / 2**30: "That is in GiB: return bytes.",
                    8e-6: "That is in GB: return bytes.",
                },
            ),
            (
                (1000, "adam"),
                16000,
                {
                    12000: "One 4-byte part is missing: the gradient, or one of Adam's two moments.",
                    8000: "Adam keeps two moments (running mean and running square) per parameter.",
                    4000: "That is the weights alone: gradients and Adam's two moments come on top.",
                },
            ),
            (
                (10, "momentum"),
                120,
                {
                    80: "Momentum keeps one buffer per parameter.",
                    160: "Momentum keeps one buffer (the velocity), not two like Adam.",
                },
            ),
            ((5, "adamw"), 80, "AdamW keeps the same two moments as Adam; it only applies weight decay differently."),
        ],
        reference=_ref_model_state_bytes,
        random_inputs=lambda rng: (rng.randint(1, 10**9), rng.choice(sorted(_STATE_VALUES))),
        refuse=[memory.model_states_bytes, memory.large_model_memory],
        hint="What does one parameter cost: its weight, its gradient, and how many values does this optimizer keep "
        "for it? How many bytes is a float32 value? And is your answer in bytes, for all the parameters?",
    )


def _ref_mlp_activation_bytes(sizes, batch: int) -> int:
    return 4 * batch * (sum(sizes[1:-1]) + 2 * sizes[-1])


def _02_mlp_activation_bytes() -> dict:
    from .. import memory

    one_short = "One tensor with a value per class is missing: autograd saves the log-softmax, and your loop keeps "
    one_short += "the logits in `out` through the backward pass: two values per class."
    relu_only = "That counts the ReLU outputs only: the log-softmax that the loss saves and the logits that `out` "
    relu_only += "holds have a value per class each."
    twice = "Each hidden layer counted twice, before and after its ReLU: ReLU saves only its output, and the next "
    twice += "Linear saves that same tensor as its input; the values before the ReLU are freed."
    big = _ref_mlp_activation_bytes([64, 1024, 1024, 10], 2048)
    return dict(
        cases=[
            (
                ([3, 5, 2], 1),
                36,
                {
                    28: one_short,
                    20: relu_only,
                    56: twice,
                    44: "A ReLU after the last layer? The last Linear's output is the logits, which go straight into "
                    "the loss: there is no ReLU there to save anything.",
                    48: "Two mistakes give 48 here. Counted the input batch? Leave out sizes[0]: the data loader "
                    "holds it, not the model's saved tensors. Counted each hidden layer before and after its ReLU, "
                    "with one value per class? ReLU saves only its output, and the loss needs two values per class.",
                    9: "Bytes, not values: a float32 value takes 4 bytes.",
                },
            ),
            (
                ([64, 1024, 1024, 10], 2048),
                big,
                {
                    16_777_216: relu_only,
                    16_859_136: one_short,
                    big + 4 * 2048 * 2048: twice,
                    big // 4: "Bytes, not values: a float32 value takes 4 bytes.",
                    big // 2048: "That is one example's bytes: multiply by the batch.",
                },
            ),
        ],
        reference=_ref_mlp_activation_bytes,
        random_inputs=lambda rng: (_random_mlp(rng), rng.randint(1, 512)),
        refuse=[memory.mlp_activation_bytes, memory.measure_activation_bytes_per_example],
        hint="Per example, which saved tensors did the cell above find that are neither parameters, the input nor "
        "the labels, and which tensor does the loop itself hold? How many values per hidden unit and per class is "
        "that, how many bytes per value, and how many examples?",
    )


def _ref_largest_batch(sizes, optimizer: str, memory_bytes: int) -> int:
    free = memory_bytes - _ref_model_state_bytes(_ref_mlp_parameters(sizes), optimizer)
    return max(0, free // _ref_mlp_activation_bytes(sizes, 1))


def _random_budget(rng: random.Random) -> tuple[list[int], str, int]:
    """A random MLP, optimizer and memory, the memory now and then exactly what a whole batch needs."""
    sizes, optimizer = _random_mlp(rng), rng.choice(["sgd", "momentum", "adam"])
    if rng.random() < 0.3:  # a batch that fills the memory to the byte
        states = _ref_model_state_bytes(_ref_mlp_parameters(sizes), optimizer)
        return sizes, optimizer, states + rng.randint(0, 1000) * _ref_mlp_activation_bytes(sizes, 1)
    return sizes, optimizer, rng.randint(10**5, 10**10)


def _02_largest_batch() -> dict:
    from .. import memory

    sizes = [64, 1024, 1024, 10]
    states, per_example = (
        _ref_model_state_bytes(_ref_mlp_parameters(sizes), "adam"),
        _ref_mlp_activation_bytes(sizes, 1),
    )
    gib = _ref_largest_batch(sizes, "adam", 2**30)
    return dict(
        cases=[
            (
                (sizes, "adam", 2**30),
                gib,
                {
                    2**30 // per_example: "That is the batch for an empty memory: the model states come first.",
                    gib + 1: f"{gib + 1:,} examples would take more than the memory: round down.",
                },
            ),
            (
                (sizes, "adam", states + 3 * per_example),
                3,
                {
                    2: "The states and 3 examples fill the memory to the byte, and a batch fits when it takes at "
                    "most the memory: 3 fit."
                },
            ),
            ((sizes, "adam", states + 3 * per_example - 1), 2, "One byte short of 3 examples: 2 fit."),
            (
                (sizes, "adam", 10**6),
                0,
                "The model states alone do not fit: no batch does (0, not a negative batch).",
            ),
        ],
        reference=_ref_largest_batch,
        random_inputs=_random_budget,
        refuse=[
            memory.mlp_largest_batch,
            memory.mlp_parameters,
            memory.model_states_bytes,
            memory.mlp_activation_bytes,
        ],
        hint="What does every batch size pay before the first example? How many whole examples fit in what is "
        "left, and which way do you round? What if nothing is left?",
    )


_RECIPE_BYTES = {"fp32": (4, 4, 4, 0), "mixed": (2, 2, 4, 4), "bf16": (2, 2, 2, 0)}  # weight, grad, per value, master


def _per_parameter(optimizer: str, recipe: str) -> int:
    weight, grad, per_value, master = _RECIPE_BYTES[recipe]
    return weight + grad + master + per_value * _STATE_VALUES[optimizer]


def _ref_largest_model(memory_bytes: float, optimizer: str, recipe: str) -> int:
    return int(memory_bytes // _per_parameter(optimizer, recipe))


def _random_chip(rng: random.Random) -> tuple[float, str, str]:
    """A random memory, optimizer and recipe; now and then a memory that the model states fill to the byte."""
    optimizer, recipe = rng.choice(sorted(_STATE_VALUES)), rng.choice(sorted(_RECIPE_BYTES))
    if rng.random() < 0.3:
        return rng.randint(0, 10**10) * _per_parameter(optimizer, recipe), optimizer, recipe
    return rng.choice([float, int])(rng.randint(0, 2 * 10**11)), optimizer, recipe


def _largest_model_cases() -> list:
    """The fixed cases of ``02/largest_model``: 80 GB under each recipe, then the edges where rounding decides."""
    gb80 = 80e9
    no_master = (
        "A float32 master copy is missing: in the mixed recipe the optimizer updates a 4-byte copy of each weight "
        "and keeps its values in float32 (4 bytes each), on top of the 2-byte bf16 weight and gradient."
    )
    halved = (
        "That halves every value: the all-bf16 recipe. The mixed recipe keeps 2-byte weights and gradients, but also "
        "a float32 master copy of each weight, and the optimizer's values stay in float32: list them and add up "
        "their bytes."
    )
    return [
        (
            (gb80, "adam", "fp32"),
            5 * 10**9,
            {
                20 * 10**9: "That counts the weights alone: each parameter also has a gradient and Adam's two "
                "values (section 2).",
                10 * 10**9: "That counts the weight and its gradient: what else does Adam keep for each parameter, "
                "and in how many bytes?",
                5: "That is in billions: return the number of parameters.",
                80 * 10**9: "That is the memory in bytes: divide by what one parameter costs.",
            },
        ),
        (
            (gb80, "adam", "mixed"),
            5 * 10**9,
            {
                10 * 10**9: halved,
                gb80 // 12: no_master,
                gb80 // 14: "Two bytes a parameter short: a 2-byte value is missing (the bf16 weight or its bf16 "
                "gradient), or a 4-byte one was counted as 2. List every value the mixed recipe keeps per parameter, "
                "with its bytes.",
                gb80 // 18: "The gradients are bf16 in this recipe (2 bytes): only the master weights and the "
                "optimizer's values are float32.",
                gb80 // 20: "That keeps float32 weights and gradients plus bf16 copies of both. (torch.autocast "
                "keeps float32 weights and gradients too, but caches bf16 copies of the weights only, and only "
                "inside its region.) In the mixed recipe the passes use bf16 weights and gradients (2 bytes "
                "each), and the float32 master copy is the only 4-byte weight.",
            },
        ),
        (
            (gb80, "sgd", "mixed"),
            10 * 10**9,
            {
                20 * 10**9: "Plain SGD keeps no values, but the mixed recipe still keeps the float32 master copy "
                "that SGD updates: count it with the bf16 weight and gradient."
            },
        ),
        (
            (gb80, "adam", "bf16"),
            10 * 10**9,
            {
                5 * 10**9: "In the bf16 recipe every value is 2 bytes and there is no master copy: count the "
                "values, 2 bytes each.",
                gb80 // 6: "Adam keeps two values per parameter, its running mean and running square.",
            },
        ),
        (
            (31, "adam", "fp32"),
            1,
            {
                1.9375: "Parameters come whole: 31 bytes hold one 16-byte parameter, not 1.94.",
                2: "2 parameters need 32 bytes, one more than the 31 there are: round down.",
            },
        ),
        (
            (32, "adamw", "fp32"),
            2,
            {1: "32 bytes hold exactly two 16-byte parameters: a model fits when its states take at most the memory."},
        ),
        (
            (15, "momentum", "mixed"),
            1,
            "Momentum keeps one float32 value, beside the bf16 weight and gradient and the float32 master copy: add up "
            "their bytes, then see how many whole parameters fit in 15.",
        ),
        ((0, "adam", "mixed"), 0, "No memory, no parameters."),
    ]


def _02_largest_model() -> dict:
    from .. import memory

    return dict(
        cases=_largest_model_cases(),
        reference=_ref_largest_model,
        random_inputs=_random_chip,
        refuse=[
            memory.largest_model_that_fits,
            memory.largest_model_per_accelerator,
            memory.model_states_bytes,
            memory.large_model_memory,
        ],
        hint="What does ONE parameter keep in this recipe: a weight, a gradient, a master copy or not, how many "
        "optimizer values, and how many bytes is each? How many whole parameters fit in the memory?",
    )


#: the checks of this exercise, by key: what ``registry.check`` runs
SPECS = {
    "02/mlp_parameters": _02_mlp_parameters,
    "02/model_state_bytes": _02_model_state_bytes,
    "02/mlp_activation_bytes": _02_mlp_activation_bytes,
    "02/largest_batch": _02_largest_batch,
    "02/largest_model": _02_largest_model,
}
