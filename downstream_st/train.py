"""Train a frozen-feature ST model with fairseq-train (task speech_to_text), resumably.

Layout of a model dir (``--out``)::

    OUT/data/             train.tsv, valid.tsv, config.yaml, spm_<type><size>.model/.txt
    OUT/checkpoints/      fairseq's checkpoint<E>.pt (last N kept), checkpoint_last.pt, _best.pt
    OUT/checkpoint_avg.pt the mean of the last N epoch checkpoints (what decoding uses)
    OUT/train.log         everything fairseq printed, appended across restarts
    OUT/st.json           checkpoint, layer, languages, preset, data summary, command, versions, and
                          the sha256 of each file decoding loads (``weights``: checked before decoding)

Running the same command again resumes from ``checkpoints/checkpoint_last.pt`` (fairseq's
own resume); a finished run with the same command and data is skipped, a larger budget
(max-epoch=...) continues it. The data dir is rebuilt only when its inputs
changed, and a changed dataset under existing checkpoints is refused (the vocabulary would
no longer match the model).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import pandas as pd

from corpora.base.atomic import write_json
from corpora.base.boundary import MAX_CONFIG_BYTES, checked, is_special, read_json, read_state_json, regular_file
from corpora.base.errors import UserError
from corpora.base.provenance import config_hash, engine_versions, file_sha256, git_sha
from corpora.checks import Finding, load_table
from downstream_st.average import average_checkpoints, last_checkpoints
from downstream_st.data import build_s2t_dir, data_config_files, filter_frames, target_column
from downstream_st.fairseq_flags import as_flags, check_flags, flag_key
from downstream_st.presets import StoredRun, apply_overrides, load_preset, validation_start
from ssl_pretrain.run import fairseq_env, start_fairseq, stop

log = logging.getLogger(__name__)

AVERAGED = "checkpoint_avg.pt"
META = "st.json"


def build_train_command(data_dir: str | os.PathLike, save_dir: str | os.PathLike, train_flags: dict, *,
                        source=None, trust: bool = False) -> list[str]:
    """The fairseq-train command line (as ``python -m fairseq_cli.train``); a flag off FLAGS
    (downstream_st/fairseq_flags.py) or a value not of its type is refused, naming ``source``, unless
    ``trust``. Each flag and its value are one word (as_flags)."""
    check_flags("train", train_flags, source=source, trust=trust)
    return [sys.executable, "-m", "fairseq_cli.train", str(Path(data_dir).resolve()),
            "--task", "speech_to_text", "--config-yaml", "config.yaml",
            "--train-subset", "train", "--valid-subset", "valid",
            "--save-dir", str(Path(save_dir).resolve()), "--log-format", "simple", "--log-interval", "10",
            *as_flags(train_flags)]


def process_env(threads: int | None, gpu: str | None = None) -> dict:
    """Environment for a fairseq process: torch's CPU threads (OMP/MKL) when ``threads`` is set,
    and the one GPU it may see (``CUDA_VISIBLE_DEVICES``) when ``gpu`` is."""
    env = {"OMP_NUM_THREADS": str(int(threads)), "MKL_NUM_THREADS": str(int(threads))} if threads else {}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def run_fairseq(cmd: list[str], log_path: Path, poll_s: float = 0.5, threads: int | None = None,
                gpu: str | None = None, trust: bool = False) -> None:
    """Run fairseq to completion (its output appended to ``log_path``); Ctrl-C stops it cleanly.
    The checkpoints it will load are checked first (ssl_pretrain.run.start_fairseq; ``trust``:
    --trust-checkpoint)."""
    offset = start = log_path.stat().st_size if log_path.exists() else 0
    proc = start_fairseq(cmd, log_path, env=fairseq_env(process_env(threads, gpu)), trust=trust, warm=True)
    try:
        while proc.poll() is None:
            time.sleep(poll_s)
            offset = _echo_progress(log_path, offset)
        _echo_progress(log_path, offset)
    except BaseException:
        stop(proc)
        raise
    if proc.returncode != 0:
        with open(log_path, "rb") as f:   # this run's part of the log (it is appended across restarts)
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
        known = explain_failure(text, cmd)
        if known is not None:
            raise UserError(known.message, path=log_path, fix=known.fix)
        tail = text.strip().splitlines()[-3:]
        raise UserError(f"fairseq exited with code {proc.returncode}: {' | '.join(tail)}", path=log_path,
                        fix="read the end of the log; fix the data or preset and run the same command again "
                            "(it resumes)")


# --- fairseq's failures whose cause this tool can name ------------------------------------------

FAIRSEQ_BATCH_MULTIPLE = 8   # fairseq's default required_batch_size_multiple (dataset config)


def _flag(cmd_or_flags, name: str, default=None):
    """A flag's value in a command line (list: ``--name=value`` as as_flags writes it, or ``--name
    value``) or a preset's train section (dict); the last one given, as argparse reads it."""
    if isinstance(cmd_or_flags, dict):
        for key, value in cmd_or_flags.items():
            if flag_key(key) == name:
                return value
        return default
    flag, found = f"--{name}", default
    for i, word in enumerate(cmd_or_flags):
        if word.startswith(flag + "="):
            found = word.partition("=")[2]
        elif word == flag and i + 1 < len(cmd_or_flags):
            found = cmd_or_flags[i + 1]
    return found


