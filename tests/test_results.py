import os
import stat

import pytest

from tuner.store.results import atomic_write, gpu_dir


def test_gpu_dir(tmp_path):
    assert gpu_dir(tmp_path, "nvidia-h100-80gb-hbm3") == tmp_path / "nvidia-h100-80gb-hbm3"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = tmp_path / "deep" / "best.yaml"
    atomic_write(path, "first\n")
    atomic_write(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["best.yaml"]


def test_atomic_write_is_readable_by_others(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "best.yaml", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "best.yaml").stat().st_mode) == 0o644


def test_atomic_write_failure_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "best.yaml"
    atomic_write(path, "old\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["best.yaml"]
