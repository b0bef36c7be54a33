"""files.write_atomic: the one atomic writer."""

import os

import pytest

from course_lib import files


def test_write_atomic_bytes_str_and_function(tmp_path):
    p = files.write_atomic(tmp_path / "a.bin", b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    files.write_atomic(tmp_path / "a.bin", "héllo")
    assert (tmp_path / "a.bin").read_text(encoding="utf-8") == "héllo"
    files.write_atomic(str(tmp_path / "b.txt"), lambda f: f.write(b"from a function"))
    assert (tmp_path / "b.txt").read_bytes() == b"from a function"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a.bin", "b.txt"]  # no temporary left
    mask = os.umask(0)
    os.umask(mask)
    if os.name == "posix":
        assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")

    def crash(f):
        f.write(b"half of the ")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        files.write_atomic(target, crash)
    assert target.read_text() == "old" and [q.name for q in tmp_path.iterdir()] == ["r.json"]


def test_write_atomic_bad_input(tmp_path):
    with pytest.raises(TypeError, match="path"):
        files.write_atomic(3, b"")
    with pytest.raises(TypeError, match="write"):
        files.write_atomic(tmp_path / "x", 3)
    with pytest.raises(ValueError, match="folder"):
        files.write_atomic(tmp_path, b"")
    with pytest.raises(ValueError, match="does not exist"):
        files.write_atomic(tmp_path / "missing" / "x", b"")
