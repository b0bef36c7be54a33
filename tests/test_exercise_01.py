"""Exercise 01 (arithmetic intensity, the roofline, time to train): each plausible wrong answer below must fail its
check cell with a CheckFailed that carries the fitting explanation (the runner is tests/wrong_answers.py), and an
answer that calls the course library, which computes the same numbers, is refused."""

from __future__ import annotations

from pathlib import Path

from wrong_answers import function_name, wrong_answer_tests

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "01_processing_units.ipynb"

INTENSITY = """
def matmul_intensity(m, n, k, bytes_per_element):
    return {flops} / ({size} * ({elements}))
"""
INTENSITY_RIGHT = dict(flops="2 * m * n * k", size="bytes_per_element", elements="m * k + k * n + m * n")
ELEMENTWISE = """
def elementwise_bytes(n_elements, bytes_per_element, write_allocate, in_place):
    return ({arrays}) * n_elements * {size}
"""
ELEMENTWISE_RIGHT = dict(arrays="4 if write_allocate and not in_place else 3", size="bytes_per_element")
ROOF = """
def roofline(intensity, peak_flops, bandwidth):
    fed = {fed}
    return {attainable}, "memory" if {below} else "compute"
"""
ROOF_RIGHT = dict(fed="intensity * bandwidth", attainable="min(peak_flops, fed)", below="fed < peak_flops")
DAYS = """
def days_to_train(n_params, n_tokens, peak_tflops, utilization, n_devices):
    return {flops} * n_params * n_tokens / ({rate}) / {per_day}
"""
DAYS_RIGHT = dict(flops="6", rate="n_devices * peak_tflops * 1e12 * utilization", per_day="86400")
BOUND = """
def memory_bound_names(ops, peak_flops, bandwidth):
    return {result}
"""
FIT = """
def fit_overhead_and_peak(flops, seconds):
    import numpy as np
    (overhead, per_flop), *_ = np.linalg.lstsq(np.array({rows}), np.array({rhs}), rcond=None)
    return {ret}
"""
SMALLEST = """
def smallest_compute_bound_n(peak_flops, bandwidth, bytes_per_element):
    return {n}
"""

