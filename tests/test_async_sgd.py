"""course_lib.comm.async_sgd: Hogwild! on shared memory beside synchronous DDP (notebook 06.1, section 4)."""

from __future__ import annotations

import pytest
import torch

from course_lib.comm import async_sgd, run_hogwild, run_sync
from course_lib.parallel.data_parallel import max_abs_difference


def test_sgd_batches_are_seeded_and_cover_epochs():
    a, b = async_sgd.sgd_batches(50, 32), async_sgd.sgd_batches(50, 32)
    assert a.shape == (50, 32) and torch.equal(a, b)
    n = 1347  # the digits training split
    per_epoch = n // 32
    assert len(torch.unique(a[:per_epoch].flatten())) == per_epoch * 32  # no example twice within an epoch
    assert not torch.equal(a, async_sgd.sgd_batches(50, 32, seed=1))


@pytest.mark.slow
def test_one_worker_is_sequential_sgd_with_zero_staleness():
    run = run_hogwild(1, updates=60, batch_size=16)
    assert run["updates_per_worker"] == [60] and run["mean_staleness"] == 0 and run["max_staleness"] == 0
    again = run_hogwild(1, updates=60, batch_size=16)
    assert max_abs_difference(run["params"], again["params"]) == 0.0  # deterministic
    assert run["accuracy"] > run["start_accuracy"] + 30  # it learned


@pytest.mark.slow
def test_two_workers_share_the_model_and_count_staleness():
    seq = run_hogwild(1, updates=300, batch_size=32)
    hog = run_hogwild(2, updates=300, batch_size=32, delays=(0.0, 0.001))
    assert sum(hog["updates_per_worker"]) == 300 and all(u > 0 for u in hog["updates_per_worker"])
    assert len(hog["staleness"]) == 2 and all(s >= 0 for row in hog["staleness"] for s in row)
    slow = hog["staleness"][1]
    assert sum(slow) / len(slow) > 1  # the delayed worker's updates land after the other worker's
    assert abs(hog["accuracy"] - seq["accuracy"]) < 5  # both workers' updates reached the shared model


@pytest.mark.slow
def test_sync_ddp_equals_sequential_sgd_on_the_same_batches():
    seq = run_hogwild(1, updates=40, batch_size=16)
    sync = run_sync(2, updates=40, batch_size=16)
    assert max_abs_difference(sync["params"], seq["params"]) < 1e-5
    assert sync["wall_s"] > 0 and sync["accuracy"] == pytest.approx(seq["accuracy"], abs=0.5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: run_hogwild(0), "workers"),
        (lambda: run_hogwild(1, updates=0), "updates"),
        (lambda: run_hogwild(1, batch_size=-1), "batch_size"),
        (lambda: run_hogwild(1, lr=0), "lr"),
        (lambda: run_hogwild(10_000), "workers"),
        (lambda: run_hogwild(2, delays=(0.0,)), "delays"),
        (lambda: run_hogwild(1, delays=(-1.0,)), "delays"),
        (lambda: run_hogwild(1, timeout=0), "timeout"),
        (lambda: run_sync(2, batch_size=31), "evenly"),
        (lambda: async_sgd.sgd_batches(10, 100_000), "batch_size"),
        (lambda: async_sgd.sgd_batches(10, 8, seed=-1), "seed"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError, match="delays"):
        run_hogwild(1, delays=0.5)
    with pytest.raises(TypeError, match="params"):
        async_sgd.accuracy([1, 2])
