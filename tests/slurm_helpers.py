"""The one-node SLURM cluster the tests submit to (scripts/slurm/start.sh runs it on localhost).

`slurm_cluster` (session fixture) checks that the controller answers and the node takes jobs;
otherwise it skips with the reason start.sh / install.sh recorded (apt failed, slurmctld did
not start, ...), so a machine without SLURM runs the rest of the suite and says why loudly.
`LocalSlurm.executor()` builds a submitit executor whose requests fit this cluster, and
`wait_for_jobs()` waits without sacct (there is no slurmdbd here): it reads the job state
from the controller, which keeps finished jobs for MinJobAge (600 s) seconds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SLURM_DIR = Path(os.environ.get("GG_SLURM_DIR", "/var/tmp/gendergap-slurm"))
PARTITION = "local"          # the one partition start.sh writes
NODE = "localhost"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}


def _run(cmd: list[str], conf: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                              env={**os.environ, "SLURM_CONF": str(conf)})
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"{cmd[0]} timed out after 20 s")


def _log_tail(name: str, lines: int = 4) -> str:
    path = SLURM_DIR / "log" / name
    if not path.is_file():
        return f"(no {path})"
    return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])


def cluster_problem(slurm_dir: Path = SLURM_DIR) -> str | None:
    """None when the test cluster takes jobs; otherwise one line saying why not."""
    conf = slurm_dir / "slurm.conf"
    recorded = slurm_dir / "unavailable"  # written by scripts/slurm/install.sh / start.sh
    why = recorded.read_text(errors="replace").strip() if recorded.is_file() else ""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        return why or "slurm-wlm not installed: no sbatch/scontrol on PATH (scripts/slurm/install.sh installs it)"
    if not conf.is_file():
        return why or f"no test cluster: {conf} is missing (run: bash scripts/slurm/start.sh)"
    ping = _run(["scontrol", "ping"], conf)
    if "is UP" not in ping.stdout:
        return why or (f"slurmctld does not answer ({(ping.stdout + ping.stderr).strip()}): "
                       f"{_log_tail('slurmctld.log')} (restart: bash scripts/slurm/start.sh)")
    state = _run(["sinfo", "-h", "-n", NODE, "-o", "%T"], conf).stdout.strip()
    if state not in ("idle", "mixed", "allocated", "completing"):
        return why or (f"node {NODE} is {state or 'unknown'} (slurmd not registered?): "
                       f"{_log_tail('slurmd.log')} (restart: bash scripts/slurm/start.sh)")
    return None


def _node_facts(conf: Path) -> dict:
    out = _run(["scontrol", "-o", "show", "node", NODE], conf).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


@dataclass(frozen=True)
class LocalSlurm:
    """The running one-node cluster: where its config is and what a job may ask for."""
    conf: Path
    partition: str
    cpus: int
    real_memory_mb: int

    def executor(self, folder, *, timeout_min: int = 10, cpus_per_task: int = 1, mem_gb: int = 1, **params):
        """A submitit AutoExecutor for this cluster. No GPU request (the node has none), and
        CPUs / memory within the node's, or SLURM refuses the job at submission
        ("Requested node configuration is not available"). Extra submitit parameters pass
        through (e.g. slurm_array_parallelism, slurm_additional_parameters)."""
        import submitit
        if cpus_per_task > self.cpus or mem_gb * 1024 > self.real_memory_mb:
            raise ValueError(f"the test node has {self.cpus} CPUs and {self.real_memory_mb} MB; "
                             f"asked for {cpus_per_task} CPUs per task and {mem_gb} GB")
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        ex.update_parameters(slurm_partition=self.partition, timeout_min=timeout_min,
                             cpus_per_task=cpus_per_task, mem_gb=mem_gb, **params)
        return ex

    def job_state(self, job_id: str) -> str:
        """The controller's state of a job or array element ("123", "123_4"): PENDING, RUNNING,
        COMPLETED, FAILED, ...; "GONE" once it left the controller's memory."""
        out = _run(["scontrol", "-o", "show", "job", str(job_id)], self.conf).stdout
        for kv in out.split():
            if kv.startswith("JobState="):
                return kv.split("=", 1)[1]
        return "GONE"

    def wait_for_jobs(self, job_ids, timeout_s: float = 300, poll_s: float = 1.0) -> dict[str, str]:
        """Wait until every job is finished; return {job id: final state}. On time-out the
        jobs still queued are cancelled and the test fails with their states."""
        job_ids = [str(j) for j in job_ids]
        deadline = time.monotonic() + timeout_s
        while True:
            states = {j: self.job_state(j) for j in job_ids}
            if all(s in TERMINAL or s == "GONE" for s in states.values()):
                return states
            if time.monotonic() > deadline:
                _run(["scancel", *job_ids], self.conf)
                pytest.fail(f"SLURM jobs not finished after {timeout_s:.0f} s (cancelled): {states}")
            time.sleep(poll_s)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurm]:
    """The one-node test cluster, with SLURM_CONF set for this session so that submitit's own
    sbatch / squeue / scancel calls (and the jobs, which inherit the environment) find it."""
    problem = cluster_problem()
    if problem is not None:
        # A real reason, never a silent one: SLURM needs root + apt (or a running cluster); on a
        # machine without them the rest of the suite still runs, and `problem` says exactly what
        # failed (apt, slurmctld, slurmd), which scripts/run_tests.sh prints in its SKIPPED banner.
        pytest.skip(f"one-node SLURM cluster unavailable: {problem}")
    conf = SLURM_DIR / "slurm.conf"
    facts = _node_facts(conf)
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", str(conf))
    try:
        yield LocalSlurm(conf, PARTITION, int(facts.get("CPUTot", 1)), int(facts.get("RealMemory", 1024)))
    finally:
        mp.undo()