# (what the mistake is, the wrong code, a piece of the message the learner must see or None)
WRONG = [
    # matmul_intensity
    (
        "intensity: a multiply-add as one FLOP",
        INTENSITY.format(**{**INTENSITY_RIGHT, "flops": "m * n * k"}),
        "a multiply-add is two FLOPs",
    ),
    ("intensity: elements, not bytes", INTENSITY.format(**{**INTENSITY_RIGHT, "size": "1"}), "4 bytes"),
    (
        "intensity: bits, not bytes",
        INTENSITY.format(**{**INTENSITY_RIGHT, "size": "8 * bytes_per_element"}),
        "divides by bits",
    ),
    (
        "intensity: C never written back",
        INTENSITY.format(**{**INTENSITY_RIGHT, "elements": "m * k + k * n"}),
        "C is written back",
    ),
    (
        "intensity: C counted as read and written",
        INTENSITY.format(**{**INTENSITY_RIGHT, "elements": "m * k + k * n + 2 * m * n"}),
        "counts C twice",
    ),
    (
        "intensity: a fixed 2 bytes per element",
        INTENSITY.format(**{**INTENSITY_RIGHT, "size": "2"}),
        "not a fixed 2",
    ),
    (
        "intensity: A and B transposed in the count",
        INTENSITY.format(**{**INTENSITY_RIGHT, "elements": "m * n + n * k + m * n"}),
        None,
    ),
    (
        "intensity: the library's",
        INTENSITY.format(**INTENSITY_RIGHT).replace(
            "return",
            "return compute.matmul_intensity(m, n, k, {4: 'fp32', 2: 'bf16', 1: 'int8'}[bytes_per_element])\n"
            "    return",
        ),
        "compute.matmul_intensity",
    ),
    # elementwise_bytes
    (
        "elementwise: write-allocate ignored",
        ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "arrays": "3"}),
        "crosses the bus twice",
    ),
    (
        "elementwise: write-allocate always",
        ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "arrays": "4"}),
        "streaming stores",
    ),
    (
        "elementwise: write-allocate in place too",
        ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "arrays": "4 if write_allocate else 3"}),
        "nothing extra to read",
    ),
    (
        "elementwise: the result never written",
        ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "arrays": "3 if write_allocate and not in_place else 2"}),
        "c is written to memory too",
    ),
    (
        "elementwise: in place, the sum not written back",
        ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "arrays": "2 if in_place else 4 if write_allocate else 3"}),
        "the sum written back",
    ),
    (
        "elementwise: a and b read again",
        ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "arrays": "5 if write_allocate and not in_place else 3"}),
        "not a and b a second time",
    ),
    ("elementwise: elements, not bytes", ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "size": "1"}), "not elements"),
    ("elementwise: bits", ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "size": "8 * bytes_per_element"}), "in bits"),
    ("elementwise: a fixed 4 bytes", ELEMENTWISE.format(**{**ELEMENTWISE_RIGHT, "size": "4"}), "(bf16)"),
    (
        "elementwise: the library's",
        "def elementwise_bytes(n_elements, bytes_per_element, write_allocate, in_place):\n"
        "    per = 1 / compute.elementwise_intensity(1.0, 2, 1)\n"
        "    return (per + (4 if write_allocate and not in_place else 0)) * n_elements * bytes_per_element / 4",
        "compute.elementwise_intensity",
    ),
    # roofline
    (
        "roofline: memory-bound at the ridge",
        ROOF.format(**{**ROOF_RIGHT, "below": "fed <= peak_flops"}),
        "the statement calls that 'compute'",
    ),
    (
        "roofline: the ridge upside down",
        ROOF.format(
            **{
                **ROOF_RIGHT,
                "below": "intensity < bandwidth / peak_flops",
                "attainable": "fed if intensity < bandwidth / peak_flops else peak_flops",
            }
        ),
        "not bandwidth / peak",
    ),
    (
        "roofline: the higher ceiling",
        ROOF.format(**{**ROOF_RIGHT, "attainable": "max(peak_flops, fed)"}),
        "The lower ceiling wins",
    ),
    (
        "roofline: the FLOP/s alone",
        "def roofline(intensity, peak_flops, bandwidth):\n    return min(peak_flops, intensity * bandwidth)",
        "Do you return a pair",
    ),
    (
        "roofline: the pair the other way round",
        "def roofline(intensity, peak_flops, bandwidth):\n"
        "    fed = intensity * bandwidth\n"
        '    return ("memory" if fed < peak_flops else "compute"), min(peak_flops, fed)',
        "the other way round",
    ),
    ("roofline: the labels swapped", ROOF.format(**{**ROOF_RIGHT, "below": "fed >= peak_flops"}), None),
    (
        "roofline: the library's",
        "def roofline(intensity, peak_flops, bandwidth):\n"
        "    regime = 'memory' if intensity * bandwidth < peak_flops else 'compute'\n"
        "    return compute.roofline(intensity, peak_flops, bandwidth), regime",
        "compute.roofline",
    ),
    # days_to_train
    ("days: seconds", DAYS.format(**{**DAYS_RIGHT, "per_day": "1"}), "in seconds"),
    ("days: hours", DAYS.format(**{**DAYS_RIGHT, "per_day": "3600"}), "in hours"),
    (
        "days: TFLOP/s taken as FLOP/s",
        DAYS.format(**{**DAYS_RIGHT, "rate": "n_devices * peak_tflops * utilization"}),
        "10^12 FLOP/s",
    ),
    (
        "days: a TFLOP taken as 2**40 FLOPs",
        DAYS.format(**{**DAYS_RIGHT, "rate": "n_devices * peak_tflops * 2**40 * utilization"}),
        "not 2^40",
    ),
    ("days: the forward pass only", DAYS.format(**{**DAYS_RIGHT, "flops": "2"}), "backward pass adds 4"),
    (
        "days: times the utilization",
        DAYS.format(**{**DAYS_RIGHT, "rate": "n_devices * peak_tflops * 1e12 / utilization"}),
        "Divide by the utilization",
    ),
    (
        "days: times the chips",
        DAYS.format(**{**DAYS_RIGHT, "rate": "peak_tflops * 1e12 * utilization / n_devices"}),
        "divide by their number",
    ),
    (
        "days: the library's seconds over 86,400",
        "def days_to_train(n_params, n_tokens, peak_tflops, utilization, n_devices):\n"
        "    return compute.time_to_train(n_params, n_tokens, peak_tflops * 1e12, utilization, n_devices) / 86400",
        "compute.time_to_train",
    ),
    (
        "days: the library's, through getattr",
        "def days_to_train(n_params, n_tokens, peak_tflops, utilization, n_devices):\n"
        "    seconds = getattr(compute, 'time_to_' + 'train')\n"
        "    return seconds(n_params, n_tokens, peak_tflops * 1e12, utilization, n_devices) / 86400",
        "called course_lib.compute.time_to_train",
    ),
    # memory_bound_names (self-contained: a wrong roofline above stays defined in the kernel)
    (
        "bound: the ridge counted as memory-bound",
        BOUND.format(result="{name for name, i in ops.items() if i <= peak_flops / bandwidth}"),
        "exactly at the ridge",
    ),
    (
        "bound: the compute-bound ones",
        BOUND.format(result="{name for name, i in ops.items() if i * bandwidth >= peak_flops}"),
        "Those are the compute-bound ones",
    ),
    (
        "bound: a list",
        BOUND.format(result="[name for name, i in ops.items() if i * bandwidth < peak_flops]"),
        "return a set of names",
    ),
    (
        "bound: the library's",
        BOUND.format(result="compute.memory_bound(ops, peak_flops, bandwidth)"),
        "calls compute.memory_bound",
    ),
    (
        "bound: the library's roofline",
        BOUND.format(
            result="{name for name, i in ops.items()\n"
            "            if compute.roofline_regime(i, peak_flops, bandwidth)[1] == 'memory'}"
        ),
        "compute.roofline_regime",
    ),
    # smallest_compute_bound_n
    (
        "compute-bound n: rounded down",
        SMALLEST.format(n="int(1.5 * bytes_per_element * peak_flops / bandwidth)"),
        "Round up",
    ),
    (
        "compute-bound n: not rounded at all",
        SMALLEST.format(n="1.5 * bytes_per_element * peak_flops / bandwidth"),
        "a whole matrix size",
    ),
    (
        "compute-bound n: 4 bytes an element",
        SMALLEST.format(n="math.ceil(6 * peak_flops / bandwidth)"),
        "bytes_per_element = 2 bytes",
    ),
    (
        "compute-bound n: n equal to the ridge",
        SMALLEST.format(n="math.ceil(peak_flops / bandwidth)"),
        "n is the matrix size",
    ),
    (
        "compute-bound n: 2 x the ridge",
        SMALLEST.format(n="math.ceil(bytes_per_element * peak_flops / bandwidth)"),
        "three n x n matrices",
    ),
    (
        "compute-bound n: the ridge upside down",
        SMALLEST.format(n="max(1, math.ceil(1.5 * bytes_per_element * bandwidth / peak_flops))"),
        "upside down",
    ),
    (
        "compute-bound n: the tie counted as memory-bound",
        SMALLEST.format(n="math.floor(1.5 * bytes_per_element * peak_flops / bandwidth) + 1"),
        "counts as compute-bound",
    ),
    (
        "compute-bound n: never below 2",
        SMALLEST.format(n="max(2, math.ceil(1.5 * bytes_per_element * peak_flops / bandwidth))"),
        "even a 1 x 1 x 1 product",
    ),
    (
        "fit: absolute seconds",
        FIT.format(rows="[[1, f] for f in flops]", rhs="seconds", ret="overhead, 1 / per_flop"),
        "fits absolute seconds",
    ),
    (
        "fit: weighted by 1 / seconds",
        FIT.format(
            rows="[[1 / t**0.5, f / t**0.5] for f, t in zip(flops, seconds)]",
            rhs="[t**0.5 for t in seconds]",
            ret="overhead, 1 / per_flop",
        ),
        "1 / seconds squared",
    ),
    (
        "fit: two points",
        "def fit_overhead_and_peak(flops, seconds):\n    return seconds[0], flops[-1] / (seconds[-1] - seconds[0])",
        "two-point fit",
    ),
    (
        "fit: seconds per FLOP returned",
        FIT.format(
            rows="[[1 / t, f / t] for f, t in zip(flops, seconds)]", rhs="[1.0] * len(flops)", ret="overhead, per_flop"
        ),
        "seconds per FLOP",
    ),
    (
        "fit: swapped",
        FIT.format(
            rows="[[1 / t, f / t] for f, t in zip(flops, seconds)]",
            rhs="[1.0] * len(flops)",
            ret="1 / per_flop, overhead",
        ),
        "Swapped",
    ),
    (
        "fit: the library's step-time model",
        FIT.format(
            rows="[[1 / t, f / t] for f, t in zip(flops, seconds)]",
            rhs="[1.0] * len(flops)",
            ret="overhead, flops[-1] / (compute.overhead_model_time(flops[-1], overhead, 1 / per_flop) - overhead)",
        ),
        "course library",
    ),
    (
        "compute-bound n: the library's intensity",
        "def smallest_compute_bound_n(peak_flops, bandwidth, bytes_per_element):\n"
        "    n = 1\n"
        "    while compute.matmul_intensity(n, n, n, {4: 'fp32', 2: 'bf16', 1: 'int8'}[bytes_per_element]) "
        "< peak_flops / bandwidth:\n"
        "        n += 1\n"
        "    return n",
        "compute.matmul_intensity",
    ),
]
wrong_runs, test_plausible_wrong_answer_fails_its_check = wrong_answer_tests(SOLUTION, WRONG)


