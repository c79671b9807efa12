"""The records of results/<gpu>/'s files: every key checked on read, and a file read and written again the
same, byte for byte."""
from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tuner.store.best import best_records, read_best, update_best
from tuner.store.results import BEST_FILE, ResultsError
from tuner.store.schema import BestEntry, BestHeader

REPO = Path(__file__).resolve().parents[1]
COMMITTED = sorted(REPO.glob("results/*/" + BEST_FILE))

# An entry with every key the tuner writes (tuning.best_entry), as it writes them: ptxas gave no report
# (spill_bytes null) and the entry it replaced had no run id.
FULL_ENTRY = {
    "problem": {"n": 1, "h": 32, "w": 32, "c": 32, "k": 32, "r": 3, "s": 3, "pad": 1, "stride": 1, "dilation": 1,
                "input_type": "f16", "filter_type": "f16", "output_type": "f32", "accumulator_type": "f32",
                "epilogue": "bias+relu"},
    "family": "sm80",
    "params": {"tile": "64x64x32", "warps": "2x2x1", "stages": 4, "swizzle": 2, "iterator": "optimized", "split_k": 1},
    "kernel": "64x64x32_w2x2x1_s4_sw2_optimized_sk1_a8x8_f16_f16_f32_f32",
    "runtime_us": 3.994, "spread": 0.0077, "p10_us": 3.98, "p90_us": 4.01, "tflops": 4.7, "gbps": 53.8,
    "rel_l2_error": 3.721e-07, "grid_blocks": 16, "cluster": [1, 1, 1], "waves": 0.121, "registers_per_thread": 96,
    "spill_bytes": None, "smem_bytes": 40960,
    "study": {"name": "gpu/conv_1/n1h32w32c32k32r3s3p1u1d1/families=sm80@0123abcd/f16_f16_f32_f32+bias+relu",
              "trials": 40, "measured_this_run": 24},
    "family_best_us": {"sm80": 3.994},
    "run": "host:1:abc", "date": "2026-11-22T16:06:33+00:00",
    "occupancy": {"blocks_per_sm": 2, "limited_by": ["shared memory"], "theoretical_pct": 25.0},
    "waste": [{"code": "small_grid", "value": 0.1212, "message": "16 blocks on 132 SMs"}],
    "ncu": {"duration_us": 4.1, "grid_blocks": 16, "waves_per_sm": 0.12,
            "agrees_with_static": {"grid_blocks": True, "occupancy": False}},
    "reference": {"params": {"tile": "128x128x64", "warps": "2x2x1", "stages": 3, "swizzle": 1,
                             "iterator": "optimized", "split_k": 1},
                  "runtime_us": 9.248, "grid_blocks": 8, "speedup": 2.316},
    "previous": {"runtime_us": 4.2, "kernel": "older", "run": None, "date": ""},
}
HEADER = {"device": {"name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3", "compute_capability": "9.0",
                     "sm_count": 132, "l2_bytes": 52428800},
          "toolchain": {"nvcc": "13.0.88", "cutlass": "4.2.0.0", "driver": "13.0", "cuda_runtime": "13.2"}}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: path.parent.name)
@pytest.mark.slow
def test_the_committed_best_yaml_reads_back_and_writes_out_unchanged(tmp_path, path):
    shutil.copy(path, tmp_path / BEST_FILE)
    header, layers = best_records(tmp_path)
    layer = next(iter(layers))
    update_best(tmp_path, layer, layers[layer], header)  # rewrites the whole file from its records
    assert (tmp_path / BEST_FILE).read_bytes() == path.read_bytes()


def test_an_entry_with_every_key_is_written_as_the_tuner_always_wrote_it(tmp_path):
    entry = BestEntry.parse("conv_1", copy.deepcopy(FULL_ENTRY))
    assert entry.as_dict() == FULL_ENTRY and list(entry.as_dict()) == list(FULL_ENTRY)
    assert entry.spill_bytes is None and entry.previous.run is None and entry.previous_us == 4.2
    assert entry.study_name == FULL_ENTRY["study"]["name"] and entry.knobs == FULL_ENTRY["params"]
    update_best(tmp_path, "conv_1", entry, BestHeader.parse(HEADER))
    written = {**HEADER, "layer_count": 1, "layers": {"conv_1": FULL_ENTRY}}
    assert (tmp_path / BEST_FILE).read_text() == yaml.safe_dump(written, sort_keys=False, width=110)


