"""The checks of exercise 03 (the interconnect), for ``registry.check``: each ``_03_name()`` returns the keyword
arguments of ``check_function``, and each ``_ref_name`` is the exercise's reference.
"""

from __future__ import annotations

import math
import random


def _ref_ring_allreduce_seconds(nbytes, world_size, alpha, bandwidth) -> float:
    return 2 * (world_size - 1) * (alpha + nbytes / world_size / bandwidth)


def _03_ring_allreduce_seconds() -> dict:
    from .. import comm

    return dict(
        cases=[
            (
                (4e6, 4, 1e-5, 1e9),
                6.06e-3,
                {
                    8.08e-3: "2N steps: each phase takes N - 1 steps (after N - 1 hops every chunk has visited all "
                    "N ranks).",
                    3.03e-3: "One phase only: after the reduce-scatter each rank holds one reduced chunk; the "
                    "all-gather that hands every rank the whole result takes N - 1 steps more.",
                    2.406e-2: "Each step sends one chunk, 1/N of the message, not the whole message.",
                    6.01e-3: "Each of the 2(N - 1) steps pays the latency alpha, not the all-reduce once.",
                    4.806e-2: "8 times too slow on the bandwidth term: nbytes and bandwidth are both in bytes, no "
                    "bits.",
                },
            ),
            ((1e6, 1, 1e-5, 1e9), 0.0, "One rank has nobody to send to: 0 steps, 0 seconds."),
            ((1e6, 2, 0.0, 1e9), 1e-3),
        ],
        reference=_ref_ring_allreduce_seconds,
        random_inputs=lambda rng: (
            rng.randint(1, 2**30),
            rng.randint(1, 64),
            rng.uniform(0, 1e-4),
            10 ** rng.uniform(8, 11.7),
        ),
        refuse=[comm.allreduce_time, comm.reduce_scatter_time, comm.allgather_time],
        rtol=1e-9,
        atol=1e-15,
        hint="How many steps does each phase take before every chunk has visited every rank, and how many phases "
        "are there? How many bytes does one step push through a link? How often is the latency paid?",
    )


def _ref_bus_bandwidth(nbytes, seconds, world_size) -> float:
    return nbytes / seconds * 2 * (world_size - 1) / world_size


def _03_bus_bandwidth() -> dict:
    from .. import comm

    return dict(
        cases=[
            (
                (1e9, 1.0, 4),
                1.5e9,
                {
                    1e9: "That is the algorithm bandwidth, nbytes / seconds. Bus bandwidth counts what one rank "
                    "really sends: in a ring all-reduce, what share of nbytes is that?",
                    0.75e9: "(N - 1)/N is one phase, the reduce-scatter: what must a rank still send after it?",
                    2e9: "2 is the limit for many ranks. With 4 ranks, how many chunks does a rank send, and how "
                    "large is each?",
                    1e9 / 1.5: "Upside down: a rank sends more than nbytes in all, so the bus bandwidth is above the "
                    "algorithm bandwidth, not below it.",
                    1.2e10: "That is in bits per second: return bytes per second.",
                    6e9: "N times too much: in each step a rank sends one chunk, not the whole message. How large is a "
                    "chunk?",
                },
            ),
            ((1e9, 2.0, 1), 0.0, "One rank sends nothing: its bus bandwidth is 0."),
            ((1e9, 1.0, 2), 1e9),
        ],
        reference=_ref_bus_bandwidth,
        random_inputs=lambda rng: (rng.randint(1, 2**30), rng.uniform(1e-4, 10), rng.randint(1, 512)),
        refuse=[comm.busbw, comm.busbw_factor, comm.algbw],
        rtol=1e-9,
        hint="In a ring all-reduce, how many bytes does one rank send, as a share of nbytes (section 1)? What is "
        "that share with 1 rank, with 2, with many? Do you multiply the algorithm bandwidth by it, or divide?",
    )


def _ref_dp_speedup(compute_s, grad_bytes, world_size, bandwidth) -> float:
    return world_size * compute_s / (compute_s + _ref_ring_allreduce_seconds(grad_bytes, world_size, 0.0, bandwidth))


