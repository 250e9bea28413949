"""Run planned jobs through submitit: the local executor here, SLURM job arrays on a cluster.

State lives beside the outputs, in ``OUT/sweep/jobs/<job>/``: ``done.json`` (the job's key and
times) once it finished, ``failed.json`` (the error) when it failed, ``submitted.json`` (executor,
job id, log files). A re-run skips every job whose done.json carries the current key, so killing
a sweep and starting it again only runs what is left; the results DB never gets a second row set
because its score key is unique (analysis/store.py) and finished jobs are not run again.
"""
from __future__ import annotations

import fcntl
import shutil
import signal
import subprocess
import time
from pathlib import Path

from corpora.atomic import write_json
from corpora.errors import UserError
from gendergap.jobs import read_json, run_job

# rough minutes per job kind on the built-in study: the local scheduler starts the job with the
# longest chain of work behind it first (critical path), so two cores stay busy to the end
COST = {"pretrain": 10, "asr-e2e": 3, "st": 2.5, "gender-st": 1.5, "asr-frozen": 1.5, "probes": 1, "features": 0.6,
        "corpus": 0.4}
OWNED_OUTPUTS = ("asr-e2e", "asr-frozen", "st", "gender-st", "probes")  # run dirs a changed job starts afresh


def state_dir(out: Path, name: str) -> Path:
    return Path(out) / "sweep" / "jobs" / name.replace(":", "_").replace("/", "_")


def _lock_held(folder: Path) -> bool:
    lock = folder / "lock"
    if not lock.exists():
        return False
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def _squeue_ids() -> set[str] | None:
    if not shutil.which("squeue"):
        return None
    # -r: one line per array element (pending elements are otherwise folded into "123_[0-3]")
    r = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True)
    return set(r.stdout.split()) if r.returncode == 0 else None


def job_state(job: dict, out: Path, queue: set[str] | None = None) -> str:
    """done | failed | running | changed (finished with another key) | pending."""
    folder = state_dir(out, job["name"])
    done = read_json(folder / "done.json")
    if done and done.get("key") == job["key"]:
        return "done"
    if _lock_held(folder):
        return "running"
    sub = read_json(folder / "submitted.json")
    if sub and sub.get("key") == job["key"] and sub.get("executor") == "slurm" and queue and sub["job_id"] in queue:
        return "running"
    failed = read_json(folder / "failed.json")
    if failed and failed.get("key") == job["key"]:
        return "failed"
    return "changed" if done else "pending"


def check_executor(name: str) -> None:
    """Refuse an executor this machine cannot use, before anything runs."""
    if name == "slurm" and not shutil.which("sbatch"):
        raise UserError("executor 'slurm' is not available here: no `sbatch` on PATH",
                        fix="run on a SLURM login node, or use --executor local")
    if name not in ("local", "slurm"):
        raise UserError(f"unknown executor {name!r}", fix="use local or slurm")


def _priority(jobs: list[dict]) -> dict[str, float]:
    """Length of the costliest chain of jobs starting at each job (critical-path scheduling)."""
    after: dict[str, list[str]] = {j["name"]: [] for j in jobs}
    for j in jobs:
        for d in j["deps"]:
            after[d].append(j["name"])
    cost = {j["name"]: COST.get(j["kind"], 0.1) for j in jobs}
    prio: dict[str, float] = {}
    for j in reversed(jobs):  # jobs are in dependency order
        prio[j["name"]] = cost[j["name"]] + max((prio[n] for n in after[j["name"]]), default=0.0)
    return prio


class Progress:
    def __init__(self, total: int, quiet: bool = False):
        self.total, self.done, self.failed, self.quiet, self.t0 = total, 0, 0, quiet, time.perf_counter()

    def say(self, what: str, name: str, extra: str = "") -> None:
        if not self.quiet:
            clock = time.perf_counter() - self.t0
            print(f"  [{self.done + self.failed:>3}/{self.total}] {clock:6.0f} s  {what:8s} {name}"
                  + (f"  {extra}" if extra else ""), flush=True)


