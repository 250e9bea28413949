"""Gender-filtered, duration-targeted selection over an utterance table.

The reference study built its pretraining sets by gender (female-only, male-only) and kept the
two totals comparable by down-sampling one corpus (EPAC); its ASR set is a gender-balanced
down-sample of mTEDx. These are plain functions over the utterance table (pandas):

    spec = parse_gender_spec("balanced")            # or "F", "M", "p=0.3", "any"
    pool, dropped = apply_exclusions(df, spec, exclude_speakers={"spk9"})
    chosen, notes = select_by_gender(pool, spec, hours=10, seed=0)

Every row dropped is accounted for in a ``Dropped`` record (why, how many rows, hours,
speakers), which the build writes to ``selection_report.json``. Sampling is deterministic for a
seed and independent of the table's row order (rows are sorted by id before shuffling).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from corpora.base.errors import UserError
from corpora.table import COLUMNS

# Seconds. Durations are floats from headers: compare with a tolerance well under a sample.
EPS = 1e-6
_SEP = "\x1f"   # joins corpus and speaker in speaker_keys (a control character no id holds)


def speaker_keys(df: pd.DataFrame) -> pd.Series:
    """Each row's speaker as one (corpus, speaker) value. Speaker ids are unique within a corpus
    only (two corpora both number speakers from 1), so every speaker count, speaker set and
    disjointness check in manifests/ goes through this, as corpora.stats does."""
    return df["corpus"].astype(str) + _SEP + df["speaker"].astype(str)


def speaker_pair(key: str) -> tuple[str, str]:
    """A speaker_keys value back to (corpus, speaker)."""
    corpus, speaker = key.split(_SEP, 1)
    return corpus, speaker


def of_speakers(df: pd.DataFrame, speakers) -> pd.Series:
    """Rows of these speakers: (corpus, speaker) pairs, or bare ids, which name that id in every corpus."""
    pairs = {_SEP.join(map(str, s)) for s in speakers if isinstance(s, tuple)}
    bare = {str(s) for s in speakers if not isinstance(s, tuple)}
    return speaker_keys(df).isin(pairs) | df["speaker"].astype(str).isin(bare)


@dataclass(frozen=True)
class GenderSpec:
    """What gender make-up to select. ``female_share`` None means "any mix, as the table has it"."""
    label: str
    female_share: float | None

    @property
    def genders(self) -> tuple[str, ...]:
        """The gender codes this spec selects (U only for 'any')."""
        if self.female_share is None:
            return ("F", "M", "U")
        return tuple(g for g, share in (("F", self.female_share), ("M", 1 - self.female_share)) if share > 0)

    def share(self, gender: str) -> float:
        return self.female_share if gender == "F" else 1 - self.female_share


def parse_gender_spec(text: str) -> GenderSpec:
    """'F' / 'female', 'M' / 'male', 'balanced', 'p=0.3' (female share), or 'any'."""
    key = str(text).strip().lower()
    named = {"f": 1.0, "female": 1.0, "m": 0.0, "male": 0.0, "balanced": 0.5, "b": 0.5}
    if key in named:
        return GenderSpec({1.0: "F", 0.0: "M", 0.5: "balanced"}[named[key]], named[key])
    if key in ("any", "all"):
        return GenderSpec("any", None)
    m = re.fullmatch(r"p\s*=\s*([0-9]*\.?[0-9]+)", key)
    if m and 0.0 <= float(m.group(1)) <= 1.0:
        p = float(m.group(1))
        return GenderSpec(f"p={p:g}", p)
    raise UserError(f"unknown gender selection {text!r}",
                    fix="use F, M, balanced, any, or p=SHARE with SHARE the female share in [0, 1] (e.g. p=0.3)")


def hhmm(seconds: float, with_seconds: bool = False) -> str:
    """Hours:minutes as the study's tables write them (1,006:59); or h:mm:ss for tiny sets."""
    if with_seconds:
        s = int(round(float(seconds)))
        return f"{s // 3600:,}:{s // 60 % 60:02d}:{s % 60:02d}"
    minutes = int(round(float(seconds) / 60))
    return f"{minutes // 60:,}:{minutes % 60:02d}"


