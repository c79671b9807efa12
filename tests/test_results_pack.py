"""tune.py results pack/unpack: the untracked per-GPU artefacts moved between hosts as one .tar.gz."""
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from tuner.cli import results as results_command
from tuner.store.results import ResultsError

REPO = Path(__file__).resolve().parents[1]
ARTEFACTS = {"optuna.journal": b'{"op_code": 0}\n', "history.jsonl": b'{"layer": "conv_1"}\n',
             "logs/bench.log": b"one run\n", "logs/deep/ncu.json": b"{}", "plots/summary.png": b"\x89PNG"}


def results_tree(root: Path, gpu: str = "nvidia-h100-80gb-hbm3") -> Path:
    folder = root / gpu
    for name, content in ARTEFACTS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    (folder / "best.yaml").write_text("layers: {}\n")  # tracked: never packed
    return folder


def run(*argv: str) -> int:
    return results_command.main(list(argv), Console(file=io.StringIO()))


def members(archive: Path) -> set[str]:
    with tarfile.open(archive, "r:gz") as tar:
        return {member.name for member in tar.getmembers()}


def test_round_trip_moves_every_artefact_and_nothing_tracked(tmp_path):
    here = results_tree(tmp_path / "here")
    results_tree(tmp_path / "here", "nvidia-h200")
    archive = tmp_path / "moved.tar.gz"
    assert run("pack", "--results-dir", str(tmp_path / "here"), "-o", str(archive)) == 0
    assert members(archive) == {f"results/{gpu}/{name}" for gpu in ("nvidia-h100-80gb-hbm3", "nvidia-h200")
                                for name in ARTEFACTS}
    assert run("unpack", str(archive), "--results-dir", str(tmp_path / "there")) == 0
    there = tmp_path / "there" / here.name
    for name, content in ARTEFACTS.items():
        assert (there / name).read_bytes() == content, name
        assert (there / name).stat().st_mtime == pytest.approx((here / name).stat().st_mtime, abs=1)
    assert not (there / "best.yaml").exists()
    assert not [path for path in (tmp_path / "there").rglob(".*")]  # no temp file left behind


def test_pack_takes_only_the_named_gpu_and_refuses_one_with_nothing(tmp_path):
    results_tree(tmp_path)
    results_tree(tmp_path, "nvidia-h200")
    archive = tmp_path / "h200.tar.gz"
    assert run("pack", "--results-dir", str(tmp_path), "--gpu", "nvidia-h200", "-o", str(archive)) == 0
    assert {name.split("/")[1] for name in members(archive)} == {"nvidia-h200"}
    (tmp_path / "empty-gpu").mkdir()
    with pytest.raises(ResultsError, match="nothing to pack for empty-gpu"):
        run("pack", "--results-dir", str(tmp_path), "--gpu", "empty-gpu", "-o", str(tmp_path / "x.tar.gz"))
    with pytest.raises(ResultsError, match="not a results folder name"):
        run("pack", "--results-dir", str(tmp_path), "--gpu", "../elsewhere")
    with pytest.raises(ResultsError, match="nothing to pack"):
        run("pack", "--results-dir", str(tmp_path / "none"), "-o", str(tmp_path / "y.tar.gz"))


def test_pack_leaves_links_out(tmp_path):
    folder = results_tree(tmp_path)
    (tmp_path / "secret").write_text("not results")
    (folder / "logs" / "link.log").symlink_to(tmp_path / "secret")
    (folder / "logs" / "linked").symlink_to(tmp_path, target_is_directory=True)
    archive = tmp_path / "out.tar.gz"
    assert run("pack", "--results-dir", str(tmp_path), "-o", str(archive)) == 0
    assert not [name for name in members(archive) if "link" in name]


def test_unpack_never_overwrites_without_replace(tmp_path):
    results_tree(tmp_path / "here")
    archive = tmp_path / "moved.tar.gz"
    run("pack", "--results-dir", str(tmp_path / "here"), "-o", str(archive))
    there = tmp_path / "there" / "nvidia-h100-80gb-hbm3"
    there.mkdir(parents=True)
    (there / "history.jsonl").write_text("this host's history\n")
    with pytest.raises(ResultsError, match="history.jsonl already exist.*--replace.*nothing unpacked"):
        run("unpack", str(archive), "--results-dir", str(tmp_path / "there"))
    assert (there / "history.jsonl").read_text() == "this host's history\n"
    assert sorted(path.name for path in there.iterdir()) == ["history.jsonl"]  # nothing else written either
    assert run("unpack", str(archive), "--results-dir", str(tmp_path / "there"), "--replace") == 0
    assert (there / "history.jsonl").read_bytes() == ARTEFACTS["history.jsonl"]


