"""From utterance tables + per-utterance feature files to fairseq's speech_to_text data dir.

    train = UtteranceTable.load("T.tsv").with_lines().select(corpus="synth-fr", split="train", strict=True).rows
    train = attach_features(require_target(train, "en", "T.tsv"), read_feature_index(idx), idx)
    build_s2t_dir({"train": train, "valid": valid}, "st/data", tgt_lang="en", data_opts=preset["data"])

Any direction works the same way: the source speech is the table's audio (its ``text`` column
is the transcript, not used for direct ST), the target is the column ``tgt_text_<lang>``
(fr->en reads ``tgt_text_en``, en->fr reads ``tgt_text_fr``). Feature files are ``[T, D]``
``.npy`` arrays listed in an index TSV (``id, path, n_frames, dim``; ssl_pretrain's
``features.tsv``). Every row keeps ``_line``, its line in the table it came from
(``UtteranceTable.with_lines``), so errors can name it.
"""
from __future__ import annotations

import csv
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from corpora.base.atomic import atomic_open, write_text
from corpora.base.boundary import MAX_DIM, check_name, inside, printable, regular_file, whole
from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from manifests.export_kaldi import MAX_FRAMES
from manifests.export_s2t import export_s2t

log = logging.getLogger(__name__)


def target_column(lang: str) -> str:
    """The table column holding translations into ``lang`` (``tgt_text_en`` for en)."""
    return f"tgt_text_{lang}"


def require_target(df: pd.DataFrame, lang: str, source: str | os.PathLike) -> pd.DataFrame:
    """Check the target text for ``lang`` is there and non-empty on every row."""
    column = target_column(lang)
    if column not in df.columns:
        have = [c for c in df.columns if str(c).startswith("tgt_text_")]
        raise UserError(f"no target text column {column!r} for --tgt {lang}"
                        f" (the table has {', '.join(have) if have else 'no tgt_text_<lang> column'})",
                        path=source, line=1,
                        fix=f"add the {lang} translations as a {column} column, or pick --tgt among "
                            f"{', '.join(c[len('tgt_text_'):] for c in have) or 'the languages it has'}")
    empty = df[column].astype(str).str.strip() == ""
    if empty.any():
        row = df[empty].iloc[0]
        raise UserError(f"utterance {row['id']!r} has an empty {column} ({int(empty.sum())} row(s) in all)",
                        path=source, line=int(row.get("_line", 0)) or None,
                        fix="translate those rows, or select only rows that have one (--corpus / --split)")
    return df


