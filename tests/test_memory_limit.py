"""course_lib.memory.limit: capped subprocesses for out-of-memory demos (notebook 02, memory).

Each run_with_memory_limit call starts a child process (~0.05 s once the forkserver has imported
torch). Helper functions live at module level: the child imports them. Tests that need an enforced
address-space cap skip where there is none (macOS, Windows); the others run everywhere.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from course_lib.memory import limit
from course_lib.memory.limit import (
    LimitedRun,
    allocate_bytes,
    find_max_batch_size,
    is_oom_error,
    mlp_training_step,
    run_with_memory_limit,
)

from course_lib.procs import leftover_processes as leftover_children

MiB = 2**20
needs_cap = pytest.mark.skipif(
    not limit.memory_limit_supported(), reason="an enforced RLIMIT_AS needs Linux; this platform cannot cap memory"
)


def raise_value_error(x: int) -> None:
    raise ValueError(f"bad value {x}")


def sleep_then_return(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def kill_myself() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def no_children_left() -> bool:
    return not leftover_children()


@pytest.mark.slow
@needs_cap
def test_small_allocation_fits_and_limit_is_headroom_above_baseline():
    r = run_with_memory_limit(allocate_bytes, 256 * MiB, 128 * MiB)
    assert isinstance(r, LimitedRun)
    assert r.ok and not r.oom and r.value == 128 * MiB, r.summary()
    # limit semantics: the cap is the child's baseline address space plus limit_bytes
    assert r.address_space_limit_bytes == r.baseline_address_space_bytes + 256 * MiB
    assert r.baseline_address_space_bytes > 100 * MiB  # python + torch reserve a lot of address space
    assert 120 * MiB < r.peak_rss_increase_bytes < 256 * MiB
    assert r.seconds > 0 and r.fn_seconds is not None and no_children_left()


@pytest.mark.slow
@needs_cap
def test_allocation_above_headroom_is_oom():
    r = run_with_memory_limit(allocate_bytes, 256 * MiB, 384 * MiB)  # 1.5x the head-room
    assert not r.ok and r.oom and r.error_type == "RuntimeError", r.summary()
    assert "DefaultCPUAllocator" in r.message and "out of memory" in r.message
    assert "OUT OF MEMORY" in r.summary()


@pytest.mark.slow
@needs_cap
def test_2gb_under_512mb_is_oom_and_caller_survives():
    r = run_with_memory_limit(allocate_bytes, 512 * MiB, 2048 * MiB)
    assert not r.ok and r.oom and r.value is None
    assert no_children_left()
    assert os.getpid() == psutil.Process().pid  # still here


@pytest.mark.slow
@needs_cap
def test_other_exceptions_are_returned_not_raised():
    r = run_with_memory_limit(raise_value_error, 64 * MiB, 7)
    assert not r.ok and not r.oom and r.error_type == "ValueError"
    assert "bad value 7" in r.message and "raise_value_error" in r.message  # short traceback


@pytest.mark.slow
@needs_cap
def test_timeout_kills_child():
    r = run_with_memory_limit(sleep_then_return, 64 * MiB, 600.0, timeout=3.0)
    assert not r.ok and r.timed_out and r.error_type == "TimeoutError" and not r.oom
    assert "timeout=3" in r.message
    assert 3 <= r.seconds < 600, "the timeout, not the 600 s sleep, must end the run"
    assert no_children_left()


@pytest.mark.slow
@needs_cap
def test_child_that_crashes_while_importing_shows_its_own_output():
    import crash_at_import

    r = run_with_memory_limit(crash_at_import.work, 64 * MiB)
    assert not r.ok and not r.oom and r.error_type == "ChildExited" and r.exitcode == 7
    assert "dying while being imported, on purpose" in r.message and "dying" in r.log_tail
    assert no_children_left()


@pytest.mark.slow
@needs_cap
def test_child_that_exits_silently_says_so():
    r = run_with_memory_limit(os._exit, 64 * MiB, 5)
    assert r.error_type == "ChildExited" and "code 5" in r.message and "printed nothing" in r.message


@pytest.mark.slow
@needs_cap
def test_child_killed_by_signal_counts_as_oom():
    r = run_with_memory_limit(kill_myself, 64 * MiB)
    assert not r.ok and r.oom and r.exitcode == -signal.SIGKILL and "SIGKILL" in r.message


def test_non_importable_functions_are_rejected_up_front():
    with pytest.raises(TypeError, match="importable"):
        run_with_memory_limit(lambda: 1, 64 * MiB)

    def local():
        return 1

    with pytest.raises(TypeError, match="module"):
        run_with_memory_limit(local, 64 * MiB)

    def in_notebook():
        return 1

    in_notebook.__module__ = "__main__"
    in_notebook.__qualname__ = "in_notebook"
    with pytest.raises(TypeError, match="notebook"):
        run_with_memory_limit(in_notebook, 64 * MiB)
    with pytest.raises(TypeError, match="callable"):
        run_with_memory_limit(42, 64 * MiB)
    assert no_children_left()


@pytest.mark.parametrize("limit", [0, -1, -5.0])
def test_bad_limit(limit):
    with pytest.raises(ValueError, match="limit_bytes"):
        run_with_memory_limit(allocate_bytes, limit, 10)


def test_bad_arguments():
    with pytest.raises(TypeError, match="limit_bytes"):
        run_with_memory_limit(allocate_bytes, "1GB", 10)
    with pytest.raises(ValueError, match="timeout"):
        run_with_memory_limit(allocate_bytes, MiB, 10, timeout=0)
    with pytest.raises(ValueError, match="high"):
        find_max_batch_size(mlp_training_step, MiB, low=8, high=4)
    with pytest.raises(ValueError, match="start"):
        find_max_batch_size(mlp_training_step, MiB, low=8, high=64, start=128)
    with pytest.raises(ValueError, match="batch_size"):
        mlp_training_step(0)


def test_is_oom_error():
    assert is_oom_error(MemoryError())
    assert is_oom_error(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"))
    assert not is_oom_error(RuntimeError("shape mismatch"))
    assert not is_oom_error(ValueError("not enough memory"))  # only allocator RuntimeErrors count


@pytest.mark.slow
@needs_cap
def test_find_max_batch_size():
    s = find_max_batch_size(mlp_training_step, 128 * MiB, low=64, high=16384, start=1024)
    assert s.largest_ok is not None and s.smallest_failed is not None, s
    assert s.largest_ok < s.smallest_failed <= s.largest_ok + max(1, s.largest_ok // 8), s.table()
    by_batch = {p.batch_size: p for p in s.probes}
    assert by_batch[s.largest_ok].ok and by_batch[s.smallest_failed].oom
    # memory grows with the batch: everything at or below largest_ok fit, everything above failed
    assert all(p.ok == (p.batch_size <= s.largest_ok) for p in s.probes), s.table()
    assert len(s.probes) <= 12, s.table()
    assert no_children_left()


@pytest.mark.slow
@needs_cap
def test_keyboard_interrupt_leaves_no_child():
    import threading

    main = threading.main_thread().ident
    t0 = time.perf_counter()
    timer = threading.Timer(1.5, signal.pthread_kill, (main, signal.SIGINT))  # Ctrl-C while the child sleeps
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_with_memory_limit(sleep_then_return, 64 * MiB, 600.0, timeout=600.0)
    finally:
        timer.cancel()
    assert time.perf_counter() - t0 < 600, "Ctrl-C, not the timeout, must end the run"
    assert no_children_left()


@pytest.mark.slow
@needs_cap
def test_env_reaches_the_child_only():
    import os

    from course_lib.memory import limit

    r = limit.run_with_memory_limit(os.getenv, 256 * 2**20, "COURSE_TEST_VAR", env={"COURSE_TEST_VAR": "42"})
    assert r.ok and r.value == "42"
    assert "COURSE_TEST_VAR" not in os.environ
    with pytest.raises(TypeError, match="env"):
        limit.run_with_memory_limit(os.getenv, 256 * 2**20, "X", env={"X": 1})
