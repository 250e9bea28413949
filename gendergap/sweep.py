"""Run planned jobs through submitit: the local executor here, SLURM job arrays on a cluster.

State lives beside the outputs, in ``OUT/sweep/jobs/<job>/``: ``done.json`` (the job's key and
times) once it finished, ``failed.json`` (the error) when it failed, ``submitted.json`` (executor,
job id, log files). A re-run skips every job whose done.json carries the current key, so killing
a sweep and starting it again only runs what is left; the results DB never gets a second row set
because its score key is unique (analysis/store.py) and finished jobs are not run again.

Under SLURM a sweep may be re-run while an earlier run's jobs are still queued or running: those
are not submitted again, and a new job that needs one of them waits on its existing SLURM job id
(``afterok:<id>`` from its submitted.json), so dependencies hold across runs. Each job array is
throttled to ``executor.array_parallelism`` elements at once (``--array=0-N%P``). Jobs are
submitit Checkpointables (gendergap/jobs.py): a preempted or timed-out job is requeued and
resumes.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from corpora.base.atomic import write_json
from corpora.base.boundary import finite, locked
from corpora.base.errors import UserError
from corpora.checks import one_pass
from gendergap import warm
from gendergap.config import task_types
from gendergap.jobs import SweepJob, read_state
from gendergap.steps.base import CheckContext


def state_dir(out: Path, name: str) -> Path:
    return Path(out) / "sweep" / "jobs" / name.replace(":", "_").replace("/", "_")


def _lock_held(folder: Path) -> bool:
    lock = folder / "lock"
    if not lock.exists():
        return False
    with locked(lock, blocking=False) as got:
        return not got


def _squeue_ids() -> set[str] | None:
    if not shutil.which("squeue"):
        return None
    # -r: one line per array element (pending elements are otherwise folded into "123_[0-3]")
    r = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True)
    return set(r.stdout.split()) if r.returncode == 0 else None


def job_state(job, out: Path, queue: set[str] | None = None) -> str:
    """done | failed | running | changed (finished with another key) | pending."""
    folder = state_dir(out, job.name)
    done = read_state(folder / "done.json")
    if done and done.get("key") == job.key:
        return "done"
    if _lock_held(folder):
        return "running"
    sub = read_state(folder / "submitted.json")
    if sub and sub.get("key") == job.key and sub.get("executor") == "slurm" and queue and sub["job_id"] in queue:
        return "running"
    failed = read_state(folder / "failed.json")
    if failed and failed.get("key") == job.key:
        return "failed"
    return "changed" if done else "pending"


def check_executor(name: str) -> None:
    """Refuse an executor this machine cannot use, before anything runs."""
    if name == "slurm" and not shutil.which("sbatch"):
        raise UserError("executor 'slurm' is not available here: no `sbatch` on PATH",
                        fix="run on a SLURM login node, or use --executor local")
    if name not in ("local", "slurm"):
        raise UserError(f"unknown executor {name!r}", fix="use local or slurm")


def _priority(jobs: list) -> dict[str, float]:
    """Length of the costliest chain of jobs starting at each job (critical-path scheduling)."""
    after: dict[str, list[str]] = {j.name: [] for j in jobs}
    for j in jobs:
        for d in j.deps:
            after[d].append(j.name)
    cost = {j.name: j.cost_min for j in jobs}
    prio: dict[str, float] = {}
    for j in reversed(jobs):  # jobs are in dependency order
        prio[j.name] = cost[j.name] + max((prio[n] for n in after[j.name]), default=0.0)
    return prio


class Progress:
    def __init__(self, total: int, quiet: bool = False):
        self.total, self.done, self.failed, self.quiet, self.t0 = total, 0, 0, quiet, time.perf_counter()

    def say(self, what: str, name: str, extra: str = "") -> None:
        if not self.quiet:
            clock = time.perf_counter() - self.t0
            print(f"  [{self.done + self.failed:>3}/{self.total}] {clock:6.0f} s  {what:8s} {name}"
                  + (f"  {extra}" if extra else ""), flush=True)


def _prepare(jobs: list, out: Path, retry_failed: bool, quiet: bool) -> dict[str, str]:
    """States of all jobs; a job whose key changed loses its old run dir (it is run afresh)."""
    queue = _squeue_ids()
    states = {j.name: job_state(j, out, queue) for j in jobs}
    for j in jobs:
        folder = state_dir(out, j.name)
        if states[j.name] == "changed":
            if j.owns_outputs:
                for o in j.outputs:
                    if Path(o).exists():
                        if not quiet:
                            print(f"  config changed for {j.name}: removing {o} and running it again")
                        shutil.rmtree(o)
            (folder / "done.json").unlink(missing_ok=True)
            states[j.name] = "pending"
        if states[j.name] == "running":
            # held by a job left over from a killed sweep: submitting it again is safe (it waits for
            # the lock, then finds the job finished); under SLURM it is still queued, so leave it
            states[j.name] = "pending" if not (read_state(folder / "submitted.json") or {}).get(
                "executor") == "slurm" else "running"
        if states[j.name] == "failed" and retry_failed:
            (folder / "failed.json").unlink(missing_ok=True)
            states[j.name] = "pending"
    return states


def run_sweep(jobs: list, out: str | Path, executor: str = "local", parallel: int = 2,
              retry_failed: bool = False, quiet: bool = False, slurm: dict | None = None) -> dict[str, str]:
    """Run every job not yet done; returns the final state of each job."""
    check_executor(executor)
    out = Path(out).resolve()
    states = _prepare(jobs, out, retry_failed, quiet)
    for j in jobs:
        folder = state_dir(out, j.name)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "job.json", j.as_dict())
    todo = [j for j in jobs if states[j.name] in ("pending", "running")]
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
        if states[j.name] == "pending" and any(states[d] in ("failed", "blocked") for d in j.deps):
            states[j.name] = "blocked"
            blocked.append(j.name)
    if blocked:
        names = ", ".join(blocked[:4]) + (f" and {len(blocked) - 4} more" if len(blocked) > 4 else "")
        progress.say("blocked", f"{len(blocked)} job(s) needing a failed one: {names}")


def _finish(job, sj, states, out, progress) -> None:
    try:
        done = sj.result()
        states[job.name] = "done"
        progress.done += 1
        progress.say("done", job.name, f"{done.get('seconds', 0):.0f} s")
    except Exception:  # noqa: BLE001 -- the job's own error is in failed.json and its log
        states[job.name] = "failed"
        progress.failed += 1
        failed = read_state(state_dir(out, job.name) / "failed.json") or {}
        progress.say("FAILED", job.name, f"{failed.get('error', 'see log')} (log: {sj.paths.stdout})")


def _run_local(jobs, states, out, parallel, progress) -> dict[str, str]:
    from contextlib import nullcontext

    import submitit

    prio = _priority(jobs)
    logs = out / "sweep" / "logs"
    plain = submitit.LocalExecutor(folder=logs)
    running: dict[str, tuple] = {}

    def stop(signum, frame):  # SIGTERM: behave as Ctrl-C so running jobs are cancelled
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, stop)
    # jobs start as children of one process that imported the engines once (gendergap/warm.py);
    # a job on a GPU starts the plain way (the server never touches CUDA)
    engines = sorted({m for j in jobs if states[j.name] != "done" for m in j.ENGINE_IMPORTS})
    server = warm.Server(logs / "warm-server.log", preload=tuple(engines)) if warm.enabled() else None
    try:
        with server or nullcontext():
            warm_ex = submitit.LocalExecutor(folder=logs, python=server.python_command) if server else plain
            while True:
                for name, (job, sj) in list(running.items()):
                    if sj.done():
                        del running[name]
                        _finish(job, sj, states, out, progress)
                _mark_blocked(jobs, states, progress)
                ready = sorted((j for j in jobs if states[j.name] == "pending"
                                and all(states[d] == "done" for d in j.deps)), key=lambda j: -prio[j.name])
                for job in ready[:max(0, parallel - len(running))]:
                    ex = plain if str(getattr(job, "device", "cpu")).startswith("cuda") else warm_ex
                    ex.update_parameters(timeout_min=job.resources["time_min"])
                    sj = ex.submit(SweepJob(job, str(state_dir(out, job.name))))
                    write_json(state_dir(out, job.name) / "submitted.json", {
                        "key": job.key, "executor": "local", "job_id": str(sj.job_id), "stdout": str(sj.paths.stdout),
                        "stderr": str(sj.paths.stderr), "when": time.time()})
                    states[job.name] = "running"
                    running[job.name] = (job, sj)
                    progress.say("start", job.name)
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


def array_label(job) -> str:
    """What a job array is called (gg-<label>): the task's name, or the job kind for the wiring
    and scoring jobs (a MuST-SHE scoring job belongs to its gender-st task but is not one)."""
    return job.task if job.task and job.kind in task_types() else job.kind


def slurm_groups(jobs: list, states: dict[str, str]) -> list[list]:
    """The job arrays a SLURM run submits: the pending jobs of one task with the same resources
    and the same depth in the graph (longest chain of jobs before it), so no array holds a job
    and its prerequisite, and submitting the arrays by depth submits every prerequisite first.
    One pass over the jobs (dependency order) and their deps: linear in the size of the plan."""
    depth: dict[str, int] = {}
    groups: dict[tuple, list[dict]] = {}
    for j in jobs:
        depth[j.name] = 1 + max((depth[d] for d in j.deps), default=-1)
        if states[j.name] == "pending":
            res = j.resources
            key = (depth[j.name], array_label(j), res["cpus"], res["gpus"], res["mem_gb"], res["time_min"])
            groups.setdefault(key, []).append(j)
    return [groups[k] for k in sorted(groups, key=lambda k: k[:2])]


def earlier_slurm_ids(jobs: list, states: dict[str, str], out: Path) -> dict[str, str]:
    """SLURM ids of jobs an earlier run submitted that are still queued or running (state
    "running" with a slurm submitted.json of the current key): new jobs wait on these ids."""
    ids = {}
    for j in jobs:
        if states[j.name] == "running":
            sub = read_state(state_dir(out, j.name) / "submitted.json") or {}
            if sub.get("executor") == "slurm" and sub.get("key") == j.key and sub.get("job_id"):
                ids[j.name] = str(sub["job_id"])
    return ids


def slurm_parameters(res: dict, label: str, slurm: dict, deps: list[str]) -> dict:
    """submitit parameters of one job array: its task's resources, the cluster settings of the
    config's executor section, and the afterok dependencies."""
    extra = {"kill-on-invalid-dep": "yes"}
    if deps:
        extra["dependency"] = "afterok:" + ":".join(deps)
    params = {"timeout_min": res["time_min"], "cpus_per_task": res["cpus"], "mem_gb": res["mem_gb"],
              "name": f"gg-{label}", "slurm_additional_parameters": extra}
    if res["gpus"]:
        params["gpus_per_node"] = res["gpus"]
    # the cluster settings `pretrain launch` takes as flags (qos, a node constraint: v100-32g vs
    # a100), and set-up lines each job's sbatch script runs first (module loads, exports)
    for k in ("partition", "account", "array_parallelism", "qos", "constraint", "setup"):
        if slurm.get(k):
            params[f"slurm_{k}"] = list(slurm[k]) if k == "setup" else slurm[k]
    return params


