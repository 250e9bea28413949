"""Train a frozen-feature ST model with fairseq-train (task speech_to_text), resumably.

Layout of a model dir (``--out``)::

    OUT/data/             train.tsv, valid.tsv, config.yaml, spm_<type><size>.model/.txt
    OUT/checkpoints/      fairseq's checkpoint<E>.pt (last N kept), checkpoint_last.pt, _best.pt
    OUT/checkpoint_avg.pt the mean of the last N epoch checkpoints (what decoding uses)
    OUT/train.log         everything fairseq printed, appended across restarts
    OUT/st.json           checkpoint, layer, languages, preset, data summary, command, versions

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
from corpora.base.errors import UserError
from corpora.base.provenance import config_hash, engine_versions, git_sha
from downstream_st.average import average_checkpoints, last_checkpoints
from downstream_st.data import build_s2t_dir, filter_frames, target_column
from downstream_st.presets import as_flags
from ssl_pretrain.run import fairseq_env, start_fairseq, stop

log = logging.getLogger(__name__)

AVERAGED = "checkpoint_avg.pt"
META = "st.json"


def build_train_command(data_dir: str | os.PathLike, save_dir: str | os.PathLike, train_flags: dict) -> list[str]:
    """The fairseq-train command line (as ``python -m fairseq_cli.train``)."""
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
                gpu: str | None = None) -> None:
    """Run fairseq to completion (its output appended to ``log_path``); Ctrl-C stops it cleanly."""
    offset = log_path.stat().st_size if log_path.exists() else 0
    proc = start_fairseq(cmd, log_path, env=fairseq_env(process_env(threads, gpu)))
    try:
        while proc.poll() is None:
            time.sleep(poll_s)
            offset = _echo_progress(log_path, offset)
        _echo_progress(log_path, offset)
    except BaseException:
        stop(proc)
        raise
    if proc.returncode != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        raise UserError(f"fairseq exited with code {proc.returncode}: {' | '.join(tail)}", path=log_path,
                        fix="read the end of the log; fix the data or preset and run the same command again "
                            "(it resumes)")


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
    import json
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}


def train_st(train: pd.DataFrame, valid: pd.DataFrame, out_dir: str | os.PathLike, *, preset: dict,
             src_lang: str, tgt_lang: str, feature_dim: int, meta: dict | None = None,
             train_source=None, valid_source=None) -> dict:
    """Build the data dir, run (or resume) fairseq-train, average the last checkpoints.

    ``train``/``valid`` carry ``feature_path``/``n_frames`` (data.attach_features) and the
    target column; ``preset`` is a loaded preset with overrides applied; ``meta`` (SSL
    checkpoint, layer, feature cache ...) is stored in OUT/st.json for decoding. Returns the
    summary written there.
    """
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(train, valid, out_dir, tgt_lang=tgt_lang, data_opts=preset["data"], feature_dim=feature_dim,
                        train_source=train_source, valid_source=valid_source)
    save_dir = out_dir / "checkpoints"
    cmd = build_train_command(out_dir / "data", save_dir, preset["train"])
    old = _read_meta(out_dir / META)
    if (old.get("status") == "done" and old.get("command") == cmd and old.get("data", {}).get("fingerprint")
            == data["fingerprint"] and Path(old.get("checkpoint", "")).is_file()):
        log.info("%s is already trained with this command and data: nothing to do", out_dir)
        return old
    summary = {"src_lang": src_lang, "tgt_lang": tgt_lang, "feature_dim": int(feature_dim), "preset": preset,
               "data": data, "command": cmd, "versions": engine_versions(), "git_sha": git_sha(),
               "status": "training", **(meta or {})}
    write_json(out_dir / META, summary)
    log_path = out_dir / "train.log"
    resumed = (save_dir / "checkpoint_last.pt").is_file()
    log.info("%s fairseq-train -> %s (log: %s)", "resuming" if resumed else "starting", save_dir, log_path)
    started = time.time()
    run_fairseq(cmd, log_path, threads=preset.get("cpu_threads"), gpu=preset.get("gpu"))
    n = int(preset.get("average_last", 10))
    paths = last_checkpoints(save_dir, n)
    average_checkpoints(paths, out_dir / AVERAGED)
    summary.update(status="done", averaged=[p.name for p in paths], checkpoint=str(out_dir / AVERAGED),
                   train_seconds=round(time.time() - started, 1), resumed=resumed)
    write_json(out_dir / META, summary)
    return summary


def read_model_meta(model_dir: str | os.PathLike) -> dict:
    """OUT/st.json of a trained model dir (a UserError when it is not one, or unfinished)."""
    path = Path(model_dir) / META
    meta = _read_meta(path)
    if not meta:
        raise UserError("not an ST model dir (no st.json)", path=model_dir,
                        fix="give the --out dir of `gendergap st train`")
    if meta.get("status") != "done" or not Path(meta.get("checkpoint", "")).is_file():
        raise UserError("this ST model has not finished training (no averaged checkpoint)", path=path,
                        fix="run the same `gendergap st train` command again: it resumes")
    return meta
