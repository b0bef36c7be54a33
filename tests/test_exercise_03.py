"""Exercise 03 (the interconnect): each plausible wrong answer below must fail its check cell with a CheckFailed that
carries the fitting explanation (the runner is tests/wrong_answers.py), and an answer that calls the course library,
which computes the same numbers, is refused."""

from __future__ import annotations

from pathlib import Path

from wrong_answers import function_name, wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "03_interconnect.ipynb"

RING = """
def ring_allreduce_seconds(nbytes, world_size, alpha, bandwidth):
    return {total}
"""
BUS = """
def bus_bandwidth(nbytes, seconds, world_size):
    return nbytes / seconds * {factor}
"""
# the functions below do without the learner's ring and bus functions: wrong ones above stay defined in the kernel
SPEEDUP = """
def dp_speedup(compute_s, grad_bytes, world_size, bandwidth):
    comm_s = 2 * (world_size - 1) / world_size * grad_bytes / bandwidth
    return {result}
"""
NEEDED = """
def bandwidth_needed(compute_s, grad_bytes, world_size, efficiency):
    allowed = {allowed}
    return {factor} * grad_bytes / allowed{unit}
"""
NEEDED_RIGHT = dict(allowed="compute_s * (1 / efficiency - 1)", factor="2 * (world_size - 1) / world_size", unit="")
PREDICT = """
def predict_from_largest(rows, world_size):
    share = 2 * (world_size - 1) / world_size
    largest = {pick}
    link = largest["bytes"] / largest["seconds"]{bus}
    return link, {predicted}
"""
PREDICT_RIGHT = dict(
    pick='max(rows, key=lambda r: (r["bytes"], -r["seconds"]))',
    bus=" * share",
    predicted='[share * r["bytes"] / link for r in rows]',
)
LINK = """
def ring_bandwidth(world_size, gpus_per_server, in_server, network):
    return {result}
"""
FIT = """
def fit_alpha_beta(sizes, seconds, world_size):
    import numpy as np

    slope, intercept = {line}
    steps = 2 * (world_size - 1)
    return {result}
"""
FIT_LINE = "np.polyfit(sizes, seconds, 1)"
FIT_RIGHT = "intercept / steps, steps / world_size / slope"

# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    # ring_allreduce_seconds
    (
        "ring: 2N steps (off by one per phase)",
        RING.format(total="2 * world_size * (alpha + nbytes / world_size / bandwidth)"),
        "each phase takes N - 1 steps",
    ),
    (
        "ring: one phase only",
        RING.format(total="(world_size - 1) * (alpha + nbytes / world_size / bandwidth)"),
        "One phase only",
    ),
    (
        "ring: the whole message every step",
        RING.format(total="2 * (world_size - 1) * (alpha + nbytes / bandwidth)"),
        "1/N of the message",
    ),
    (
        "ring: alpha paid once",
        RING.format(total="alpha + 2 * (world_size - 1) * nbytes / world_size / bandwidth"),
        "pays the latency alpha",
    ),
    (
        "ring: bits, not bytes",
        RING.format(total="2 * (world_size - 1) * (alpha + 8 * nbytes / world_size / bandwidth)"),
        "no bits",
    ),
    (
        "ring: the library's",
        RING.format(total="comm.allreduce_time(nbytes, world_size, alpha, bandwidth, algorithm='ring')"),
        "calls comm.alpha_beta.allreduce_time",
    ),
    (
        "ring: the library's two phases",
        RING.format(
            total="comm.reduce_scatter_time(nbytes, world_size, alpha, bandwidth)\n"
            "    + comm.allgather_time(nbytes, world_size, alpha, bandwidth)"
        ).replace("return ", "return (", 1)
        + ")",
        "reduce_scatter_time",
    ),
    # bus_bandwidth
    ("bus: the factor 2(N - 1)/N forgotten", BUS.format(factor="1"), "That is the algorithm bandwidth"),
    ("bus: one phase, (N - 1)/N", BUS.format(factor="(world_size - 1) / world_size"), "is one phase"),
    ("bus: a flat factor 2", BUS.format(factor="2"), "2 is the limit for many ranks"),
    ("bus: the factor upside down", BUS.format(factor="world_size / (2 * (world_size - 1))"), "Upside down"),
    ("bus: times N", BUS.format(factor="2 * (world_size - 1)"), "N times too much"),
    ("bus: bits per second", BUS.format(factor="8 * 2 * (world_size - 1) / world_size"), "in bits per second"),
    (
        "bus: the library's",
        "def bus_bandwidth(nbytes, seconds, world_size):\n    return comm.busbw(nbytes, seconds, world_size)",
        "busbw",
    ),
    # dp_speedup
    ("speed-up: the efficiency", SPEEDUP.format(result="compute_s / (compute_s + comm_s)"), "That is the efficiency"),
    (
        "speed-up: strong scaling",
        SPEEDUP.format(result="compute_s / (compute_s / world_size + comm_s)"),
        "strong scaling",
    ),
    (
        "speed-up: the all-reduce overlapped",
        SPEEDUP.format(result="world_size * compute_s / max(compute_s, comm_s)"),
        "no overlap",
    ),
    (
        "speed-up: no ring factor",
        SPEEDUP.format(result="world_size * compute_s / (compute_s + grad_bytes / bandwidth)"),
        "2(N-1)/N",
    ),
    (
        "speed-up: the library's",
        SPEEDUP.format(result="comm.data_parallel_speedup(compute_s, grad_bytes, world_size, bandwidth)"),
        "data_parallel_speedup",
    ),
    # bandwidth_needed
    (
        "needed: a tenth of the compute for the all-reduce",
        NEEDED.format(**{**NEEDED_RIGHT, "allowed": "compute_s * (1 - efficiency)"}),
        "what is left of it for the all-reduce",
    ),
    (
        "needed: the all-reduce given 90 % of the compute",
        NEEDED.format(**{**NEEDED_RIGHT, "allowed": "compute_s * efficiency"}),
        "take 90 % of the compute time",
    ),
    (
        "needed: the factor 2(N - 1)/N forgotten",
        NEEDED.format(**{**NEEDED_RIGHT, "factor": "1"}),
        "The ring's factor is missing",
    ),
    (
        "needed: every rank sends the whole gradient per step (times N)",
        NEEDED.format(**{**NEEDED_RIGHT, "factor": "2 * (world_size - 1)"}),
        "N times too much",
    ),
    (
        "needed: nothing defined for one rank",
        NEEDED.format(**{**NEEDED_RIGHT, "factor": "1 / (world_size / (2 * (world_size - 1)))"}),
        "ZeroDivisionError",
    ),
    (
        "needed: efficiency 1 divides by zero",
        NEEDED.format(**NEEDED_RIGHT),
        "no finite link does that, so return math.inf",  # the case's explanation, though the function raised
    ),
    (
        "needed: one rank at efficiency 1 divides by zero",
        "def bandwidth_needed(compute_s, grad_bytes, world_size, efficiency):\n"
        "    allowed = compute_s * (1 / efficiency - 1)\n"
        "    if allowed == 0 and world_size > 1:\n"
        "        return math.inf\n"
        "    return 2 * (world_size - 1) / world_size * grad_bytes / allowed",
        "One rank sends nothing, even at efficiency 1",
    ),
    (
        "needed: infinite even for one rank at efficiency 1",
        "def bandwidth_needed(compute_s, grad_bytes, world_size, efficiency):\n"
        "    if efficiency == 1:\n"
        "        return math.inf\n"
        "    return 2 * (world_size - 1) / world_size * grad_bytes / (compute_s * (1 / efficiency - 1))",
        "even at efficiency 1",
    ),
    ("needed: GB/s", NEEDED.format(**{**NEEDED_RIGHT, "unit": " / 1e9"}), "in GB/s"),
    ("needed: bits per second", NEEDED.format(**{**NEEDED_RIGHT, "unit": " * 8"}), "in bits per second"),
    (
        "needed: the library's",
        "def bandwidth_needed(compute_s, grad_bytes, world_size, efficiency):\n"
        "    return comm.bandwidth_needed(compute_s, grad_bytes, world_size, efficiency)",
        "comm.alpha_beta.bandwidth_needed",
    ),
    # predict_from_largest
    ("predict: the first row", PREDICT.format(**{**PREDICT_RIGHT, "pick": "rows[0]"}), "from the first row"),
    (
        "predict: sorted by size",
        PREDICT.format(**{**PREDICT_RIGHT, "predicted": 'sorted(share * r["bytes"] / link for r in rows)'}),
        "in the order of the rows",
    ),
    (
        "predict: the slowest row",
        PREDICT.format(**{**PREDICT_RIGHT, "pick": 'max(rows, key=lambda r: r["seconds"])'}),
        "from the slowest row",
    ),
    (
        "predict: the first of the largest rows",
        PREDICT.format(**{**PREDICT_RIGHT, "pick": 'max(rows, key=lambda r: r["bytes"])'}),
        "fastest of them",
    ),
    (
        "predict: the last of the largest rows",
        PREDICT.format(**{**PREDICT_RIGHT, "pick": 'sorted(rows, key=lambda r: r["bytes"])[-1]'}),
        "fastest of them",
    ),
    ("predict: the algorithm bandwidth", PREDICT.format(**{**PREDICT_RIGHT, "bus": ""}), "algorithm bandwidth"),
    (
        "predict: the library's fit",
        PREDICT.format(**PREDICT_RIGHT).replace(
            "    return link,",
            '    link = comm.busbw(largest["bytes"], largest["seconds"], world_size)\n    return link,',
        ),
        "comm.alpha_beta.busbw",
    ),
    # ring_bandwidth
    (
        "link: a full server counted as leaving it",
        LINK.format(result="in_server if world_size < gpus_per_server else min(in_server, gpus_per_server * network)"),
        "fill one server of 8 exactly",
    ),
    (
        "link: always leaves the server",
        LINK.format(result="min(in_server, gpus_per_server * network)"),
        "never leaves it",
    ),
    ("link: never leaves a server", LINK.format(result="in_server"), "do not fit in a server of 8"),
    (
        "link: one ring through one card (the slowest hop)",
        LINK.format(result="in_server if world_size <= gpus_per_server else min(in_server, network)"),
        "one ring per card",
    ),
    (
        "link: one network card shared by the server",
        LINK.format(result="in_server if world_size <= gpus_per_server else min(in_server, network / gpus_per_server)"),
        "all 8 of them at once",
    ),
    (
        "link: the cards' sum without the in-server link",
        LINK.format(result="in_server if world_size <= gpus_per_server else gpus_per_server * network"),
        "no faster than in_server",
    ),
    (
        "link: a table of the fixed cases",
        "def ring_bandwidth(world_size, gpus_per_server, in_server, network):\n"
        "    table = {(16, 8, 300e9, 25e9): 200e9, (32, 4, 300e9, 25e9): 100e9}\n"
        "    return table.get((world_size, gpus_per_server, in_server, network), in_server)",
        "from the reference",
    ),
    (
        "link: the average of the two links",
        LINK.format(
            result="in_server if world_size <= gpus_per_server else (in_server + gpus_per_server * network) / 2"
        ),
        "not as fast as the average",
    ),
    (
        "link: the network alone outside a server",
        LINK.format(result="in_server if world_size <= gpus_per_server else network"),
        "one ring per card",
    ),
    (
        "link: 8 GPUs a server, whatever gpus_per_server says",
        LINK.format(result="in_server if world_size <= gpus_per_server else min(in_server, 8 * network)"),
        "gpus_per_server = 4 GPUs",
    ),
    # fit_alpha_beta
    (
        "fit: forgot the 2(N-1)/N of the bytes",
        FIT.format(line=FIT_LINE, result="intercept / steps, 1 / slope"),
        "each rank sends 2(N-1)/N x n",
    ),
    (
        "fit: alpha as the whole intercept",
        FIT.format(line=FIT_LINE, result="intercept, steps / world_size / slope"),
        "the latency of all 2(N-1) steps",
    ),
    (
        "fit: relative misses (each row weighed by 1 / t), not plain least squares",
        FIT.format(line="np.polyfit(sizes, seconds, 1, w=[1 / t for t in seconds])", result=FIT_RIGHT),
        "plain least squares on the seconds",
    ),
    (
        "fit: sizes in MiB",
        FIT.format(line="np.polyfit([n / 2**20 for n in sizes], seconds, 1)", result=FIT_RIGHT),
        "fit on bytes, not MiB",
    ),
    (
        "fit: alpha and B swapped",
        FIT.format(line=FIT_LINE, result="steps / world_size / slope, intercept / steps"),
        "the other way round",
    ),
    (
        "fit: seconds per byte",
        FIT.format(line=FIT_LINE, result="intercept / steps, slope / (steps / world_size)"),
        "seconds per byte",
    ),
    (
        "fit: a line through the first and the last row",
        FIT.format(
            line="((seconds[-1] - seconds[0]) / (sizes[-1] - sizes[0]),\n"
            "                        seconds[0] - (seconds[-1] - seconds[0]) / (sizes[-1] - sizes[0]) * sizes[0])",
            result=FIT_RIGHT,
        ),
        "first and the last row",
    ),
    (
        "fit: the course library's fit",
        "def fit_alpha_beta(sizes, seconds, world_size):\n"
        "    fit = comm.fit_alpha_beta(sizes, seconds)\n"
        "    return fit.alpha_s, fit.bandwidth_bytes_per_s",
        "comm.",
    ),
]

wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)


def test_every_exercise_function_has_wrong_answers():
    names = {function_name(code) for _, code, _ in WRONG}
    assert names == {
        "ring_allreduce_seconds",
        "bus_bandwidth",
        "dp_speedup",
        "bandwidth_needed",
        "predict_from_largest",
        "ring_bandwidth",
        "fit_alpha_beta",
    }


def test_a_function_that_raises_gets_the_case_explanation_too():
    """A learner's bandwidth_needed that divides by zero at efficiency 1 is told what the case expects (return
    math.inf), not only which error it raised, with the hint after it; an unfinished one still gets its own
    message."""
    import pytest

    from course_lib import checks

    def bandwidth_needed(compute_s, grad_bytes, world_size, efficiency):
        share = 2 * (world_size - 1) / world_size
        return 0.0 if share == 0 else share * grad_bytes / (compute_s * (1 / efficiency - 1))

    with pytest.raises(checks.CheckFailed) as err:
        checks.check("03/bandwidth_needed", bandwidth_needed, quiet=True)
    message = str(err.value)
    assert "raised ZeroDivisionError" in message and "so return math.inf" in message
    assert message.index("so return math.inf") < message.index("Hint:")


def test_an_unfinished_stub_points_at_its_hint_comments_instead_of_repeating_them(tmp_path, monkeypatch):
    """The solutions of exercises 01-03 keep their hints as comments above the solution block, so a stub shows
    each hint once, in its cell; the message of an unfinished check points there."""
    import importlib

    import pytest

    from course_lib import checks

    (tmp_path / "stub_module.py").write_text(
        "def bus_bandwidth(nbytes, seconds, world_size):\n"
        "    # Hint: how many bytes does one rank send?\n"
        "    raise NotImplementedError('Exercise: write your code here.')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    stub = importlib.import_module("stub_module")
    with pytest.raises(checks.ExerciseNotDone) as err:
        checks.check("03/bus_bandwidth", stub.bus_bandwidth, quiet=True)
    message = str(err.value)
    assert "not written yet" in message and "read the `# Hint:` comments" in message
    assert "how many bytes does one rank send" not in message
