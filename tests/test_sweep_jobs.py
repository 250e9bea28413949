"""Sweep jobs as submitit runs them: checkpointable (requeued with the same spec), and big plans
keep their shape (the 100 x 6 plan: right number of jobs, unique names and keys)."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from submitit.helpers import Checkpointable, DelayedSubmission

from gendergap import sweep
from gendergap.config import load_config
from gendergap.jobs import SweepJob, run_job
from gendergap.plan import plan_jobs
from gendergap.steps.base import Step
from gendergap.steps.models import CheckpointsStep
from gendergap.study import print_stages

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_sweep_plan import big_config  # noqa: E402


def test_checkpoint_resubmits_the_same_job(tmp_path):
    step = CheckpointsStep(name="x", registry=str(tmp_path / "reg.json"), entries=[], key="k1")
    job = SweepJob(step, str(tmp_path))
    assert isinstance(job, Checkpointable)
    again = job.checkpoint()
    assert isinstance(again, DelayedSubmission)
    assert again.function.step is step and again.function.state_dir == str(tmp_path)
    assert again.function is not job and not again.function.requeued and job.requeued
    assert (tmp_path / "requeued.json").is_file()


@dataclasses.dataclass
class _SpinAndSleep(Step):
    """A step that costs CPU in a child process (as an ST job's fairseq does) and then waits."""
    KIND = "spin"
    spin_s: float = 0.6
    sleep_s: float = 0.8
    warm_server: str | None = None   # spin in a child of this warm server (gendergap/warm.py) instead,
    folder: str | None = None        # with its module written here

    def run(self) -> None:
        spin = f"import time\nt = time.process_time()\nwhile time.process_time() - t < {self.spin_s}: pass"
        if self.warm_server:
            folder = Path(self.folder)
            (folder / "spin_mod.py").write_text(spin)
            subprocess.run([sys.executable, "-m", "gendergap.warm", "run", self.warm_server, "--", "-m", "spin_mod"],
                           check=True, cwd=folder, env={**os.environ, "PYTHONPATH": str(folder)})
        else:
            subprocess.run([sys.executable, "-c", spin], check=True)
        time.sleep(self.sleep_s)


def test_a_finished_job_records_its_cpu_seconds_children_included(tmp_path):
    """done.json's cpu_s is the job's user + system time with the processes it waited for: the
    child's spin counts, the sleep does not (what the demo's CPU-second target is measured in)."""
    done = run_job(_SpinAndSleep(name="spin", key="k"), str(tmp_path))
    assert done["seconds"] >= 1.4
    assert 0.6 <= done["cpu_s"] < done["seconds"] - 0.5, done


def test_a_jobs_cpu_seconds_include_what_it_started_warm(tmp_path):
    """An ST job starts fairseq from the sweep's warm server: the server's child, not the job's, so
    the job's RUSAGE_CHILDREN misses it. Its CPU time comes back through the job's ledger."""
    from gendergap.warm import LEDGER_ENV, Server
    with Server(tmp_path / "server.log") as server:
        done = run_job(_SpinAndSleep(name="spin", key="k", spin_s=1.0, sleep_s=0.1, warm_server=server.path,
                                     folder=str(tmp_path)),
                       str(tmp_path / "state"))
    assert 1.0 <= done["cpu_s"] < done["seconds"], done
    assert len((tmp_path / "state" / "forked-cpu.txt").read_text().split()) == 1
    assert LEDGER_ENV not in os.environ    # run in this process: its environment is left as it was


def test_100_checkpoints_x_6_tasks_plan(tmp_path):
    jobs = plan_jobs(load_config(big_config(tmp_path, 100)), tmp_path / "o")
    # per checkpoint: asr-e2e, 2 asr-frozen, 3 st, gender-st + mustshe, probes, features = 10;
    # plus one shared ASR export, the checkpoint registry and the report, and one conditions job per
    # task block (asr-e2e, 2 asr-frozen, 3 st pairs, gender-st); the ASR tasks' test set's voice
    # measures and the one mixed-model job
    assert len(jobs) == 100 * 10 + 3 + 7 + 2
    assert len({j.name for j in jobs}) == len(jobs) and len({j.key for j in jobs}) == len(jobs)
    groups = sweep.slurm_groups(jobs, {j.name: "pending" for j in jobs})
    # conditions: two waves; the voice measures and the mixed model one each
    assert sum(len(g) for g in groups) == len(jobs) and len(groups) == 15
    position = {j.name: i for i, j in enumerate(jobs)}
    assert all(position[d] < position[j.name] for j in jobs for d in j.deps)


def test_a_done_json_with_bad_times_is_listed_without_them(tmp_path):
    """done.json is read as data (the boundary refuses NaN): times that are text or a bool leave the job done
    but untimed, and the study's time table is still printed (it counted the job's CPU as unknown, not 0)."""
    good = CheckpointsStep(name="good", registry=str(tmp_path / "reg.json"), entries=[], key="k1")
    bad = CheckpointsStep(name="bad", registry=str(tmp_path / "reg.json"), entries=[], key="k2")
    for step, times in ((good, {"seconds": 2.0, "cpu_s": 1.5, "started": 10.0, "finished": 12.0}),
                        (bad, {"seconds": "12 s", "cpu_s": "lots", "started": True, "finished": 12.0})):
        folder = sweep.state_dir(tmp_path.resolve(), step.name)
        folder.mkdir(parents=True)
        (folder / "done.json").write_text(json.dumps({"key": step.key, "name": step.name, "kind": step.kind,
                                                      **times}))
    rows = {r["job"]: r for r in sweep.summary([good, bad], tmp_path)}
    assert rows["good"]["state"] == rows["bad"]["state"] == "done"
    assert (rows["good"]["seconds"], rows["good"]["cpu_s"]) == (2.0, 1.5)
    assert rows["bad"]["seconds"] is None and rows["bad"]["cpu_s"] is None and rows["bad"]["started"] is None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_stages(list(rows.values()), 5.0)
    assert buf.getvalue().splitlines()[2].split()[:6] == ["checkpoints", "1", "2.0", "s", "1.5", "s"]
