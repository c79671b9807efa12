"""A report file, in whichever form it is: text read and checked before it is parsed, or an .ncu-rep read
through Nsight Compute's report interface in a child process."""
from __future__ import annotations

from pathlib import Path

from tuner.analysis.ncu import BINARY_REPORT, NcuLaunch, NcuReportError, require_launches
from tuner.analysis.ncu_csv import CSV_HEADER, is_raw_csv, parse_csv_report, parse_raw_csv_report, raw_metrics
from tuner.analysis.ncu_text import GUI_HEADER, parse_gui_report, parse_text_report


def parse_report(text: str) -> list[NcuLaunch]:
    """Parse a report in whichever form `text` is: CLI details text, `--csv --page details`, or the
    GUI's Details page copied as text."""
    if is_raw_csv(text):
        return parse_raw_csv_report(text)
    if CSV_HEADER.search(text):
        return parse_csv_report(text)
    if GUI_HEADER.search(text):
        return parse_gui_report(text)
    return parse_text_report(text)


# Text reports run some 20 KB per launch: 64 MiB is thousands of launches, and parses in a few seconds.
MAX_REPORT_BYTES = 64 * 1024 * 1024
# A text report has no NUL byte; an .ncu-rep or other binary file has them near its start.
_BINARY_PROBE_BYTES = 64 * 1024


def read_report_text(path: Path) -> str:
    """A report file's text: refused when it is not a file, larger than MAX_REPORT_BYTES, empty or binary."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise NcuReportError(f"ncu report {path} is not a file")
        if size > MAX_REPORT_BYTES:
            raise NcuReportError(f"ncu report {path} is {size / 1e6:.1f} MB, more than the "
                                 f"{MAX_REPORT_BYTES // (1024 * 1024)} MiB this reads: export fewer launches "
                                 "(ncu --import FILE --kernel-name NAME --launch-count N)")
        with path.open("rb") as stream:
            data = stream.read(MAX_REPORT_BYTES + 1)
    except OSError as error:
        raise NcuReportError(f"cannot read ncu report {path}: {error.strerror or error}") from None
    if b"\0" in data[:_BINARY_PROBE_BYTES]:
        raise NcuReportError(f"ncu report {path}: {BINARY_REPORT}")
    return data.decode("utf-8", errors="replace")


def ncu_report_folder() -> Path | None:
    """Where Nsight Compute's Python report interface (ncu_report) lives: on the path as it is (the
    ncu-report package, or PYTHONPATH), else the extras/python folder of the Nsight Compute that `ncu` on
    PATH belongs to. Found without importing it: the native library is loaded only in the child that
    reads a report (read_ncu_rep)."""
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("ncu_report")
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        return origin.parent.parent if origin.name == "__init__.py" else origin.parent
    ncu = shutil.which("ncu")
    folders = []
    if ncu:
        base = Path(ncu).resolve().parent
        folders += [base / "extras" / "python", base.parent / "extras" / "python",
                    *base.parent.glob("nsight-compute*/extras/python")]
    # The CUDA toolkit's and the standalone installers' usual places.
    for root in (Path("/usr/local"), Path("/opt/nvidia")):
        folders += [*root.glob("cuda*/nsight-compute*/extras/python"), *root.glob("nsight-compute*/*/extras/python"),
                    *root.glob("nsight-compute*/extras/python")]
    return next((folder for folder in folders if (folder / "ncu_report.py").is_file()), None)


def _raw_dims(values: dict[str, tuple[str, str]], prefix: str) -> tuple[int, int, int] | None:
    """x, y, z of `<prefix>_x/_y/_z` raw metrics (unit, value text), or None where one is missing."""
    texts = [values.get(f"{prefix}_{axis}", ("", ""))[1].replace(",", "") for axis in "xyz"]
    return tuple(int(text) for text in texts) if all(text.isdigit() for text in texts) else None


NCU_REP_TIMEOUT_S = 120


def read_ncu_rep(path: Path) -> list[NcuLaunch]:
    """An .ncu-rep file through ncu_report, in a child process (tuner/analysis/ncu_rep.py: the native library
    can crash the process that loads it): every metric of every launch, as the raw page gives them."""
    import json
    import os
    import subprocess
    import sys

    folder = ncu_report_folder()
    export = f"or export it with `ncu --import {path.name} --csv --page raw > {path.stem}.csv` and read that"
    if folder is None:
        raise NcuReportError(f"{path} is an .ncu-rep: reading it needs Nsight Compute's Python report interface, "
                             f"ncu_report (pip install ncu-report, or ncu on PATH); {export}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(Path(__file__).resolve().parents[2]),
                                         *filter(None, [env.get("PYTHONPATH")])])
    try:
        child = subprocess.run([sys.executable, "-m", "tuner.analysis.ncu_rep", str(path)], capture_output=True, text=True,
                               env=env, timeout=NCU_REP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NcuReportError(f"{path}: ncu_report took more than {NCU_REP_TIMEOUT_S} s; {export}") from None
    if child.returncode != 0:
        how = f"crashed (signal {-child.returncode})" if child.returncode < 0 else "cannot read it"
        last = (child.stderr.strip().splitlines() or [""])[-1][:200]
        raise NcuReportError(f"{path}: ncu_report {how}{f' ({last})' if last else ''}; {export}")
    try:
        found = json.loads(child.stdout)
    except ValueError:
        raise NcuReportError(f"{path}: ncu_report gave no readable answer; {export}") from None
    launches = []
    for action in found:
        values = {name: (unit, text) for name, (unit, text) in action["metrics"].items()}
        launches.append(NcuLaunch(action["name"], _raw_dims(values, "launch__grid_dim"),
                                  _raw_dims(values, "launch__block_dim"), None, None, raw_metrics(values)))
    return require_launches(launches)


def load_report(path: Path) -> tuple[list[NcuLaunch], str]:
    """A report file's launches and the text they were read from (of an .ncu-rep, the device names it
    records), in whichever form it is; NcuReportError names the file and says in one line what is wrong."""
    if path.suffix == ".ncu-rep" and path.is_file():
        launches = read_ncu_rep(path)
        names = {str(metric.value) for launch in launches
                 if (metric := launch.metric("device__attribute_display_name", "raw")) is not None}
        return launches, "\n".join(sorted(names))
    text = read_report_text(path)
    try:
        return parse_report(text), text
    except NcuReportError as error:
        raise NcuReportError(f"ncu report {path}: {error}") from None


def read_report(path: Path) -> list[NcuLaunch]:
    return load_report(path)[0]
