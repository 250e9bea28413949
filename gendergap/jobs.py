"""What a sweep job runs, in the job's own process (submitit's local executor or a SLURM node).

A job is one study step (gendergap/steps): ``run_job`` calls ``step.run()`` while holding a lock
on the step's state folder, so a step launched twice (a sweep killed and re-run while its
orphaned job still runs) waits for the first and then finds it finished instead of training
twice into the same folder. Results stored meanwhile record the step (analysis.store.recording_step).

The sweep submits ``SweepJob(step, state_dir)``, a submitit ``Checkpointable``: when SLURM
preempts the job or its time limit nears, submitit calls ``checkpoint()``, which resubmits the
same step, and requeues it. Nothing else needs saving: every step resumes from its own
checkpoints when run again (pretraining from checkpoint_last.pt, fine-tuning from
SpeechBrain's checkpointer, the feature store from its finished shards), and a step already
finished is skipped by its done.json.
"""
from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path

from submitit.helpers import Checkpointable, DelayedSubmission

from corpora.base import boundary
from corpora.base.atomic import write_json
from corpora.base.boundary import locked
from gendergap import warm
from gendergap.logs import setup_logging


def read_state(path: Path) -> dict | None:
    """A job's state file (done/submitted/failed.json) as the boundary reads it; None when it is
    absent or unreadable -- the job then counts as not done and runs again, which is always safe."""
    return boundary.read_state_json(path, "job state file")


class SweepJob(Checkpointable):
    """One step as submitit runs it: ``SweepJob(step, state_dir)()`` is ``run_job``, and
    ``checkpoint()`` hands submitit the same job again for the requeue after a preemption or
    time-out (submitit requeues only callables that have a checkpoint method)."""

    def __init__(self, step, state_dir: str):
        self.step, self.state_dir = step, str(state_dir)
        self.requeued = False

    def __call__(self) -> dict:
        return run_job(self.step, self.state_dir, interrupted=lambda: self.requeued)

    def checkpoint(self, *args, **kwargs) -> DelayedSubmission:
        self.requeued = True  # the SystemExit submitit raises next is a requeue, not a failure
        write_json(Path(self.state_dir) / "requeued.json", {"key": self.step.key, "when": time.time()})
        return DelayedSubmission(SweepJob(self.step, self.state_dir))


def run_job(step, state_dir: str, interrupted=None) -> dict:
    """Run one step unless a finished run with the same key exists; returns done.json.
    ``interrupted()`` True: the job is being requeued, so an exit is not recorded as a failure."""
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    with locked(state / "lock"):  # blocks while another process runs this job
        done = read_state(state / "done.json")
        if done and done.get("key") == step.key:
            return done
        (state / "failed.json").unlink(missing_ok=True)
        ledger = state / "forked-cpu.txt"   # the CPU time of the engine processes it starts warm
        ledger.unlink(missing_ok=True)
        outer = os.environ.get(warm.LEDGER_ENV)
        os.environ[warm.LEDGER_ENV] = str(ledger)
        # this process and the ones it waited for (an ST job's fairseq), plus those it started warm
        started, cpu_started = time.time(), warm.cpu_seconds()
        try:
            _run(step)
        except BaseException as e:  # noqa: BLE001 -- recorded, then re-raised for the executor
            if interrupted is not None and interrupted():
                raise
            write_json(state / "failed.json", {"key": step.key, "step": step.describe(),
                                                "error": f"{type(e).__name__}: {e}", "when": time.time(),
                                                "traceback": traceback.format_exc()[-4000:]})
            raise
        finally:   # a job run in its caller's process (tests) leaves its environment as it was
            if outer is None:
                os.environ.pop(warm.LEDGER_ENV, None)
            else:
                os.environ[warm.LEDGER_ENV] = outer
        done = {"key": step.key, "name": step.name, "kind": step.kind, "started": started,
                "finished": time.time(), "seconds": round(time.time() - started, 1),
                "cpu_s": round(warm.cpu_seconds() - cpu_started + warm.ledger_seconds(ledger), 1),
                "host": socket.gethostname()}
        write_json(state / "done.json", done)
        return done


def _run(step) -> None:
    """The step's run() with its job's threads, quiet logging, and its results recorded as its own."""
    from analysis.store import recording_step

    cpus = int(step.resources.get("cpus", 1))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(cpus)
    import torch
    torch.set_num_threads(cpus)
    setup_logging(quiet=True)
    print(f"== {step.name}: {step.describe()}", flush=True)
    with recording_step(step.record()):
        step.run()
