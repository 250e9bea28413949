"""Run fairseq wav2vec 2.0 pretraining locally (CPU or the local GPUs), under the watchdog.

Layout of an output directory:
    OUT/checkpoints/   fairseq's checkpoint_last.pt, checkpoint_E_U.pt, checkpoint_best.pt
    OUT/train.log      everything fairseq printed, appended across restarts
    OUT/watchdog.jsonl what the watchdog saw and did (one JSON object per line)
    OUT/run.json       the command, preset, seed, manifest stats, versions, git sha
Running the same command again resumes from OUT/checkpoints/checkpoint_last.pt (fairseq's
own resume), with the learning rate and seed the watchdog last chose.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from corpora.base.atomic import atomic_open, atomic_path, write_json
from corpora.base.boundary import read_state_json
from corpora.base.errors import UserError
from corpora.base.provenance import engine_versions, git_sha
from ssl_pretrain import watchdog as wd
from ssl_pretrain.fairseq_values import hydra_value_problem
from ssl_pretrain.hardware import load_preset, preset_path
from ssl_pretrain.manifest_check import check_manifest_dir

log = logging.getLogger(__name__)


NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"
# A command that starts ``python -m MODULE ...`` faster than a fresh interpreter, from a process
# that imported torch and fairseq already (a sweep's warm server sets it for the jobs it starts:
# gendergap/warm.py). start_fairseq(warm=True) uses it when it is set.
FAST_PYTHON_ENV = "GENDERGAP_FAST_PYTHON"


def fairseq_env(extra: dict | None = None, threads: int | None = None) -> dict:
    """Environment for a fairseq process.

    ``threads`` caps torch's CPU threads (OMP/MKL). On a busy shared CPU this matters more
    than anything else: a tiny run took 87 s with 2 threads and 6.5 s with 1 at load 7.5.
    torch's weights-only switch is set by start_fairseq alone (see there).
    """
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env.update(extra or {})
    return env


# Hydra overrides that make fairseq import code, load a file as a checkpoint or move what gendergap
# watches: refused from a command line or a config unless --trust-checkpoint (hydra.* holds
# callbacks, whose _target_ is any callable; common.user_dir imports a folder as a module).
DANGEROUS_KEYS = ("user_dir", "restore_file", "finetune_from_model", "continue_once", "w2v_path", "w2v_args",
                  "_target_", "save_dir", "log_file", "tensorboard_logdir", "wandb_project", "azureml_logging")


def dangerous_override(key: str) -> str | None:
    """Why a hydra override key may not come from an untrusted source (None: it may)."""
    key = key.lstrip("+~")
    if not re.fullmatch(r"[A-Za-z_][\w.]*", key):
        return "is not a plain group.key name (hydra would read it as one of its own options)"
    if key.split(".")[0] == "hydra" or any(part in DANGEROUS_KEYS for part in key.split(".")):
        return "makes fairseq import code, load a file as a checkpoint or write outside the run"
    return None


def check_overrides(overrides, trust: bool = False) -> list[str]:
    """fairseq hydra overrides are `group.key=value`; catch typos before fairseq does, and refuse the keys
    and values (hydra_value_problem) that run code or load checkpoints, unless ``trust`` (--trust-checkpoint)."""
    out = []
    for o in overrides or []:
        if "=" not in o or o.startswith("="):
            raise UserError(f"override {o!r} is not key=value",
                            fix="write e.g. optimization.max_update=1000 or model.encoder_layers=4")
        why = None if trust else dangerous_override(o.partition("=")[0]) or hydra_value_problem(*o.split("=", 1))
        if why:
            raise UserError(f"override {o!r} {why}", fix="drop it (gendergap sets checkpoints and paths itself); "
                            "only if you trust where it came from, pass --trust-checkpoint on the command line")
        out.append(o)
    return out


def preset_problems(cfg: dict, prefix: str = "") -> list[str]:
    """The keys (group.key) of a hydra preset file that dangerous_override or hydra_value_problem refuses."""
    found = []
    for key, value in (cfg or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            found += preset_problems(value, name + ".")
        elif (dangerous_override(name) and not (name == "checkpoint.save_dir" or name.startswith("hydra.run."))
              or hydra_value_problem(name, value)):
            found.append(name)
    return found


def _override_value(overrides: list[str], key: str):
    for o in reversed(overrides):
        k, _, v = o.partition("=")
        if k.lstrip("+") == key:
            return v
    return None


def base_lr(preset: str, overrides: list[str]) -> float:
    """The peak learning rate the run was asked for (override, else the preset's)."""
    v = _override_value(overrides, "optimization.lr")
    if v is None:
        v = load_preset(preset)["optimization"]["lr"]
    if isinstance(v, str):
        v = v.strip("[] ").split(",")[0]
    if isinstance(v, list):
        v = v[0]
    return float(v)


def build_command(preset: str, manifest_dir, out_dir, seed: int | None = None, overrides=(),
                  hydra_dir=None, cpu_ranks: bool = False, trust: bool = False, internal=()) -> list[str]:
    """The fairseq-hydra-train command line (as `python -m fairseq_cli.hydra_train`).

    ``hydra_dir``: hydra's run dir (default OUT/hydra; one per rank in multi-rank jobs).
    ``cpu_ranks``: one of several CPU ranks under SLURM: `python -m ssl_pretrain.run`, the
    same fairseq entry point with fairseq's CUDA-only calls worked around (`_cpu_rank_main`).
    ``trust``: --trust-checkpoint was given (check_overrides); ``internal``: overrides gendergap
    built itself (the warm start's init.pt), appended unchecked.
    """
    cfg = preset_path(preset)
    bad = [] if trust else preset_problems(load_preset(preset))
    if bad:
        raise UserError(f"the preset sets {bad[0]}, whose key or value makes fairseq run code or load a checkpoint",
                        path=cfg, fix="remove it from the preset (or pass --trust-checkpoint if you trust the file)")
    out_dir = Path(out_dir).resolve()
    entry = "ssl_pretrain.run" if cpu_ranks else "fairseq_cli.hydra_train"
    cmd = [sys.executable, "-m", entry, "--config-dir", str(cfg.parent),
           "--config-name", cfg.stem,
           f"task.data={Path(manifest_dir).resolve()}",
           f"checkpoint.save_dir={out_dir / 'checkpoints'}",
           f"hydra.run.dir={hydra_dir or out_dir / 'hydra'}"]
    if not (Path(manifest_dir) / "valid.tsv").is_file():
        cmd.append("dataset.disable_validation=true")
    if seed is not None:
        cmd.append(f"common.seed={seed}")
    return cmd + check_overrides(overrides, trust) + list(internal)


def _arg(cmd: list[str], flag: str) -> str | None:
    """The value of ``--flag V`` / ``--flag=V`` (fairseq-train, generate) or ``key=V`` (hydra)."""
    for i, a in enumerate(cmd):
        if flag.startswith("--") and a == flag and i + 1 < len(cmd):
            return cmd[i + 1]
        if a.lstrip("+").startswith(flag + "="):
            return a.partition("=")[2]
    return None


def fairseq_inputs(cmd: list[str], cwd: Path) -> list[Path]:
    """The checkpoint files the fairseq command ``cmd`` will torch.load: the resume file
    (save dir's checkpoint_last.pt, or the restore file), the warm-start and pretrained-part
    files, generate's --path models, and any other argument naming an existing .pt file."""
    found = []
    for save_flag, restore_flag in (("--save-dir", "--restore-file"),
                                    ("checkpoint.save_dir", "checkpoint.restore_file")):
        save_dir = _arg(cmd, save_flag)
        restore = _arg(cmd, restore_flag) or "checkpoint_last.pt"
        if save_dir:
            found.append(Path(save_dir) / restore if restore == "checkpoint_last.pt" else cwd / restore)
    for flag in ("--finetune-from-model", "--load-pretrained-encoder-from", "--load-pretrained-decoder-from",
                 "checkpoint.finetune_from_model", "model.w2v_path"):
        if _arg(cmd, flag):
            found.append(cwd / _arg(cmd, flag))
    if _arg(cmd, "--path"):
        found += [cwd / p for p in _arg(cmd, "--path").split(os.pathsep)]
    for a in cmd[3:]:   # a safety net: anything else naming a .pt (python -m MODULE comes first)
        value = a.partition("=")[2] if "=" in a else a
        if value.endswith(".pt"):
            found.append(cwd / value)
    return list(dict.fromkeys(p for p in found if p.is_file()))


_SAVED = re.compile(r"checkpoint(\d+|_\d+_\d+|_best)\.pt$")


def _is_prefix_of(short: Path, full: Path, chunk: int = 1 << 24) -> bool:
    if short.stat().st_size >= full.stat().st_size:
        return False
    with open(short, "rb") as a, open(full, "rb") as b:
        while block := a.read(chunk):
            if b.read(len(block)) != block:
                return False
    return True


def repair_cut_short_last(save_dir) -> str | None:
    """Undo a kill that landed while fairseq copied a save to checkpoint_last.pt.

    fairseq writes each save once, atomically (checkpoint_E_U.pt or checkpointE.pt), then *copies*
    it to checkpoint_best.pt and checkpoint_last.pt, not atomically: a SIGKILL, a preemption or a
    time-out in that window leaves checkpoint_last.pt a prefix of a complete file, which fairseq's
    resume cannot read. When checkpoint_last.pt is no zip archive and is a byte prefix of a
    complete sibling, the cut file is kept aside as ``checkpoint_last.pt.partial`` (or ``.partial1``,
    ``.partial2``, ...: never over a file already there, a user's or an earlier repair's) and the
    sibling (the same state) copied in its place, atomically. Returns the sibling's name, or None
    when there was nothing to repair (anything else unreadable is refused later, by the safe loader).
    """
    last = Path(save_dir) / "checkpoint_last.pt"
    if not last.is_file() or zipfile.is_zipfile(last):
        return None
    # the save itself (numbered, written atomically) before its copy checkpoint_best.pt
    saved = sorted((p for p in last.parent.glob("checkpoint*.pt") if _SAVED.search(p.name) and p.is_file()),
                   key=lambda p: (p.name != "checkpoint_best.pt", p.stat().st_mtime_ns), reverse=True)
    source = next((p for p in saved if zipfile.is_zipfile(p) and _is_prefix_of(last, p)), None)
    if source is None:
        return None
    with atomic_path(last) as tmp:   # a unique temporary name: never written through a planted link
        shutil.copyfile(source, tmp)
        aside = _keep_aside(last)
    log.warning("%s was cut short while fairseq copied %s to it (a kill during a save); resuming from "
                "%s, the same state (the cut file is kept as %s)", last, source.name, source.name, aside.name)
    return source.name


def _keep_aside(path: Path) -> Path:
    """A second name for ``path``, the first free one of PATH.partial, PATH.partial1, ...: a hard link
    fails on a name that exists, so no file there (a user's, an earlier repair's) is ever replaced;
    a file system without hard links gets a rename onto a name seen free."""
    for n in range(10_000):
        aside = path.with_name(f"{path.name}.partial{n or ''}")
        try:
            os.link(path, aside, follow_symlinks=False)
        except FileExistsError:
            continue
        except OSError:
            if os.path.lexists(aside):
                continue
            path.replace(aside)
        return aside
    raise UserError("10,000 cut-short copies are kept beside it", path=path, fix="remove those you do not need")


def start_fairseq(cmd: list[str], log_path, env: dict | None = None, trust: bool = False,
                  warm: bool = False) -> subprocess.Popen:
    """Start fairseq in its own process group, appending its output to ``log_path``.

    Every checkpoint the command will load (fairseq_inputs) is first read with the project's safe
    loader; a crafted one is refused in one line before anything starts. fairseq then runs
    through ssl_pretrain.fairseq_entry, so its own torch.load stays weights-only with the same
    allowlist. Only ``trust`` (--trust-checkpoint on the command line: the user vouches for the
    files) skips the check and sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 for this process, so that
    fairseq unpickles fully; gendergap sets that variable nowhere else, and removes one inherited
    from the caller's environment otherwise.

    ``warm``: start it through FAST_PYTHON_ENV's command when the environment has one (the ST
    runs of a sweep job: each would spend ~6 s of CPU importing torch and fairseq). The process
    is then the warm server's child, the same command in the same folder, environment and
    streams; the command stops it as it would stop fairseq (it forwards signals).
    """
    from ssl_pretrain.safe_load import check_before_fairseq
    log_path = Path(log_path)
    for save_flag in ("--save-dir", "checkpoint.save_dir"):
        if _arg(cmd, save_flag):
            repair_cut_short_last(log_path.parent / _arg(cmd, save_flag))
    check_before_fairseq(fairseq_inputs(cmd, log_path.parent), trust=trust)
    env = dict(env or fairseq_env())
    if trust:
        env[NO_WEIGHTS_ONLY] = "1"
    else:
        env.pop(NO_WEIGHTS_ONLY, None)
    if len(cmd) > 2 and cmd[1] == "-m" and cmd[2].startswith("fairseq_cli."):
        cmd = [cmd[0], "-m", "ssl_pretrain.fairseq_entry", *cmd[2:]]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fast = env.get(FAST_PYTHON_ENV) if warm and cmd[0] == sys.executable and cmd[1] == "-m" else None
    with open(log_path, "a", encoding="utf-8") as f:
        f.write(f"==== gendergap {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}{' (warm)' if fast else ''}\n")
    if fast:
        cmd = [*shlex.split(fast), *cmd[1:]]
    logf = open(log_path, "ab")
    # own session: stopping it (watchdog trip, Ctrl-C) stops fairseq's data workers too
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                            cwd=str(log_path.parent), start_new_session=True)
    logf.close()
    return proc


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the run's process group, then SIGKILL after ``grace_s``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def read_log_from(path: Path, offset: int) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def watchdog_state(journal_path: Path, lr: float, seed: int | None) -> tuple[float, int | None, int]:
    """lr, seed and restart count after the watchdog's earlier rollbacks (survives re-runs)."""
    restarts = 0
    for e in wd.read_journal(journal_path):
        if e.get("event") == "rollback":
            lr, restarts = e["new_lr"], e["restart"]
            seed = e.get("new_seed", seed)
    return lr, seed, restarts