def test_every_exercise_function_has_wrong_answers():
    names = {function_name(code) for _, code, _ in WRONG}
    assert names == {
        "matmul_intensity",
        "elementwise_bytes",
        "roofline",
        "days_to_train",
        "memory_bound_names",
        "fit_overhead_and_peak",
        "smallest_compute_bound_n",
    }


def _refused(fn, **kw) -> str:
    """The message of a check_function that refuses ``fn`` (days_to_train's check, cut to one case)."""
    import pytest

    from course_lib import checks, compute

    with pytest.raises(checks.CheckFailed) as err:
        checks.check_function(
            fn,
            [((1e9, 1e10, 100, 0.5, 1), 13.88888888888889)],
            reference=compute.days_to_train,
            random_inputs=lambda rng: (1e9, 1e10, 100, rng.uniform(0.1, 0.6), 8),
            hint="write it yourself",
            quiet=True,
            **kw,
        )
    return str(err.value)


def test_the_guard_refuses_every_route_to_the_library():
    import functools

    from course_lib import compute

    refuse = {"refuse": [compute.time_to_train]}

    def named(n_params, n_tokens, peak_tflops, utilization, n_devices):
        return compute.time_to_train(n_params, n_tokens, peak_tflops * 1e12, utilization, n_devices) / 86400

    def hidden(n_params, n_tokens, peak_tflops, utilization, n_devices):
        seconds = vars(compute)["time_to_" + "train"]
        return seconds(n_params, n_tokens, peak_tflops * 1e12, utilization, n_devices) / 86400

    def helper(n_params, n_tokens, peak_tflops, utilization, n_devices):
        return hidden(n_params, n_tokens, peak_tflops, utilization, n_devices)

    assert "calls compute.time_to_train" in _refused(named, **refuse)  # by name, before it runs
    for fn in (hidden, helper, functools.partial(compute.days_to_train)):  # while it runs, whatever the route
        message = _refused(fn, **refuse)
        assert "called course_lib.compute." in message and "Hint: write it yourself" in message
    assert "calls days_to_train" in _refused(lambda *a: compute.days_to_train(*a), **refuse)
    assert "is a function of the course library" in _refused(compute.time_to_train, **refuse)
    # without ``refuse`` or ``own_code`` (exercises 04-07) the check is as it was: the reference, by name
    from course_lib import checks

    assert (
        checks.check_function(
            hidden, reference=compute.days_to_train, random_inputs=lambda rng: (1e9, 1e10, 100, 0.4, 8), quiet=True
        )
        == 25
    )


