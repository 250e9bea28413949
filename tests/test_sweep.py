"""`gendergap sweep` for real (submitit's local executor, real engines on the tiny corpus):
killed halfway and run again it finishes the rest without redoing finished jobs, the DB holds
exactly one row set per job, failed jobs wait for --retry-failed, and `sweep status` lists logs."""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

CONFIG = """\
name: t
corpus: {synth: tiny}
pretraining: {corpus: synth-fr, sets: {female: F, male: M}}
checkpoints:
  F-tiny: {shipped: tiny-female, pretrained_on: female}
  M-tiny: {shipped: tiny-male, pretrained_on: male}
tasks:
  asr-frozen: {corpus: %s, layer: last, overrides: [max_steps=2, number_of_epochs=1]}
report: {bootstrap: 20}
"""


def sweep(cfg: Path, out: Path, *extra, wait=True):
    cmd = [sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def done_files(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "sweep" / "jobs").glob("*/done.json")}


def score_keys(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT checkpoint, task, lang_pair, subset, gender, metric FROM scores").fetchall()


def test_killed_sweep_resumes_without_redoing_or_duplicating(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG % "synth-fr")
    out = tmp_path / "o"
    p = sweep(cfg, out, "--parallel", "1", wait=False)
    deadline = time.time() + 400
    while not any(n.startswith("asr-frozen") for n in done_files(out)):  # first ASR job done, the second starts
        assert p.poll() is None, p.stdout.read()
        assert time.time() < deadline, "no ASR job finished in time"
        time.sleep(0.5)
    os.kill(p.pid, signal.SIGKILL)  # the sweep dies; its running job is orphaned and keeps going
    p.wait()
    before = done_files(out)
    assert len(before) < 10 and "report" not in before
    submitted = {p.parent.name for p in (out / "sweep" / "jobs").glob("*/submitted.json")}

    r = sweep(cfg, out)
    assert r.returncode == 0, r.stdout + r.stderr
    after = done_files(out)
    # the re-run found done the jobs done before the kill and, if it ended before the re-run
    # looked, the orphaned one (submitted before the kill: jobs start warm now, and a tiny one can
    # end within a second)
    orphans = submitted - set(before)
    found = int(re.search(r"(\d+) done already", r.stdout).group(1))
    assert len(orphans) <= 1 and found in (len(before), len(before) + len(orphans)), (r.stdout, before, orphans)
    assert len(after) == 13  # corpus, 2 manifests, asr-data, checkpoints, 2 features, 2 asr-frozen, conditions,
    # voice measures, mixed model, report
    for name, d in before.items():  # finished jobs were not run again
        assert after[name] == d, name
    keys = score_keys(out / "results.db")
    assert len(keys) == len(set(keys)) > 0  # one row set per job
    asr = [k for k in keys if k[1] == "asr-frozen" and k[4] in ("F", "M", "all") and k[5] == "wer"]
    assert sorted((k[0], k[4]) for k in asr) == sorted((c, g) for c in ("F-tiny", "M-tiny") for g in ("F", "M", "all"))
    assert (out / "report" / "report.md").is_file()

    again = sweep(cfg, out)  # everything finished: a no-op
    assert again.returncode == 0 and "13 done already, 0 to run" in again.stdout, again.stdout
    assert score_keys(out / "results.db") == keys and done_files(out) == after

    status = sweep(cfg, out, "status")
    assert status.returncode == 0 and "13 done" in status.stdout
    line = next(x for x in status.stdout.splitlines() if "asr-frozen:F-tiny" in x)
    log = Path(line.split()[-1])
    assert log.is_file() and "== asr-frozen:F-tiny: AsrStep(recipe='frozen', ckpt='F-tiny'" in log.read_text()


def test_failed_job_blocks_dependents_and_waits_for_retry(tmp_path):
    cfg = tmp_path / "c.yaml"
    # a layer the models lack: the feature extractions fail when they run (a corpus the table lacks
    # would be refused before any job by the sweep's input checks, tests/test_preflight.py)
    cfg.write_text((CONFIG % "synth-fr").replace("layer: last", "layer: 99"))
    out = tmp_path / "o"
    r = sweep(cfg, out)
    assert r.returncode == 1
    assert "FAILED   features:F-tiny  UserError:" in r.stdout and "layer 99 is out of range" in r.stdout
    assert "blocked" in r.stdout
    assert "asr-frozen:F-tiny, asr-frozen:M-tiny, conditions:asr-frozen, mixed-model, report;" in r.stdout
    failed = out / "sweep" / "jobs" / "features_F-tiny" / "failed.json"
    first = failed.read_text()

    r2 = sweep(cfg, out)  # not retried without --retry-failed
    assert r2.returncode == 1 and "2 failed before" in r2.stdout and failed.read_text() == first
    assert "FAILED" not in r2.stdout
    r3 = sweep(cfg, out, "--retry-failed")
    assert r3.returncode == 1 and "start    features:F-tiny" in r3.stdout and failed.read_text() != first
    status = sweep(cfg, out, "status")
    assert "failed   features:F-tiny" in status.stdout and "layer 99 is out of range" in status.stdout
