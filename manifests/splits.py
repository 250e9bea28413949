"""Speaker-disjoint train / valid selections, with the study's valid-set up-sampling.

The study's balanced ASR set kept mTEDx's valid speakers and, where a gender fell short of the
valid target, "up-sampled using the unused entries from the original training set". Here the
same idea stays speaker-disjoint: whole training speakers of the short gender move to valid
(in a seeded random order) until the target is reachable, then valid is down-sampled to it, and
the train selection is drawn from the speakers left.

    sel = build_selection(df, "balanced", hours=20, valid_hours=1, seed=0)
    sel.splits["train"], sel.splits["valid"], sel.report
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from corpora.base.errors import UserError
from corpora.base.provenance import config_hash
from manifests.select import (
    _GENDER_STREAM,
    Dropped,
    GenderSpec,
    _rng,
    apply_exclusions,
    cap_corpora,
    check_columns,
    hhmm,
    parse_gender_spec,
    sample_to_duration,
    select_by_gender,
    speaker_keys,
    speaker_pair,
)

VALID_SPLITS = ("valid", "dev")
TEST_SPLITS = ("test",)


@dataclass
class Selection:
    """The selected rows per split (train, and valid when there is one) and the report."""
    splits: dict[str, pd.DataFrame]
    report: dict


def split_summary(df: pd.DataFrame) -> dict:
    """Rows, seconds, hh:mm and speakers per gender, and overall."""
    out = {}
    for g, grp in df.groupby("gender", sort=True):
        out[g] = {"rows": int(len(grp)), "seconds": round(float(grp["duration"].sum()), 3),
                  "hours": hhmm(grp["duration"].sum()), "speakers": int(speaker_keys(grp).nunique())}
    out["all"] = {"rows": int(len(df)), "seconds": round(float(df["duration"].sum()), 3),
                  "hours": hhmm(df["duration"].sum()), "speakers": int(speaker_keys(df).nunique())}
    return out


def _valid_selection(pool: pd.DataFrame, spec: GenderSpec, valid_hours: float | None, seed: int,
                     source, valid_splits=VALID_SPLITS) -> tuple[pd.DataFrame, list[Dropped], list[dict]]:
    """Pick valid rows: the table's own valid rows, up-sampled from train speakers when short."""
    labelled = pool["split"].isin(set(valid_splits)).to_numpy()
    if valid_hours is None:
        return pool[labelled], [], []
    dropped, notes = [], []
    shares = ({g: spec.share(g) for g in spec.genders} if spec.female_share is not None else {"*": 1.0})
    chosen = np.zeros(len(pool), dtype=bool)
    genders = pool["gender"].to_numpy()
    durations = pool["duration"].to_numpy()
    for key, share in shares.items():
        target = 3600.0 * valid_hours * share
        in_g = np.ones(len(pool), dtype=bool) if key == "*" else genders == key
        cand = labelled & in_g
        have = float(durations[cand].sum())
        if have + 1e-3 < target:
            # Move whole training speakers (random order for the seed) until valid can reach its target.
            train_rows = pool[in_g & ~labelled]
            spk_dur = train_rows.groupby(speaker_keys(train_rows))["duration"].sum().sort_index()
            order = _rng(seed, 30, _GENDER_STREAM.get(key, 0)).permutation(len(spk_dur))
            moved = []
            for i in order:
                if have + 1e-3 >= target:
                    break
                moved.append(spk_dur.index[i])
                have += float(spk_dur.iloc[i])
            if have + 1e-3 < target:
                raise UserError(f"valid: asked for {hhmm(target)} of {key if key != '*' else 'speech'}, "
                                f"valid rows and all training speakers together hold {hhmm(have)}",
                                path=source, fix="ask for fewer --valid-hours, or add data")
            cand |= in_g & speaker_keys(pool).isin(set(moved)).to_numpy()
            # [corpus, speaker] pairs: a bare id would not say which corpus's speaker moved
            notes.append({"gender": key, "upsampled_speakers": sorted(list(speaker_pair(k)) for k in moved),
                          "seconds": round(float(spk_dur[moved].sum()), 3)})
        idx = np.flatnonzero(cand)
        mask = sample_to_duration(durations[idx], target, _rng(seed, 31, _GENDER_STREAM.get(key, 0)))
        chosen[idx[mask]] = True
    return pool[chosen], dropped, notes