def _03_dp_speedup() -> dict:
    from .. import comm

    return dict(
        cases=[
            (
                (0.1, 4e8, 4, 1e12),
                _ref_dp_speedup(0.1, 4e8, 4, 1e12),
                {
                    _ref_dp_speedup(0.1, 4e8, 4, 1e12) / 4: "That is the efficiency, the speed-up per rank: N ranks "
                    "finish N batches per step.",
                    0.1 / (0.025 + 6e-4): "That splits one batch over the ranks (strong scaling); here each rank runs "
                    "a whole step on its own batch (weak scaling), so only the all-reduce is added.",
                    4.0: "4 is the ideal: the all-reduce comes after the compute (no overlap), so it adds to every "
                    "step.",
                    0.4 / (0.1 + 4e-4): "That all-reduce moved the gradients once per rank; a ring sends 2(N-1)/N of "
                    "them per rank (a reduce-scatter, then an all-gather): use ring_allreduce_seconds from section 1.",
                },
            ),
            ((1.0, 1e9, 1, 1e9), 1.0, "One rank has nothing to send: its speed-up is 1."),
            (
                (1.0, 1e9, 2, 1e9),
                1.0,
                "2 ranks do twice the work per step, but 1 GB on 2 ranks at 1 GB/s takes 1 s to all-reduce, as long "
                "as the compute.",
            ),
            ((0.1, 4e8, 8, 1e12), _ref_dp_speedup(0.1, 4e8, 8, 1e12)),
        ],
        reference=_ref_dp_speedup,
        random_inputs=lambda rng: (
            rng.uniform(1e-3, 5),
            rng.randint(1, 2**34),
            rng.randint(1, 256),
            10 ** rng.uniform(8, 11.7),
        ),
        refuse=[comm.data_parallel_speedup, comm.data_parallel_step_time, comm.allreduce_time],
        rtol=1e-9,
        hint="How many batches do N ranks finish per step, and how long is their step? How many does one rank "
        "finish in its own step? Does the all-reduce overlap the compute here?",
    )


def _ref_bandwidth_needed(compute_s, grad_bytes, world_size, efficiency) -> float:
    share = 2 * (world_size - 1) / world_size
    if share == 0:
        return 0.0  # one rank sends nothing, even at efficiency 1
    allowed = compute_s * (1 / efficiency - 1)
    return share * grad_bytes / allowed if allowed > 0 else math.inf


def _03_bandwidth_needed() -> dict:
    from .. import comm

    args = (0.1, 4e8, 4, 0.9)
    right = _ref_bandwidth_needed(*args)
    return dict(
        cases=[
            (
                args,
                right,
                {
                    1.5 * 4e8 / (0.1 * 0.1): "That lets the all-reduce take 10 % of the compute time. At 90 % "
                    "efficiency, how long may the whole step last, and what is left of it for the all-reduce?",
                    right / 1.5: "The ring's factor is missing: in a ring all-reduce, how much of the gradient bytes "
                    "does each rank send, counting both phases?",
                    right / 2: "(N - 1)/N is one phase, the reduce-scatter: what must a rank still send after it?",
                    right * 4: "N times too much: in each step a rank sends one chunk of the gradient bytes, not all "
                    "of them. How large is a chunk?",
                    1.5 * 4e8 / (0.1 * 0.9): "That lets the all-reduce take 90 % of the compute time. At 90 % "
                    "efficiency, how long may the whole step last, and what is left of it for the all-reduce?",
                    right / 1e9: "That is in GB/s: return bytes per second.",
                    right * 8: "That is in bits per second: return bytes.",
                },
            ),
            ((1.0, 1e9, 2, 0.5), 1e9, "At efficiency 0.5 the all-reduce may take as long as the compute, 1 s."),
            ((0.1, 4e8, 1, 0.9), 0.0, "One rank sends nothing, so it needs no link: 0 bytes per second."),
            (
                (0.1, 4e8, 4, 1.0),
                math.inf,
                "At efficiency 1 the all-reduce must take no time at all: no finite link does that, so return "
                "math.inf.",
            ),
            ((0.1, 4e8, 1, 1.0), 0.0, "One rank sends nothing, even at efficiency 1: it needs no link, 0 bytes/s."),
            ((0.1, 4e8, 8, 0.9), _ref_bandwidth_needed(0.1, 4e8, 8, 0.9)),
        ],
        reference=_ref_bandwidth_needed,
        random_inputs=lambda rng: (
            rng.uniform(1e-3, 5),
            rng.randint(1, 2**34),
            rng.randint(1, 256),
            rng.uniform(0.05, 0.99),
        ),
        refuse=[comm.bandwidth_needed, comm.data_parallel_speedup, comm.allreduce_time],
        rtol=1e-9,
        hint="At that efficiency, how long may a whole step last, and so how long may the all-reduce take? How "
        "many bytes must each rank send in that time (section 1)? In which unit do you return it? What is left "
        "for the all-reduce at efficiency 1?",
    )