def _prepare(jobs: list[dict], out: Path, retry_failed: bool, quiet: bool) -> dict[str, str]:
    """States of all jobs; a job whose key changed loses its old run dir (it is run afresh)."""
    queue = _squeue_ids()
    states = {j["name"]: job_state(j, out, queue) for j in jobs}
    for j in jobs:
        folder = state_dir(out, j["name"])
        if states[j["name"]] == "changed":
            if j["kind"] in OWNED_OUTPUTS:
                for o in j["outputs"]:
                    if Path(o).exists():
                        if not quiet:
                            print(f"  config changed for {j['name']}: removing {o} and running it again")
                        shutil.rmtree(o)
            (folder / "done.json").unlink(missing_ok=True)
            states[j["name"]] = "pending"
        if states[j["name"]] == "running":
            # held by a job left over from a killed sweep: submitting it again is safe (it waits for
            # the lock, then finds the job finished); under SLURM it is still queued, so leave it
            states[j["name"]] = "pending" if not (read_json(folder / "submitted.json") or {}).get(
                "executor") == "slurm" else "running"
        if states[j["name"]] == "failed" and retry_failed:
            (folder / "failed.json").unlink(missing_ok=True)
            states[j["name"]] = "pending"
    return states


def run_sweep(jobs: list[dict], out: str | Path, executor: str = "local", parallel: int = 2,
              retry_failed: bool = False, quiet: bool = False, slurm: dict | None = None) -> dict[str, str]:
    """Run every job not yet done; returns the final state of each job."""
    check_executor(executor)
    out = Path(out).resolve()
    states = _prepare(jobs, out, retry_failed, quiet)
    for j in jobs:
        folder = state_dir(out, j["name"])
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "job.json", j)
    todo = [j for j in jobs if states[j["name"]] in ("pending", "running")]
    earlier = [n for n, s in states.items() if s == "failed"]
    progress = Progress(len(jobs), quiet)
    progress.done = sum(s == "done" for s in states.values())
    if not quiet:
        print(f"sweep: {len(jobs)} jobs: {progress.done} done already, {len(todo)} to run"
              + (f", {len(earlier)} failed before (not retried without --retry-failed)" if earlier else "")
              + f"; executor {executor}; logs and state in {out / 'sweep'}", flush=True)
    if executor == "local":
        return _run_local(jobs, states, out, parallel, progress)
    return _run_slurm(jobs, states, out, slurm or {}, progress)


def _mark_blocked(jobs, states, progress) -> None:
    blocked = []
    for j in jobs:  # dependency order: one pass reaches everything downstream
        if states[j["name"]] == "pending" and any(states[d] in ("failed", "blocked") for d in j["deps"]):
            states[j["name"]] = "blocked"
            blocked.append(j["name"])
    if blocked:
        names = ", ".join(blocked[:4]) + (f" and {len(blocked) - 4} more" if len(blocked) > 4 else "")
        progress.say("blocked", f"{len(blocked)} job(s) needing a failed one: {names}")


def _finish(job, sj, states, out, progress) -> None:
    try:
        done = sj.result()
        states[job["name"]] = "done"
        progress.done += 1
        progress.say("done", job["name"], f"{done.get('seconds', 0):.0f} s")
    except Exception:  # noqa: BLE001 -- the job's own error is in failed.json and its log
        states[job["name"]] = "failed"
        progress.failed += 1
        failed = read_json(state_dir(out, job["name"]) / "failed.json") or {}
        progress.say("FAILED", job["name"], f"{failed.get('error', 'see log')} (log: {sj.paths.stdout})")


