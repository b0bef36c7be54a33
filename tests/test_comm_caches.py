"""Tests for course_lib.comm.caches: the working-set sweep of notebook 03, section 2."""

from __future__ import annotations

import pytest

from course_lib.comm import caches

KIB, MIB = 2**10, 2**20
ZEN4 = {"L1d": 32 * KIB, "L2": 1 * MIB, "L3": 32 * MIB}


def test_sizes_run_from_32_kib_to_four_times_the_last_cache():
    sizes = caches.working_set_sizes(ZEN4)
    assert sizes[0] == 32 * KIB and sizes[-1] == 128 * MIB
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))


def test_sizes_default_to_256_mib_when_the_caches_are_unknown_and_stop_at_the_limit():
    assert caches.working_set_sizes({})[-1] == 256 * MIB
    assert caches.working_set_sizes({"L3": 512 * MIB}, limit=2**30)[-1] == 2**30


def test_in_cache_is_the_median_inside_l2_and_memory_the_sizes_beyond_4x_the_llc():
    bw = {s: 100.0 for s in caches.working_set_sizes(ZEN4)}
    bw.update({64 * KIB: 110.0, 128 * KIB: 120.0, 256 * KIB: 130.0, 512 * KIB: 500.0, 128 * MIB: 20.0})
    inside, memory = caches.cache_over_memory(bw, ZEN4)
    assert inside == 125.0  # median of 64-512 KiB: twice L1d up to half of L2
    assert memory == 20.0  # only 128 MiB is at least 4x the 32-MiB L3


def test_cache_over_memory_refuses_a_sweep_that_never_left_the_caches():
    with pytest.raises(ValueError, match="inside L2"):
        caches.cache_over_memory({1 * MIB: 1.0}, ZEN4)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: caches.working_set_sizes([32]), TypeError),
        (lambda: caches.working_set_sizes(ZEN4, smallest=10), ValueError),
        (lambda: caches.working_set_bandwidth([512]), ValueError),
        (lambda: caches.working_set_bandwidth([64 * KIB], bytes_per_call=-1), ValueError),
        (lambda: caches.dependent_load_time(16 * KIB), ValueError),  # not above the 32-KiB small chain
        (lambda: caches.dependent_load_time(MIB, line=63), ValueError),
        (lambda: caches.dependent_load_time("1 MiB"), TypeError),
        (lambda: caches.dependent_load_time(MIB, steps=0), ValueError),
    ],
)
def test_bad_input_names_the_argument(call, error):
    with pytest.raises(error):
        call()


def test_a_small_sweep_reads_each_set_and_returns_bytes_per_second():
    bw = caches.working_set_bandwidth([64 * KIB, 4 * MIB], bytes_per_call=4 * MIB, rounds=1, min_run_time=0.005)
    assert set(bw) == {64 * KIB, 4 * MIB}
    assert all(1e8 < b < 1e13 for b in bw.values())  # between 0.1 GB/s and 10 TB/s: bytes were counted, per second


XEON5 = {"L1d": 48 * KIB, "L2": 2 * MIB, "L3": 320 * MIB}  # a 5th-gen Xeon VM reports a 320-MiB LLC


def test_a_320_mib_llc_is_swept_to_4x_when_memory_allows_and_judged_there():
    sizes = caches.working_set_sizes(XEON5, limit=4 * 2**30)
    assert sizes[-1] == 2 * 2**30  # the first power of two at least 4 x 320 MiB
    bw = {s: (100.0 if s <= MIB else 20.0) for s in sizes}
    assert caches.memory_sizes(bw, XEON5) == [2 * 2**30]
    assert caches.cache_over_memory(bw, XEON5) == (100.0, 20.0)