def _run_slurm(jobs, states, out, slurm, progress) -> dict[str, str]:
    """Submit the remaining jobs as SLURM job arrays, one array per task (its resources), each
    waiting (afterok) for the arrays holding its dependencies, or for the SLURM jobs an earlier
    run submitted for them; then wait for all of them and report."""
    import submitit

    ex = submitit.AutoExecutor(folder=out / "sweep" / "logs", cluster="slurm")
    earlier = earlier_slurm_ids(jobs, states, out)
    slurm_ids: dict[str, str] = {}  # job name -> SLURM id (array element "123_4") of this run
    # (job, SLURM id, log) of every job to wait for: this run's and the earlier run's still queued
    watched: list[tuple] = [
        (j, earlier[j.name], (read_state(state_dir(out, j.name) / "submitted.json") or {}).get("stdout", ""))
        for j in jobs if j.name in earlier]
    for group in slurm_groups(jobs, states):
        # an earlier run's job keeps its element id ("123_4"): only that element must finish
        deps = sorted({slurm_ids[d].split("_")[0] if d in slurm_ids else earlier[d]
                       for j in group for d in j.deps if d in slurm_ids or d in earlier})
        label = array_label(group[0])
        ex.update_parameters(**slurm_parameters(group[0].resources, label, slurm, deps))
        with ex.batch():
            handles = [ex.submit(SweepJob(j, str(state_dir(out, j.name)))) for j in group]
        for j, sj in zip(group, handles):
            slurm_ids[j.name] = str(sj.job_id)
            write_json(state_dir(out, j.name) / "submitted.json", {
                "key": j.key, "executor": "slurm", "job_id": str(sj.job_id), "stdout": str(sj.paths.stdout),
                "stderr": str(sj.paths.stderr), "when": time.time()})
            states[j.name] = "running"
            watched.append((j, str(sj.job_id), str(sj.paths.stdout)))
        throttle = f" %{slurm['array_parallelism']}" if slurm.get("array_parallelism") else ""
        progress.say("submit", f"{len(group)} job(s) of {label}",
                     f"array {str(handles[0].job_id).split('_')[0]}{throttle}"
                     + (f" after {','.join(deps)}" if deps else ""))
    while any(states[j.name] == "running" for j, _, _ in watched):
        time.sleep(2)
        queue = _squeue_ids() or set()
        for j, job_id, log in watched:
            if states[j.name] != "running":
                continue
            folder = state_dir(out, j.name)
            done = read_state(folder / "done.json")
            if done and done.get("key") == j.key:
                states[j.name] = "done"
                progress.done += 1
                progress.say("done", j.name, f"{done.get('seconds', 0):.0f} s (SLURM {job_id})")
            elif job_id not in queue and not _lock_held(folder):
                time.sleep(1)  # the marker is written before the job leaves the queue; re-read once
                if (read_state(folder / "done.json") or {}).get("key") == j.key:
                    continue
                failed = read_state(folder / "failed.json") or {}
                states[j.name] = "failed"
                progress.failed += 1
                why = (failed.get("error")
                       or "left the SLURM queue without finishing (cancelled, or a job it needs failed)")
                progress.say("FAILED", j.name, f"{why} (log: {log})")
    return states