def explain_failure(log_text: str, cmd) -> Finding | None:
    """fairseq's own failure text, translated where the cause is known: an empty batch list
    ("The dataset is empty": fairseq drops a last batch whose size is not a multiple of
    required-batch-size-multiple, so a split that fits in one batch vanishes) and running out of
    memory at the preset's max-tokens. None for anything else."""
    mult = int(_flag(cmd, "required-batch-size-multiple", FAIRSEQ_BATCH_MULTIPLE))
    max_tokens = _flag(cmd, "max-tokens")
    if "The dataset is empty" in log_text:
        return Finding(f"fairseq made no batch from a split (\"The dataset is empty\"): it drops a last batch "
                       f"whose size is not a multiple of required-batch-size-multiple ({mult}), and this split "
                       f"fits in one batch of max-tokens={max_tokens} frames",
                       "add the override required-batch-size-multiple=1 (or give the split more utterances)")
    if is_oom_text(log_text):
        return Finding(f"fairseq ran out of memory with batches of max-tokens={max_tokens} frames",
                       f"lower it, e.g. max-tokens={int(max_tokens) // 2 if max_tokens else 20000}, and double "
                       "update-freq to keep the batch per update")
    return None


def is_oom_text(text: str) -> bool:
    """torch's out-of-memory messages (CUDA, and the CPU allocator's)."""
    return any(m in text for m in ("CUDA out of memory", "OutOfMemoryError", "DefaultCPUAllocator: can't allocate",
                                   "out of memory"))


def batch_findings(frames: dict[str, list[int]], train_flags: dict) -> list[Finding]:
    """Before fairseq starts: would it make at least one batch of each split (``frames``: split ->
    source frames per utterance), by fairseq's own batching (data_utils.batch_by_size, utterances
    longest first as SpeechToTextDataset orders them), and does the longest utterance fit
    max-tokens? Either fault stops fairseq-train with a message that names neither cause."""
    import numpy as np
    from fairseq.data.data_utils import batch_by_size

    mult = int(_flag(train_flags, "required-batch-size-multiple", FAIRSEQ_BATCH_MULTIPLE))
    max_tokens = _flag(train_flags, "max-tokens")
    max_sentences = _flag(train_flags, "batch-size")
    found = []
    for split, n in frames.items():
        n = np.asarray(sorted(n, reverse=True), dtype=np.int64)
        if split != "train" and max_tokens:
            n = n[n <= int(max_tokens)]   # skip-invalid-size-inputs-valid-test: fairseq skips those
        if not len(n):
            continue
        if max_tokens and n[0] > int(max_tokens):
            found.append(Finding(f"the longest {split} utterance has {n[0]} feature frames, more than max-tokens="
                                 f"{max_tokens} (frames per batch): fairseq cannot batch it",
                                 f"add the override max-tokens={n[0]}, or lower data.max_frames below {max_tokens}"))
            continue
        batches = batch_by_size(np.arange(len(n)), num_tokens_fn=None, num_tokens_vec=n,
                                max_tokens=int(max_tokens) if max_tokens else None,
                                max_sentences=int(max_sentences) if max_sentences else None,
                                required_batch_size_multiple=mult)
        if not batches:
            found.append(Finding(f"the {split} split's {len(n)} utterance(s) fit in one batch whose size is not a "
                                 f"multiple of required-batch-size-multiple ({mult}): fairseq drops it and stops "
                                 "with \"The dataset is empty\"",
                                 "add the override required-batch-size-multiple=1 (or give the split more "
                                 f"utterances, a multiple of {mult})"))
    return found