def _largest_row(rows) -> dict:
    """The row with the most bytes; the fastest of them where several share that size (noise only adds time)."""
    return max(rows, key=lambda r: (r["bytes"], -r["seconds"]))


def _ref_predict_with(row, rows, world_size) -> tuple[float, list[float]]:
    """The link read off ``row`` with the bus bandwidth, and every row's time predicted on it."""
    link = _ref_bus_bandwidth(row["bytes"], row["seconds"], world_size)
    return link, [_ref_ring_allreduce_seconds(r["bytes"], world_size, 0.0, link) for r in rows]


def _wrong_link(row, rows, world_size) -> tuple[float, tuple[float, ...]]:
    """``_ref_predict_with`` as a key of a {wrong answer: why} mapping."""
    link, predicted = _ref_predict_with(row, rows, world_size)
    return link, tuple(predicted)


def _ref_predict_from_largest(rows, world_size) -> tuple[float, list[float]]:
    return _ref_predict_with(_largest_row(rows), rows, world_size)


def _random_rows(rng: random.Random) -> tuple[list[dict], int]:
    """A few timings, as a noisy benchmark gives them: sizes may repeat, and a smaller message may be slower."""
    rows = [
        {"bytes": float(2 ** rng.randint(16, 22)), "seconds": rng.uniform(1e-5, 0.1)} for _ in range(rng.randint(1, 6))
    ]
    return rows, rng.randint(2, 64)


def _03_predict_from_largest() -> dict:
    rows_3 = [{"bytes": 1e6, "seconds": 2e-3}, {"bytes": 4e6, "seconds": 5e-3}, {"bytes": 2e6, "seconds": 3e-3}]
    slow_small = [{"bytes": 8e6, "seconds": 9e-3}, {"bytes": 1e6, "seconds": 1.2e-2}]
    tied = [
        {"bytes": 4e6, "seconds": 5e-3},
        {"bytes": 4e6, "seconds": 4e-3},
        {"bytes": 1e6, "seconds": 2e-3},
        {"bytes": 4e6, "seconds": 4.5e-3},
    ]
    on_a_tie = "Several rows share the largest size: read the link off the fastest of them, as the statement says "
    on_a_tie += "(noise only ever adds time)."
    return dict(
        cases=[
            (
                (rows_3, 2),
                _ref_predict_from_largest(rows_3, 2),
                {
                    _wrong_link(rows_3[0], rows_3, 2): "That link comes from the first row, not from the "
                    "largest message.",
                    (8e8, (1.25e-3, 2.5e-3, 5e-3)): "Keep the predictions in the order of the rows, not sorted by "
                    "size.",
                },
            ),
            (
                (rows_3, 4),
                _ref_predict_from_largest(rows_3, 4),
                {
                    (8e8, (1.875e-3, 7.5e-3, 3.75e-3)): "That link is nbytes / seconds, the algorithm bandwidth: on "
                    "4 ranks each rank sends 1.5 times the message, so read the link with your bus_bandwidth."
                },
            ),
            (
                (slow_small, 2),
                _ref_predict_from_largest(slow_small, 2),
                {
                    _wrong_link(slow_small[1], slow_small, 2): "That link comes from the slowest row, not from "
                    "the largest message: a small message can take longer (a hiccup, the latency), and the largest "
                    "one is the one latency disturbs least."
                },
            ),
            (
                (tied, 2),
                _ref_predict_from_largest(tied, 2),
                {_wrong_link(tied[0], tied, 2): on_a_tie, _wrong_link(tied[3], tied, 2): on_a_tie},
            ),
            (([{"bytes": 1e6, "seconds": 1e-3}], 8), (1.75e9, [1e-3])),
        ],
        reference=_ref_predict_from_largest,
        random_inputs=_random_rows,
        own_code=True,
        rtol=1e-9,
        hint="Which row is the largest message (and, when several share that size, which of them)? Does your link "
        "account for the number of ranks? Are the predictions in the order of the rows?",
    )