def summary(jobs: list, out: str | Path) -> list[dict]:
    """One row per job: state, seconds, CPU-seconds (None from a done.json written before they were
    counted), log (for `sweep status` and the study's timing table)."""
    out = Path(out).resolve()
    queue = _squeue_ids()
    rows = []
    for j in jobs:
        folder = state_dir(out, j.name)
        done = read_state(folder / "done.json") or {}
        sub = read_state(folder / "submitted.json") or {}
        failed = read_state(folder / "failed.json") or {}
        state = job_state(j, out, queue)
        # the times as numbers or None: a done.json is read as data, and a text or NaN in it must
        # not break the time table (a job without usable times is listed without them)
        times = {k: _time_or_none(done.get(k)) for k in ("seconds", "cpu_s", "started", "finished")}
        timed = state == "done" and None not in (times["seconds"], times["started"], times["finished"])
        rows.append({"job": j.name, "kind": j.kind, "state": state,
                     "seconds": times["seconds"] if timed else None,
                     "cpu_s": times["cpu_s"] if timed else None,
                     "started": times["started"], "finished": times["finished"],
                     "log": sub.get("stdout", ""), "error": failed.get("error") if state == "failed" else None})
    return rows


def _time_or_none(value) -> float | None:
    """A time from a done.json: the boundary's finite number >= 0, else None (JSON true is no time)."""
    if isinstance(value, bool):
        return None
    try:
        return finite(value, "time", lo=0)
    except UserError:
        return None