def test_the_guard_lets_the_learners_own_functions_pass():
    from course_lib import checks, compute

    def roofline(intensity, peak_flops, bandwidth):  # the learner's, named like compute.roofline
        fed = intensity * bandwidth
        return min(peak_flops, fed), "memory" if fed < peak_flops else "compute"

    def memory_bound_names(ops, peak_flops, bandwidth):
        return {name for name, i in ops.items() if roofline(i, peak_flops, bandwidth)[1] == "memory"}

    passed = checks.check_function(
        memory_bound_names,
        [(({"add": 1 / 12, "at the ridge": 20.0}, 400e9, 20e9), {"add"})],
        reference=compute.memory_bound,
        random_inputs=lambda rng: ({"op": 10 ** rng.uniform(-2, 3)}, 1e12, 1e11),
        refuse=[compute.roofline_regime, compute.roofline],
        quiet=True,
    )
    assert passed == 26


def _check_message(key, fn) -> str:
    import pytest

    from course_lib import checks

    with pytest.raises(checks.CheckFailed) as err:
        checks.check(key, fn, quiet=True)
    return str(err.value)


def test_the_guard_sees_through_a_switched_off_watcher_and_threads():
    """A function that switches the watcher off (by name or through getattr), or runs the library in a thread or in
    an executor started beforehand, is refused; a function that prints is not."""
    import concurrent.futures
    import sys
    import threading

    from course_lib import checks, compute

    regime = vars(compute)["roofline_" + "regime"]  # out of sight of the check's look at the names
    before = sys.getprofile(), threading.getprofile()

    def roofline(intensity, peak_flops, bandwidth):
        sys.setprofile(None)
        return compute.roofline_regime(intensity, peak_flops, bandwidth)

    assert "uses setprofile" in _check_message("01/roofline", roofline)
    switch = getattr(sys, "set" + "profile")

    def roofline(intensity, peak_flops, bandwidth):  # noqa: F811
        switch(None)
        return regime(intensity, peak_flops, bandwidth)

    assert "called setprofile" in _check_message("01/roofline", roofline)
    start = getattr(threading, "Th" + "read")

    def roofline(intensity, peak_flops, bandwidth):  # noqa: F811
        out = []
        worker = start(target=lambda: out.append(regime(intensity, peak_flops, bandwidth)))
        worker.start()
        worker.join()
        return out[0]

    assert "start_new_thread" in _check_message("01/roofline", roofline)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(int).result()  # its worker thread runs already, unwatched
        hand_over = getattr(pool, "sub" + "mit")

        def roofline(intensity, peak_flops, bandwidth):  # noqa: F811
            return hand_over(regime, intensity, peak_flops, bandwidth).result()

        assert "submit" in _check_message("01/roofline", roofline)

    def roofline(intensity, peak_flops, bandwidth):  # noqa: F811
        with concurrent.futures.ThreadPoolExecutor() as pool:
            return pool.submit(regime, intensity, peak_flops, bandwidth).result()

    assert "uses ThreadPoolExecutor" in _check_message("01/roofline", roofline)

    def roofline(intensity, peak_flops, bandwidth):  # noqa: F811
        print("computing", intensity)
        fed = intensity * bandwidth
        return (fed, "memory") if fed < peak_flops else (peak_flops, "compute")

    assert checks.check("01/roofline", roofline, quiet=True) > 25
    assert (sys.getprofile(), threading.getprofile()) == before


