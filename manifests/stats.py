"""Duration and speaker counts per gender, in the layout of the study's Tables 1 and 2.

Table 1 (pretraining sets): one line per corpus, ``Duration M / F`` (hours:minutes) and
``# speakers M / F``, then a TOTAL line. Table 2 (downstream sets): per split, a ``# speakers``
line and a ``Duration`` line with columns M, F, B (speakers with rows of both genders), All;
a U column appears when the data has unknown genders.

    counts = gender_counts({"train": df_train, "valid": df_valid})   # tidy DataFrame
    print(format_table2(counts)); print(format_table1(counts))
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.utterances import UtteranceTable
from manifests.select import hhmm, mixed_gender_speakers, of_speakers, speaker_keys


def load_rows(path) -> pd.DataFrame:
    return UtteranceTable.load(path).rows


def gender_counts(splits: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Tidy counts: split, corpus, group (M, F, U or B), rows, seconds, speakers.

    B collects every row of a speaker with both F and M rows (the study's 'B' column). Speakers
    are (corpus, speaker) pairs: equal ids in two corpora are two speakers.
    """
    parts = []
    for split, df in splits.items():
        if not len(df):
            continue
        group = df["gender"].where(~of_speakers(df, mixed_gender_speakers(df)), "B")
        parts.append(df.assign(_split=split, _group=group, _spk=speaker_keys(df)))
    if not parts:
        return pd.DataFrame(columns=["split", "corpus", "group", "rows", "seconds", "speakers"])
    all_rows = pd.concat(parts, ignore_index=True)
    out = (all_rows.groupby(["_split", "corpus", "_group"], sort=False)
           .agg(rows=("id", "size"), seconds=("duration", "sum"), speakers=("_spk", "nunique"))
           .reset_index().rename(columns={"_split": "split", "_group": "group"}))
    return out


def _groups(counts: pd.DataFrame) -> list[str]:
    present = set(counts["group"])
    return ["M", "F"] + [g for g in ("B", "U") if g in present]


def _cell(counts: pd.DataFrame, group: str | None) -> tuple[float, int]:
    sel = counts if group is None else counts[counts["group"] == group]
    # Speakers are counted per (split, corpus, group) and are (corpus, speaker) pairs, so the
    # per-corpus counts add up: no speaker is in two corpora.
    return float(sel["seconds"].sum()), int(sel["speakers"].sum())


def table2(counts: pd.DataFrame, speakers_from: dict[str, pd.DataFrame] | None = None,
           with_seconds: bool = False) -> pd.DataFrame:
    """Rows (split, '# speakers' | 'Duration'), columns M, F[, B, U], All -- as strings."""
    groups = _groups(counts)
    rows = []
    for split in dict.fromkeys(counts["split"]):
        c = counts[counts["split"] == split]
        spk_line, dur_line = {"split": split, "": "# speakers"}, {"split": split, "": "Duration"}
        for g in groups + ["All"]:
            seconds, _ = _cell(c, None if g == "All" else g)
            n_spk = _speakers(speakers_from, split, None if g == "All" else g, c)
            spk_line[g] = str(n_spk) if seconds else "-"
            dur_line[g] = hhmm(seconds, with_seconds) if seconds else "-"
        rows += [spk_line, dur_line]
    return pd.DataFrame(rows)


def _speakers(frames, split, group, c) -> int:
    """Distinct (corpus, speaker) pairs when the rows are at hand, else the per-corpus sum."""
    if frames is not None and split in frames:
        df = frames[split]
        if group is None:
            return int(speaker_keys(df).nunique())
        mixed = mixed_gender_speakers(df)
        if group == "B":
            return len(mixed)
        return int(speaker_keys(df[(df["gender"] == group) & ~of_speakers(df, mixed)]).nunique())
    return _cell(c, group)[1]