def build_selection(df: pd.DataFrame, gender: str | GenderSpec = "balanced", *,
                    hours: float | None = None, hours_per_gender: float | None = None,
                    valid_hours: float | None = None, seed: int = 0,
                    exclude_ids=(), exclude_speakers=(), holdout_splits=TEST_SPLITS,
                    train_splits=None, valid_splits=VALID_SPLITS,
                    exclude_unknown: bool | None = None, mixed_speakers: str = "error",
                    corpora=None, corpus_hours: dict | None = None, downsample_corpora=None,
                    source="<table>") -> Selection:
    """Select a gender-filtered, duration-targeted, speaker-disjoint train (+ valid) set.

    Arguments
    ---------
    gender: 'F', 'M', 'balanced', 'p=SHARE' (female share) or 'any'.
    hours / hours_per_gender: train size (overall, split by the share / per gender); None = as
        much as the pool allows at that share (balanced: the scarcer gender whole).
    valid_hours: valid size overall (split by the share, so balanced 1 h = 0:30 F + 0:30 M); rows
        labelled valid/dev seed it, training speakers top it up. None: the table's valid rows as
        they are (gender-filtered), if any.
    corpus_hours: {corpus: cap in hours}, applied before the gender targets.
    downsample_corpora: only these corpora may lose rows to meet the targets (study: EPAC).
    holdout_splits: splits (and their speakers) never selected; default ('test',).
    train_splits: split labels that feed train (e.g. ('pretrain',)); None = every label not in
        valid_splits or holdout_splits. valid_splits: labels that feed valid (default valid, dev).
    Raises UserError for requests the table cannot meet, naming what exists.
    """
    spec = gender if isinstance(gender, GenderSpec) else parse_gender_spec(gender)
    if hours is not None and hours <= 0 or hours_per_gender is not None and hours_per_gender <= 0:
        raise UserError("hours must be > 0", fix="e.g. --hours 10")
    if valid_hours is not None and valid_hours <= 0:
        raise UserError("valid hours must be > 0", fix="e.g. --valid-hours 1, or leave it out")
    check_columns(df, source)
    input_summary = split_summary(df) if len(df) else {}
    valid_splits = tuple(valid_splits or ())
    pool, dropped = apply_exclusions(df, spec, source=source, exclude_ids=exclude_ids,
                                     exclude_speakers=exclude_speakers, holdout_splits=holdout_splits,
                                     exclude_unknown=exclude_unknown, mixed_speakers=mixed_speakers,
                                     corpora=corpora)
    pool = _usable_pool(pool, dropped, train_splits, valid_splits, corpus_hours, seed, source)
    valid, v_dropped, upsampled = _valid_selection(pool, spec, valid_hours, seed, source, valid_splits)
    dropped += v_dropped
    train_pool = _train_pool(pool, valid, valid_splits, dropped, source)
    train, targets, t_dropped = select_by_gender(train_pool, spec, hours=hours, hours_per_gender=hours_per_gender,
                                                 seed=seed, downsample_corpora=downsample_corpora,
                                                 what="train", source=source)
    dropped += t_dropped
    if not len(train):
        raise UserError("the selection is empty", path=source, fix="ask for more hours or loosen the exclusions")
    splits = {"train": train}
    if len(valid):
        splits["valid"] = valid.sort_index()
    request = _request(spec, hours=hours, hours_per_gender=hours_per_gender, valid_hours=valid_hours, seed=seed,
                       exclude_ids=exclude_ids, exclude_speakers=exclude_speakers, holdout_splits=holdout_splits,
                       train_splits=train_splits, valid_splits=valid_splits, exclude_unknown=exclude_unknown,
                       mixed_speakers=mixed_speakers, corpora=corpora, corpus_hours=corpus_hours,
                       downsample_corpora=downsample_corpora)
    return Selection(splits, _report(request, input_summary, dropped, targets, upsampled, splits))