def test_a_320_mib_llc_on_a_small_memory_falls_back_to_the_largest_set_measured():
    sizes = caches.working_set_sizes(XEON5, limit=2**30)  # memory allowed no more than 1 GiB
    assert sizes[-1] == 2**30
    bw = {s: (100.0 if s <= MIB else 20.0) for s in sizes}
    assert caches.memory_sizes(bw, XEON5) == [2**30]  # at least twice the LLC: used, and the notebook says so
    assert caches.cache_over_memory(bw, XEON5) == (100.0, 20.0)
    short = {s: b for s, b in bw.items() if s <= 512 * MIB}  # under twice the LLC: no memory reading at all
    assert caches.memory_sizes(short, XEON5) == []
    with pytest.raises(ValueError, match="twice the last cache"):
        caches.cache_over_memory(short, XEON5)


def test_the_default_limit_follows_the_memory_available(monkeypatch):
    class VM:
        available = 5 * 2**30  # a tenth: 512 MiB

    monkeypatch.setattr(caches.psutil, "virtual_memory", lambda: VM)
    assert caches.working_set_sizes(XEON5)[-1] == 512 * MIB
    assert caches.working_set_sizes(ZEN4)[-1] == 128 * MIB  # 4x a 32-MiB L3 fits: unchanged


def test_describe_groups_the_sweep_by_cache_level():
    sweep = {32 * KIB: 200e9, 512 * KIB: 115e9, 8 * MIB: 96e9, 128 * MIB: 33e9}
    lines = caches.describe(sweep, ZEN4).splitlines()
    assert lines[0] == "caches: L1d 32 KiB, L2 1 MiB, L3 32 MiB"
    assert [line.split(":")[0].strip() for line in lines[1:-1]] == [
        "within L1d",
        "within L2",
        "within L3",
        "beyond the caches",
    ]
    assert lines[-2].endswith("128 MiB 33 GB/s")
    assert lines[-1].startswith("the caches this thread sees end between 8 MiB and 128 MiB")
    assert caches.describe({64 * KIB: 1e9}, {}).splitlines() == [
        "caches: sizes unknown here",
        "beyond the caches: 64 KiB 1 GB/s",
    ]
    with pytest.raises(TypeError, match="bandwidth"):
        caches.describe([1], ZEN4)


def test_the_sweep_names_where_the_caches_end_whatever_the_system_reports():
    """A VM reporting its host's 480-MiB L3 reads 128 MiB at memory's pace: the sweep, not the report, says so."""
    bw = {2**20: 127e9, 2**21: 66e9, 2**22: 27e9, 2**26: 21e9, 2**27: 15e9, 2**28: 14e9, 2**30: 14e9}
    assert caches.caches_end(bw) == (2**26, 2**27)  # a gradual fall: the end is where memory's pace begins
    assert "end between 64 MiB and 128 MiB" in caches.describe(bw, {"L2": 2**21, "L3": 480 * 2**20})
    assert caches.caches_end({2**20: 10e9, 2**21: 9.5e9, 2**22: 9e9}) is None  # all at one pace: no end claimed
    assert caches.caches_end({2**20: 30e9, 2**30: 9e9}) is None  # two sizes cannot show where
    assert "end between" not in caches.describe({2**20: 10e9, 2**21: 9e9}, {"L2": 2**21})


def test_the_pointer_chain_is_one_cycle_through_every_line_in_a_random_order():
    chain = caches._pointer_chain(64 * KIB, 64, seed=3)
    i, seen = 0, []
    for _ in range(64 * KIB // 64):
        seen.append(i)
        i = chain[i]
    assert i == 0 and sorted(seen) == list(range(0, 16 * KIB, 16))  # each line's first int once, then back to 0
    assert seen != sorted(seen)  # not in address order: the prefetchers cannot guess the next line


def test_a_load_from_memory_takes_longer_than_one_from_l1():
    """No effect (memory as fast as L1, or a chain the prefetchers follow) gives about 1x; measured 4-6x on the
    course's CPUs (170-200 ns against 30 ns of interpreter a step)."""
    t = caches.dependent_load_time(256 * MIB, steps=20_000, rounds=2)
    assert t["memory"] > 1.5 * t["cache"], t