@dataclass
class Dropped:
    """Rows left out at one step, and why."""
    reason: str
    rows: int
    seconds: float
    speakers: int
    by_gender: dict = field(default_factory=dict)   # gender -> seconds

    @classmethod
    def of(cls, reason: str, rows: pd.DataFrame) -> "Dropped":
        return cls(reason, int(len(rows)), round(float(rows["duration"].sum()), 3), int(speaker_keys(rows).nunique()),
                   {g: round(float(s), 3) for g, s in rows.groupby("gender")["duration"].sum().items()})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["hours"] = hhmm(self.seconds)
        return d


def check_columns(df: pd.DataFrame, source) -> None:
    """The selection needs the standard columns; a table without ``gender`` cannot be filtered."""
    if "gender" not in df.columns:
        raise UserError("the table has no 'gender' column", path=source, line=1,
                        fix="add a gender column (F/M/U) -- corpus readers fill it from speaker metadata")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=source, line=1,
                        fix="an utterance table needs: " + ", ".join(COLUMNS))


def mixed_gender_speakers(df: pd.DataFrame) -> list[tuple[str, str]]:
    """(corpus, speaker) pairs with both F and M rows (the study's 'B' column: e.g. a talk given by
    two people). Speaker 1 F in one corpus and 1 M in another are two speakers, not one mixed."""
    known = df[df["gender"].isin(("F", "M"))]
    n = known.groupby(speaker_keys(known))["gender"].nunique()
    return sorted(speaker_pair(k) for k in n[n > 1].index)


def _take(df: pd.DataFrame, mask, reason: str, dropped: list[Dropped]) -> pd.DataFrame:
    """Drop rows where ``mask`` is True, recording why."""
    mask = np.asarray(mask, dtype=bool)
    if mask.any():
        dropped.append(Dropped.of(reason, df[mask]))
    return df[~mask]


def apply_exclusions(df: pd.DataFrame, spec: GenderSpec, *, source="<table>",
                     exclude_ids=(), exclude_speakers=(), holdout_splits=("test",),
                     exclude_unknown: bool | None = None, mixed_speakers: str = "error",
                     corpora=None) -> tuple[pd.DataFrame, list[Dropped]]:
    """Remove what may never be selected; returns (pool, dropped records).

    - ``holdout_splits``: rows of these splits AND every row of their speakers (keeps test
      speakers out of train and valid even where a corpus reuses a speaker across splits);
    - ``exclude_ids`` / ``exclude_speakers``: explicit lists; a speaker is a (corpus, speaker)
      pair, or a bare id, which is left out in every corpus (the list does not say which);
    - ``exclude_unknown``: drop gender U (default: yes, unless the spec is 'any');
    - ``mixed_speakers``: 'error' (default; a speaker with F and M rows is a metadata problem)
      or 'drop' (leave them out, as the study's balanced set left out its 'B' speakers);
    - ``corpora``: keep only these corpora.
    """
    check_columns(df, source)
    dropped: list[Dropped] = []
    if corpora:
        df = _take(df, ~df["corpus"].isin(set(corpora)), f"corpus not in {sorted(corpora)}", dropped)
    if holdout_splits:
        held = df["split"].isin(set(holdout_splits))
        held_spk = set(speaker_keys(df[held]))
        df = _take(df, held, f"held-out split {sorted(holdout_splits)}", dropped)
        df = _take(df, speaker_keys(df).isin(held_spk), "speaker of a held-out split", dropped)
    if len(exclude_ids):
        df = _take(df, df["id"].isin(set(exclude_ids)), "excluded id", dropped)
    if len(exclude_speakers):
        df = _take(df, of_speakers(df, exclude_speakers), "excluded speaker", dropped)
    mixed = mixed_gender_speakers(df)
    if mixed:
        if mixed_speakers != "drop":
            corpus, spk = mixed[0]
            rows = (of_speakers(df, [mixed[0]])).to_numpy()
            pos = int(rows.nonzero()[0][0])
            # read_table's index is the row number, so it survives the filters above.
            line = int(df.index[pos]) + 2 if pd.api.types.is_integer_dtype(df.index) else None
            genders = sorted(set(df.loc[rows, "gender"]) & {"F", "M"})
            raise UserError(f"speaker {spk!r} has genders {genders} on different rows of corpus {corpus!r}"
                            + (f" ({len(mixed)} such speakers)" if len(mixed) > 1 else ""),
                            path=source, line=line,
                            fix="fix the metadata, or leave such speakers out with --drop-mixed-speakers")
        df = _take(df, of_speakers(df, mixed), "speaker with both F and M rows", dropped)
    if exclude_unknown is None:
        exclude_unknown = spec.female_share is not None
    if exclude_unknown:
        df = _take(df, df["gender"] == "U", "gender unknown (U)", dropped)
    df = _take(df, ~df["gender"].isin(spec.genders), f"gender not selected by {spec.label!r}", dropped)
    return df, dropped