def _weights_sha256(state: dict) -> str:
    """sha256 over a checkpoint dict's weights (names, dtypes, shapes, bytes): which model it is."""
    import hashlib

    import torch
    h = hashlib.sha256()
    for name in sorted(state["model"]):
        t = state["model"][name].detach().cpu().contiguous().reshape(-1)
        h.update(f"{name}\0{t.dtype}\0{tuple(state['model'][name].shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def warm_start(state: dict, out_dir, source: str | None = None) -> list[str]:
    """Overrides that start a run from ``state``'s weights (a fairseq wav2vec 2.0 checkpoint dict,
    e.g. a packed release read by ssl_pretrain.checkpoints) with a fresh optimizer, schedule and
    data order: fairseq's own ``checkpoint.finetune_from_model``, which a rerun of the same command
    ignores once ``checkpoint_last.pt`` exists (so a killed warm-started run resumes as usual).
    A packed release holds weights and config only; the bookkeeping fairseq's loader reads is
    filled in (the update count restarts at 0).

    OUT/init.json records which weights OUT/init.pt holds (``source``, their sha256): a rerun with
    other weights rewrites init.pt, so --init-from always wins over a stale file, unless the run
    already has a checkpoint_last.pt trained from the old weights: then it is refused, naming both."""
    import torch
    out_dir = Path(out_dir)
    init, record_path = out_dir / "init.pt", out_dir / "init.json"
    digest = _weights_sha256(state)
    record = read_state_json(record_path, "init.json") or {}
    if not (init.is_file() and record.get("sha256") == digest):
        if record.get("sha256") and (out_dir / "checkpoints" / "checkpoint_last.pt").is_file():
            raise UserError(f"this run was started from {record.get('source')} (weights sha256 "
                            f"{record['sha256'][:12]}), not from {source or 'the --init-from checkpoint'} (weights "
                            f"sha256 {digest[:12]}): its checkpoints continue the first", path=out_dir,
                            fix="give a new --out for the new starting point (or delete OUT/checkpoints to start over)")
        history = (state.get("optimizer_history") or [{}])[-1]
        full = {"cfg": state["cfg"], "args": None, "model": {k: v.float() for k, v in state["model"].items()},
                "optimizer_history": [{"criterion_name": "Wav2vecCriterion", "optimizer_name": "FairseqAdam",
                                       "lr_scheduler_state": {"best": None}, "best_loss": None,
                                       "num_updates": history.get("num_updates") or 0}],
                "extra_state": {}, "last_optimizer_state": None}
        out_dir.mkdir(parents=True, exist_ok=True)
        with atomic_open(init, "wb") as f:
            torch.save(full, f)
        write_json(record_path, {"source": str(source) if source else None, "sha256": digest})
    return [f"checkpoint.finetune_from_model={init.resolve()}"]


def run_pretraining(preset: str, manifest_dir, out_dir, seed: int | None = None, overrides=(),
                    policy: wd.Policy | None = wd.Policy(), check_audio: str = "sample",
                    poll_s: float = 1.0, threads: int | None = None, trust: bool = False) -> dict:
    """Pretrain (or resume) under the watchdog; returns a summary dict (also in OUT/run.json).

    ``policy=None`` runs fairseq without the watchdog. ``trust``: --trust-checkpoint (the
    overrides may name files and code; fairseq unpickles its checkpoints fully).
    """
    out_dir = Path(out_dir)
    own = f"checkpoint.finetune_from_model={(out_dir / 'init.pt').resolve()}"   # warm_start's, not the user's
    internal = [o for o in overrides or () if o == own]
    overrides = check_overrides([o for o in overrides or () if o != own], trust)
    preset_path(preset)  # an unknown preset fails before the (slower) manifest check
    stats = check_manifest_dir(manifest_dir, check_audio=check_audio)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path, save_dir = out_dir / "train.log", out_dir / "checkpoints"
    journal_path = out_dir / (policy.journal if policy else "watchdog.jsonl")
    lr, seed, restarts = watchdog_state(journal_path, base_lr(preset, overrides), seed)
    summary = {"preset": str(preset), "manifest": str(Path(manifest_dir).resolve()), "manifest_stats": stats,
               "seed": seed, "overrides": overrides + internal, "versions": engine_versions(), "git_sha": git_sha(),
               "policy": policy.as_dict() if policy else None}
    while True:
        extra = [f"optimization.lr=[{lr}]"] if restarts else []
        cmd = build_command(preset, manifest_dir, out_dir, seed, overrides + extra, trust=trust, internal=internal)
        write_json(out_dir / "run.json", {**summary, "command": cmd, "lr": lr, "restarts": restarts})
        offset = log_path.stat().st_size if log_path.exists() else 0
        start_updates = resume_updates(log_path)
        log.info("pretraining %s -> %s (log: %s)", preset, save_dir, log_path)
        proc = start_fairseq(cmd, log_path, fairseq_env(threads=threads), trust=trust)
        trip = None
        try:
            while proc.poll() is None:
                time.sleep(poll_s)
                if policy is not None:
                    trip = wd.check(wd.parse_lines(read_log_from(log_path, offset).splitlines()), policy, start_updates)
                    if trip is not None:
                        stop(proc)
                        break
        except BaseException:
            stop(proc)
            raise
        rc = proc.wait()
        if policy is not None and trip is None:
            trip = wd.check(wd.parse_lines(read_log_from(log_path, offset).splitlines()), policy, start_updates)
        if trip is None:
            if rc != 0:
                raise UserError(f"fairseq exited with code {rc}", path=log_path,
                                fix="read the end of the log; fix the config or data and run the same command again")
            updates = resume_updates(log_path)
            summary.update(final_updates=updates, lr=lr, restarts=restarts)
            write_json(out_dir / "run.json", {**summary, "command": cmd})
            return summary
        action, new_seed = recover(trip, out_dir, lr, restarts, seed, policy)
        lr, seed, restarts = action.new_lr, new_seed, action.restart


def recover(trip: wd.Trip, out_dir, lr: float, restarts: int, seed: int | None,
            policy: wd.Policy) -> tuple[wd.Action, int | None]:
    """After a trip: journal it, pick and restore the last good checkpoint, mark the log.
    Returns (action, seed for the restart); raises UserError when the policy gives up."""
    out_dir = Path(out_dir)
    log_path, save_dir, journal_path = out_dir / "train.log", out_dir / "checkpoints", out_dir / policy.journal
    records = wd.parse_lines(log_path.read_text(encoding="utf-8", errors="replace").splitlines())
    action = wd.plan_recovery(trip, wd.candidate_checkpoints(save_dir, records), lr, restarts, policy)
    wd.journal(journal_path, "trip", **vars(trip))
    if action.kind == "give_up":
        wd.journal(journal_path, "give_up", **vars(action))
        raise UserError(f"training tripped the watchdog ({trip.reason}: {trip.detail}) "
                        f"{policy.max_restarts} times", path=log_path,
                        fix="lower optimization.lr, raise optimization.clip_norm or check the data")
    aside = wd.apply_rollback(action, save_dir)
    new_seed = (1 if seed is None else seed) + 1 if action.reseed else seed  # seed 0 is a real seed
    wd.journal(journal_path, "rollback", **vars(action), set_aside=aside, new_seed=new_seed)
    with open(log_path, "a", encoding="utf-8") as f:
        # written in fairseq's own words so that parsing the log (resume point, rollback
        # candidates) sees checkpoint_last.pt at its rolled-back update
        f.write(f"==== gendergap watchdog: {trip.reason}; Saved checkpoint {save_dir / 'checkpoint_last.pt'} "
                f"(epoch 0 @ {action.checkpoint_updates} updates) by rollback from {action.checkpoint}\n")
    log.warning("watchdog: %s at update %s; rolled back to %s (update %d), lr %.3g -> %.3g",
                trip.reason, trip.num_updates, action.checkpoint, action.checkpoint_updates,
                action.old_lr, action.new_lr)
    return action, new_seed


def resume_updates(log_path: Path) -> int:
    """The update count of checkpoint_last.pt according to the log (0 if none yet)."""
    if not log_path.exists():
        return 0
    saved = 0
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        r = wd.parse_line(line)
        if r is not None and r.kind == "saved":
            saved = r.num_updates
    return saved


def _cpu_rank_main(argv: list[str]) -> None:
    """fairseq-hydra-train as one of several CPU ranks (SLURM tasks, gloo backend).

    fairseq 0.12 runs multi-rank training on CPU only after two CUDA-only calls are avoided
    (found by running 2 ranks on the tests' SLURM cluster; both raise on a CPU-only torch):
      * fairseq/distributed/utils.py, infer_init_method (line 84): with SLURM tasks it sets
        device_id = SLURM_LOCALID and then calls torch.cuda.set_device(device_id) whenever
        device_id > 0, even with common.cpu=true -> every rank but the first dies with
        "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'". Each CPU rank
        is told it is local rank 0; its global rank still comes from SLURM_PROCID.
      * fairseq/distributed/utils.py, all_gather_list (line 620), which the wav2vec criterion's
        logging needs (it cannot be summed off TPUs): it allocates its buffer with
        torch.cuda.ByteTensor -> "TypeError: type torch.cuda.ByteTensor not available". The
        function reuses a buffer stored on itself when it is large enough, so a CPU buffer
        of the size it would allocate (all_gather_list_size x world size) is put there first.
    Everything else is fairseq's own code path (SLURM init, gloo all-reduce, checkpoints).
    """
    import torch
    from fairseq.distributed import utils as dist_utils

    from ssl_pretrain.device import flush_subnormals
    from ssl_pretrain.safe_load import SAFE_GLOBALS

    torch.serialization.add_safe_globals(SAFE_GLOBALS)   # fairseq's torch.load stays weights-only (fairseq_entry)
    flush_subnormals()   # as every fairseq process does (fairseq_entry)
    os.environ["SLURM_LOCALID"] = "0"
    world = int(os.environ.get("SLURM_NTASKS", "1"))
    size = int(_override_value(argv, "common.all_gather_list_size") or 16384)   # fairseq's default
    dist_utils.all_gather_list._buffer = torch.zeros(size * world, dtype=torch.uint8)
    dist_utils.all_gather_list._cpu_buffer = torch.zeros(size, dtype=torch.uint8)
    from fairseq_cli.hydra_train import cli_main
    cli_main()


if __name__ == "__main__":
    _cpu_rank_main(sys.argv[1:])