def _run_local(jobs, states, out, parallel, progress) -> dict[str, str]:
    import submitit

    prio = _priority(jobs)
    ex = submitit.LocalExecutor(folder=out / "sweep" / "logs")
    running: dict[str, tuple[dict, object]] = {}

    def stop(signum, frame):  # SIGTERM: behave as Ctrl-C so running jobs are cancelled
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            for name, (job, sj) in list(running.items()):
                if sj.done():
                    del running[name]
                    _finish(job, sj, states, out, progress)
            _mark_blocked(jobs, states, progress)
            ready = sorted((j for j in jobs if states[j["name"]] == "pending"
                            and all(states[d] == "done" for d in j["deps"])), key=lambda j: -prio[j["name"]])
            for job in ready[:max(0, parallel - len(running))]:
                ex.update_parameters(timeout_min=job["resources"]["time_min"])
                sj = ex.submit(run_job, job, str(state_dir(out, job["name"])))
                write_json(state_dir(out, job["name"]) / "submitted.json", {
                    "key": job["key"], "executor": "local", "job_id": str(sj.job_id), "stdout": str(sj.paths.stdout),
                    "stderr": str(sj.paths.stderr), "when": time.time()})
                states[job["name"]] = "running"
                running[job["name"]] = (job, sj)
                progress.say("start", job["name"])
            if not running:
                break
            time.sleep(0.3)
    except KeyboardInterrupt:
        for job, sj in running.values():
            sj.cancel(check=False)
        print(f"\nsweep interrupted: {len(running)} running job(s) cancelled; run the same command again to "
              "finish the rest (finished jobs are kept)", flush=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
    return states


def _run_slurm(jobs, states, out, slurm, progress) -> dict[str, str]:
    """Submit the remaining jobs as SLURM job arrays, one array per task (its resources), each
    waiting (afterok) for the arrays holding its dependencies; then wait and report."""
    import submitit

    ex = submitit.AutoExecutor(folder=out / "sweep" / "logs", cluster="slurm")
    slurm_ids: dict[str, str] = {}  # job name -> SLURM id (array element "123_4")
    groups: list[list[dict]] = []
    for j in jobs:
        if states[j["name"]] != "pending":
            continue
        group_of = {x["name"] for x in groups[-1]} if groups else set()
        same = groups and (groups[-1][0]["task"] or groups[-1][0]["kind"]) == (j["task"] or j["kind"])
        if same and not (set(j["deps"]) & group_of):
            groups[-1].append(j)
        else:
            groups.append([j])
    submitted: list[tuple[dict, object]] = []
    for group in groups:
        deps = sorted({slurm_ids[d].split("_")[0] for j in group for d in j["deps"] if d in slurm_ids})
        res = group[0]["resources"]
        extra = {"kill-on-invalid-dep": "yes"}
        if deps:
            extra["dependency"] = "afterok:" + ":".join(deps)
        params = {"timeout_min": res["time_min"], "cpus_per_task": res["cpus"], "mem_gb": res["mem_gb"],
                  "name": f"gg-{group[0]['task'] or group[0]['kind']}", "slurm_additional_parameters": extra}
        if res["gpus"]:
            params["gpus_per_node"] = res["gpus"]
        for k in ("partition", "account"):
            if slurm.get(k):
                params[f"slurm_{k}"] = slurm[k]
        ex.update_parameters(**params)
        with ex.batch():
            handles = [ex.submit(run_job, j, str(state_dir(out, j["name"]))) for j in group]
        for j, sj in zip(group, handles):
            slurm_ids[j["name"]] = str(sj.job_id)
            write_json(state_dir(out, j["name"]) / "submitted.json", {
                "key": j["key"], "executor": "slurm", "job_id": str(sj.job_id), "stdout": str(sj.paths.stdout),
                "stderr": str(sj.paths.stderr), "when": time.time()})
            states[j["name"]] = "running"
            submitted.append((j, sj))
        progress.say("submit", f"{len(group)} job(s) of {group[0]['task'] or group[0]['kind']}",
                     f"array {str(handles[0].job_id).split('_')[0]}" + (f" after {','.join(deps)}" if deps else ""))
    while any(states[j["name"]] == "running" for j, _ in submitted):
        time.sleep(2)
        queue = _squeue_ids() or set()
        for j, sj in submitted:
            if states[j["name"]] != "running":
                continue
            folder = state_dir(out, j["name"])
            done = read_json(folder / "done.json")
            if done and done.get("key") == j["key"]:
                states[j["name"]] = "done"
                progress.done += 1
                progress.say("done", j["name"], f"{done.get('seconds', 0):.0f} s (SLURM {sj.job_id})")
            elif str(sj.job_id) not in queue and not _lock_held(folder):
                time.sleep(1)  # the marker is written before the job leaves the queue; re-read once
                if (read_json(folder / "done.json") or {}).get("key") == j["key"]:
                    continue
                failed = read_json(folder / "failed.json") or {}
                states[j["name"]] = "failed"
                progress.failed += 1
                why = failed.get("error") or "left the SLURM queue without finishing (cancelled, or a job it needs failed)"
                progress.say("FAILED", j["name"], f"{why} (log: {sj.paths.stdout})")
    return states


def summary(jobs: list[dict], out: str | Path) -> list[dict]:
    """One row per job: state, seconds, log (for `sweep status` and the study's timing table)."""
    out = Path(out).resolve()
    queue = _squeue_ids()
    rows = []
    for j in jobs:
        folder = state_dir(out, j["name"])
        done = read_json(folder / "done.json") or {}
        sub = read_json(folder / "submitted.json") or {}
        failed = read_json(folder / "failed.json") or {}
        state = job_state(j, out, queue)
        rows.append({"job": j["name"], "kind": j["kind"], "state": state,
                     "seconds": done.get("seconds") if state == "done" else None,
                     "started": done.get("started"), "finished": done.get("finished"),
                     "log": sub.get("stdout", ""), "error": failed.get("error") if state == "failed" else None})
    return rows