def test_a_hand_made_entry_keeps_only_its_keys(tmp_path):
    """The five keys every entry holds, and any of the rest, each written back only where it was given."""
    minimal = {key: FULL_ENTRY[key] for key in ("problem", "family", "params", "kernel", "runtime_us")}
    for extra in ({}, {"date": "2026-11-24"}, {"study": {"name": "s"}}, {"tflops": 4.49}):
        assert BestEntry.parse("conv_1", {**minimal, **extra}).as_dict() == {**minimal, **extra}


@pytest.mark.parametrize("key, value, says", [
    ("spread", "tight", "spread 'tight' is not a number of 0 or more"),
    ("grid_blocks", 1.5, "grid_blocks 1.5 is not a whole number"),
    ("cluster", "1x2x1", "cluster '1x2x1' is not a list"),
    ("cluster", [1, -2, 1], "cluster[1] -2 is not a whole number"),
    ("spill_bytes", True, "spill_bytes True is not a whole number"),
    ("study", {"name": "s", "trials": "many"}, "study: trials 'many' is not a whole number"),
    ("study", {"name": "s", "tirals": 3}, "study: unknown key 'tirals'"),
    ("family_best_us", {"sm80": 0}, "family_best_us.sm80 0 is not a positive number"),
    ("family_best_us", {"SM 80": 1.0}, "family_best_us key 'SM 80' is not a family name"),
    ("run", 7, "run 7 is not a run id"),
    ("occupancy", {"blocks_per_sm": 2, "limited_by": ["smem"]}, "occupancy: missing theoretical_pct"),
    ("waste", [{"code": "small_grid", "value": "x", "message": "m"}], "waste[0]: value 'x' is not a number"),
    ("ncu", {"duration_us": 4.1, "agrees_with_static": {"grid_blocks": "yes"}},
     "ncu.agrees_with_static.grid_blocks 'yes' is not true or false"),
    ("reference", {"params": {"tile": "t"}, "runtime_us": 9.0, "grid_blocks": 8}, "reference: missing speedup"),
    ("previous", {"runtime_us": -1, "kernel": "k", "run": None, "date": ""}, "previous: runtime_us -1 is not a"),
    ("previous", {"runtime_us": 4.2, "kernel": "k", "date": ""}, "previous: missing run"),
    ("tflop", 4.7, "unknown key 'tflop'"),
])
def test_every_key_of_an_entry_is_checked(tmp_path, key, value, says):
    damaged = {**copy.deepcopy(FULL_ENTRY), key: value}
    (tmp_path / BEST_FILE).write_text(yaml.safe_dump({**HEADER, "layer_count": 1, "layers": {"conv_1": damaged}}))
    with pytest.raises(ResultsError, match=re.escape(says)) as refused:
        read_best(tmp_path)
    assert "layer 'conv_1'" in str(refused.value) and "restore it" in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("header, says", [
    ({"device": {"name": "H100", "sm_count": "132"}}, "device: sm_count '132' is not a whole number"),
    ({"device": ["H100"]}, "device is not a mapping"),
    ({"toolchain": {"nvcc": 13.0}}, "toolchain: nvcc 13.0 is not an nvcc version"),
    ({"devices": {}}, "unknown key 'devices'"),
    ({"schema": 2}, "best.yaml states schema 2: another version of the tuner wrote it (this one reads schema 1)"),
])
def test_the_header_is_checked_and_a_newer_file_refused(tmp_path, header, says):
    (tmp_path / BEST_FILE).write_text(yaml.safe_dump({**header, "layer_count": 0, "layers": {}}))
    with pytest.raises(ResultsError, match=re.escape(says)):
        read_best(tmp_path)
