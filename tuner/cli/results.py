"""`tune.py results pack|unpack`: the per-GPU artefacts git does not track moved between hosts as one .tar.gz
(tuner/store/pack.py packs and checks them)."""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import tarfile
import zlib
from pathlib import Path

from rich.console import Console

from tuner.cli.choices import UsageParser
from tuner.store.pack import ARTEFACTS, files_to_pack, pack, unpack
from tuner.store.results import ResultsError

REPO = Path(__file__).resolve().parents[2]


def default_archive() -> Path:
    return Path(f"results-{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}.tar.gz")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="tune.py results",
        description=f"Move the per-GPU artefacts git does not track ({ARTEFACTS} under results/<gpu>/) "
                    "between hosts as one .tar.gz.")
    actions = parser.add_subparsers(title="actions", dest="action", metavar="{pack,unpack}", required=True)
    packing = actions.add_parser("pack", help="write results/<gpu>/'s untracked artefacts into one .tar.gz",
                                 description="Write the untracked artefacts of results/<gpu>/ into one .tar.gz "
                                             "(members results/<gpu>/...); a journal is read under its lock.")
    packing.add_argument("--gpu", action="append", metavar="NAME",
                         help="GPU folder under the results directory (repeatable; default: every GPU folder "
                              "holding any of them)")
    packing.add_argument("--results-dir", type=Path, default=REPO / "results", metavar="DIR",
                         help="the folder holding results/<gpu>/ (default results/ in the repository)")
    packing.add_argument("-o", "--output", type=Path, metavar="FILE",
                         help="the archive to write, replaced if it exists (default results-<UTC date>.tar.gz "
                              "in the current folder)")
    unpacking = actions.add_parser("unpack", help="put a pack's files back under results/<gpu>/",
                                   description="Put an archive written by `tune.py results pack` back under "
                                               "results/<gpu>/. Refuses members outside results/<gpu>/'s "
                                               f"artefacts ({ARTEFACTS}), absolute paths, '..' and links; "
                                               "writes nothing unless every member passes.")
    unpacking.add_argument("archive", type=Path, help="the .tar.gz written by `tune.py results pack`")
    unpacking.add_argument("--results-dir", type=Path, default=REPO / "results", metavar="DIR",
                           help="the folder to unpack results/<gpu>/ into (default results/ in the repository)")
    unpacking.add_argument("--replace", action="store_true",
                           help="overwrite files that already exist (default: refuse, and write nothing)")
    return parser


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"


def main(argv: list[str], console: Console) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "pack":
            archive = args.output or default_archive()
            files = files_to_pack(args.results_dir, args.gpu)
            pack(files, archive)
            gpus = sorted({file.member.split("/")[1] for file in files})
            console.print(f"wrote {archive}: {len(files)} files of {', '.join(gpus)} "
                          f"({_size(sum(file.source.stat().st_size for file in files))} before compression, "
                          f"{_size(archive.stat().st_size)} packed)")
            return 0
        files = unpack(args.archive, args.results_dir, args.replace)
        gpus = sorted({file.member.split("/")[1] for file in files})
        console.print(f"unpacked {len(files)} files ({_size(sum(file.size for file in files))}) into "
                      f"{', '.join(str(args.results_dir / gpu) for gpu in gpus)}")
        return 0
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ResultsError(f"{getattr(args, 'archive', '')}: not a readable .tar.gz ({error})") from None
    except OSError as error:
        raise ResultsError(f"{error.filename or ''}: {error.strerror or error}") from None
