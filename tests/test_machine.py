"""The allocator facts notebook 00 uses to decide whether it judges its "del" claim."""

from __future__ import annotations

import pytest

from course_lib.hardware import machine

GLIBC_MAPS = "7f0-7f1 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"


@pytest.mark.parametrize(
    "maps, system, expected",
    [
        (GLIBC_MAPS, "Linux", "glibc"),
        (GLIBC_MAPS + "7f2-7f3 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4.5.9\n", "Linux", "tcmalloc"),
        (GLIBC_MAPS + "7f2-7f3 r-xp 0 08:01 2 /usr/lib/libjemalloc.so.2\n", "Linux", "jemalloc"),
        (GLIBC_MAPS + "7f2-7f3 r-xp 0 08:01 2 /opt/lib/libmimalloc.so.2.1\n", "Linux", "mimalloc"),
        ("", "Darwin", "macOS libmalloc"),
        ("", "Windows", "Windows heap"),
        ("", "SunOS", "unknown"),
    ],
)
def test_malloc_library_names_a_preloaded_allocator_else_the_systems(maps, system, expected):
    assert machine.malloc_library(maps, system) == expected


def test_malloc_library_reads_this_process():
    assert machine.malloc_library() in {"glibc", "tcmalloc", "jemalloc", "mimalloc", "macOS libmalloc", "Windows heap"}


@pytest.mark.parametrize(
    "library, environ, arch, returned, why",
    [
        ("glibc", {}, "x86_64", True, "unmaps it on free"),
        ("glibc", {"MALLOC_MMAP_MAX_": "0"}, "x86_64", False, "MALLOC_MMAP_MAX_"),
        ("glibc", {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1"}, "x86_64", False, "GLIBC_TUNABLES"),
        ("glibc", {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2"}, "x86_64", True, "unmaps"),
        ("tcmalloc", {}, "x86_64", False, "keeps freed memory"),
        ("jemalloc", {}, "x86_64", False, "keeps freed memory"),
        ("Windows heap", {}, "AMD64", False, "mimalloc"),
        ("glibc", {}, "aarch64", False, "64-bit Arm"),
        ("macOS libmalloc", {}, "arm64", False, "64-bit Arm"),
        ("macOS libmalloc", {}, "x86_64", True, "macOS"),
        ("unknown", {}, "x86_64", False, "unknown"),
    ],
)
def test_large_blocks_are_judged_returned_only_where_the_allocator_gives_them_back(
    library, environ, arch, returned, why
):
    got, said = machine.large_blocks_returned_on_free(library, environ, arch)
    assert got is returned and why in said


def test_the_report_calls_hardware_threads_logical_cpus_not_cores():
    line = next(x for x in machine.detect().report().splitlines() if x.startswith("Cores"))
    assert "physical" in line and "logical CPUs (hardware threads)" in line


def test_the_disk_under_a_path_is_named_from_its_mount_where_no_block_device_holds_it(monkeypatch, tmp_path):
    """disk_of names a virtual, NVMe or spinning disk from /sys, and an overlay (containers) or tmpfs from the mount
    table; it refuses a path that is not one."""
    mounts = "overlay / overlay rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n"
    monkeypatch.setattr(machine, "_read", lambda p: mounts if p == "/proc/self/mounts" else "")
    assert "overlay" in machine._file_system_kind("/content/data") and "memory" in machine._file_system_kind(
        "/dev/shm/x"
    )
    assert isinstance(machine.disk_of(tmp_path), str)
    with pytest.raises(TypeError):
        machine.disk_of(3)
    with pytest.raises(FileNotFoundError):
        machine.disk_of(tmp_path / "missing")


def test_the_memory_settings_summary_names_ram_swap_and_a_container_cap():
    s = machine.memory_settings()
    assert s.ram_bytes > 0 and s.swap_bytes >= 0 and s.summary().startswith(s.system)
    assert "RAM" in s.summary() and ("swap" in s.summary())
