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
executor: {name: slurm, partition: %s, setup: ["echo SETUP-LINE-RAN on $SLURM_JOB_ID"]}
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
    # the executor's set-up lines go into every sbatch script and run before the job
    scripts = list((out / "sweep" / "logs").glob("*_submission.sh"))
    assert scripts and all("echo SETUP-LINE-RAN" in s.read_text() for s in scripts)
    assert any("SETUP-LINE-RAN on " in p.read_text(errors="replace") for p in (out / "sweep" / "logs").glob("*.out"))

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "13 done already, 0 to run" in again.stdout, again.stdout


def _spec(name, deps=(), task=None) -> dict:
    return {"name": name, "deps": list(deps), "task": task}


def _steps(specs: list[dict], out) -> list:
    """Real study steps that are cheap: registering no checkpoint (reads the registry, writes
    nothing), keyed as the planner keys them."""
    from gendergap.plan import _with_keys
    from gendergap.steps.models import CheckpointsStep
    return _with_keys([CheckpointsStep(registry=f"{out}/checkpoints.json", entries=[],
                                       resources={"cpus": 1, "mem_gb": 1, "gpus": 0, "time_min": 10}, **s)
                       for s in specs])


def _sweep_in_background(specs, out, partition, throttle=None):
    """`run_sweep` under SLURM in its own process, as a user re-running the command would."""
    script = ("import json, sys; from gendergap.sweep import run_sweep; "
              f"from {__name__} import _steps; "
              "s = run_sweep(_steps(json.loads(sys.argv[1]), sys.argv[2]), sys.argv[2], executor='slurm', "
              "slurm=json.loads(sys.argv[3])); print('STATES', json.dumps(s))")
    slurm = {"partition": partition, "array_parallelism": throttle}
    return subprocess.Popen([sys.executable, "-c", script, json.dumps(specs), str(out), json.dumps(slurm)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1",
                                 "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get(
                                     "PYTHONPATH", "")])})


def _scontrol(job_id) -> dict:
    out = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def _wait_for(what, timeout_s=300):
    import time
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"gave up after {timeout_s} s waiting for {what.__doc__}")


def test_rerun_waits_on_the_earlier_runs_slurm_job(slurm_cluster, tmp_path):
    """Run 1 submits a prerequisite that is held running (the test holds its job lock); run 2,
    started meanwhile, does not submit it again and sends its two dependents as one array,
    throttled to 1 at a time, with afterok on run 1's SLURM job id. Released, the prerequisite
    finishes, then the dependents run one after the other."""
    import fcntl
    import time

    from gendergap.sweep import state_dir

    out = tmp_path / "o"
    specs = [_spec("prereq"), _spec("dep:a", ["prereq"], task="dep"), _spec("dep:b", ["prereq"], task="dep")]
    by = {s["name"]: s for s in specs}
    lock_dir = state_dir(out.resolve(), "prereq")
    lock_dir.mkdir(parents=True)
    with open(lock_dir / "lock", "w") as hold:
        fcntl.flock(hold, fcntl.LOCK_EX)  # the prerequisite blocks on this until released: it "takes a while"
        run1 = _sweep_in_background([by["prereq"]], out, slurm_cluster.partition)
        sub = _wait_for(lambda: (json.loads((lock_dir / "submitted.json").read_text())
                                 if (lock_dir / "submitted.json").is_file() else None))
        prereq_id = sub["job_id"]  # queued or running (the node may be busy): either way run 2 must wait on it
        run2 = _sweep_in_background(specs, out, slurm_cluster.partition, throttle=1)
        # the sweep records an array's members one after the other: wait for both records
        dep_subs = [state_dir(out.resolve(), n) / "submitted.json" for n in ("dep:a", "dep:b")]
        _wait_for(lambda: all(p.is_file() for p in dep_subs))
        dep_ids = [json.loads(p.read_text())["job_id"] for p in dep_subs]
        info = _scontrol(dep_ids[0])
        assert f"afterok:{prereq_id}" in info["Dependency"], info.get("Dependency")
        assert info["ArrayTaskThrottle"] == "1", info
        assert slurm_cluster.job_state(prereq_id) in ("PENDING", "RUNNING")
        time.sleep(3)  # with the prerequisite still running, the dependents still wait
        assert {slurm_cluster.job_state(i) for i in dep_ids} == {"PENDING"}
    for proc in (run1, run2):  # lock released: everything finishes
        text, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "STATES" in text, text[-3000:]
    assert json.loads(text.split("STATES", 1)[1]) == {"prereq": "done", "dep:a": "done", "dep:b": "done"}
    assert text.count("submit ") == 1, text  # run 2 submitted only the dependents' array
    # done.json is written before SLURM closes the job (submitit still writes its result): wait
    # for the controller to say COMPLETED before reading the jobs' times
    slurm_cluster.wait_for_jobs([prereq_id, *dep_ids], timeout_s=120)
    times = {n: _scontrol(i) for n, i in [("prereq", prereq_id), ("dep:a", dep_ids[0]), ("dep:b", dep_ids[1])]}
    from datetime import datetime
    at = {n: (datetime.fromisoformat(t["StartTime"]), datetime.fromisoformat(t["EndTime"])) for n, t in times.items()}
    assert {t["JobState"] for t in times.values()} == {"COMPLETED"}, times
    assert at["dep:a"][0] >= at["prereq"][1] and at["dep:b"][0] >= at["prereq"][1], at
    first, second = sorted(("dep:a", "dep:b"), key=lambda n: at[n][0])
    assert at[second][0] >= at[first][1], at  # %1: never two elements of the array at once
    done = {n: json.loads((state_dir(out.resolve(), n) / "done.json").read_text()) for n in by}
    assert min(done["dep:a"]["started"], done["dep:b"]["started"]) >= done["prereq"]["finished"]
