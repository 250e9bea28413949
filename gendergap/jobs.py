"""What a sweep job runs, in the job's own process (submitit's local executor or a SLURM node).

A job is a list of steps, each either a `gendergap` command line (``{"cli": [...]}``) or one of
the small functions below (``{"call": "name", "kwargs": {...}}``) for the wiring no command
covers. ``run_job`` holds a lock on the job's state folder while it works, so a job launched
twice (a sweep killed and re-run while its orphaned job still runs) waits for the first and
then finds it finished instead of training twice into the same folder.

The sweep submits ``SweepJob(spec, state_dir)``, a submitit ``Checkpointable``: when SLURM
preempts the job or its time limit nears, submitit calls ``checkpoint()``, which resubmits the
same job spec, and requeues it. Nothing else needs saving: every step resumes from its own
checkpoints when run again (pretraining from checkpoint_last.pt, fine-tuning from
SpeechBrain's checkpointer, the feature store from its finished shards), and a step already
finished is skipped by its done.json.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import traceback
from pathlib import Path

from submitit.helpers import Checkpointable, DelayedSubmission

from corpora.base.atomic import write_json
from corpora.base.errors import UserError

SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
PRETRAIN_SEEDS = 4  # a tiny run still at chance is redone with the next seed, up to this many tries


class JobFailed(RuntimeError):
    pass


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class SweepJob(Checkpointable):
    """One sweep job as submitit runs it: ``SweepJob(spec, state_dir)()`` is ``run_job``, and
    ``checkpoint()`` hands submitit the same job again for the requeue after a preemption or
    time-out (submitit requeues only callables that have a checkpoint method)."""

    def __init__(self, spec: dict, state_dir: str):
        self.spec, self.state_dir = spec, str(state_dir)
        self.requeued = False

    def __call__(self) -> dict:
        return run_job(self.spec, self.state_dir, interrupted=lambda: self.requeued)

    def checkpoint(self, *args, **kwargs) -> DelayedSubmission:
        self.requeued = True  # the SystemExit submitit raises next is a requeue, not a failure
        write_json(Path(self.state_dir) / "requeued.json", {"key": self.spec["key"], "when": time.time()})
        return DelayedSubmission(SweepJob(self.spec, self.state_dir))


def run_job(spec: dict, state_dir: str, interrupted=None) -> dict:
    """Run one job's steps unless a finished run with the same key exists; returns done.json.
    ``interrupted()`` True: the job is being requeued, so an exit is not recorded as a failure."""
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    with open(state / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # blocks while another process runs this job
        done = read_json(state / "done.json")
        if done and done.get("key") == spec["key"]:
            return done
        (state / "failed.json").unlink(missing_ok=True)
        cpus = int(spec.get("resources", {}).get("cpus", 1))
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(cpus)
        started = time.time()
        step = None
        try:
            import torch
            torch.set_num_threads(cpus)
            for step in spec["steps"]:
                print(f"== {spec['name']}: {_describe(step)}", flush=True)
                _run_step(step)
        except BaseException as e:  # noqa: BLE001 -- recorded, then re-raised for the executor
            if interrupted is not None and interrupted():
                raise
            write_json(state / "failed.json", {"key": spec["key"], "step": _describe(step) if step else None,
                                                "error": f"{type(e).__name__}: {e}", "when": time.time(),
                                                "traceback": traceback.format_exc()[-4000:]})
            raise
        done = {"key": spec["key"], "name": spec["name"], "kind": spec["kind"], "started": started,
                "finished": time.time(), "seconds": round(time.time() - started, 1), "host": socket.gethostname()}
        write_json(state / "done.json", done)
        return done


def _describe(step: dict) -> str:
    if "cli" in step:
        return "gendergap " + " ".join(step["cli"])
    return f"{step['call']}({', '.join(f'{k}={v!r}' for k, v in step['kwargs'].items())})"


def _run_step(step: dict) -> None:
    if "cli" in step:
        from gendergap.cli import main
        rc = main(["--debug"] + list(step["cli"]))  # --debug: a UserError propagates, its line lands in failed.json
        if rc != 0:
            raise JobFailed(f"`gendergap {' '.join(step['cli'][:2])} ...` exited with {rc} (its error is in the log)")
    else:
        CALLS[step["call"]](**step["kwargs"])


# ---- the steps no `gendergap` command covers -------------------------------------------------

def build_pretraining_manifest(table: str, out: str, gender: str, split: str, corpus: str | None,
                               hours: float | None, seed: int) -> None:
    from manifests.build import build_manifest

    if (Path(out) / "selection_report.json").is_file():
        return
    build_manifest(table=table, out=out, gender=gender, fmt="fairseq", splits=(split,), seed=seed, hours=hours,
                   selection_options={"corpora": [corpus]} if corpus else None)


def make_up(report_path: str) -> dict:
    """Hours and gender percentages of a pretraining selection (Table 3 of the study)."""
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    train = report["splits"]["train"]
    total = sum(v["seconds"] for g, v in train.items() if g != "all")
    pct = {g: 100.0 * train.get(g, {}).get("seconds", 0.0) / total for g in ("M", "F", "U")}
    return {"hours": round(total / 3600, 3), "male_pct": round(pct["M"], 1), "female_pct": round(pct["F"], 1),
            "unknown_pct": round(pct["U"], 1)}


def pretrain_tiny(manifest: str, out: str, seed: int, updates: int, preset: str = "tiny",
                  continue_updates: int = 0) -> None:
    """Pretrain; a run whose valid accuracy ends below 2x chance (the plateau of
    notes/DEPENDENCIES.md) is redone with the next seed. With ``continue_updates``, the accepted
    checkpoint is then continued by that many updates from a warm start (fresh optimizer and
    schedule, ``pretrain run --init-from``): a longer schedule from scratch sat at chance, the
    continuation does not. The shipped checkpoints were made by these rules
    (ssl_pretrain/shipped/PROVENANCE.md). Leaves ``out/checkpoint.txt`` naming the final
    checkpoint and ``out/updates.txt`` the updates it has seen in all."""
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.convert import num_updates
    from ssl_pretrain.evaluate import last_valid_accuracy
    from ssl_pretrain.run import run_pretraining, warm_start

    chance = 1 / 11  # the tiny preset draws 10 negatives
    out = Path(out)
    for s in range(seed + 1, seed + 1 + PRETRAIN_SEEDS):
        run = out / f"seed{s}"
        info = read_json(run / "run.json") or {}
        if "final_updates" not in info:
            run_pretraining(preset, manifest, run, seed=s, threads=1, overrides=[f"optimization.max_update={updates}"])
        at, accuracy = last_valid_accuracy(run / "train.log")
        if accuracy is not None and accuracy >= 2 * chance:
            best = run / "checkpoints" / "checkpoint_best.pt"
            total = num_updates(CheckpointRef.resolve(best).fairseq_state())
            if continue_updates:
                more = out / "continued"
                if "final_updates" not in (read_json(more / "run.json") or {}):
                    # the first seed again (not the accepted one): what the shipped continuations used
                    run_pretraining(preset, manifest, more, seed=seed + 1, threads=1,
                                    overrides=[f"optimization.max_update={continue_updates}",
                                               *warm_start(CheckpointRef.resolve(best).fairseq_state(), more)])
                # the last checkpoint: the continuation's learning rate has decayed to 0 by its end, so
                # it is the trained model (its valid loss differs from the lowest by noise)
                best = more / "checkpoints" / "checkpoint_last.pt"
                total += num_updates(CheckpointRef.resolve(best).fairseq_state())  # counted from 0 again
            (out / "updates.txt").write_text(f"{total}\n")
            (out / "checkpoint.txt").write_text(str(best) + "\n")
            return
        print(f"seed {s}: valid accuracy {accuracy} at update {at} is still at chance; trying the next seed", flush=True)
    raise UserError(f"pretraining stayed at chance with seeds {seed + 1}..{seed + PRETRAIN_SEEDS}", path=out,
                    fix="use a shipped or imported checkpoint, or another seed")


def pool_seeds(results: list[str], seeds: list[int], key: str | None, db: str, checkpoint: str, task: str,
               lang_pair: str, subset: str, bootstrap: int, seed: int) -> None:
    """Pool one task's per-seed scoring results (their JSON files; ``key``: where the scoring
    result sits in it, e.g. ``bleu``) into mean ± sd and the seed-and-speaker CI, and store them
    as one run (analysis/seeds.py)."""
    from analysis.seeds import pool_seed_results, pooled_rows
    from analysis.store import ResultsStore
    from corpora.base.provenance import file_fingerprint

    loaded = [json.loads(Path(r).read_text(encoding="utf-8")) for r in results]
    loaded = [r[key] if key else r for r in loaded]
    pooled = pool_seed_results(loaded, seeds, bootstrap=bootstrap, seed=seed, source=results[0])
    config = {"kind": "seeds", "checkpoint": checkpoint, "task": task, "lang_pair": lang_pair, "subset": subset,
              "signature": pooled["signature"], "results": results}
    with ResultsStore(db) as store:
        run_id = store.find_done(config, kind="seeds")
        if run_id is None:
            run_id = store.start_run("seeds", config, name=checkpoint, seed=seed,
                                     inputs=[file_fingerprint(r) for r in results])
        store.add_scores(run_id, pooled_rows(pooled, checkpoint, task, lang_pair, subset), finish=True)
    print(f"{checkpoint} {task} {lang_pair} over seeds {seeds}: " + ", ".join(
        f"{k} {pooled['mean'][k]:.2f} ± {pooled['sd'][k] or 0:.2f}" for k in ("all", "delta_rel")
        if pooled["mean"][k] is not None) + f" (Δrel CI {pooled['ci']['delta_rel']})", flush=True)


def register_checkpoints(registry: str, entries: list[dict], trust: bool = False) -> None:
    """Register every checkpoint of the study (path, or a pretrain run's accepted checkpoint)."""
    from ssl_pretrain.checkpoints import register_checkpoint
    from ssl_pretrain.registry import Registry

    reg = Registry(registry)
    known = {e["name"]: e for e in reg.entries()}
    for e in entries:
        path = e["path"] or (Path(e["pretrain_dir"]) / "checkpoint.txt").read_text().strip()
        extra = make_up(e["make_up"]) if e.get("make_up") else dict(e.get("table3") or {})
        if e.get("pretrain_dir") and (Path(e["pretrain_dir"]) / "updates.txt").is_file():
            extra["updates"] = int((Path(e["pretrain_dir"]) / "updates.txt").read_text())
        old = known.get(e["name"])
        if old and Path(old["path"]) == Path(path).resolve() and all(old.get(k) == v for k, v in extra.items()):
            continue
        register_checkpoint(reg, e["name"], path, replace_entry=True, note=e.get("note") or "", trust=trust, **extra)


def export_asr_data(table: str, corpus: str, splits: dict, out: str) -> None:
    """SpeechBrain CSVs (train/valid/test) of one corpus, split by the table's split labels."""
    from corpora.table import read_table, resolve_audio
    from manifests.export_speechbrain import export_speechbrain

    df = read_table(table)
    df = df[df["corpus"] == corpus].copy()
    df["audio"] = resolve_audio(df, table)  # the CSVs must work from any working directory
    parts = {}
    for role, split in splits.items():
        rows = df[df["split"] == split]
        if rows.empty:
            raise UserError(f"corpus {corpus!r} has no rows in split {split!r}", path=table,
                            fix="check the task's corpus and splits in the study config")
        parts[role] = rows
    export_speechbrain(parts, out)


def extract_features(table: str, ckpt: str, registry: str, store: str, requests: list[dict], device: str,
                     precision: str, trust: bool = False) -> None:
    """Extract, once, what a checkpoint's frozen-feature tasks will read from the feature store.

    Each request is a task's rows (corpus + splits; probes: the rows probe_splits draws with
    ``probe_seed``) and layers. Requests are served by as few entries as cover them: a request
    whose rows and layers an entry already holds adds nothing, one with the same layers as an
    entry adds its rows to it. The built-in study gets one entry with every layer of synth-fr
    (frozen ASR, fr->en ST, probes) and one with layer 1 of the gender set (en->fr ST).
    """
    import pandas as pd

    from analysis.probing import probe_splits
    from corpora.table import read_table, resolve_audio
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.device import device_and_precision
    from ssl_pretrain.feature_store import FeatureStore, extractor_for

    device, precision = device_and_precision(device, precision)
    df = read_table(table)
    extractor = extractor_for(CheckpointRef.resolve(ckpt, registry, trust=trust), device, precision)
    wanted = []
    for req in requests:
        rows = df[df["split"].isin(req["splits"]) & ((df["corpus"] == req["corpus"]) if req["corpus"] else True)]
        if rows.empty:
            raise UserError(f"no rows of corpus {req['corpus']!r} in splits {req['splits']} for a frozen-feature task",
                            path=table, fix="check the tasks' corpus and splits in the study config")
        if req.get("probe_seed") is not None:
            rows = pd.concat(probe_splits(rows, seed=req["probe_seed"], source=table).values())
        wanted.append((rows, set(_union_layers([req["layers"]], extractor.n_outputs))))
    entries: list[list] = []  # [rows, layers]
    for rows, layers in sorted(wanted, key=lambda w: -len(w[1])):
        ids = set(rows["id"])
        if any(ids <= set(e[0]["id"]) and layers <= e[1] for e in entries):
            continue
        same = next((e for e in entries if e[1] == layers), None)
        if same is not None:
            same[0] = pd.concat([same[0], rows]).drop_duplicates("id")
        else:
            entries.append([rows, layers])
    for rows, layers in entries:
        rows = rows.reset_index(drop=True)
        rows = rows.assign(audio=resolve_audio(rows, table).to_numpy())
        view = FeatureStore(store).view(extractor, rows, sorted(layers), progress=False)
        print(f"features of {ckpt}: {len(rows)} utterances, layers {view.layers}, {device} {precision} -> {view.dir}",
              flush=True)


def _union_layers(options: list[str], n_outputs: int) -> list[int]:
    """The layer options of several tasks ("all", "last", "1", "0,2,4") as one list."""
    wanted = set()
    for option in options:
        for item in str(option).split(","):
            item = item.strip()
            if item == "all":
                return list(range(n_outputs))
            wanted.add(n_outputs - 1 if item == "last" else int(item))
    return sorted(wanted)


def score_mustshe(tsv: str, hyps: str, db: str, checkpoint: str, lang_pair: str, subset: str = "test") -> None:
    """MuST-SHE coverage/accuracy of an ST run's test hypotheses, into the results DB."""
    from analysis.mustshe import score_mustshe as score
    from gendergap.cmd_st import store_mustshe

    result = score(tsv, hyps)
    write_json(str(hyps) + ".mustshe.json", result)
    store_mustshe(db, result, checkpoint, lang_pair, subset, {"mustshe": str(Path(tsv).resolve()),
                                                               "hyps": str(Path(hyps).resolve())}, [tsv, hyps])


CALLS = {f.__name__: f for f in (build_pretraining_manifest, pretrain_tiny, register_checkpoints, pool_seeds, export_asr_data,
                                 extract_features, score_mustshe)}