def hostile_archive(path: Path, *infos: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        good = tarfile.TarInfo("results/nvidia-h100-80gb-hbm3/history.jsonl")
        good.size = 3
        tar.addfile(good, io.BytesIO(b"ok\n"))
        for info in infos:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def file_member(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def link_member(name: str, kind: bytes, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def fifo_member(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.FIFOTYPE
    return info


@pytest.mark.parametrize("member, reason", [
    (file_member("/etc/passwd"), "absolute"),
    (file_member("results/nvidia-h100-80gb-hbm3/../../escape.txt"), "'..'"),
    (file_member("../escape.txt"), "'..'"),
    (file_member("results/nvidia-h100-80gb-hbm3/logs/../../../x"), "'..'"),
    (file_member("results/nvidia-h100-80gb-hbm3/best.yaml"), "none of"),
    (file_member("results/nvidia-h100-80gb-hbm3/logs"), "none of"),
    (file_member("results/README.md"), "outside results/<gpu>/"),
    (file_member("elsewhere/nvidia-h100-80gb-hbm3/optuna.journal"), "outside results/<gpu>/"),
    (file_member("results/Not A Slug/optuna.journal"), "outside results/<gpu>/"),
    (file_member("results/nvidia-h100-80gb-hbm3//optuna.journal"), "empty"),
    (link_member("results/nvidia-h100-80gb-hbm3/logs/a.log", tarfile.SYMTYPE, "/etc/passwd"), "link"),
    (link_member("results/nvidia-h100-80gb-hbm3/logs/b.log", tarfile.LNKTYPE, "/etc/passwd"), "link"),
    (fifo_member("results/nvidia-h100-80gb-hbm3/logs/fifo"), "special"),
    (file_member("results/nvidia-h100-80gb-hbm3/history.jsonl"), "twice"),
])
def test_unpack_refuses_hostile_members_and_writes_nothing(tmp_path, member, reason):
    archive = hostile_archive(tmp_path / "hostile.tar.gz", member)
    target = tmp_path / "sandbox" / "results"
    with pytest.raises(ResultsError, match="refused, nothing unpacked") as error:
        run("unpack", str(archive), "--results-dir", str(target))
    assert reason in str(error.value)
    assert not (tmp_path / "sandbox").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_unpack_refuses_to_write_through_a_linked_folder(tmp_path):
    results_tree(tmp_path / "here")
    archive = tmp_path / "moved.tar.gz"
    run("pack", "--results-dir", str(tmp_path / "here"), "-o", str(archive))
    (tmp_path / "there").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "there" / "nvidia-h100-80gb-hbm3").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(ResultsError, match="is a link or a file"):
        run("unpack", str(archive), "--results-dir", str(tmp_path / "there"))
    assert not list((tmp_path / "elsewhere").iterdir())


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    """Through tune.py as a user runs it: a hostile member, a file that is not a .tar.gz, a missing one."""
    hostile = hostile_archive(tmp_path / "hostile.tar.gz", file_member("../../escape.txt"))
    (tmp_path / "not.tar.gz").write_text("plain text")
    for archive in (hostile, tmp_path / "not.tar.gz", tmp_path / "missing.tar.gz"):
        result = subprocess.run([sys.executable, str(REPO / "tune.py"), "results", "unpack", str(archive),
                                 "--results-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
        assert str(archive.name) in lines[0]
    assert not (tmp_path / "r").exists()


def test_help_names_every_flag():
    for action, flags in (("pack", ("--gpu", "--results-dir", "--output")), ("unpack", ("--results-dir", "--replace"))):
        result = subprocess.run([sys.executable, str(REPO / "tune.py"), "results", action, "--help"],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and f"usage: tune.py results {action}" in result.stdout, result.stderr
        assert all(flag in result.stdout for flag in flags), result.stdout