def check_steps(jobs: list, out: str | Path, progress: bool = True) -> list:
    """Every step's check (gendergap.steps.base.Step.check) over the whole graph, before any job
    runs: each table read once, each audio header once (corpora.checks.one_pass). Inputs that a
    step not yet done will write are skipped. A problem of a step with no task of its own (the
    ASR data export) belongs to the tasks reading its output. Finished jobs are not checked: they
    will not run. Returns the problems, each once."""
    import dataclasses

    out = Path(out).resolve()
    todo = [j for j in jobs if job_state(j, out) != "done"]   # a finished job reads nothing again
    ctx = CheckContext(pending=[o for j in todo for o in j.outputs])
    readers: dict[str, list] = {}
    for j in jobs:
        for d in j.deps:
            readers.setdefault(d, []).append(j)

    def tasks_reading(name: str) -> list[str]:
        seen, todo, tasks = set(), [name], []
        while todo:
            for r in readers.get(todo.pop(), []):
                if r.name not in seen:
                    seen.add(r.name)
                    tasks += [r.task] if r.task else []
                    todo += [] if r.task else [r.name]
        return list(dict.fromkeys(tasks))

    found = []
    with one_pass(progress):
        for j in todo:
            for p in j.check(ctx):
                if p.key is None:
                    tasks = [j.task] if j.task else tasks_reading(j.name)
                    p = dataclasses.replace(p, key=f"tasks.{tasks[0]}" if tasks else None, also=tuple(tasks[1:]))
                if p not in found:
                    found.append(p)
    for note in dict.fromkeys(ctx.notes):
        print(f"note: {note}", flush=True)
    return found
