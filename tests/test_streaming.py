"""course_lib.memory.streaming: data sets larger than the memory budget (notebook 02, memory).

The headline test writes a 400 MB file and streams it with a 100 MB budget (4x) in a fresh,
capped subprocess: the resident peak stays under the budget, while np.load of the whole file
needs more than the budget (and runs out of memory under the same cap).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from course_lib.memory import limit
from course_lib.memory.streaming import (
    MemmapDataset,
    StreamingDataset,
    _cached_fraction,
    dataset_info,
    disk_read_throughput,
    stream_once,
    write_synthetic_dataset,
)

MiB = 2**20


@pytest.fixture
def small(tmp_path):
    return write_synthetic_dataset(tmp_path / "small", 1000, 8, chunk_rows=300, n_classes=3, seed=1)


def test_write_and_read_back(small):
    info = dataset_info(small)
    assert (info.n_samples, info.n_features, info.n_classes, info.dtype) == (1000, 8, 3, "float32")
    x = np.load(small / "x.npy")
    y = np.load(small / "y.npy")
    assert x.shape == (1000, 8) and y.shape == (1000,) and set(np.unique(y)) == {0, 1, 2}
    again = write_synthetic_dataset(small.parent / "again", 1000, 8, chunk_rows=300, n_classes=3, seed=1)
    assert np.array_equal(np.load(again / "x.npy"), x)  # deterministic


@pytest.mark.slow
def test_streaming_dataset_covers_every_row_once(small):
    x = np.load(small / "x.npy")
    ds = StreamingDataset(small, batch_size=64, chunk_rows=300)
    batches = list(ds)
    assert len(batches) == len(ds)
    xs = torch.cat([b[0] for b in batches])
    assert torch.equal(xs, torch.from_numpy(x))  # in order, no shuffle
    sh = StreamingDataset(small, batch_size=64, chunk_rows=300, shuffle=True)
    xs2 = torch.cat([b[0] for b in sh])
    assert not torch.equal(xs2, xs)
    assert torch.equal(xs2.sum(0), xs.sum(0)) or torch.allclose(xs2.sum(0), xs.sum(0), atol=1e-3)
    assert sorted(map(tuple, xs2.tolist())) == sorted(map(tuple, xs.tolist()))  # a permutation
    # a DataLoader with 2 workers splits the chunks between them
    dl = DataLoader(StreamingDataset(small, batch_size=100, chunk_rows=300), batch_size=None, num_workers=2)
    assert sum(len(b[1]) for b in dl) == 1000


def test_memmap_dataset(small):
    ds = MemmapDataset(small)
    x, y = ds[5]
    assert x.shape == (8,) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(x, torch.from_numpy(np.load(small / "x.npy")[5]))
    assert ds.release()
    with pytest.raises(IndexError):
        ds[1000]
    dl = DataLoader(ds, batch_size=250, num_workers=0)
    assert sum(len(b[1]) for b in dl) == 1000


def test_bad_input(tmp_path, small):
    with pytest.raises(ValueError, match="dtype"):
        write_synthetic_dataset(tmp_path / "d", 10, 2, dtype="int3")
    with pytest.raises(ValueError, match="n_samples"):
        write_synthetic_dataset(tmp_path / "d", 0, 2)
    with pytest.raises(ValueError, match="n_classes"):
        write_synthetic_dataset(tmp_path / "d", 10, 2, n_classes=1)
    with pytest.raises(ValueError, match="path"):
        dataset_info(tmp_path / "missing")
    with pytest.raises(ValueError, match="method"):
        stream_once(small, MiB, method="magic")
    with pytest.raises(ValueError, match="budget_bytes"):
        stream_once(small, 0)
    with pytest.raises(ValueError, match="batch_size"):
        StreamingDataset(small, 0)


def test_stream_once_in_process_learns(small):
    r = stream_once(small, 4 * MiB, batch_size=50, lr=0.5)
    assert r.n_samples == 1000 and r.accuracy > 0.5  # three separable classes: above chance (1/3)
    assert r.class_means_norm == pytest.approx(stream_once(small, 4 * MiB, method="load").class_means_norm, rel=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(not limit.memory_limit_supported(), reason="capped subprocess needs Linux")
def test_streaming_4x_larger_than_budget_stays_under_budget():
    with tempfile.TemporaryDirectory(prefix="course-stream-") as tmp:  # 400 MB: removed at once
        _check_streaming_4x(Path(tmp))


def _check_streaming_4x(tmp_path: Path) -> None:
    budget = 100 * MiB
    path = write_synthetic_dataset(tmp_path / "big", (4 * budget) // (256 * 4), 256)
    info = dataset_info(path)
    assert info.nbytes >= 4 * budget
    stream = limit.run_with_memory_limit(stream_once, budget, path, budget, "stream", timeout=120)
    assert stream.ok, stream.summary()
    s = stream.value
    assert s.peak_is_exact
    assert s.peak_increase_bytes < budget, (
        f"streaming peak +{s.peak_increase_bytes / MiB:.0f} MiB, budget {budget / MiB:.0f} MiB"
    )
    # the naive way: the whole file in RAM. With room for it, its peak exceeds the budget ...
    naive = limit.run_with_memory_limit(stream_once, 2 * info.nbytes, path, budget, "load", timeout=120)
    assert naive.ok, naive.summary()
    assert naive.value.peak_increase_bytes > budget, naive.value
    assert naive.value.class_means_norm == pytest.approx(s.class_means_norm, rel=1e-6)  # same answer
    # ... and under the same cap as the streaming run it runs out of memory
    capped = limit.run_with_memory_limit(stream_once, budget, path, budget, "load", timeout=120)
    assert not capped.ok and capped.oom, capped.summary()
    print(
        f"stream peak +{s.peak_increase_bytes / MiB:.0f} MiB, load +{naive.value.peak_increase_bytes / MiB:.0f} MiB, "
        f"budget {budget / MiB:.0f} MiB"
    )


def test_cold_and_cached_reads(tmp_path):
    path = write_synthetic_dataset(tmp_path / "mid", 16 * MiB // (64 * 4), 64) / "x.npy"
    if _cached_fraction(path) is None:
        pytest.skip("this OS cannot tell which pages are cached (no mincore)")
    cold = disk_read_throughput(path)
    if not cold.cache_dropped:
        pytest.skip("this OS would not drop the file from its page cache (posix_fadvise DONTNEED)")
    warm = disk_read_throughput(path, drop_cache=False)
    assert cold.nbytes == warm.nbytes == path.stat().st_size and cold.bytes_per_second > 0
    assert cold.cached_fraction_before < 0.05, cold  # the drop worked: nothing cached before the cold read
    assert warm.cached_fraction_before > 0.95, warm  # the cold read itself put every page in the cache
    assert _cached_fraction(path) > 0.95


def test_cached_fraction_and_throughput_small(small):
    disk_read_throughput(small / "x.npy", drop_cache=False)  # read it: now it is in the cache
    f = _cached_fraction(small / "x.npy")
    if f is None:
        pytest.skip("this OS cannot tell which pages are cached (no mincore)")
    assert f == 1.0
    r = disk_read_throughput(small / "x.npy", block_size=4096)
    assert r.nbytes == (small / "x.npy").stat().st_size
    with pytest.raises(ValueError, match="path"):
        disk_read_throughput(small)
    with pytest.raises(ValueError, match="block_size"):
        disk_read_throughput(small / "x.npy", block_size=0)


def test_streaming_flags_must_be_booleans(small):
    """bool("no") is True: a flag given as a string or a number is refused, not read as its truthiness."""
    for bad in ({"shuffle": "no"}, {"drop_last": 1}, {"drop_cache": None}):
        with pytest.raises(TypeError, match="must be True or False"):
            StreamingDataset(small, batch_size=64, **bad)
    with pytest.raises(TypeError, match="seed"):
        StreamingDataset(small, batch_size=64, seed=1.5)


@pytest.mark.slow
@pytest.mark.skipif(not limit.memory_limit_supported(), reason="capped subprocess needs Linux")
def test_streaming_fits_under_a_cap_of_its_budget_where_loading_does_not(tmp_path):
    """Notebook 02, section 8, at the smallest data set it runs (48 MiB, a 12-MiB budget)."""
    budget = 12 * MiB
    path = write_synthetic_dataset(tmp_path / "min", (4 * budget) // (64 * 4), 64)
    stream = limit.run_with_memory_limit(stream_once, budget, path, budget, "stream", timeout=120)
    assert stream.ok, stream.summary()
    assert stream.value.peak_increase_bytes < budget, stream.value
    capped = limit.run_with_memory_limit(stream_once, budget, path, budget, "load", timeout=120)
    assert not capped.ok and capped.oom, capped.summary()
