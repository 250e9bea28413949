"""`gendergap sweep --executor slurm` on the one-node cluster (scripts/slurm/): the jobs go out
as SLURM job arrays chained with afterok dependencies, run, and a second run is a no-op.
Skipped, with the reason, when the cluster is not up (tests/slurm_helpers.py)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm

CONFIG = """\
name: slurm-test
corpus: {synth: tiny}
pretraining: {corpus: synth-fr, sets: {female: F, male: M}}
checkpoints:
  F-tiny: {shipped: tiny-female, pretrained_on: female}
  M-tiny: {shipped: tiny-male, pretrained_on: male}
tasks:
  asr-frozen:
    corpus: synth-fr
    layer: last
    overrides: [max_steps=2, number_of_epochs=1]
    resources: {cpus: 1, mem_gb: 2, time_min: 15}
report: {bootstrap: 20}
executor: {name: slurm, partition: %s}
"""


def test_sweep_runs_as_slurm_job_arrays(slurm_cluster, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG % slurm_cluster.partition)
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # the two ASR jobs went out as one array of 2, waiting on the arrays holding their inputs
    line = next(x for x in r.stdout.splitlines() if "submit" in x and "2 job(s) of asr-frozen" in x)
    assert " after " in line, line
    subs = {p.parent.name: json.loads(p.read_text()) for p in (out / "sweep" / "jobs").glob("*/submitted.json")}
    assert {s["executor"] for s in subs.values()} == {"slurm"}
    a, b = subs["asr-frozen_F-tiny"]["job_id"], subs["asr-frozen_M-tiny"]["job_id"]
    assert a.split("_")[0] == b.split("_")[0] and {a.split("_")[1], b.split("_")[1]} == {"0", "1"}
    for name in ("asr-frozen_F-tiny", "asr-frozen_M-tiny", "report"):
        done = json.loads((out / "sweep" / "jobs" / name / "done.json").read_text())
        assert done["seconds"] > 0
    with sqlite3.connect(out / "results.db") as c:
        rows = c.execute("SELECT checkpoint, gender FROM scores WHERE task='asr-frozen' AND metric='wer' "
                         "AND subset='test' AND gender IN ('F', 'M', 'all')").fetchall()
    assert sorted(rows) == sorted((ck, g) for ck in ("F-tiny", "M-tiny") for g in ("F", "M", "all"))
    assert (out / "report" / "report.md").is_file()

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "8 done already, 0 to run" in again.stdout, again.stdout
