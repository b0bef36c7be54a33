"""Tests for course_lib.comm: collective cost formulas, nccl-tests bandwidths, alpha-beta
fits, the data-parallel speedup model and the cited link table (notebook 03)."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import numpy as np
import pytest

from course_lib import catalog, comm
from course_lib.comm import (
    ALGORITHMS,
    OPS,
    AlphaBeta,
    algbw,
    allgather_time,
    allreduce_time,
    broadcast_time,
    busbw,
    busbw_factor,
    data_parallel_speedup,
    data_parallel_step_time,
    fit_alpha_beta,
    fit_ring_allreduce,
    reduce_scatter_time,
)
from course_lib.catalog import Link, get_link, links

A = 1e-5  # 10 us per message
BW = 1e9  # 1 GB/s
N = 64 * 2**20  # 64 MiB


# ---- 1. collective formulas -------------------------------------------------------


def test_ring_allreduce_hand_values():
    # p = 2: 2 alpha + n/bw ; p = 4: 6 alpha + 1.5 n/bw ; p = 8: 14 alpha + 1.75 n/bw
    assert allreduce_time(N, 2, A, BW) == pytest.approx(2 * A + N / BW)
    assert allreduce_time(N, 4, A, BW) == pytest.approx(6 * A + 1.5 * N / BW)
    assert allreduce_time(N, 8, A, BW, "ring") == pytest.approx(14 * A + 1.75 * N / BW)


def test_tree_allreduce_hand_values():
    # 2 * ceil(log2 p) * (alpha + n/bw)
    assert allreduce_time(N, 2, A, BW, "tree") == pytest.approx(2 * (A + N / BW))
    assert allreduce_time(N, 4, A, BW, "tree") == pytest.approx(4 * (A + N / BW))
    assert allreduce_time(N, 5, A, BW, "tree") == pytest.approx(6 * (A + N / BW))
    assert allreduce_time(N, 8, A, BW, "tree") == pytest.approx(6 * (A + N / BW))


def test_parameter_server_allreduce_hand_values():
    assert allreduce_time(N, 2, A, BW, "parameter_server") == pytest.approx(2 * (A + N / BW))
    assert allreduce_time(N, 5, A, BW, "parameter_server") == pytest.approx(8 * (A + N / BW))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_single_rank_costs_nothing(algorithm):
    assert allreduce_time(N, 1, A, BW, algorithm) == 0.0
    assert allgather_time(N, 1, A, BW) == 0.0
    assert reduce_scatter_time(N, 1, A, BW) == 0.0
    assert broadcast_time(N, 1, A, BW) == 0.0


def test_zero_bytes_costs_only_latency():
    assert allreduce_time(0, 4, A, BW) == pytest.approx(6 * A)
    assert allreduce_time(0, 4, 0.0, BW) == 0.0


def test_allgather_reduce_scatter_broadcast_hand_values():
    assert allgather_time(N, 4, A, BW) == pytest.approx(3 * A + 0.75 * N / BW)
    assert reduce_scatter_time(N, 4, A, BW) == pytest.approx(3 * A + 0.75 * N / BW)
    assert broadcast_time(N, 2, A, BW) == pytest.approx(A + N / BW)
    assert broadcast_time(N, 8, A, BW) == pytest.approx(3 * (A + N / BW))
    assert broadcast_time(N, 9, A, BW) == pytest.approx(4 * (A + N / BW))


@pytest.mark.parametrize("p", [2, 3, 4, 7, 16])
def test_ring_allreduce_is_reduce_scatter_plus_allgather(p):
    assert allreduce_time(N, p, A, BW) == pytest.approx(reduce_scatter_time(N, p, A, BW) + allgather_time(N, p, A, BW))


def test_algorithm_orderings_for_large_and_small_messages():
    big, small, p = 1e9, 8, 64
    ring = allreduce_time(big, p, A, BW, "ring")
    assert ring < allreduce_time(big, p, A, BW, "tree") < allreduce_time(big, p, A, BW, "parameter_server")
    # Tiny messages: latency dominates and the tree's log p rounds beat the ring's 2(p-1).
    assert allreduce_time(small, p, A, BW, "tree") < allreduce_time(small, p, A, BW, "ring")
    # Ring bandwidth term is bounded by 2 n / bw however many ranks.
    assert allreduce_time(big, 1024, 0.0, BW) < 2 * big / BW


def test_infinite_bandwidth_leaves_only_latency():
    assert allreduce_time(N, 4, A, math.inf) == pytest.approx(6 * A)


# ---- 2. algbw / busbw -----------------------------------------------------------------


def test_algbw():
    assert algbw(1e9, 2.0) == pytest.approx(5e8)
    assert algbw(0, 1.0) == 0.0


@pytest.mark.parametrize(
    "op, p, factor",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
    ],
)
def test_busbw_factors_match_nccl_tests(op, p, factor):
    assert busbw_factor(p, op) == pytest.approx(factor)
    assert busbw(1e9, 1.0, p, op) == pytest.approx(1e9 * factor)


def test_every_op_has_a_factor_and_default_is_all_reduce():
    # by hand, for 4 ranks (nccl-tests PERFORMANCE.md): 2(n-1)/n, (n-1)/n, (n-1)/n, 1, 1, (n-1)/n
    expected = {
        "all_reduce": 1.5,
        "all_gather": 0.75,
        "reduce_scatter": 0.75,
        "broadcast": 1.0,
        "reduce": 1.0,
        "all_to_all": 0.75,
    }
    assert set(expected) == set(OPS)
    assert {op: busbw_factor(4, op) for op in OPS} == pytest.approx(expected)
    assert busbw(1e9, 1.0, 4) == busbw(1e9, 1.0, 4, "all_reduce")
    assert busbw_factor(1, "all_reduce") == 0.0


@pytest.mark.parametrize("p", [2, 3, 4, 8, 64])
def test_busbw_of_an_ideal_ring_is_the_link_bandwidth(p):
    t = allreduce_time(N, p, 0.0, BW)
    assert busbw(N, t, p) == pytest.approx(BW)
    assert busbw(N, allgather_time(N, p, 0.0, BW), p, "all_gather") == pytest.approx(BW)
    assert busbw(N, reduce_scatter_time(N, p, 0.0, BW), p, "reduce_scatter") == pytest.approx(BW)


# ---- 3. alpha-beta fits ---------------------------------------------------------------

SIZES = np.array([2**k for k in range(10, 27)], dtype=float)  # 1 KiB .. 64 MiB


def test_fit_alpha_beta_recovers_exact_line():
    alpha, bw = 35e-6, 1.2e9
    t = alpha + SIZES / bw
    fit = fit_alpha_beta(SIZES, t)
    assert isinstance(fit, AlphaBeta)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-9)
    assert fit.beta_s_per_byte == pytest.approx(1 / bw, rel=1e-9)
    assert fit.n_points == SIZES.size and not fit.alpha_clamped
    np.testing.assert_allclose(fit.predict(SIZES), t, rtol=1e-9)
    np.testing.assert_allclose(fit.relative_errors(SIZES, t), 0.0, atol=1e-9)
    assert isinstance(fit.predict(1e6), float)


def test_fit_is_frozen():
    fit = fit_alpha_beta([1e6, 2e6], [1e-3, 2e-3])
    with pytest.raises(Exception):
        fit.alpha_s = 1.0  # type: ignore[misc]


def test_min_bytes_drops_noisy_small_messages():
    # Like gloo on a shared 2-core machine (notebook 03): small messages pay a big, noisy
    # wake-up latency; the line through the >= 1 MiB points is clean.
    alpha, bw = 50e-6, 1.2e9
    t = alpha + SIZES / bw
    noisy = t.copy()
    noisy[SIZES < 2**20] *= 9.0
    whole = fit_alpha_beta(SIZES, noisy)
    large = fit_alpha_beta(SIZES, noisy, min_bytes=2**20)
    assert large.n_points == int(np.sum(SIZES >= 2**20))
    assert large.min_bytes == 2**20
    assert large.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert large.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-6)
    assert np.max(np.abs(whole.relative_errors(SIZES, noisy))) > 0.25
    big = SIZES >= 2**20
    assert np.max(np.abs(large.relative_errors(SIZES[big], noisy[big]))) < 1e-6


def test_relative_errors_sign_and_value():
    fit = AlphaBeta(alpha_s=0.0, bandwidth_bytes_per_s=1e9)
    # Prediction 1 ms; measured 0.8 ms -> +25% ; measured 2 ms -> -50%.
    np.testing.assert_allclose(fit.relative_errors([1e6, 1e6], [0.8e-3, 2e-3]), [0.25, -0.5])


def test_negative_intercept_is_clamped_to_zero():
    sizes = np.array([1e6, 2e6, 4e6, 8e6])
    t = sizes / 1e9 - 1e-4  # a line that would need alpha < 0
    fit = fit_alpha_beta(sizes, t)
    assert fit.alpha_clamped and fit.alpha_s == 0.0
    assert fit.bandwidth_bytes_per_s > 0


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_fit_ring_allreduce_recovers_link_alpha_and_bandwidth(p):
    alpha, bw = 20e-6, 2.5e9
    t = np.array([allreduce_time(n, p, alpha, bw) for n in SIZES])
    fit = fit_ring_allreduce(SIZES, t, p)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-9)
    assert fit.latency_factor == 2 * (p - 1)
    assert fit.bandwidth_factor == pytest.approx(2 * (p - 1) / p)
    np.testing.assert_allclose(fit.predict(SIZES), t, rtol=1e-9)
    # For p = 2 the ring fit and the plain line agree.
    if p == 2:
        line = fit_alpha_beta(SIZES, t)
        assert line.alpha_s == pytest.approx(2 * alpha, rel=1e-9)
        assert line.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-9)


def test_fit_rejects_bad_data():
    with pytest.raises(ValueError, match="same length"):
        fit_alpha_beta([1, 2, 3], [1.0, 2.0])
    with pytest.raises(ValueError, match="2 distinct sizes"):
        fit_alpha_beta([1e6, 1e6], [1.0, 1.1])
    with pytest.raises(ValueError, match="2 distinct sizes"):
        fit_alpha_beta([1e3, 1e6], [1.0, 2.0], min_bytes=1e5)
    with pytest.raises(ValueError, match="seconds"):
        fit_alpha_beta([1e3, 1e6], [0.0, 2.0])
    with pytest.raises(ValueError, match="sizes_bytes"):
        fit_alpha_beta([-1, 1e6], [1.0, 2.0])
    with pytest.raises(ValueError, match="slope"):
        fit_alpha_beta([1e3, 1e6], [2.0, 1.0])
    with pytest.raises(ValueError, match="min_bytes"):
        fit_alpha_beta([1e3, 1e6], [1.0, 2.0], min_bytes=-1)
    with pytest.raises(ValueError, match="world_size"):
        fit_ring_allreduce([1e3, 1e6], [1.0, 2.0], 1)
    with pytest.raises(TypeError, match="world_size"):
        fit_ring_allreduce([1e3, 1e6], [1.0, 2.0], 2.5)


# ---- 4. data-parallel model ----------------------------------------------------------

GRAD = 4 * 25_000_000  # 25 M fp32 parameters


def test_step_time_formula():
    comm_s = allreduce_time(GRAD, 4, A, BW)
    assert data_parallel_step_time(0.5, GRAD, 4, BW, A) == pytest.approx(0.5 + comm_s)
    assert data_parallel_step_time(0.5, GRAD, 4, BW, A, overlap=0.25) == pytest.approx(0.5 + 0.75 * comm_s)
    assert data_parallel_step_time(0.5, GRAD, 4, BW, A, overlap=1.0) == pytest.approx(0.5)
    assert data_parallel_step_time(0.5, GRAD, 1, BW, A) == pytest.approx(0.5)
    tree = allreduce_time(GRAD, 4, A, BW, "tree")
    assert data_parallel_step_time(0.5, GRAD, 4, BW, A, algorithm="tree") == pytest.approx(0.5 + tree)


@pytest.mark.parametrize("p", [1, 2, 8, 64])
def test_weak_speedup_is_world_size_on_a_free_link(p):
    assert data_parallel_speedup(0.3, GRAD, p, math.inf) == pytest.approx(p)
    assert data_parallel_speedup(0.3, GRAD, p, 1e30, scaling="strong") == pytest.approx(p)
    # Full overlap hides any communication.
    assert data_parallel_speedup(0.3, GRAD, p, 1e3, overlap=1.0) == pytest.approx(p)


def test_slow_link_makes_data_parallel_slower_than_one_rank():
    assert data_parallel_speedup(0.1, GRAD, 4, 1e6) < 1.0  # 1 MB/s
    assert data_parallel_speedup(0.1, GRAD, 4, 1e6, scaling="strong") < 1.0


def test_speedup_hand_values_and_orderings():
    c, p = 1.0, 4
    comm_s = allreduce_time(GRAD, p, A, BW)
    weak = data_parallel_speedup(c, GRAD, p, BW, A)
    strong = data_parallel_speedup(c, GRAD, p, BW, A, scaling="strong")
    assert weak == pytest.approx(p * c / (c + comm_s))
    assert strong == pytest.approx(c / (c / p + comm_s))
    assert 1.0 < strong < weak < p
    assert data_parallel_speedup(c, GRAD, 1, BW, A) == pytest.approx(1.0)
    # More overlap, more speedup; more bandwidth, more speedup.
    assert data_parallel_speedup(c, GRAD, p, BW, A, overlap=0.5) > weak
    assert data_parallel_speedup(c, GRAD, p, 10 * BW, A) > weak


@pytest.mark.parametrize("p", [2, 4, 8, 64])
@pytest.mark.parametrize("efficiency", [0.5, 0.9])
def test_bandwidth_needed_reaches_the_efficiency_exactly(p, efficiency):
    need = comm.bandwidth_needed(0.25, GRAD, p, efficiency)
    assert data_parallel_speedup(0.25, GRAD, p, need) == pytest.approx(efficiency * p)
    assert data_parallel_speedup(0.25, GRAD, p, 0.99 * need) < efficiency * p  # the smallest such link


def test_bandwidth_needed_hand_values_and_bad_input():
    assert comm.bandwidth_needed(1.0, 1e9, 2, 0.5) == pytest.approx(1e9)  # the all-reduce may take C
    assert comm.bandwidth_needed(0.5, 1e9, 2, 0.5) == pytest.approx(2e9)  # half the compute, twice the link
    assert comm.bandwidth_needed(1.0, 1e9, 1, 0.9) == 0.0  # one rank sends nothing
    for kwargs, match in [
        ({"efficiency": 1.0}, "efficiency"),
        ({"efficiency": 0}, "efficiency"),
        ({"compute_s": 0}, "compute_s"),
        ({"grad_bytes": -1}, "grad_bytes"),
        ({"world_size": 0}, "world_size"),
    ]:
        args = {"compute_s": 1.0, "grad_bytes": 1e9, "world_size": 4, "efficiency": 0.9, **kwargs}
        with pytest.raises(ValueError, match=match):
            comm.bandwidth_needed(**args)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_crossover_is_where_latency_and_bandwidth_terms_are_equal(p):
    fit = fit_ring_allreduce(N_SIZES, [allreduce_time(n, p, A, BW) for n in N_SIZES], p)
    assert fit.intercept_s == pytest.approx(2 * (p - 1) * A)
    n = fit.crossover_bytes
    assert n == pytest.approx(p * A * BW)
    assert 2 * (p - 1) * A == pytest.approx(busbw_factor(p) * n / BW)  # the two terms of allreduce_time
    assert fit_alpha_beta([1e6, 2e6], [1e-3 + 1e6 / BW, 1e-3 + 2e6 / BW]).crossover_bytes == pytest.approx(1e-3 * BW)
    assert AlphaBeta(0.0, BW).crossover_bytes == 0.0


N_SIZES = [2**k for k in range(10, 27, 2)]


@pytest.mark.parametrize(
    "p, ref, cores, factor",
    [
        (4, 2, 2, 2.0),
        (4, 2, 1, 2.0),
        (4, 2, 4, 1.0),
        (4, 2, 16, 1.0),
        (4, 2, 3, 4 / 3),
        (2, 2, 1, 1.0),
        (8, 1, 2, 4.0),
    ],
)
def test_core_sharing(p, ref, cores, factor):
    assert comm.core_sharing(p, ref, cores) == pytest.approx(factor)


@pytest.mark.parametrize(
    "busy, factor",
    [(1.0, 2.0), (0.8, 1.6), (0.5, 1.0), (0.25, 1.0), (0.7, 1.4)],  # 4 ranks against 2 on 2 free cores
)
def test_core_sharing_counts_the_share_of_a_core_each_rank_keeps_busy(busy, factor):
    assert comm.core_sharing(4, 2, 2, busy=busy) == pytest.approx(factor)


def test_core_sharing_rejects_bad_input():
    with pytest.raises(ValueError, match="free_cores"):
        comm.core_sharing(4, 2, 0)
    with pytest.raises(ValueError, match="busy"):
        comm.core_sharing(4, 2, 2, busy=0)
    with pytest.raises(TypeError, match="world_size"):
        comm.core_sharing(4.0, 2, 2)


# ---- 5. the link table ----------------------------------------------------------------

ALL_LINKS = links()
GBS = {link.key: link.bandwidth_gbs for link in ALL_LINKS}


def test_required_rows_present_and_keys_unique():
    keys = catalog.link_names()
    required = {
        "pcie3-x16",
        "pcie4-x16",
        "pcie5-x16",
        "nvlink2",
        "nvlink3",
        "nvlink4",
        "nvlink5",
        "ib-edr",
        "ib-hdr",
        "ib-ndr",
        "eth-1g",
        "eth-10g",
        "eth-25g",
        "eth-100g",
        "eth-400g",
        "tpu-v4-ici",
        "tpu-v5e-ici",
        "tpu-v5p-ici",
    }
    assert required <= set(keys)
    assert len(keys) == len(set(keys))
    assert [link.key for link in ALL_LINKS] == keys


@pytest.mark.parametrize("link", ALL_LINKS, ids=lambda link: link.key)
def test_every_link_is_cited_and_sane(link: Link):
    assert link.kind in catalog.LINK_KINDS
    assert link.name.strip()
    for url in link.source.split("; "):
        assert url.startswith("https://"), url
    assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", link.source_date)
    assert link.notes.strip()
    assert link.bandwidth_gbs > 0 and math.isfinite(link.bandwidth_gbs)
    assert link.bandwidth_bytes_per_s == pytest.approx(link.bandwidth_gbs * 1e9)
    assert link.latency_us is None or link.latency_us > 0


def test_orderings_between_generations():
    assert GBS["pcie3-x16"] < GBS["pcie4-x16"] < GBS["pcie5-x16"]
    assert GBS["nvlink4"] > GBS["nvlink3"] > GBS["pcie4-x16"]
    assert GBS["nvlink5"] > GBS["nvlink4"] > GBS["nvlink3"] > GBS["nvlink2"]
    assert GBS["eth-1g"] < GBS["eth-10g"] < GBS["eth-25g"] < GBS["eth-100g"] < GBS["eth-400g"]
    assert GBS["ib-edr"] < GBS["ib-hdr"] < GBS["ib-ndr"]
    # The same signalling rate gives the same per-direction rate.
    assert GBS["ib-edr"] == GBS["eth-100g"] and GBS["ib-ndr"] == GBS["eth-400g"]


def test_per_direction_values():
    assert GBS["pcie3-x16"] == pytest.approx(15.75, abs=0.01)
    assert GBS["pcie4-x16"] == pytest.approx(31.5, abs=0.02)
    assert GBS["pcie5-x16"] == pytest.approx(63.0, abs=0.03)
    assert GBS["nvlink2"] == 150 and GBS["nvlink3"] == 300 and GBS["nvlink4"] == 450
    assert GBS["nvlink5"] == 900
    assert GBS["ib-edr"] == 12.5 and GBS["ib-hdr"] == 25 and GBS["ib-ndr"] == 50
    assert GBS["eth-1g"] == 0.125 and GBS["eth-10g"] == 1.25 and GBS["eth-100g"] == 12.5


@pytest.mark.parametrize(
    "link_key, acc_key",
    [
        ("nvlink2", "v100-16gb"),
        ("nvlink3", "a100-80gb"),
        ("nvlink4", "h100-sxm"),
        ("nvlink4", "h200"),
        ("tpu-v4-ici", "tpu-v4"),
        ("tpu-v5e-ici", "tpu-v5e"),
        ("tpu-v5p-ici", "tpu-v5p"),
        ("tpu-v6e-ici", "tpu-v6e"),
    ],
)
def test_consistent_with_catalog_per_direction(link_key, acc_key):
    # Both tables give bandwidth per direction.
    assert GBS[link_key] == catalog.get_accelerator(acc_key).interconnect_gbs


@pytest.mark.parametrize(
    "link_key, acc_key",
    [("pcie3-x16", "t4"), ("pcie3-x16", "p100-16gb"), ("pcie4-x16", "l4")],
)
def test_pcie_rows_match_catalog_within_rounding(link_key, acc_key):
    per_direction = catalog.get_accelerator(acc_key).interconnect_gbs
    assert GBS[link_key] == pytest.approx(per_direction, rel=0.01)


def test_memory_rows_come_from_catalog():
    for link in links("memory"):
        assert link.bandwidth_gbs in {t.sequential_read_gbs for t in catalog.storage_tiers("memory")}


@pytest.mark.parametrize(
    "alias, key",
    [
        ("1GbE", "eth-1g"),
        ("10GbE", "eth-10g"),
        ("100gbe", "eth-100g"),
        ("nvlink3", "nvlink3"),
        ("NVLink 4", "nvlink4"),
        ("NVLINK-5", "nvlink5"),
        ("pcie4", "pcie4-x16"),
        ("PCIe 5.0 x16", "pcie5-x16"),
        ("PCIe Gen3", "pcie3-x16"),
        ("NDR", "ib-ndr"),
        ("InfiniBand HDR", "ib-hdr"),
        ("v5e", "tpu-v5e-ici"),
        ("TPU v5p", "tpu-v5p-ici"),
        ("ib-edr", "ib-edr"),
    ],
)
def test_get_link_aliases(alias, key):
    assert get_link(alias).key == key


def test_links_by_kind():
    assert {link.key for link in links("pcie")} == {"pcie3-x16", "pcie4-x16", "pcie5-x16"}
    assert all(link.kind == "infiniband" for link in links("infiniband"))
    assert sum(len(links(kind)) for kind in catalog.LINK_KINDS) == len(ALL_LINKS)
    rows = catalog.link_rows()
    assert len(rows) == len(ALL_LINKS) and rows[0]["bandwidth_gbs_per_direction"] > 0


def test_bad_link_lookups():
    with pytest.raises(ValueError, match="pcie3-x16"):  # lists accepted keys
        get_link("token ring")
    with pytest.raises(TypeError):
        get_link(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        links("carrier pigeon")


def test_link_table_drives_the_cost_model():
    # A 1 GB gradient all-reduce over 8 ranks: NVLink 4 beats 100 GbE by the bandwidth ratio.
    nv = allreduce_time(1e9, 8, 0.0, get_link("nvlink4").bandwidth_bytes_per_s)
    eth = allreduce_time(1e9, 8, 0.0, get_link("100GbE").bandwidth_bytes_per_s)
    assert eth / nv == pytest.approx(450 / 12.5)


# ---- bad inputs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(nbytes=-1), ValueError, "nbytes"),
        (dict(nbytes="1MB"), TypeError, "nbytes"),
        (dict(nbytes=math.nan), ValueError, "nbytes"),
        (dict(world_size=0), ValueError, "world_size"),
        (dict(world_size=2.0), TypeError, "world_size"),
        (dict(world_size=True), TypeError, "world_size"),
        (dict(alpha=-1e-6), ValueError, "alpha"),
        (dict(bandwidth=0), ValueError, "bandwidth"),
        (dict(bandwidth=-5), ValueError, "bandwidth"),
        (dict(algorithm="butterfly"), ValueError, "ring"),
        (dict(algorithm=None), TypeError, "algorithm"),
    ],
)
def test_allreduce_time_rejects_bad_input(kwargs, exc, match):
    args = dict(nbytes=N, world_size=4, alpha=A, bandwidth=BW, algorithm="ring")
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        allreduce_time(**args)


@pytest.mark.parametrize("fn", [allgather_time, reduce_scatter_time, broadcast_time])
def test_other_collectives_reject_bad_input(fn):
    with pytest.raises(ValueError, match="nbytes"):
        fn(-1, 4, A, BW)
    with pytest.raises(ValueError, match="world_size"):
        fn(N, 0, A, BW)
    with pytest.raises(ValueError, match="alpha"):
        fn(N, 4, -A, BW)
    with pytest.raises(ValueError, match="bandwidth"):
        fn(N, 4, A, 0.0)


def test_bandwidth_helpers_reject_bad_input():
    with pytest.raises(ValueError, match="seconds"):
        algbw(1e6, 0.0)
    with pytest.raises(ValueError, match="nbytes"):
        algbw(-1, 1.0)
    with pytest.raises(ValueError, match="all_reduce"):  # lists the accepted ops
        busbw(1e6, 1.0, 4, op="allreduce")
    with pytest.raises(ValueError, match="world_size"):
        busbw(1e6, 1.0, 0)


def test_data_parallel_rejects_bad_input():
    with pytest.raises(ValueError, match="overlap"):
        data_parallel_step_time(1.0, GRAD, 4, BW, overlap=1.5)
    with pytest.raises(ValueError, match="overlap"):
        data_parallel_speedup(1.0, GRAD, 4, BW, overlap=-0.1)
    with pytest.raises(ValueError, match="weak"):
        data_parallel_speedup(1.0, GRAD, 4, BW, scaling="linear")
    with pytest.raises(ValueError, match="compute_s"):
        data_parallel_speedup(0.0, GRAD, 4, BW)
    with pytest.raises(ValueError, match="compute_s"):
        data_parallel_step_time(-1.0, GRAD, 4, BW)
    with pytest.raises(ValueError, match="bandwidth"):
        data_parallel_speedup(1.0, GRAD, 4, 0)
    with pytest.raises(ValueError, match="world_size"):
        data_parallel_speedup(1.0, GRAD, 0, BW)
    with pytest.raises(ValueError, match="ring"):
        data_parallel_step_time(1.0, GRAD, 4, BW, algorithm="allgather")


# ---- layering -------------------------------------------------------------------------


def test_comm_cost_imports_only_stdlib_numpy_and_catalog():
    source = Path(comm.alpha_beta.__file__).read_text()
    allowed = {"__future__", "math", "numbers", "re", "dataclasses", "typing", "numpy"}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] in allowed, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: only the catalog and the argument checks
                assert node.module in (None, "catalog", "arguments"), node.module
                assert node.module or all(a.name in ("catalog", "arguments") for a in node.names)
            else:
                assert node.module.split(".")[0] in allowed, node.module


def test_public_functions_have_docstrings():
    for name in comm.__all__:
        obj = getattr(comm, name)
        if callable(obj):
            assert len((obj.__doc__ or "").strip()) > 20, name


def test_a_model_that_cannot_predict_is_refused():
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        AlphaBeta(0, 0)  # would predict infinite times
    with pytest.raises(ValueError, match="alpha_s"):
        AlphaBeta(-1e-6, 1e9)
    with pytest.raises(TypeError, match="alpha_s"):
        AlphaBeta("0", 1e9)


def test_names_ignore_case_here_too():
    assert allreduce_time(1e6, 4, 1e-5, 1e9, "RING") == allreduce_time(1e6, 4, 1e-5, 1e9, "ring")
    assert busbw(1e9, 1.0, 4, "All_Reduce") == busbw(1e9, 1.0, 4, "all_reduce")
    with pytest.raises(TypeError, match="bandwidth"):
        allreduce_time(1e6, 4, 1e-5, "1e9")


# ----------------------------------------------------------------------------------------------
# feeding a trainer (notebook 03, section 4)


def _count_step():
    seen = []

    def step(x, y):
        assert x.dtype.is_floating_point and 0 <= float(x.min()) and float(x.max()) <= 1
        seen.append(tuple(x.shape))

    return step, seen


def test_read_starvation_reads_every_batch_and_deletes_its_file(tmp_path):
    from course_lib.comm import feeding

    step, seen = _count_step()
    out = feeding.read_starvation(
        step, (4, 1, 8, 8), batches=3, target_s=0.01, max_bytes=8 * 2**20, directory=str(tmp_path)
    )
    assert list(tmp_path.iterdir()) == [], "the temporary file must be gone"
    assert out["file_bytes"] == 3 * out["batch_bytes"] and out["batch_bytes"] % 2**20 == 0
    assert out["disk"]["batches"] == out["cache"]["batches"] == 3
    assert len(seen) == 2 * 2 * 3 and set(seen) == {(4, 1, 8, 8)}  # 2 rounds x (disk, cache) x 3 batches
    assert out["dropped"] == feeding.CAN_DROP_PAGE_CACHE
    assert out["disk_Bps"] > 0 and out["cache_Bps"] > 0
    assert out["used_bytes"] == 4 * 8 * 8 and out["read_block"] == 2**20  # the model reads other pieces than a batch
    for e in (out["disk"], out["cache"]):
        assert 0 <= e["idle_fraction"] < 1 and e["wait_s"] + e["compute_s"] <= e["total_s"] * 1.001


def test_read_starvation_can_time_its_model_in_the_epochs_own_pieces(tmp_path):
    from course_lib.comm import feeding

    step, _ = _count_step()
    out = feeding.read_starvation(
        step, (4, 1, 8, 8), batches=2, target_s=0.01, max_bytes=4 * 2**20, directory=str(tmp_path), read_block=None
    )
    assert out["read_block"] == out["batch_bytes"]  # one batch a read, as the trainer reads


def test_read_starvation_deletes_its_file_when_the_step_fails(tmp_path):
    from course_lib.comm import feeding

    def step(x, y):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        feeding.read_starvation(
            step, (2, 1, 4, 4), batches=2, target_s=0.01, max_bytes=4 * 2**20, directory=str(tmp_path)
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"x_shape": (0, 1)}, ValueError, "x_shape"),
        ({"batches": 0}, ValueError, "batches"),
        ({"target_s": 0}, ValueError, "target_s"),
        ({"step": 3}, TypeError, "step"),
    ],
)
def test_read_starvation_rejects_bad_input(kwargs, exc, match):
    from course_lib.comm import feeding

    args = {"step": lambda x, y: None, **kwargs}
    with pytest.raises(exc, match=match):
        feeding.read_starvation(**args)


@pytest.mark.skipif(not hasattr(__import__("os"), "posix_fadvise"), reason="no posix_fadvise on this system")
def test_drop_from_page_cache_works_without_privileges(tmp_path):
    from course_lib.comm import feeding

    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 4096)
    assert feeding.drop_from_page_cache(path) is True
    assert path.read_bytes() == b"x" * 4096


def test_worker_epochs_returns_one_epoch_per_setting():
    import torch

    from course_lib.comm import feeding

    ds = torch.utils.data.TensorDataset(torch.rand(20, 3), torch.zeros(20, dtype=torch.long))
    step, seen = _count_step()
    out = feeding.worker_epochs(ds, step, batch_size=8, workers=(0,), rounds=2)
    assert list(out) == [0] and out[0]["batches"] == 3
    with pytest.raises(ValueError, match="workers"):
        feeding.worker_epochs(ds, step, workers=(-1,))


@pytest.mark.slow
def test_worker_parts_times_the_worker_the_handover_and_the_fill():
    import torch

    from course_lib.comm import feeding

    ds = torch.utils.data.TensorDataset(torch.rand(20, 3), torch.zeros(20, dtype=torch.long))
    out = feeding.worker_parts(ds, batch_size=8, rounds=1)
    assert out["batches"] == 3
    assert out["worker_s"] > 0 and out["handover_s"] > 0 and out["first_s"] > 0
    assert out["prepare_s"] == pytest.approx(max(0.0, out["worker_s"] - out["handover_s"]))
    assert 0 < out["receive_s"] < out["first_s"]  # a waiting batch comes faster than the first one
    with pytest.raises(ValueError, match="batch_size"):
        feeding.worker_parts(ds, batch_size=0)


def test_worker_epoch_model_by_hand():
    from course_lib.comm import feeding

    parts = {"first_s": 0.02, "worker_s": 0.010, "receive_s": 0.001}
    # step-bound: fill + 3 x (step + receive) + the last step
    out = feeding.worker_epoch_model(parts, 0.024, 4)
    assert out["total_s"] == pytest.approx(0.02 + 3 * 0.025 + 0.024)
    assert out["wait_s"] == pytest.approx(out["total_s"] - 4 * 0.024)
    # worker-bound: the worker sets the pace, the trainer waits
    out = feeding.worker_epoch_model(parts, 0.002, 4)
    assert out["total_s"] == pytest.approx(0.02 + 3 * 0.010 + 0.002)
    assert feeding.worker_epoch_model(parts, 0.0, 1)["total_s"] == pytest.approx(0.02)
    with pytest.raises(ValueError, match="batches"):
        feeding.worker_epoch_model(parts, 0.01, 0)
    with pytest.raises(ValueError, match="step_s"):
        feeding.worker_epoch_model(parts, -1.0, 2)


def test_double_tree_allreduce_time_by_hand():
    # 8 ranks: 2 * 3 hops of latency, twice the message over the link
    assert comm.double_tree_allreduce_time(1e6, 8, 1e-5, 1e9) == pytest.approx(6e-5 + 2e-3)
    assert comm.double_tree_allreduce_time(1e6, 1, 1e-5, 1e9) == 0.0
    assert comm.double_tree_allreduce_time(0, 1024, 1e-5, 1e9) == pytest.approx(20 * 1e-5)
    with pytest.raises(ValueError, match="world_size"):
        comm.double_tree_allreduce_time(1.0, 0, 1e-5, 1e9)


@pytest.mark.parametrize("p", [4, 8, 64, 1024])
def test_ring_and_tree_cross_where_the_crossover_says(p):
    alpha, bw = 3e-5, 2e9
    n = comm.ring_tree_crossover_bytes(p, alpha, bw)
    assert comm.allreduce_time(n, p, alpha, bw) == pytest.approx(comm.double_tree_allreduce_time(n, p, alpha, bw))
    assert comm.allreduce_time(n / 4, p, alpha, bw) > comm.double_tree_allreduce_time(n / 4, p, alpha, bw)
    assert comm.allreduce_time(n * 4, p, alpha, bw) < comm.double_tree_allreduce_time(n * 4, p, alpha, bw)


def test_ring_vs_tree_rows():
    rows = comm.ring_vs_tree(1e-5, 1e9, world_sizes=(2, 8), sizes=(4, 2**20))
    assert [r["world_size"] for r in rows] == [2, 8]
    assert rows[0]["crossover_bytes"] == 0.0  # 2 ranks: the ring is never slower
    ring, tree = rows[1]["times"][4]
    assert ring == pytest.approx(14e-5 + 1.75 * 4 / 1e9) and tree == pytest.approx(6e-5 + 8 / 1e9)


def test_with_measured_latency_keeps_the_bandwidth():
    fit = comm.fit_ring_allreduce([2**20, 2**22, 2**24], [1e-3, 3e-3, 11e-3], 2)
    link = comm.with_measured_latency(fit, 2e-4)
    assert link.bandwidth_bytes_per_s == fit.bandwidth_bytes_per_s
    assert link.alpha_s == pytest.approx(1e-4) and link.intercept_s == pytest.approx(2e-4)
    assert link.crossover_bytes == pytest.approx(2e-4 * fit.bandwidth_bytes_per_s)  # Hockney's n_1/2, 2 ranks
    with pytest.raises(TypeError, match="fit"):
        comm.with_measured_latency(1.0, 2e-4)
    with pytest.raises(ValueError, match="small_message_s"):
        comm.with_measured_latency(fit, 0.0)


def _row(nbytes, seconds, world=2, sent=None):
    sent = sent or (None, None, None)
    return {
        "bytes": nbytes,
        "seconds": seconds,
        "busbw_Bps": nbytes / seconds,
        "world_size": world,
        "bytes_sent": sent[0],
        "bytes_sent_max": sent[1],
        "bytes_sent_min": sent[2],
    }


def test_bytes_per_message_byte_is_the_median_over_rows():
    rows = [_row(100, 1.0, 4, (150, 300, 100)), _row(200, 1.0, 4, (300, 300, 300)), _row(400, 1.0, 4, (600, 600, 600))]
    got = comm.bytes_per_message_byte(rows)
    assert got == pytest.approx({"mean": 1.5, "max": 1.5, "min": 1.5})  # min: 1.0, 1.5, 1.5
    assert comm.bytes_per_message_byte([_row(100, 1.0)]) is None  # nothing counted
    assert comm.bytes_per_message_byte([]) is None


def test_allreduce_table_prints_every_row_and_the_cache_column():
    rows = [_row(4, 2e-4), _row(2**25, 2e-2)]
    text = comm.allreduce_table(rows, lambda n: 1e-4 + n / 2e9, llc_bytes=2**25)
    lines = text.splitlines()
    assert len(lines) == 4 and "LLC" in lines[0] and lines[3].startswith("* the 20th percentile")  # the footnote
    assert lines[2].split()[-1] == "2.00"  # 2 ranks x 32 MiB over a 32 MiB cache
    assert "LLC" not in comm.allreduce_table(rows, lambda n: 1e-4)


def test_feeding_descriptions_print_every_source_and_worker_count():
    from course_lib.comm import feeding

    epoch = {"wait_s": 0.05, "compute_s": 0.1, "idle_fraction": 1 / 3}
    feed = {
        "batches": 4,
        "batch_bytes": 2**25,
        "used_bytes": 2**15,
        "read_block": 2**25,
        "disk_Bps": 2e9,
        "cache_Bps": 6e9,
        "file_bytes": 2**27,
        "disk": epoch,
        "cache": epoch,
    }
    text = feeding.describe_reads(feed).splitlines()
    assert len(text) == 3 and text[1].startswith("from disk") and "idle 33%" in text[2]
    pipeline = {
        0: {"total_s": 0.64, "batches": 16, "idle_fraction": 0.45, "compute_s": 0.352},
        1: {"total_s": 0.4, "batches": 16, "idle_fraction": 0.1, "compute_s": 0.352},
    }
    lines = feeding.describe_epochs(pipeline, {0: 0.45, 1: 0.0}).splitlines()
    assert lines[0] == "0 worker(s): 0.64 s for 16 batches, idle 45% (predicted 45%), training 22 ms a batch"
    assert "predicted" not in feeding.describe_epochs(pipeline)


def test_step_operations_counts_one_sgd_step():
    from course_lib.comm import scaling

    small, deep = scaling.step_operations(8, 16, 1, 4), scaling.step_operations(8, 16, 3, 4)
    assert 10 < small < deep < 200  # more layers, more operations
    assert scaling.step_operations(8, 16, 1, 4) == small  # batch-independent count, deterministic
    assert 1e-6 <= scaling.KERNEL_LAUNCH_S <= 1e-5
    with pytest.raises(ValueError, match="layers"):
        scaling.step_operations(8, 16, 0, 4)