def _ref_ring_bandwidth(world_size, gpus_per_server, in_server, network) -> float:
    if world_size <= gpus_per_server:
        return in_server
    return min(in_server, gpus_per_server * network)  # one ring per network card, side by side


def _random_cluster(rng: random.Random) -> tuple[int, int, float, float]:
    """A cluster as the statement allows: the job fits one server or takes whole servers."""
    gpus = rng.choice([2, 4, 8, 16])
    world_size = rng.randint(1, gpus) if rng.random() < 0.3 else gpus * rng.randint(2, 32)
    return world_size, gpus, 10 ** rng.uniform(9, 12), 10 ** rng.uniform(9, 12)


def _one_ring(g: int) -> str:
    return (
        "That is one ring through one network card. Between servers NCCL runs one ring per card side by side: with "
        f"{g} GPUs and {g} cards a server, each ring carries 1/{g} of the bytes and leaves the server through its own "
        "card. How fast, then, do a server's bytes cross the network, and what does every GPU's in-server link carry?"
    )


def _in_server_bound(g: int) -> str:
    return (
        f"Every ring still passes through every GPU of a server, so each GPU's in-server link carries all {g} rings: "
        "the ring can go no faster than in_server, however many cards the server has."
    )


def _03_ring_bandwidth() -> dict:
    one_ring, in_server_bound = _one_ring(8), _in_server_bound(8)
    never_leaves = "8 GPUs fill one server of 8 exactly: the ring never leaves it, so the network does not count."
    return dict(
        cases=[
            ((8, 8, 300e9, 25e9), 300e9, {200e9: never_leaves, 25e9: never_leaves}),
            (
                (16, 8, 300e9, 25e9),
                200e9,
                {
                    300e9: "16 GPUs do not fit in a server of 8: the ring crosses the network. What can the "
                    "server's cards carry together?",
                    25e9: one_ring,
                    25e9 / 8: "That shares one network card among the server's 8 GPUs. Here each GPU has its own "
                    "card, and the rings leave the server through all 8 of them at once.",
                    162.5e9: "A ring is not as fast as the average of its links: each step waits for the slowest.",
                    250e9: "A ring is not as fast as the average of its links: each step waits for the slowest.",
                },
            ),
            ((64, 8, 300e9, 50e9), 300e9, {50e9: one_ring, 400e9: in_server_bound}),
            ((4, 8, 31.5e9, 50e9), 31.5e9),
            ((16, 8, 31.5e9, 50e9), 31.5e9, {50e9: in_server_bound, 400e9: in_server_bound}),
            (
                (32, 4, 300e9, 25e9),
                100e9,
                {
                    25e9: _one_ring(4),
                    200e9: "This server holds gpus_per_server = 4 GPUs, not 8: 4 cards leave it side by side.",
                    300e9: "32 GPUs do not fit in a server of 4: the ring crosses the network. What can the "
                    "server's cards carry together?",
                },
            ),
        ],
        reference=_ref_ring_bandwidth,
        random_inputs=_random_cluster,
        own_code=True,
        rtol=1e-9,
        hint="Does a ring of this many GPUs fit in one server? If it leaves the servers, through how many network "
        "cards do a server's bytes leave at once, and which link does every ring still cross inside a server?",
    )


def _ref_fit_alpha_beta(sizes, seconds, world_size) -> tuple[float, float]:
    """Least squares of t = 2(N-1) alpha + 2(N-1)/N x n / B: a line t = c0 + c1 n, then alpha and B from it."""
    k = len(sizes)
    mean_n, mean_t = sum(sizes) / k, sum(seconds) / k
    c1 = sum((n - mean_n) * (t - mean_t) for n, t in zip(sizes, seconds)) / sum((n - mean_n) ** 2 for n in sizes)
    c0 = mean_t - c1 * mean_n
    steps = 2 * (world_size - 1)
    return c0 / steps, steps / world_size / c1