def _echo_progress(log_path: Path, offset: int) -> int:
    """Log fairseq's per-epoch train/valid summary lines written since ``offset`` (the rest stays
    in the log file); returns the new offset (only whole lines are consumed)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return offset
    end = chunk.rfind(b"\n") + 1
    for line in chunk[:end].decode("utf-8", errors="replace").splitlines():
        if "| train | epoch" in line or "| valid | epoch" in line or "done training" in line:
            log.info("fairseq:%s", line.split("|", 2)[-1][:200])
    return offset + end


def _data_fingerprint(splits: dict[str, pd.DataFrame], tgt_lang: str, data_opts: dict) -> str:
    column = target_column(tgt_lang)
    return config_hash({"data": data_opts, "tgt": tgt_lang,
                        "splits": {k: [list(map(str, r)) for r in df[["id", column, "feature_path", "n_frames"]]
                                       .itertuples(index=False)] for k, df in splits.items()}})


def prepare_data(train: pd.DataFrame, valid: pd.DataFrame, out_dir: str | os.PathLike, *, tgt_lang: str,
                 data_opts: dict, feature_dim: int, train_source=None, valid_source=None) -> dict:
    """Apply the frame filter and (re)build OUT/data; returns a summary (rows, dropped, fingerprint)."""
    out_dir = Path(out_dir)
    max_frames, min_frames = data_opts.get("max_frames"), int(data_opts.get("min_frames") or 0)
    train, dropped_train = filter_frames(train, max_frames, min_frames, "train", train_source)
    valid, dropped_valid = filter_frames(valid, max_frames, min_frames, "valid", valid_source)
    splits = {"train": train, "valid": valid}
    fingerprint = _data_fingerprint(splits, tgt_lang, data_opts)
    meta_path = out_dir / META
    old = _read_meta(meta_path)
    data_dir = out_dir / "data"
    have_ckpts = any((out_dir / "checkpoints").glob("checkpoint*.pt"))
    if old.get("data", {}).get("fingerprint") != fingerprint or not (data_dir / "config.yaml").is_file():
        if have_ckpts and old.get("data", {}).get("fingerprint"):
            raise UserError("this model dir was trained on other data (utterances, targets, features or "
                            "vocabulary options changed)", path=out_dir,
                            fix="use a new --out, or delete OUT/checkpoints to start over")
        summary = build_s2t_dir(splits, data_dir, tgt_lang=tgt_lang, data_opts=data_opts, feature_dim=feature_dim)
    else:
        summary = old["data"]["export"]
    return {"fingerprint": fingerprint, "export": summary, "dropped": {"train": dropped_train, "valid": dropped_valid},
            "rows": {"train": len(train), "valid": len(valid)},
            "speakers": {k: int(df["speaker"].nunique()) for k, df in splits.items() if "speaker" in df}}


def _read_meta(path: Path) -> dict:
    return read_state_json(path, path.name) or {}


def train_st(train: pd.DataFrame, valid: pd.DataFrame, out_dir: str | os.PathLike, *, preset: dict,
             src_lang: str, tgt_lang: str, feature_dim: int, meta: dict | None = None,
             train_source=None, valid_source=None, trust: bool = False) -> dict:
    """Build the data dir, run (or resume) fairseq-train, average the last checkpoints.

    ``train``/``valid`` carry ``feature_path``/``n_frames`` (data.attach_features) and the
    target column; ``preset`` is a loaded preset with overrides applied; ``meta`` (SSL
    checkpoint, layer, feature cache ...) is stored in OUT/st.json for decoding. Returns the
    summary written there. ``trust`` (--trust-checkpoint): any fairseq flag, full unpickling.

    st.json names the averaged checkpoint relative to OUT (a copied or moved dir decodes its own
    model) and paths outside OUT both relative to it and absolute (``inputs``; relocate_meta).
    """
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(train, valid, out_dir, tgt_lang=tgt_lang, data_opts=preset["data"], feature_dim=feature_dim,
                        train_source=train_source, valid_source=valid_source)
    save_dir = out_dir / "checkpoints"
    flags = dict(preset["train"])
    if validation_start(preset) is not None:
        flags["validate-after-updates"] = validation_start(preset)
    cmd = build_train_command(out_dir / "data", save_dir, flags, source=preset.get("_source"), trust=trust)
    # fairseq's batching, checked before it starts (its own failure text names neither cause)
    lo, hi = int(preset["data"].get("min_frames") or 0), preset["data"].get("max_frames")
    problems = batch_findings({name: [n for n in df["n_frames"].astype(int) if n >= lo and (not hi or n <= int(hi))]
                               for name, df in (("train", train), ("valid", valid))}, preset["train"])
    if problems:
        raise UserError(problems[0].message, path=preset.get("_source"), fix=problems[0].fix)
    old = _read_meta(out_dir / META)
    if (old.get("status") == "done" and old.get("command") == cmd and old.get("data", {}).get("fingerprint")
            == data["fingerprint"] and (out_dir / AVERAGED).is_file() and old.get("weights") == model_files(out_dir)):
        log.info("%s is already trained with this command and data: nothing to do", out_dir)
        return old
    summary = {"src_lang": src_lang, "tgt_lang": tgt_lang, "feature_dim": int(feature_dim), "preset": preset,
               "data": data, "command": cmd, "versions": engine_versions(), "git_sha": git_sha(),
               "status": "training", **portable_paths(meta or {}, out_dir)}
    write_json(out_dir / META, summary)
    log_path = out_dir / "train.log"
    resumed = (save_dir / "checkpoint_last.pt").is_file()
    log.info("%s fairseq-train -> %s (log: %s)", "resuming" if resumed else "starting", save_dir, log_path)
    started = time.time()
    run_fairseq(cmd, log_path, threads=preset.get("cpu_threads"), gpu=preset.get("gpu"), trust=trust)
    n = int(preset.get("average_last", 10))
    paths = last_checkpoints(save_dir, n)
    average_checkpoints(paths, out_dir / AVERAGED)
    summary.update(status="done", averaged=[p.name for p in paths], checkpoint=AVERAGED,
                   train_seconds=round(time.time() - started, 1), resumed=resumed, weights=model_files(out_dir))
    write_json(out_dir / META, summary)
    return summary


# st.json's paths outside the run dir: recorded relative to it (a study dir copied whole keeps
# them valid) and absolute (a run dir moved alone still finds them)
OUTSIDE_PATHS = ("feature_store", "registry", "feature_index", "ssl_checkpoint")


def portable_paths(meta: dict, out_dir: Path) -> dict:
    """``meta`` with OUTSIDE_PATHS (and ``tables``) relative to ``out_dir``; the absolute paths
    and the sha256 of a feature index file go under ``inputs``. ``meta`` holds only paths that exist."""
    meta, inputs = dict(meta), {}
    for key in OUTSIDE_PATHS:
        if isinstance(meta.get(key), str) and (key != "ssl_checkpoint" or Path(meta[key]).exists()):
            where = Path(meta[key]).resolve()   # ssl_checkpoint: a path, not a registered name
            # a feature index's bytes are the training features; the registry changes with every
            # `ckpt add`, and the SSL checkpoint is checked by its content hash (ssl_sha256)
            inputs[key] = {"abs": str(where), **({"sha256": file_sha256(where)} if key == "feature_index" else {})}
            meta[key] = os.path.relpath(where, out_dir)
    if isinstance(meta.get("tables"), dict):
        def rel(v):
            return [rel(x) for x in v] if isinstance(v, list) else os.path.relpath(Path(v).resolve(), out_dir)
        meta["tables"] = {k: rel(v) for k, v in meta["tables"].items()}
    return {**meta, "inputs": inputs}


def relocate_meta(meta: dict, model_dir: Path, path: Path) -> dict:
    """st.json as read from ``model_dir`` wherever it now lies: the checkpoint is the dir's own;
    a relative outside path resolves against the dir, else (a dir moved alone) the recorded absolute
    one. A feature index whose bytes changed since training is refused (another model's features)."""
    meta = dict(meta)
    meta["checkpoint"] = str(model_dir / AVERAGED)   # never the path of the dir it was copied from
    for key, recorded in (meta.get("inputs") or {}).items():   # none in a run dir from before relative paths
        value = meta.get(key)
        if key not in OUTSIDE_PATHS or not isinstance(value, str) or Path(value).is_absolute():
            continue
        here = (model_dir / value).resolve()
        meta[key] = str(here if here.exists() or not Path(recorded.get("abs", "")).exists() else recorded["abs"])
        sha = recorded.get("sha256")
        if sha and Path(meta[key]).is_file() and file_sha256(Path(meta[key])) != sha:
            raise UserError(f"{key} {meta[key]} changed since the model was trained (sha256 {sha[:12]} then, "
                            f"{file_sha256(Path(meta[key]))[:12]} now)", path=path,
                            fix="restore that file, or pass the test features with --features-index")
    _check_named_files(meta, model_dir, path)
    return meta


def _check_named_files(meta: dict, model_dir: Path, source: Path) -> None:
    """The files st.json names outside its dir are read as data only (the checkpoint by its sha256,
    the index by its recorded sha256); still, a FIFO or device there would block the read for ever
    and a registry the size of a disk would be parsed: refused in one line naming st.json."""
    for key in ("registry", "feature_index", "ssl_checkpoint"):
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise UserError(f"st.json's {key} is a {type(value).__name__}, not a path", path=source,
                            fix="restore st.json as `gendergap st train` wrote it")
        where = model_dir / value if value else None   # a relative path is the run dir's
        if where and (key == "registry" and where.exists() or is_special(where)):
            regular_file(where, f"{key} named by st.json", max_bytes=MAX_CONFIG_BYTES if key == "registry" else None,
                         fix="restore st.json as `gendergap st train` wrote it (or pass --registry, --features-index)")


def model_files(model_dir: str | os.PathLike) -> dict[str, str]:
    """What `st decode` loads of a run, by content: the averaged checkpoint and the data config with
    the vocabulary and sentencepiece model it names (path relative to the run dir -> sha256)."""
    model_dir = Path(model_dir)
    config = model_dir / "data" / "config.yaml"
    names = [AVERAGED, "data/config.yaml", *(f"data/{name}" for name in data_config_files(config))]
    return {name: file_sha256(model_dir / name) for name in names}


def check_model_files(model_dir: str | os.PathLike, meta: dict, trust: bool = False) -> None:
    """The files decoding will load are the ones the run trained (st.json's ``weights``): another
    checkpoint_avg.pt or vocabulary there would give hypotheses and scores filed under this run. A
    mismatch is refused whatever the flags; a run from before the record is refused unless
    ``trust`` (--trust-checkpoint: the user vouches for the run dir)."""
    source, recorded = Path(model_dir) / META, meta.get("weights")
    if not recorded:
        if trust:
            return
        raise UserError("st.json records no sha256 of the model's files (the run was trained before gendergap "
                        "recorded them), so its checkpoint_avg.pt cannot be told from another", path=source,
                        fix="run its `gendergap st train` command again (it resumes, averages and records them); "
                            "or, for a run dir you trust, pass --trust-checkpoint")
    now = model_files(model_dir)
    for name in sorted(set(now) | set(recorded)):
        if now.get(name) != recorded.get(name):
            raise UserError(f"{name} is not the file this run trained (sha256 {str(recorded.get(name))[:12]} "
                            f"recorded, {str(now.get(name))[:12]} now)", path=source,
                            fix="run its `gendergap st train` command again (it averages its own checkpoints "
                                "again)" if name == AVERAGED else "restore the run's own file, or train again")


def read_model_meta(model_dir: str | os.PathLike) -> dict:
    """OUT/st.json of a trained model dir (a UserError when it is not one, or unfinished), its
    paths resolved where the dir lies now (relocate_meta)."""
    model_dir = Path(model_dir).resolve()
    path = model_dir / META
    if not os.path.lexists(path):
        raise UserError("not an ST model dir (no st.json)", path=model_dir,
                        fix="give the --out dir of `gendergap st train`")
    fix = "restore st.json as `gendergap st train` wrote it, or train again"
    meta = read_json(path, "st.json", shape=dict, fix=fix)
    checked(meta, StoredRun, "st.json", path=path, fix=fix)
    if meta.get("status") != "done" or not (model_dir / AVERAGED).is_file():
        raise UserError("this ST model has not finished training (no averaged checkpoint)", path=path,
                        fix="run the same `gendergap st train` command again: it resumes")
    return relocate_meta(meta, model_dir, path)


def frames_of(duration_s: float) -> int:
    """Feature frames of an utterance before extraction: wav2vec 2.0's CNN gives one per 20 ms
    (receptive field 400 samples, stride 320 at 16 kHz); the FBANK baseline stacks to 20 ms too."""
    return max(0, (int(round(duration_s * 16000)) - 400) // 320 + 1)


def table_batch_findings(table, corpus: str, splits: dict, preset: str, overrides=(),
                         eval_corpus: str | None = None) -> list[Finding]:
    """batch_findings for a study's ST task before its features exist: frames estimated from the
    table's durations (frames_of), the preset and overrides as `st train` applies them."""
    loaded, found = load_table(table)
    if loaded is None:
        return []   # the table's own finding is reported by the rows check
    try:
        recipe = apply_overrides(load_preset(preset), overrides)
    except UserError as e:
        return [Finding(f"ST preset: {e.message}", e.fix or "")]
    lo, hi = int(recipe["data"].get("min_frames") or 0), recipe["data"].get("max_frames")
    frames = {}
    for role in ("train", "valid"):
        corp = eval_corpus if role == "valid" and eval_corpus else corpus
        rows = loaded.select(corpus=corp, split=splits[role]).rows
        frames[role] = [n for n in map(frames_of, rows["duration"].astype(float))
                        if n >= lo and (not hi or n <= int(hi))]
    return batch_findings(frames, recipe["train"])