def read_feature_index(path: str | os.PathLike) -> pd.DataFrame:
    """The feature index (``id, path, n_frames, dim``) with ``_index_line``; relative paths are
    taken relative to the index file."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no feature index", path=path,
                        fix="extract features first (`gendergap ckpt features ... --out DIR` writes DIR/features.tsv)")
    header, records = read_delimited(path, "\t", what="feature index")
    df = pd.DataFrame([r for _, r in records], columns=list(dict.fromkeys(header)), dtype=str)
    missing = [c for c in ("id", "path", "n_frames", "dim") if c not in df.columns]
    if missing:
        raise UserError(f"the feature index lacks column(s) {', '.join(missing)}", path=path, line=1,
                        fix="an index has id, path, n_frames, dim (as `gendergap ckpt features --out` writes it)")
    df["_index_line"] = [line for line, _ in records]
    base = path.resolve().parent
    df["path"] = df["path"].map(lambda p: p if os.path.isabs(p) else str(base / p))
    fix = "extract the features again (`gendergap ckpt features ... --out DIR`)"
    for col, hi in (("n_frames", MAX_FRAMES), ("dim", MAX_DIM)):   # sizes arrays: bounded before use
        values = pd.to_numeric(df[col], errors="coerce")
        bad = ~(values.between(1, hi) & (values % 1 == 0))
        if bad.any():
            row = df[bad].iloc[0]
            whole(row[col], f"{col} of {printable(row['id'])}", lo=1, hi=hi, path=path, line=int(row["_index_line"]),
                  fix=fix)
        df[col] = values.astype(int)
    return df.drop_duplicates("id", keep="last")


def attach_features(df: pd.DataFrame, index: pd.DataFrame, index_path: str | os.PathLike,
                    expected_dim: int | None = None, check_files: bool = True) -> pd.DataFrame:
    """``df`` with ``feature_path`` and ``n_frames`` (frames of its ``.npy``) per row.

    Every id must be in the index, each file must exist and hold a ``[T, D]`` array whose D is
    ``expected_dim`` (default: the first file's) and whose T matches the index. Only the
    ``.npy`` headers are read (memory-mapped), so checking thousands of files is fast.
    """
    by_id = index.set_index("id")
    absent = [i for i in df["id"].astype(str) if i not in by_id.index]
    if absent:
        raise UserError(f"{len(absent)} utterance(s) have no features, e.g. {absent[0]!r}", path=index_path,
                        fix="extract features for every utterance of the table (or delete the cache dir to redo it)")
    feats = by_id.loc[df["id"].astype(str)]
    dim = expected_dim
    if check_files:
        for uid, row in feats.iterrows():
            where = dict(path=index_path, line=int(row["_index_line"]))
            fix = "delete this entry (or the whole feature dir) and extract again"
            if not os.path.isfile(row["path"]):
                raise UserError(f"feature file of {uid!r} is missing: {row['path']}", **where, fix=fix)
            try:
                shape = np.load(row["path"], mmap_mode="r").shape
            except (ValueError, OSError) as e:
                raise UserError(f"feature file of {uid!r} is not a readable .npy ({e})", **where, fix=fix) from None
            if len(shape) != 2:
                raise UserError(f"feature file of {uid!r} has shape {shape}, not [frames, dim]", **where,
                                fix="export one layer (`gendergap ckpt features --layer L`), not all layers")
            dim = shape[1] if dim is None else dim
            if shape[1] != dim:
                raise UserError(f"feature file of {uid!r} has dimension {shape[1]}, expected {dim}", **where,
                                fix="all features must come from the same model and layer; " + fix)
            if shape[0] != int(row["n_frames"]):
                raise UserError(f"feature file of {uid!r} has {shape[0]} frames, the index says {row['n_frames']}",
                                **where, fix=fix)
    elif dim is not None and (feats["dim"] != dim).any():
        bad = feats[feats["dim"] != dim].iloc[0]
        raise UserError(f"features have dimension {bad['dim']}, expected {dim}", path=index_path,
                        line=int(bad["_index_line"]), fix="use features of one model and layer")
    out = df.copy()
    out["feature_path"] = feats["path"].to_numpy()
    out["n_frames"] = feats["n_frames"].to_numpy().astype(int)
    out.attrs["feature_dim"] = int(dim if dim is not None else feats["dim"].iloc[0])
    return out


def filter_frames(df: pd.DataFrame, max_frames: int | None, min_frames: int = 0,
                  what: str = "train", source: str | os.PathLike | None = None) -> tuple[pd.DataFrame, int]:
    """Drop utterances longer than ``max_frames`` (the study's 3,000) or shorter than
    ``min_frames`` feature frames; returns (kept rows, number dropped). Nothing left is a UserError."""
    n = df["n_frames"].astype(int)
    keep = n >= (min_frames or 0)
    if max_frames:
        keep &= n <= int(max_frames)
    kept = df[keep].reset_index(drop=True)
    dropped = int((~keep).sum())
    if dropped:
        log.info("%s: dropped %d of %d utterance(s) outside %s..%s frames", what, dropped, len(df),
                 min_frames, max_frames)
    if kept.empty:
        raise UserError(f"the {what} set is empty after removing utterances over {max_frames} or under "
                        f"{min_frames} frames ({len(df)} before; longest {int(n.max())}, shortest {int(n.min())})",
                        path=source, fix="raise data.max_frames (e.g. data.max_frames=6000) or give shorter segments")
    return kept, dropped


def build_s2t_dir(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, *, tgt_lang: str,
                  data_opts: dict, feature_dim: int) -> dict:
    """Write ``<split>.tsv`` + sentencepiece + ``config.yaml`` (fairseq speech_to_text) into ``out_dir``.

    ``splits`` are tables with ``feature_path``/``n_frames`` (attach_features) and the target
    column; the vocabulary comes from the train split. Returns export_s2t's summary.
    """
    column = target_column(tgt_lang)
    extra = {}
    transforms = data_opts.get("feature_transforms") or []
    if transforms:
        extra["transforms"] = {"*": list(transforms)}
    return export_s2t(splits, out_dir, feature_template="{feature_path}", n_frames="n_frames",
                      text_column=column, tgt_lang=tgt_lang, vocab_size=int(data_opts["vocab_size"]),
                      vocab_type=str(data_opts["vocab_type"]), feature_dim=int(feature_dim), audio_root="",
                      extra_config=extra)


def data_config_files(config_path: Path) -> list[str]:
    """The vocabulary and sentencepiece files a handed run dir's data/config.yaml names, checked
    before anything is copied: each is one plain file name (``../../victim.txt`` would be read from
    and written to outside both dirs) of a regular file in that data dir (a FIFO would block for
    ever), and the config is plain YAML (a tag raises, a missing key is named)."""
    from corpora.base.strict_yaml import read_yaml
    regular_file(config_path, "ST data config", max_bytes=1_000_000)
    config, _ = read_yaml(config_path, "restore the run dir's data/config.yaml, or train again", what="ST data config")
    try:
        names = [config["vocab_filename"], config["bpe_tokenizer"]["sentencepiece_model"]]
    except (TypeError, KeyError) as e:
        raise UserError(f"the ST data config is not the one `st train` writes ({type(e).__name__})",
                        path=config_path, fix="restore the run dir's data/config.yaml, or train again") from None
    for name in names:
        check_name(name, "file named by the data config", path=config_path)
        regular_file(inside(config_path.parent, name, "vocabulary", source=config_path), "vocabulary file",
                     max_bytes=100_000_000)
    return names


def write_eval_dir(model_data_dir: str | os.PathLike, out_dir: str | os.PathLike, split: str,
                   df: pd.DataFrame, tgt_lang: str, ref_column: str | None = None) -> Path:
    """A data dir for decoding ``df`` with a trained model: the model's config.yaml and
    vocabulary copied next to ``<split>.tsv``. ``ref_column`` (default ``tgt_text_<lang>``)
    fills ``tgt_text``; without one the source transcript stands in (decoding ignores it)."""
    model_data_dir, out_dir = Path(model_data_dir), Path(out_dir)
    config_path = model_data_dir / "config.yaml"
    if not config_path.is_file():
        raise UserError("the model dir has no data/config.yaml", path=model_data_dir,
                        fix="give the --out dir of `gendergap st train`")
    names = data_config_files(config_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(model_data_dir / name, out_dir / name)
    write_text(out_dir / "config.yaml", config_path.read_text(encoding="utf-8"))
    column = ref_column or target_column(tgt_lang)
    text = df[column] if column in df.columns else df.get("text", pd.Series(["-"] * len(df)))
    text = text.astype(str).map(lambda t: t.strip() or "-")
    table = pd.DataFrame({"id": df["id"].to_numpy(), "audio": df["feature_path"].to_numpy(),
                          "n_frames": df["n_frames"].astype(int).to_numpy(), "tgt_text": text.to_numpy(),
                          "speaker": df["speaker"].to_numpy() if "speaker" in df.columns else "spk",
                          "tgt_lang": tgt_lang})
    with atomic_open(out_dir / f"{split}.tsv") as f:
        table.to_csv(f, sep="\t", index=False, quoting=csv.QUOTE_NONE, lineterminator="\n")
    return out_dir
