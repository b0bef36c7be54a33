"""glibc's books (course_lib.memory.glibc_heap) and autograd's saved bytes by dtype (memory.saved_bytes_by_dtype)."""

import platform

import pytest
import torch

from course_lib import memory, models
from course_lib.memory import glibc_heap

XML = """<malloc version="1">
<heap nr="0"><sizes></sizes><total type="fast" count="0" size="0"/><system type="current" size="1"/></heap>
<total type="fast" count="2" size="96"/>
<total type="rest" count="3" size="4000"/>
<total type="mmap" count="1" size="8192"/>
<system type="current" size="135168"/>
<system type="max" size="200000"/>
<aspace type="total" size="135168"/>
</malloc>"""

IS_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def test_parse_malloc_info_reads_the_totals_after_the_last_heap():
    c = glibc_heap.parse_malloc_info(XML)
    assert (c.heap, c.heap_max, c.free_kept, c.mmapped) == (135168, 200000, 4096, 8192)


def test_footprint_growth_counts_heap_and_mappings_at_their_largest():
    before = glibc_heap.MallocCounts(heap=100, heap_max=100, free_kept=0, mmapped=10, mmapped_max=10)
    after = glibc_heap.MallocCounts(heap=150, heap_max=400, free_kept=50, mmapped=10, mmapped_max=60)
    assert after.footprint_growth_since(before) == (400 - 100) + (60 - 10)


@pytest.mark.skipif(not IS_GLIBC, reason="glibc only")
def test_malloc_counts_follow_a_large_allocation():
    before = glibc_heap.malloc_counts()
    t = torch.ones(8 * 2**20, dtype=torch.uint8)  # 8 MiB: above the initial mmap threshold
    after = glibc_heap.malloc_counts()
    assert before is not None and after is not None and after.mmapped_max >= 8 * 2**20
    assert after.footprint_growth_since(before) >= 0
    del t


@pytest.mark.skipif(IS_GLIBC, reason="not glibc")
def test_malloc_counts_is_none_without_glibc():  # pragma: no cover - runs off glibc
    assert glibc_heap.malloc_counts() is None


def test_mlp_steps_with_heap_returns_one_count_per_step_and_checks_arguments():
    r = glibc_heap.mlp_steps_with_heap(8, steps=2, in_features=8, hidden=16, depth=1, threads=1)
    assert len(r["after"]) == 2 and isinstance(r["loss"], float)
    assert len(r["seconds"]) == 2 and all(s > 0 for s in r["seconds"])
    assert (r["before"] is None) == (not IS_GLIBC)
    with pytest.raises(ValueError, match="batch_size"):
        glibc_heap.mlp_steps_with_heap(0)


def test_saved_bytes_by_dtype_counts_one_more_example():
    torch.manual_seed(0)
    model = models.MLP(8, [16], 4)
    x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
    per = memory.saved_bytes_by_dtype(model, memory.first_examples(x, y), "fp32")
    # the input (8 floats), the ReLU output (16) and the loss's log-softmax (4), float32; the label, int64
    assert per == {"float32": (8 + 16 + 4) * 4, "int64": 8}
    bf16 = memory.saved_bytes_by_dtype(model, memory.first_examples(x, y), "bf16-mixed")
    assert bf16.get("bfloat16", 0) > 0 and sum(bf16.values()) < sum(per.values())
    with pytest.raises(ValueError, match="sizes"):
        memory.saved_bytes_by_dtype(model, memory.first_examples(x, y), "fp32", sizes=(4, 2))
    with pytest.raises(ValueError):
        memory.first_examples(x, y)(0)


def test_held_after_steps_compares_the_kernel_with_live_tensors_plus_glibcs_free_count():
    c = glibc_heap.MallocCounts
    value = {"before": c(0, 0, 10, 0), "after": [c(0, 0, 40, 0)], "rss_before": 100, "rss_after": 190, "live_after": 60}
    held = glibc_heap.held_after_steps(value)
    assert (held.resident_growth, held.live, held.free_kept) == (90, 60, 30)
    assert held.over_model == 1.0 and held.over_live == 1.5  # dropping glibc's free count breaks the model
    assert held.rest == 0 and held.file_backed is None  # the file-backed part: only where the kernel said it
    split = glibc_heap.held_after_steps({**value, "rss_after": 200, "file_growth": 6})
    assert split.rest == 10 and split.file_backed == 6
    assert glibc_heap.held_after_steps({**value, "rss_after": None}) is None
    assert glibc_heap.held_after_steps({**value, "before": None}) is None and glibc_heap.held_after_steps(None) is None
    with pytest.raises(TypeError, match="value"):
        glibc_heap.held_after_steps([value])


@pytest.mark.skipif(not IS_GLIBC, reason="glibc only")
def test_mlp_steps_with_heap_reports_the_three_meters():
    r = glibc_heap.mlp_steps_with_heap(64, steps=2, in_features=64, hidden=256, depth=1, threads=1)
    held = glibc_heap.held_after_steps(r)
    params = 64 * 256 + 256 + 256 * 10 + 10
    # weights and Adam's two moments, its step counters (one float32 scalar per parameter tensor), the batch
    assert held is not None and held.live == 3 * 4 * params + 4 * 4 + 64 * 64 * 4 + 64 * 8
