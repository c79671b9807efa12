"""tuner/build/builder_pool.py: long-lived builders, spoken to one JSON line a job each way."""
import sys
from pathlib import Path

import tuner
from tuner.build.builder_pool import BuilderPool
from tuner.families.base import BuildRequest

# a stand-in builder: answers each job with the `tuner` package it imported and the folder it was given
ECHO_BUILDER = """
import json, sys, tuner
for line in sys.stdin:
    print(json.dumps({"rc": 0, "log": tuner.__file__ + "\\n" + json.loads(line)["folder"]}), flush=True)
"""


def test_a_builder_imports_the_tuner_that_started_it_not_a_tuner_folder_where_the_user_stands(tmp_path, monkeypatch):
    """A builder runs `python -m`, which puts its working directory first on sys.path. Started in the user's, it
    built another `tuner` than the one whose sources key the build cache (a patched copy's diagnostic on the H200
    built the original sources this way)."""
    decoy = tmp_path / "tuner"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    request = BuildRequest(source="", source_file="spec.json", command=(), toolchain="echo",
                           serve_command=(sys.executable, "-c", ECHO_BUILDER))
    pool = BuilderPool()
    try:
        log, failed, transient = pool.build(request, Path("cache/ab"), timeout_s=60)
    finally:
        pool.close()
    imported, folder = log.split("\n")
    assert (failed, transient) == (False, False)
    assert Path(imported).resolve() == Path(tuner.__file__).resolve()
    assert folder == str((tmp_path / "cache/ab").resolve())  # a relative cache folder is the caller's
