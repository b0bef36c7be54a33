"""The checks of exercise 01 (arithmetic intensity, the roofline, time to train), for ``registry.check``: each
``_01_name()`` returns the keyword arguments of ``check_function``, and each ``_ref_name`` is the exercise's reference.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction


def _ref_matmul_intensity(m: int, n: int, k: int, bytes_per_element: int) -> float:
    return 2 * m * n * k / (bytes_per_element * (m * k + k * n + m * n))


def _01_matmul_intensity() -> dict:
    from .. import compute

    right = 48 / 104  # (2, 3, 4), 4 bytes: 48 FLOPs over (8 + 12 + 6) x 4 bytes
    return dict(
        cases=[
            (
                (2, 3, 4, 4),
                right,
                {
                    right / 2: "Half the answer: a multiply-add is two FLOPs, so the product does 2·m·n·k FLOPs.",
                    48 / 26: "4 times too much: that divides by the elements moved, and a float32 element is 4 bytes.",
                    48 / 80: "Too high: C is written back to memory too, so count the bytes of all three matrices.",
                    48 / 128: "Too low: that counts C twice, read and written. C = A @ B needs no old values of C: "
                    "as the statement says, each of A, B and C crosses the bus once.",
                    48 / 832: "8 times too little: that divides by bits; the intensity is FLOPs per byte.",
                    48 / 52: "Twice too high: here an element takes bytes_per_element = 4 bytes (float32), not a fixed "
                    "2; use the argument.",
                },
            ),
            ((2, 2, 2, 4), 1 / 3),
            ((1024, 1024, 1024, 4), 2048 / 12),
            ((1, 4096, 4096, 2), _ref_matmul_intensity(1, 4096, 4096, 2)),
        ],
        reference=_ref_matmul_intensity,
        random_inputs=lambda rng: (
            rng.randint(1, 4096),
            rng.randint(1, 4096),
            rng.randint(1, 4096),
            rng.choice([4, 2, 1]),
        ),
        refuse=[compute.matmul_intensity, compute.elementwise_intensity],
        hint="Off by exactly 2x: how many FLOPs is one multiply-add? Off by the element size: did you count "
        "elements or bytes? A little too high or too low: how many times does each of A, B and C cross the bus?",
    )


def _ref_elementwise_bytes(n_elements, bytes_per_element, write_allocate, in_place) -> int:
    arrays = 3 + (1 if write_allocate and not in_place else 0)  # a, b read, the sum written; c's lines read first
    return arrays * n_elements * bytes_per_element


def _01_elementwise_bytes() -> dict:
    from .. import compute

    n = 10**6
    in_place = (
        "In place (a += b) the sum goes into a, whose lines were just read as an operand: the store finds them in "
        "cache, so there is nothing extra to read. Write-allocate costs only when the destination is not an operand."
    )
    return dict(
        cases=[
            (
                (n, 4, False, False),
                12 * n,
                {
                    16 * n: "write_allocate is False here (streaming stores): c is written without being read first.",
                    8 * n: "c is written to memory too: a and b are read, c written, three arrays cross the bus.",
                    3 * n: "Count bytes, not elements: a float32 element is 4 bytes.",
                    96 * n: "That is in bits: return bytes.",
                },
            ),
            (
                (n, 4, True, False),
                16 * n,
                {
                    12 * n: "With write-allocate a store to a line that is not in cache first reads that line from "
                    "memory, so c crosses the bus twice, read then written: 16 bytes per float32 element, not 12.",
                    20 * n: "Write-allocate reads the destination's lines only (c), not a and b a second time.",
                },
            ),
            ((n, 4, True, True), 12 * n, {16 * n: in_place, 8 * n: "In place, a is read and the sum written back."}),
            ((n, 4, False, True), 12 * n, {8 * n: "In place, a is read and the sum written back: both cross the bus."}),
            ((n, 2, True, False), 8 * n, {16 * n: "Here an element takes bytes_per_element = 2 bytes (bf16)."}),
            ((0, 4, True, False), 0, "No elements, no bytes."),
        ],
        reference=_ref_elementwise_bytes,
        random_inputs=lambda rng: (
            rng.randint(0, 10**9),
            rng.choice([1, 2, 4, 8]),
            rng.random() < 0.5,
            rng.random() < 0.5,
        ),
        refuse=[compute.elementwise_intensity],
        rtol=1e-12,
        hint="Which arrays are read and which written? With write-allocate, does the store's line have to be read "
        "first, or was it just read as an operand?",
    )


def _ref_roofline(intensity: float, peak_flops: float, bandwidth: float) -> tuple[float, str]:
    fed = intensity * bandwidth
    return (fed, "memory") if fed < peak_flops else (peak_flops, "compute")


def _roofline_inputs(rng: random.Random) -> tuple[float, float, float]:
    """Random intensity, peak and bandwidth; now and then an operation exactly at the ridge point. A tie is made of
    powers of two, so it is a tie in floating point too, whichever way a learner compares: ``I * B == P``,
    ``P / B == I`` and ``I * (B / P) == 1`` hold exactly (a tie ``P = I * B`` of arbitrary floats misses ``P / B ==
    I`` by one ulp about one time in twenty, and would fail a correct ``I < P / B``)."""
    if rng.random() < 0.2:
        intensity, bandwidth = 2.0 ** rng.randint(-7, 10), 2.0 ** rng.randint(30, 41)
        return intensity, intensity * bandwidth, bandwidth
    return 10 ** rng.uniform(-2, 3), 10 ** rng.uniform(10, 15), 10 ** rng.uniform(9, 12.5)


def _01_roofline() -> dict:
    from .. import compute

    swapped = "The pair is the other way round: return (FLOP/s, name), the attainable FLOP/s first, then 'memory' "
    swapped += "or 'compute'."
    return dict(
        cases=[
            (
                (20.0, 400e9, 20e9),
                (400e9, "compute"),
                {
                    (400e9, "memory"): "20 FLOP/byte x 20e9 byte/s is exactly the peak: at the ridge point the two "
                    "ceilings are equal, and the statement calls that 'compute'.",
                    ("compute", 400e9): swapped,
                    ("memory", 400e9): swapped,
                },
            ),
            (
                (1 / 12, 400e9, 20e9),
                (20e9 / 12, "memory"),
                {
                    (400e9, "compute"): "An add does 1 FLOP per 12 bytes: memory feeds it 20e9 / 12 FLOP/s, far below "
                    "the peak. The ridge point is peak / bandwidth (FLOP/byte), not bandwidth / peak.",
                    (400e9, "memory"): "The lower ceiling wins: memory feeds this add only 20e9 / 12 FLOP/s.",
                    ("memory", 20e9 / 12): swapped,
                },
            ),
            (
                (170.0, 400e9, 20e9),
                (400e9, "compute"),
                {
                    (3.4e12, "compute"): "The lower ceiling wins: memory could feed 3.4e12 FLOP/s here, but the "
                    "arithmetic units stop at the peak."
                },
            ),
        ],
        reference=_ref_roofline,
        random_inputs=_roofline_inputs,
        refuse=[compute.roofline_regime, compute.roofline, compute.ridge_point, compute.roofline_time],
        rtol=1e-9,
        hint="Do you return a pair (FLOP/s, 'memory' or 'compute')? How many FLOP/s can memory feed at this "
        "intensity, and is that above or below the peak? Which ceiling wins? What does the statement call an "
        "operation exactly at the ridge point?",
    )


def _ref_days_to_train(n_params, n_tokens, peak_tflops, utilization, n_devices) -> float:
    return 6 * n_params * n_tokens / (n_devices * peak_tflops * 1e12 * utilization) / 86400


def _01_days_to_train() -> dict:
    from .. import compute

    right = _ref_days_to_train(1e9, 1e10, 100, 0.5, 1)
    return dict(
        cases=[
            (
                (1e9, 1e10, 100, 0.5, 1),
                right,
                {
                    right * 86400: "That is in seconds: a day has 86,400 of them.",
                    right * 24: "That is in hours: divide by 24.",
                    right * 1e12: "10^12 times too long: peak_tflops is in TFLOP/s, 10^12 FLOP/s each.",
                    right * 1e12 / 2**40: "About 9 % short: a TFLOP/s is 10^12 FLOP/s (decimal, as data sheets "
                    "count), not 2^40.",
                    right / 3: "3 times too short: the forward pass alone costs 2 FLOPs per parameter per token; "
                    "the backward pass adds 4.",
                    right / 4: "Too short: the chips reach only utilization x peak, so the job takes longer. Divide "
                    "by the utilization, do not multiply.",
                },
            ),
            (
                (2e9, 1e10, 100, 0.5, 4),
                _ref_days_to_train(2e9, 1e10, 100, 0.5, 4),
                {
                    _ref_days_to_train(2e9, 1e10, 100, 0.5, 1) * 4: "The 4 chips share the work: divide by their "
                    "number, do not multiply."
                },
            ),
            ((7e9, 2e12, 312, 0.4, 1024), _ref_days_to_train(7e9, 2e12, 312, 0.4, 1024)),
        ],
        reference=_ref_days_to_train,
        random_inputs=lambda rng: (
            10 ** rng.uniform(6, 11),
            10 ** rng.uniform(8, 13),
            rng.choice([8.1, 65, 312, 989]),
            rng.uniform(0.1, 0.6),
            rng.choice([1, 8, 256]),
        ),
        refuse=[compute.days_to_train, compute.time_to_train, compute.training_flops, compute.time_to_train_table],
        hint="Off by 10^12 or by a few percent: what is a TFLOP/s in FLOP/s? Off by 24, 1,440 or 86,400: is your "
        "answer in days? Off by 2 or 3: how many FLOPs per parameter per token do the forward and backward passes "
        "cost together? Off by the number of chips or the utilization: do they make the job shorter or longer?",
    )


def _ref_memory_bound_names(ops: dict, peak_flops: float, bandwidth: float) -> set:
    return {name for name, intensity in ops.items() if intensity * bandwidth < peak_flops}


def _01_memory_bound_names() -> dict:
    from .. import compute

    three_ops = {"add": 1 / 12, "at the ridge": 20.0, "matmul": 170.0}
    return dict(
        cases=[
            (
                (three_ops, 400e9, 20e9),
                {"add"},
                {
                    frozenset({"add", "at the ridge"}): "An operation exactly at the ridge point (here 20 FLOP/byte) "
                    "is 'compute'-bound, as your roofline says: keep only those below it.",
                    frozenset({"at the ridge", "matmul"}): "Those are the compute-bound ones: keep the names whose "
                    "roofline says 'memory', the operations below the ridge point.",
                },
            ),
            (({"small": 1.0, "large": 100.0}, 1e12, 1e11), {"small"}),
            (({}, 1e12, 1e11), set(), "No operations: no names (an empty set)."),
        ],
        reference=_ref_memory_bound_names,
        random_inputs=lambda rng: (
            {f"op {i}": 10 ** rng.uniform(-2, 3) for i in range(4)},
            10 ** rng.uniform(10, 15),
            10 ** rng.uniform(9, 12.5),
        ),
        refuse=[compute.memory_bound, compute.roofline_regime, compute.roofline, compute.ridge_point],
        hint="Do you return a set of names, the keys of ops (not a list, not the intensities)? Which verdict does "
        "your roofline give each one?",
    )


def _ref_smallest_compute_bound_n(peak_flops: float, bandwidth: float, bytes_per_element: int) -> int:
    """The smallest n whose n x n x n product (intensity 2n^3 / (3n^2 x bytes) = n / (1.5 x bytes)) reaches the ridge
    point peak / bandwidth, worked out in exact fractions so that a tie is a tie."""
    need = Fraction(3 * bytes_per_element, 2) * Fraction(peak_flops) / Fraction(bandwidth)
    return max(1, math.ceil(need))


def _01_smallest_compute_bound_n() -> dict:
    from .. import catalog, compute

    a100 = catalog.get_accelerator("a100-80gb")
    bf16 = (a100.peak_flops("bf16"), a100.memory_bandwidth_gbs * 1e9, 2)
    right = _ref_smallest_compute_bound_n(*bf16)
    wrong = {
        right - 1: "One short: that product's intensity still lies just below the ridge point. Round up: the "
        "smallest n whose intensity is at least the ridge.",
        _ref_smallest_compute_bound_n(*bf16[:2], 4): "Twice too large: that counts 4 bytes per element (or n^3 FLOPs "
        "where a multiply-add is 2). In bf16 an element is bytes_per_element = 2 bytes.",
        math.ceil(2 * bf16[0] / bf16[1]): "Your n is twice the ridge point: count the bytes again. An n x n x n "
        "product moves three n x n matrices (A, B and C), each element bytes_per_element bytes; ask your "
        "matmul_intensity for the intensity of size n, and find the n at which it reaches the ridge.",
        math.ceil(bf16[0] / bf16[1]): "That sets n itself equal to the ridge point: n is the matrix size, not its "
        "intensity. Work out the intensity an n x n x n product has (your matmul_intensity), then the n at which it "
        "reaches the ridge.",
        float(Fraction(3, 1) * Fraction(bf16[0]) / Fraction(bf16[1])): "That is where the intensity equals the ridge "
        "point exactly, a fraction; n is a whole matrix size. Round up: the smallest whole n at or past the ridge.",
        1: "An n x n x n product is compute-bound only once its intensity reaches peak / bandwidth; for the A100 in "
        "bf16 that is far above 1 FLOP/byte. Is your ridge point upside down (bandwidth / peak)?",
    }
    wrong.pop(right, None)
    return dict(
        cases=[
            (bf16, right, wrong),
            (
                (400e9, 20e9, 2),
                60,
                "Exactly at the ridge point counts as compute-bound: here the ridge is 400e9 / 20e9 = 20 FLOP/byte, "
                "and the expected size's product has exactly that intensity, so it is the answer, not one more.",
            ),
            (
                (400e9, 20e9, 4),
                120,
                "In float32 each element takes 4 bytes, twice bf16's: the same ridge (20 FLOP/byte) needs a larger "
                "product than in bf16. Did you use bytes_per_element?",
            ),
            ((1e9, 1e11, 2), 1, "A ridge of 0.01 FLOP/byte: even a 1 x 1 x 1 product lies past it, so 1."),
        ],
        reference=_ref_smallest_compute_bound_n,
        random_inputs=lambda rng: (
            (peak := 10 ** rng.uniform(11, 15)),
            peak / 10 ** rng.uniform(-1, 2.6),
            rng.choice([1, 2, 4]),
        ),
        refuse=[compute.matmul_intensity, compute.roofline_regime, compute.roofline, compute.ridge_point],
        rtol=1e-12,
        hint="Where is the ridge point (FLOP/byte) for this peak and bandwidth? What is the intensity of an "
        "n x n x n product with elements of bytes_per_element bytes (your matmul_intensity)? For which n does it "
        "first reach the ridge, a tie counting as compute-bound?",
    )


def _ref_fit_overhead_and_peak(flops, seconds) -> tuple[float, float]:
    """Least squares on relative errors: minimise the sum of ((o + f / P - t) / t)^2, each squared residual weighted
    by 1 / t^2 (linear in o and 1 / P: the 2 x 2 normal equations, solved by hand)."""
    return _weighted_fit(flops, seconds, 2)


def _weighted_fit(flops, seconds, power: int) -> tuple[float, float]:
    """Least squares of o + f / P on ``seconds``, each squared residual weighted by 1 / t**power: 2 is the reference
    (relative errors), 0 (absolute seconds) and 1 are wrong answers."""
    w = [1 / t**power for t in seconds]
    s_w, s_f = sum(w), sum(wi * f for wi, f in zip(w, flops))
    s_ff = sum(wi * f * f for wi, f in zip(w, flops))
    s_t, s_ft = sum(wi * t for wi, t in zip(w, seconds)), sum(wi * f * t for wi, f, t in zip(w, flops, seconds))
    det = s_w * s_ff - s_f * s_f
    overhead, per_flop = (s_t * s_ff - s_f * s_ft) / det, (s_w * s_ft - s_f * s_t) / det
    return overhead, 1 / per_flop


def _01_fit_overhead_and_peak() -> dict:
    sizes = [8, 16, 32, 64, 128, 256, 512, 1024]
    flops = [2.0 * n**3 for n in sizes]
    exact = [2e-6 + f / 1e11 for f in flops]  # 2 us a call, 100 GFLOP/s
    noisy = [t * e for t, e in zip(exact, (1.08, 0.93, 1.05, 0.97, 1.1, 0.92, 1.03, 0.96))]  # timings swing
    right = _ref_fit_overhead_and_peak(flops, noisy)
    per_flop = "The second value is seconds per FLOP: return the peak, FLOPs per second."
    swapped = "Swapped: return (overhead in seconds, peak in FLOP/s)."
    two_point = (
        "That is the two-point fit (the smallest size's time for the overhead, the largest for the peak): the "
        "smallest product's own FLOPs enter its overhead, and one noisy time sets each value. Use every point."
    )
    wrong = {
        _weighted_fit(flops, noisy, 0): "That fits absolute seconds: the largest products, milliseconds long, set "
        "the line, and a microsecond's fixed cost drowns in their noise. Fit relative errors: divide each residual by "
        "its own time.",
        _weighted_fit(flops, noisy, 1): "That weighs each squared residual by 1 / seconds: the relative error is "
        "the residual divided by the time, so its square carries 1 / seconds squared.",
        (noisy[0], flops[-1] / (noisy[-1] - noisy[0])): two_point,
        (right[0], 1 / right[1]): per_flop,
        (right[1], right[0]): swapped,
    }

    def random_inputs(rng):
        ns = sorted(rng.sample([4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048], rng.randint(3, 9)))
        overhead, peak = 10 ** rng.uniform(-6.5, -4), 10 ** rng.uniform(9, 13)
        fl = [2.0 * n**3 for n in ns]
        return fl, [(overhead + f / peak) * rng.uniform(0.9, 1.1) for f in fl]

    return dict(
        cases=[
            (
                (flops, exact),
                (2e-6, 1e11),  # on timings that follow the model exactly, its overhead and peak come back
                {
                    (exact[0], flops[-1] / (exact[-1] - exact[0])): two_point,
                    (2e-6, 1e-11): per_flop,
                    (1e11, 2e-6): swapped,
                },
            ),
            ((flops, noisy), right, wrong),
        ],
        reference=_ref_fit_overhead_and_peak,
        random_inputs=random_inputs,
        rtol=1e-6,
        own_code=True,
        hint="Divide each residual by its own time: which two unknowns is what is left linear in? Then it is a "
        "least-squares solve of a column of ones against two columns: which?",
    )


#: the checks of this exercise, by key: what ``registry.check`` runs
SPECS = {
    "01/matmul_intensity": _01_matmul_intensity,
    "01/elementwise_bytes": _01_elementwise_bytes,
    "01/roofline": _01_roofline,
    "01/days_to_train": _01_days_to_train,
    "01/memory_bound_names": _01_memory_bound_names,
    "01/fit_overhead_and_peak": _01_fit_overhead_and_peak,
    "01/smallest_compute_bound_n": _01_smallest_compute_bound_n,
}