def test_the_check_cells_show_no_case_reference_or_message():
    """Each check cell of exercises 01-03 is one call by key: the cases, the wrong-answer messages and the
    reference stay in course_lib.checks.registry, out of the learner's sight."""
    import re

    import nbformat

    for name in ("01_processing_units", "02_memory", "03_interconnect"):
        nb = nbformat.read(ROOT / "exercises" / f"{name}.ipynb", as_version=4)
        for cell in nb.cells:
            if "check" in cell.metadata.get("tags", []) and "check_largest" not in cell.source:
                assert re.fullmatch(r'checks\.check\("\d\d/\w+", \w+\)', cell.source.strip()), cell.source


def test_a_tie_at_the_ridge_is_a_tie_whichever_way_the_learner_compares():
    """The roofline check's random ties are exact in floating point: every correct way of comparing the intensity
    with the ridge point passes, over many seeds (a tie made as peak = intensity x bandwidth of arbitrary floats
    missed ``I < P / B`` by one ulp about one time in twenty)."""
    from course_lib.checks import core, ex01

    forms = {
        "I * B < P": lambda i, p, b: i * b < p,
        "I < P / B": lambda i, p, b: i < p / b,
        "I * (B / P) < 1": lambda i, p, b: i * (b / p) < 1,
        "I * B / P < 1": lambda i, p, b: i * b / p < 1,
        "P / I > B": lambda i, p, b: p / i > b,
    }
    for name, below in forms.items():

        def roofline(intensity, peak_flops, bandwidth, below=below):
            fed = intensity * bandwidth
            return (fed, "memory") if below(intensity, peak_flops, bandwidth) else (peak_flops, "compute")

        for seed in range(100):
            core.check_function(roofline, quiet=True, seed=seed, **ex01._01_roofline())
    import random

    ties = [ex01._roofline_inputs(random.Random(seed)) for seed in range(2000)]
    ties = [(i, p, b) for i, p, b in ties if i * b == p]
    assert len(ties) > 200 and all(p / b == i and i * (b / p) == 1 for i, p, b in ties)


