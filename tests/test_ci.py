"""The test commands the README gives are the ones CI and pytest's defaults run."""
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FULL = 'python -m pytest -q -m "not gpu" -n auto --dist loadfile'


def test_ci_runs_the_readmes_full_command():
    readme = (REPO / "README.md").read_text()
    assert f"{FULL}    # the full CPU set, as CI runs it" in readme
    commands = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if "pytest" in line
                and not line.lstrip().startswith("#")]
    assert commands == [FULL]


def test_the_quick_default_leaves_out_the_marked_tests_and_a_marker_must_be_registered():
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"]
    assert "--strict-markers" in addopts
    assert addopts[addopts.index("-m") + 1] == "not slow and not nvcc"
    registered = {re.match(r"(\w+):", marker).group(1) for marker in options["markers"]}
    assert registered == {"gpu", "nvcc", "slow"}


def test_the_full_command_runs_what_the_quick_one_leaves_out():
    """A -m on the command line replaces the default one (test_resume.py is all `slow`)."""
    def collected(*options: str) -> str:
        run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              *options, "tests/test_resume.py"], cwd=REPO, capture_output=True, text=True)
        return run.stdout.strip().splitlines()[-1]

    assert collected().startswith("no tests collected (2 deselected)")
    marker = shlex.split(FULL).index("-m")
    assert collected(*shlex.split(FULL)[marker:marker + 2]).startswith("2 tests collected")