def _request(spec: GenderSpec, *, hours, hours_per_gender, valid_hours, seed, exclude_ids, exclude_speakers,
             holdout_splits, train_splits, valid_splits, exclude_unknown, mixed_speakers, corpora, corpus_hours,
             downsample_corpora) -> dict:
    """The selection's request as the report records it (JSON-ready: lists sorted, ids counted)."""
    excluded_spk = sorted("/".join(s) if isinstance(s, tuple) else str(s) for s in exclude_speakers)
    return {"gender": spec.label, "female_share": spec.female_share, "hours": hours,
            "hours_per_gender": hours_per_gender, "valid_hours": valid_hours, "seed": seed,
            "exclude_ids": len(exclude_ids), "exclude_speakers": excluded_spk,
            "holdout_splits": list(holdout_splits or ()), "exclude_unknown": exclude_unknown,
            "train_splits": sorted(train_splits) if train_splits is not None else None,
            "valid_splits": list(valid_splits),
            "mixed_speakers": mixed_speakers, "corpora": sorted(corpora) if corpora else None,
            "corpus_hours": corpus_hours or None,
            "downsample_corpora": sorted(downsample_corpora) if downsample_corpora else None}


def _usable_pool(pool: pd.DataFrame, dropped: list, train_splits, valid_splits: tuple, corpus_hours: dict | None,
                 seed: int, source) -> pd.DataFrame:
    """The rows left once unused split labels and corpus caps are taken out (not empty)."""
    if train_splits is not None:
        unused = ~pool["split"].isin(set(train_splits) | set(valid_splits)).to_numpy()
        if unused.any():
            dropped.append(Dropped.of(f"split not in train {sorted(train_splits)} or valid {sorted(valid_splits)}",
                                      pool[unused]))
            pool = pool[~unused]
    if corpus_hours:
        pool = cap_corpora(pool, corpus_hours, seed, dropped)
    if not len(pool):
        raise UserError("the selection is empty: every row was excluded ("
                        + "; ".join(f"{d.reason}: {d.rows} rows" for d in dropped) + ")" if dropped
                        else "the selection is empty: the table has no rows", path=source,
                        fix="loosen the exclusions or check the table's gender/split columns")
    return pool


def _train_pool(pool: pd.DataFrame, valid: pd.DataFrame, valid_splits: tuple, dropped: list,
                source) -> pd.DataFrame:
    """The rows train may draw from: not in valid, not valid-labelled, no valid speaker (not empty)."""
    train_pool = pool[~pool.index.isin(valid.index)]
    leftover = train_pool["split"].isin(set(valid_splits)).to_numpy()
    if leftover.any():
        dropped.append(Dropped.of("valid-labelled row left out: valid down-sampled to its target",
                                  train_pool[leftover]))
        train_pool = train_pool[~leftover]
    # Speaker-disjointness: no valid speaker may keep rows in train.
    overlap = speaker_keys(train_pool).isin(set(speaker_keys(valid))).to_numpy()
    if overlap.any():
        dropped.append(Dropped.of("speaker in valid (splits are speaker-disjoint)", train_pool[overlap]))
    train_pool = train_pool[~overlap]
    if not len(train_pool):
        raise UserError("the training selection is empty after taking out valid speakers", path=source,
                        fix="ask for fewer --valid-hours, or add training data")
    return train_pool


def _report(request: dict, input_summary: dict, dropped: list, targets: dict, upsampled, splits: dict) -> dict:
    """What was asked, what was dropped and why, and what each split holds."""
    return {
        "request": request,
        "request_hash": config_hash(request),
        "input": input_summary,
        "dropped": [d.as_dict() for d in dropped],
        "targets_seconds": {"train": {k: round(v, 3) for k, v in targets.items()}},
        "valid_upsampled_from_train": upsampled,
        "splits": {name: split_summary(rows) for name, rows in splits.items()},
        "balance": {name: _balance(rows) for name, rows in splits.items()},
    }


def _balance(df: pd.DataFrame) -> dict:
    f = float(df.loc[df["gender"] == "F", "duration"].sum())
    m = float(df.loc[df["gender"] == "M", "duration"].sum())
    u = float(df.loc[df["gender"] == "U", "duration"].sum())
    # female_share is of the speech of known gender; the unknown part is given beside it, never folded in
    return {"female_share": round(f / (f + m), 6) if f + m else None,
            "unknown_share": round(u / (f + m + u), 6) if f + m + u else None,
            "F_minus_M_seconds": round(f - m, 3),
            "relative_difference": round(abs(f - m) / max(f, m), 6) if f and m else None}