def test_the_compute_bound_size_passes_a_closed_form_and_a_search_over_many_seeds():
    import math

    from course_lib import catalog
    from course_lib.checks import core, ex01

    def closed_form(peak_flops, bandwidth, bytes_per_element):
        return max(1, math.ceil(1.5 * bytes_per_element * peak_flops / bandwidth))

    def search(peak_flops, bandwidth, bytes_per_element):  # the learner's own intensity and roofline, step by step
        n = 1
        while 2 * n**3 * bandwidth < peak_flops * bytes_per_element * 3 * n**2:
            n += 1
        return n

    for fn in (closed_form, search):
        for seed in range(50):
            core.check_function(fn, quiet=True, seed=seed, **ex01._01_smallest_compute_bound_n())
    a100 = catalog.get_accelerator("a100-80gb")  # the worked answer's numbers, from the data sheet
    assert closed_form(a100.peak_flops("bf16"), a100.memory_bandwidth_gbs * 1e9, 2) == 460
    assert closed_form(a100.peak_flops("fp32"), a100.memory_bandwidth_gbs * 1e9, 4) == 58
    message = _check_message("01/smallest_compute_bound_n", lambda p, b, e: 461)
    assert "expected 460, got 461" in message and "One short" not in message
    unrounded = _check_message("01/smallest_compute_bound_n", lambda p, b, e: 1.5 * e * p / b)
    assert "459.04" in unrounded and "a whole matrix size" in unrounded