def sample_to_duration(durations: np.ndarray, target: float, rng: np.random.Generator) -> np.ndarray:
    """Boolean mask of a random subset whose total is <= target and as close to it as first-fit gets.

    Rows are visited in a random order and kept while they fit; the remaining gap is then
    filled with later rows that still fit. The total ends within one utterance of the target
    (the gap left is shorter than every row not taken), which is what makes balanced sets equal.
    """
    durations = np.asarray(durations, dtype=float)
    take = np.zeros(len(durations), dtype=bool)
    if target <= EPS or not len(durations):
        return take
    order = rng.permutation(len(durations))
    cum = np.cumsum(durations[order])
    k = int(np.searchsorted(cum, target + EPS, side="right"))
    take[order[:k]] = True
    gap = target - (cum[k - 1] if k else 0.0)
    rest = order[k:]
    # Each pass finds the next row (in the same random order) that still fits: few passes,
    # each vectorised, instead of a Python loop over every remaining row.
    while gap > EPS and len(rest):
        fits = np.flatnonzero(durations[rest] <= gap + EPS)
        if not len(fits):
            break
        i = rest[fits[0]]
        take[i] = True
        gap -= durations[i]
        rest = rest[fits[0] + 1:]
    return take


def _rng(seed: int, *stream: int) -> np.random.Generator:
    # One independent stream per (step, gender): changing one gender's pool leaves the other's
    # sample unchanged, which keeps F-only / M-only / balanced selections comparable.
    return np.random.default_rng([int(seed), *stream])


_GENDER_STREAM = {"F": 1, "M": 2, "U": 3}


def gender_targets(pool: pd.DataFrame, spec: GenderSpec, hours: float | None = None,
                   hours_per_gender: float | None = None, *, what: str = "train",
                   source="<table>") -> dict[str, float]:
    """Seconds to select per gender; a request the pool cannot meet is a UserError saying what exists."""
    avail = {g: float(pool.loc[pool["gender"] == g, "duration"].sum()) for g in ("F", "M", "U")}
    have = ", ".join(f"{g} {hhmm(avail[g])}" for g in ("F", "M", "U") if avail[g] > 0) or "nothing"
    if hours is not None and hours_per_gender is not None:
        raise UserError("give either hours (overall) or hours per gender, not both",
                        fix="e.g. --hours 20 (10 h F + 10 h M when balanced) or --hours-per-gender 10")
    if spec.female_share is None:
        total = sum(avail.values())
        want = total if hours is None and hours_per_gender is None else 3600.0 * (hours or hours_per_gender)
        if want > total + 1e-3:
            raise UserError(f"{what}: asked for {hhmm(want)} of speech, the pool has {hhmm(total)} ({have})",
                            path=source, fix=f"ask for at most {total / 3600:.4g} h, or add data")
        return {"*": want}
    genders = spec.genders
    if hours_per_gender is not None:
        if len(genders) == 2 and abs(spec.female_share - 0.5) > 1e-9:
            raise UserError(f"hours per gender is ambiguous with {spec.label!r}",
                            fix="use --hours (overall) with p=SHARE; per-gender hours fit F, M and balanced")
        want = {g: 3600.0 * hours_per_gender for g in genders}
    elif hours is not None:
        want = {g: 3600.0 * hours * spec.share(g) for g in genders}
    else:
        # As much as the pool allows at the requested share: the scarcer gender is used whole.
        total = min(avail[g] / spec.share(g) for g in genders)
        want = {g: total * spec.share(g) for g in genders}
    for g in genders:
        if want[g] > avail[g] + 1e-3:
            raise UserError(f"{what}: asked for {hhmm(want[g])} of {g} speech, the pool has {hhmm(avail[g])} "
                            f"of {g} ({have}, after exclusions)", path=source,
                            fix=f"ask for at most {avail[g] / 3600 / (spec.share(g) if hours is not None else 1):.4g} h"
                                f"{' overall' if hours is not None else ''}, or add {g} data")
    return want


