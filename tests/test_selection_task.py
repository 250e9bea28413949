"""A task trains on a selection (issue 28, item 4): the paper's balanced ASR subset as a step.

The reference study trains its ASR on a gender-balanced subset of mTEDx fr-fr, its valid set
topped up with unused male training speakers, the test set as released (Table 2). Here a
corpus with 5 F and 5 M training speakers, a valid split of one
woman only and a test split of one speaker per gender goes through the `selections:` section of
a study config: the selection step's CSVs, the ASR step that reads them, and Tables 1/2.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest

from corpora.table import read_table
from gendergap.cli import main
from gendergap.config import load_config
from gendergap.plan import plan_jobs
from manifest_fixtures import write_corpus
from manifests.stats import downstream_sets_table
from manifests.task_selection import build_task_selection

SPEAKERS = {**{f"f{i}": "F" for i in range(6)}, **{f"m{i}": "M" for i in range(6)}}
SPLIT_OF = {"f4": "valid", "f5": "test", "m5": "test"}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sel")
    return write_corpus(root, speakers=SPEAKERS, split_of=SPLIT_OF, utts_per_speaker=5, corpus="mtedx-fr",
                        long_recording=False)


def test_balanced_selection_with_male_valid_upsampled_and_test_as_released(table, tmp_path):
    out = tmp_path / "asr"
    report = build_task_selection(table, out, corpus="mtedx-fr", gender="balanced", valid_hours=4 / 3600, seed=3)
    parts = {s: read_table(out / f"selection_{s}.tsv") for s in ("train", "valid", "test")}
    train, valid, test = parts["train"], parts["valid"], parts["test"]
    f, m = (train.loc[train["gender"] == g, "duration"].sum() for g in "FM")
    assert f > 0 and m > 0 and abs(f - m) <= max(0.005 * max(f, m), train["duration"].max())
    # valid: the labelled woman first, then whole male speakers from the unused training ones
    assert ("f4" in set(valid["speaker"])
            and set(valid.loc[valid["gender"] == "M", "speaker"]) <= {f"m{i}" for i in range(5)})
    assert (valid["gender"] == "M").any() and report["valid_upsampled_from_train"]
    # speaker-disjoint, and the test split exactly the corpus's test rows
    assert not set(train["speaker"]) & set(valid["speaker"])
    full = read_table(table)
    assert sorted(test["id"]) == sorted(full.loc[full["split"] == "test", "id"])
    assert not (set(train["speaker"]) | set(valid["speaker"])) & {"f5", "m5"}
    for s in ("train", "valid", "test"):
        csv = pd.read_csv(out / f"{s}.csv")
        assert sorted(csv["ID"]) == sorted(parts[s]["id"])
    # finished: a second call reads the report back and rewrites nothing
    stamp = (out / "train.csv").stat().st_mtime_ns
    assert build_task_selection(table, out, corpus="mtedx-fr", gender="balanced", valid_hours=4 / 3600,
                                seed=3)["request_hash"] == report["request_hash"]
    assert (out / "train.csv").stat().st_mtime_ns == stamp
    # Table 2: the corpus as released, then the selection, each split a speakers and a duration line
    t2 = downstream_sets_table([{"name": "mtedx-fr", "table": str(table), "corpus": "mtedx-fr",
                                 "splits": {"train": "train", "valid": "valid", "test": "test"}},
                                {"name": "balanced", "dir": str(out)}])
    spk = t2[(t2["Dataset"] == "balanced") & (t2["measure"] == "# speakers")].set_index("split")
    assert spk.loc["train", "All"] == str(train["speaker"].nunique())
    assert spk.loc["valid", "M"] == str(valid.loc[valid["gender"] == "M", "speaker"].nunique())
    orig = t2[(t2["Dataset"] == "mtedx-fr") & (t2["measure"] == "# speakers")].set_index("split")
    assert orig.loc["valid", "M"] == "-" and orig.loc["train", "All"] == "9"


def _config(tmp_path: Path, table: Path, task: str) -> Path:
    cfg = tmp_path / "study.yaml"
    cfg.write_text(textwrap.dedent(f"""\
        name: sel
        corpus: {{table: {table}}}
        checkpoints:
          F-tiny: {{shipped: tiny-female}}
        selections:
          asr-balanced: {{corpus: mtedx-fr, gender: balanced, valid_hours: 0.0011}}
        tasks:
        {textwrap.indent(task, '  ')}
        """), encoding="utf-8")
    return cfg


def test_a_task_names_a_selection_and_trains_on_its_csvs(table, tmp_path):
    cfg = _config(tmp_path, table, "asr-frozen: {corpus: mtedx-fr, selection: asr-balanced, layer: last}")
    steps = {s.name: s for s in plan_jobs(load_config(cfg), tmp_path / "run")}
    sel, asr = steps["selection:asr-balanced"], steps["asr-frozen:F-tiny"]
    assert sel.name in asr.deps and asr.train == f"{sel.out}/train.csv" and asr.test == f"{sel.out}/test.csv"
    assert {"name": "asr-balanced (selection of mtedx-fr)", "dir": sel.out} in steps["report"].data["downstream"]
    sel.run()
    assert (Path(sel.out) / "valid.csv").is_file() and (Path(sel.out) / "selection_report.json").is_file()
    # another hours target is another step key (the selection is a step like any other)
    (tmp_path / "b").mkdir()
    other = _config(tmp_path / "b", table, "asr-frozen: {corpus: mtedx-fr, selection: asr-balanced, layer: last}")
    other.write_text(other.read_text().replace("valid_hours: 0.0011", "valid_hours: 0.0011, hours: 0.002"))
    assert {s.name: s for s in plan_jobs(load_config(other), tmp_path / "run")}["selection:asr-balanced"].key != sel.key


@pytest.mark.parametrize("task,message", [
    ("asr-frozen: {corpus: mtedx-fr, selection: nope}", "trains on unknown selection 'nope'"),
    ("asr-frozen: {corpus: other, selection: asr-balanced}", "which draws from corpus 'mtedx-fr'"),
])
def test_a_bad_selection_reference_is_one_line_naming_the_task(table, tmp_path, capsys, task, message):
    cfg = _config(tmp_path, table, task)
    assert main(["sweep", "--config", str(cfg), "--out", str(tmp_path / "run"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and f"{cfg}:" in err[0]