def table1(counts: pd.DataFrame, with_seconds: bool = False,
           speakers_from: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Rows per corpus (+ TOTAL): 'Duration' as 'M / F', '# speakers' as 'M / F' (all splits pooled;
    with ``speakers_from`` a speaker in several splits counts once)."""
    pooled = pd.concat(list(speakers_from.values())) if speakers_from else None
    rows = []
    for corpus in sorted(set(counts["corpus"])) + ["TOTAL (M/F)"]:
        c = counts if corpus.startswith("TOTAL") else counts[counts["corpus"] == corpus]
        (m_s, m_n), (f_s, f_n) = _cell(c, "M"), _cell(c, "F")
        if pooled is not None and not corpus.startswith("TOTAL"):
            rows_c = pooled[pooled["corpus"] == corpus]
            mixed = mixed_gender_speakers(rows_c)
            m_n, f_n = (int(speaker_keys(rows_c[(rows_c["gender"] == g) & ~of_speakers(rows_c, mixed)]).nunique())
                        for g in ("M", "F"))
        rows.append({"Dataset": corpus, "Duration": f"{hhmm(m_s, with_seconds)} / {hhmm(f_s, with_seconds)}",
                     "# speakers": "-" if corpus.startswith("TOTAL") else f"{m_n} / {f_n}"})
    return pd.DataFrame(rows)


def _render(df: pd.DataFrame, fmt: str) -> str:
    if fmt == "csv":
        return df.to_csv(index=False, lineterminator="\n")
    if fmt == "markdown":
        cols = list(df.columns)
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in df.itertuples(index=False)]
        return "\n".join(lines) + "\n"
    return df.to_string(index=False) + "\n"


def load_selection(path: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """The per-split selection tables of a manifest dir (``selection_<split>.tsv``), or one table
    file, split by its ``split`` column (e.g. a whole corpus, for the study's 'Original Content')."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("selection_*.tsv"))
        if not files:
            raise UserError("no selection_<split>.tsv here", path=path,
                            fix="point at a dir written by `gendergap manifest build`, or at a table .tsv")
        order = {"train": 0, "valid": 1, "test": 2}
        files.sort(key=lambda p: (order.get(p.stem[len("selection_"):], 9), p.name))
        return {p.stem[len("selection_"):]: load_rows(p) for p in files}
    df = load_rows(path)
    return {s or "all": g for s, g in df.groupby("split", sort=False)}


def format_stats(splits: dict[str, pd.DataFrame], fmt: str = "text", with_seconds: bool = False) -> str:
    """Both tables, as text, CSV (tidy counts + hh:mm) or Markdown; ``with_seconds``: h:mm:ss."""
    if fmt not in ("text", "csv", "markdown"):
        raise UserError(f"unknown format {fmt!r}", fix="use text, csv or markdown")
    counts = gender_counts(splits)
    if fmt == "csv":
        tidy = counts.assign(hours=counts["seconds"].map(lambda s: hhmm(s, with_seconds)),
                             seconds=counts["seconds"].round(3))
        return _render(tidy, "csv")
    t2, t1 = table2(counts, splits, with_seconds), table1(counts, with_seconds, splits)
    head = "## " if fmt == "markdown" else ""
    unit = "h:mm:ss" if with_seconds else "hours:minutes"
    return (f"{head}Per split ({unit}; B = speakers with both genders)\n\n" + _render(t2, fmt)
            + f"\n{head}Per corpus, M / F ({unit})\n\n" + _render(t1, fmt))


# --- the study report's data tables ------------------------------------------------------------

def _fill(frames: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True).fillna("-") if frames else pd.DataFrame()


def _small(frames: list[pd.DataFrame]) -> bool:
    """Under an hour in every set: hours:minutes would print 0:00, so the tables add seconds."""
    return all(float(df["duration"].sum()) < 3600 for df in frames)


def pretraining_sets_table(manifests: dict[str, str | os.PathLike]) -> pd.DataFrame:
    """Table 1 of the study: per pretraining set (a `manifest build` dir) and corpus, the train
    split's Duration M / F and # speakers M / F, then the set's TOTAL. Missing dirs are skipped;
    durations are hours:minutes, h:mm:ss when every set is under an hour."""
    trains = {name: load_rows(Path(mdir) / "selection_train.tsv") for name, mdir in manifests.items()
              if (Path(mdir) / "selection_train.tsv").is_file()}
    seconds = _small(list(trains.values()))
    frames = []
    for name, rows in trains.items():
        train = {"train": rows}
        t1 = table1(gender_counts(train), with_seconds=seconds, speakers_from=train)
        t1["# speakers"] = _total_speakers(t1, train["train"])
        t1.insert(0, "Set", name)
        frames.append(t1)
    return _fill(frames)


def _total_speakers(t1: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """Table 1's speaker column with the TOTAL line filled in (distinct speakers of the set)."""
    mixed = mixed_gender_speakers(rows)
    m, f = (int(speaker_keys(rows[(rows["gender"] == g) & ~of_speakers(rows, mixed)]).nunique()) for g in ("M", "F"))
    return [f"{m} / {f}" if d.startswith("TOTAL") else s for d, s in zip(t1["Dataset"], t1["# speakers"])]


def downstream_sets_table(sets: list[dict]) -> pd.DataFrame:
    """Table 2 of the study: per data set, per split a '# speakers' and a 'Duration' line
    (columns M, F, B[, U], All; h:mm:ss when every set is under an hour). A set is ``{name, dir}``
    (a selection written by manifests.task_selection: its selection_<split>.tsv files) or
    ``{name, table, corpus, splits}`` (a corpus's rows under the table's split labels; ``splits``
    maps a role to a label). Sets whose files do not exist (yet) are skipped."""
    frames, tables, found = [], {}, []
    for s in sets:
        if "dir" in s:
            if not (Path(s["dir"]) / "selection_report.json").is_file():
                continue
            splits = load_selection(s["dir"])
        else:
            if s["table"] not in tables:
                if not Path(s["table"]).is_file():
                    continue
                tables[s["table"]] = load_rows(s["table"])
            df = tables[s["table"]]
            rows = df[df["corpus"] == s["corpus"]]
            splits = {role: rows[rows["split"] == label] for role, label in s["splits"].items()}
        found.append((s["name"], splits))
    seconds = _small([df for _, splits in found for df in splits.values()])
    for name, splits in found:
        t2 = table2(gender_counts(splits), splits, with_seconds=seconds).rename(columns={"": "measure"})
        t2.insert(0, "Dataset", name)
        frames.append(t2)
    return _fill(frames)