def cap_corpora(pool: pd.DataFrame, corpus_hours: dict[str, float], seed: int,
                dropped: list[Dropped]) -> pd.DataFrame:
    """Down-sample each named corpus to at most its cap (hours), keeping its own gender mix."""
    keep = np.ones(len(pool), dtype=bool)
    for ci, (corpus, cap) in enumerate(sorted(corpus_hours.items())):
        in_c = (pool["corpus"] == corpus).to_numpy()
        total = float(pool.loc[in_c, "duration"].sum())
        if total <= 3600.0 * cap + EPS:
            continue
        for g, grp in pool[in_c].groupby("gender", sort=True):
            target = 3600.0 * cap * float(grp["duration"].sum()) / total
            mask = sample_to_duration(grp["duration"].to_numpy(), target, _rng(seed, 10 + ci, _GENDER_STREAM[g]))
            keep[pool.index.get_indexer(grp.index[~mask])] = False
    if not keep.all():
        dropped.append(Dropped.of(f"corpus cap {dict(sorted(corpus_hours.items()))} h", pool[~keep]))
    return pool[keep]


def select_by_gender(pool: pd.DataFrame, spec: GenderSpec, *, hours: float | None = None,
                     hours_per_gender: float | None = None, seed: int = 0,
                     downsample_corpora=None, what: str = "train", source="<table>",
                     stream: int = 0) -> tuple[pd.DataFrame, dict, list[Dropped]]:
    """Sample rows per gender to the targets; returns (selected rows, targets in seconds, dropped).

    ``downsample_corpora``: only rows of these corpora may be left out to reach a target (the
    study down-sampled EPAC only and kept the other corpora whole); None = any row may go.
    """
    pool = pool.sort_values("id", kind="stable")
    targets = gender_targets(pool, spec, hours, hours_per_gender, what=what, source=source)
    keep = np.zeros(len(pool), dtype=bool)
    genders = pool["gender"].to_numpy()
    for key, target in targets.items():
        in_g = np.ones(len(pool), dtype=bool) if key == "*" else genders == key
        movable = in_g.copy()
        if downsample_corpora:
            movable &= pool["corpus"].isin(set(downsample_corpora)).to_numpy()
        fixed = in_g & ~movable
        fixed_s = float(pool["duration"].to_numpy()[fixed].sum())
        if fixed_s > target + 1e-3:
            raise UserError(
                f"{what}: the corpora that may not be down-sampled already hold {hhmm(fixed_s)} of "
                f"{key if key != '*' else 'speech'}, more than the {hhmm(target)} asked for", path=source,
                fix=f"allow down-sampling more corpora (now only {sorted(downsample_corpora)}), or ask for more hours")
        keep |= fixed
        idx = np.flatnonzero(movable)
        mask = sample_to_duration(pool["duration"].to_numpy()[idx], target - fixed_s,
                                  _rng(seed, 20 + stream, _GENDER_STREAM.get(key, 0)))
        keep[idx[mask]] = True
    dropped = []
    if (~keep).any():
        dropped.append(Dropped.of(f"{what}: down-sampled to the {spec.label!r} duration targets", pool[~keep]))
    return pool[keep].sort_index(), targets, dropped