def _relative_fit_alpha_beta(sizes, seconds, world_size) -> tuple[float, float]:
    """The same line fitted to relative misses (each row weighed by 1 / t^2): a plausible other answer."""
    w = [1 / t**2 for t in seconds]
    sw, swn, swt = sum(w), sum(wi * n for wi, n in zip(w, sizes)), sum(wi * t for wi, t in zip(w, seconds))
    swnn = sum(wi * n * n for wi, n in zip(w, sizes))
    swnt = sum(wi * n * t for wi, n, t in zip(w, sizes, seconds))
    c1 = (sw * swnt - swn * swt) / (sw * swnn - swn**2)
    c0 = (swt - c1 * swn) / sw
    steps = 2 * (world_size - 1)
    return c0 / steps, steps / world_size / c1


def _alpha_beta_rows(world_size, alpha, bandwidth, sizes, noise=()) -> tuple[list[int], list[float], int]:
    seconds = [_ref_ring_allreduce_seconds(n, world_size, alpha, bandwidth) for n in sizes]
    return list(sizes), [t * (1 + e) for t, e in zip(seconds, list(noise) + [0.0] * len(sizes))], world_size


def _random_alpha_beta(rng: random.Random) -> tuple[list[int], list[float], int]:
    sizes = sorted(rng.sample([2**p for p in range(16, 28)], rng.randint(3, 6)))
    noise = [rng.uniform(-0.1, 0.1) for _ in sizes]
    return _alpha_beta_rows(rng.choice([2, 4, 8]), 10 ** rng.uniform(-6, -4), 10 ** rng.uniform(8, 11), sizes, noise)


def _03_fit_alpha_beta() -> dict:
    from .. import comm

    mib = 2**20
    exact = _alpha_beta_rows(4, 20e-6, 1e9, [mib, 2 * mib, 4 * mib, 8 * mib, 16 * mib])
    noisy = _alpha_beta_rows(2, 50e-6, 2e9, [mib, 4 * mib, 8 * mib, 32 * mib], [0.08, -0.05, 0.06, 0.02])
    sizes, seconds, n = noisy
    through_ends = (seconds[-1] - seconds[0]) / (sizes[-1] - sizes[0])
    ends = ((seconds[0] - through_ends * sizes[0]) / 2, 1 / through_ends)
    return dict(
        cases=[
            (
                exact,
                (20e-6, 1e9),
                {
                    (20e-6, 1e9 * 4 / 6): "The bandwidth is 1.5x too low: in a ring each rank sends 2(N-1)/N x n "
                    "bytes (1.5 n on 4 ranks), not n; the slope of the line is 2(N-1)/N / B.",
                    (6 * 20e-6, 1e9): "alpha is 6x too large: the intercept is the latency of all 2(N-1) steps (6 "
                    "on 4 ranks); alpha is one step's.",
                    (20e-6, 1e9 / mib): "The bandwidth is 2^20 times too low: fit on bytes, not MiB (sizes are bytes).",
                    (1e9, 20e-6): "The pair is the other way round: return (alpha, bandwidth), seconds first.",
                    (20e-6, 1e-9): "That is seconds per byte, the slope's unit: return the bandwidth in bytes per "
                    "second.",
                },
            ),
            (
                noisy,
                _ref_fit_alpha_beta(*noisy),
                {
                    ends: "That is the line through the first and the last row. Least squares uses every row: it "
                    "minimises the sum of the squared misses over all of them, so one noisy row moves it little.",
                    _relative_fit_alpha_beta(*noisy): "That fits relative misses (each row weighed by 1 / t^2), a good "
                    "choice where sizes span orders of magnitude, as the notebook's sweep does; this function asks for "
                    "plain least squares on the seconds themselves, every row weighed alike.",
                },
            ),
        ],
        reference=_ref_fit_alpha_beta,
        random_inputs=_random_alpha_beta,
        refuse=[comm.fit_alpha_beta, comm.fit_ring_allreduce],
        hint="Fit a straight line t = c0 + c1 x n by least squares over all rows, sizes in bytes. Which term of your "
        "ring_allreduce_seconds does not grow with n, and which does? How do c0 and c1 give alpha and B?",
    )


#: the checks of this exercise, by key: what ``registry.check`` runs
SPECS = {
    "03/ring_allreduce_seconds": _03_ring_allreduce_seconds,
    "03/bus_bandwidth": _03_bus_bandwidth,
    "03/dp_speedup": _03_dp_speedup,
    "03/bandwidth_needed": _03_bandwidth_needed,
    "03/predict_from_largest": _03_predict_from_largest,
    "03/ring_bandwidth": _03_ring_bandwidth,
    "03/fit_alpha_beta": _03_fit_alpha_beta,
}
