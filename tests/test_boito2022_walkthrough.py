"""The paper in miniature (issue 28, item 7): from corpora in their released layouts to the
report's Tables 1-5, with the commands of docs/boito2022.md only.

tests/paper_fixtures.py writes the study's corpora (four mTEDx pairs sharing talks, MLS flac and
opus, Common Voice 48 kHz mp3 with old and new headers, a LeBenchmark JSON);
scripts/boito2022_walkthrough.sh runs docs/boito2022.md's walkthrough on them: index, merge, F-only and
M-only pretraining manifests resampled to 16 kHz, a tiny pretraining of each, registration; then
a copy of configs/boito2022.yaml pointing at them, with tiny budgets (what a user edits: paths,
the two self-pretrained checkpoints, step counts, no GPUs), goes through `sweep --dry-run`, the
sweep and its report. The budgets are tiny, so the numbers mean nothing; what is checked is that
every table is there, built from the right data.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from paper_fixtures import PAIR_TRAIN_TALKS, TALKS, write_paper_corpora

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "boito2022_walkthrough.sh"
TINY_RES = {"cpus": 1, "gpus": 0, "mem_gb": 4, "time_min": 30}
TINY_OVERRIDES = {
    "asr-e2e": ["max_steps=3", "batch_seconds=4", "valid_batch_seconds=8"],
    "asr-frozen": ["max_steps=6", "hidden_size=32", "proj_dim=32", "batch_seconds=4", "valid_batch_seconds=8"],
    "st": ["data.vocab_size=40", "max-epoch=2", "update-freq=1", "warmup-updates=10", "keep-last-epochs=2",
           "average_last=2", "num-workers=0", "max-tokens=4000"],
}


def run_stage(*args, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=900)


def tiny_copy(work: Path) -> Path:
    """configs/boito2022.yaml as a user fills it in for the miniature: the tables, the two
    checkpoints pretrained and registered above (by name in their registry), tiny budgets, CPU only."""
    cfg = yaml.safe_load((REPO / "configs" / "boito2022.yaml").read_text(encoding="utf-8"))
    cfg["corpus"]["table"] = [str(work / "tables" / f"mtedx_fr-{p}.tsv") for p in ("fr", "en", "es", "pt")]
    cfg["selections"]["asr-balanced"].update(hours_per_gender=None, valid_hours=0.007)
    # the two registered by `ckpt add` in the data stage: named, not repeated (path, manifest, Table 3)
    cfg = {**{k: v for k, v in cfg.items() if k != "checkpoints"}, "registry": str(work / "checkpoints.json"),
           "checkpoints": {f"{g}-1K-Large": {"registered": f"{g}-1K-Large"} for g in "FM"}}
    for name, t in cfg["tasks"].items():
        t["resources"] = dict(TINY_RES)
        if t.get("checkpoints"):
            t["checkpoints"] = [c for c in t["checkpoints"] if c in cfg["checkpoints"]]
        kind = t.get("type", name)
        if kind in TINY_OVERRIDES:
            t["overrides"] = list(TINY_OVERRIDES[kind])
        if kind == "probes":
            t.update(layers="1", control=False, random_init=False)
    cfg["report"]["bootstrap"] = 50
    cfg["executor"] = {"name": "local", "parallel": 2}
    path = work / "boito2022-mini.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    root = tmp_path_factory.mktemp("boito2022")
    paths = write_paper_corpora(root / "data")
    work = root / "work"
    data = run_stage("data", root / "data", work)
    assert data.returncode == 0, data.stdout[-3000:] + data.stderr[-3000:]
    return {"root": root, "work": work, "paths": paths, "data": data}


def test_data_stage_indexes_merges_resamples_pretrains_and_registers(walked):
    work = walked["work"]
    out = walked["data"].stdout + walked["data"].stderr
    # the pretraining pool: five tables in one, nothing dropped; the 48 kHz mp3s as 16 kHz copies
    pool = json.loads((work / "tables" / "pretrain_pool.tsv.merge.json").read_text())
    assert len(pool["inputs"]) == 5 and pool["rows_out"] == sum(i["rows"] for i in pool["inputs"])
    for g in "FM":
        lines = (work / "manifests" / g / "train.tsv").read_text().splitlines()
        root = Path(lines[0])
        listed = [root / ln.split("\t")[0] for ln in lines[1:]]
        assert any("prepared-audio" in str(p) for p in listed), "no Common Voice clip went through the cache"
        import soundfile as sf
        assert {sf.info(p).samplerate for p in listed} == {16000}
    # registered with what each run wrote, Table 3's shares measured on its manifest
    reg = json.loads((work / "checkpoints.json").read_text())
    entries = {e["name"]: e for e in (reg["checkpoints"] if isinstance(reg, dict) and "checkpoints" in reg else reg)}
    assert entries["F-1K-Large"]["female_pct"] == 100 and entries["M-1K-Large"]["male_pct"] == 100
    assert "checkpoint_best.pt" in out or "checkpoint_last.pt" in out


def test_study_stage_reaches_the_report_with_tables_1_to_5(walked):
    work = walked["work"]
    cfg = tiny_copy(work)
    study = run_stage("study", cfg, work)
    assert study.returncode == 0, study.stdout[-5000:] + study.stderr[-5000:]
    # the dry run costs the plan: every stage, a total, the wall time under the executor's parallelism
    out = study.stdout + study.stderr
    cost = out[out.index("cost estimate (25 job(s) to run; throughput: "):]
    for stage in ("merge", "checkpoints", "selection", "features", "asr-e2e", "asr-frozen", "st", "probes", "report"):
        # known before anything ran: the merged table is merged in memory, ST's epochs counted in batches
        assert re.search(rf"^  {re.escape(stage)} +\d+ +[\d.]+ [kMG]?B +[\d.]+ (s|min|h) ", cost, re.M), stage
    assert re.search(r"^  total +25 +\S+ \S*B ", cost, re.M) and "wall time with 2 job(s) at once: about " in cost
    # the checkpoints came from the data stage's registry: its files, its Table 3 facts
    mine = {e["name"]: e for e in json.loads((work / "study" / "checkpoints.json").read_text())["checkpoints"]}
    theirs = {e["name"]: e for e in json.loads((work / "checkpoints.json").read_text())["checkpoints"]}
    for ck in ("F-1K-Large", "M-1K-Large"):
        assert Path(mine[ck]["path"]).resolve() == Path(work / theirs[ck]["path"]).resolve()
        assert [mine[ck][k] for k in ("hours", "male_pct", "female_pct")] == \
            [theirs[ck][k] for k in ("hours", "male_pct", "female_pct")]
    assert (work / theirs["F-1K-Large"]["manifest"]).resolve() == (work / "manifests" / "F").resolve()
    # the pairs' training segments are fr-fr's talks (their own copies of the audio): extracted once,
    # and every frozen-feature job read what the features step extracted (no entry of its own)
    logs = "".join(p.read_text(errors="replace") for p in (work / "study" / "sweep" / "logs").glob("*.out"))
    printed = re.findall(r"features of F-1K-Large: \d+ utterances \(\d+ audio segments\), layers \[[\d, ]+\]", logs)
    saved = re.search(r"features of F-1K-Large: (\d+) of (\d+) rows share their audio segment", logs)
    assert saved and int(saved.group(1)) > 0, logs[-3000:]
    store = next((work / "study" / "features").glob("F-1K-Large-*"))
    assert len(list(store.glob("*/entry.json"))) == len(printed) == 2
    report = (work / "study" / "report" / "report.md").read_text(encoding="utf-8")
    for title in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 5"):
        assert f"## {title}" in report, title
    # Table 1: each self-pretrained checkpoint's manifest, one gender only
    t1 = pd.read_csv(work / "study" / "report" / "table1_pretraining_data.csv", dtype=str)
    assert set(t1["Set"]) == {"F-1K-Large", "M-1K-Large"}
    assert all(d.startswith("0:00:00 / ") for d in t1.loc[t1["Set"] == "F-1K-Large", "Duration"])
    assert all(d.endswith(" / 0:00:00") for d in t1.loc[t1["Set"] == "M-1K-Large", "Duration"])
    # Table 2: fr-fr as released, the balanced selection, and each pair's training talks
    t2 = pd.read_csv(work / "study" / "report" / "table2_downstream_data.csv", dtype=str).fillna("-")
    datasets = set(t2["Dataset"])
    assert {"mtedx-fr", "asr-balanced (selection of mtedx-fr)"} <= datasets
    assert {f"mtedx-fr-{p} (train)" for p in ("en", "es", "pt")} <= datasets
    for p, talks in PAIR_TRAIN_TALKS.items():
        spk = t2[(t2["Dataset"] == f"mtedx-fr-{p} (train)") & (t2["measure"] == "# speakers")]
        assert spk["All"].tolist() == [str(len(talks))]
    sel = t2[(t2["Dataset"] == "asr-balanced (selection of mtedx-fr)")
             & (t2["measure"] == "Duration")].set_index("split")
    assert sel.loc["train", "M"] == sel.loc["train", "F"] and sel.loc["valid", "M"] != "-"
    # Table 4: both ASR tasks for both checkpoints; Table 5: the three pairs
    t4 = (work / "study" / "report" / "table4_asr.md").read_text()
    t5 = (work / "study" / "report" / "table5_st.md").read_text()
    for ck in ("F-1K-Large", "M-1K-Large"):
        assert ck in t4 and ck in t5
    for pair in ("fr-en", "fr-es", "fr-pt"):
        assert pair in t5
    # ST validated and tested on fr-fr's test talks, as the paper
    test_talks = {t for t, (_, split, _) in TALKS.items() if split == "test"}
    for pair in ("fr-en", "fr-es", "fr-pt"):
        hyp = (work / "study" / f"{pair}-st" / f"F-1K-Large.{pair}" / "test.hyp").read_text().splitlines()
        ids = [line.split("\t")[0] for line in hyp]
        assert len(ids) == sum(TALKS[t][2] for t in test_talks) and all(i.startswith("mtedx-fr/") for i in ids)
        # its fairseq processes started from the sweep's warm server (gendergap/warm.py)
        log = (work / "study" / f"{pair}-st" / f"F-1K-Large.{pair}" / "train.log").read_text()
        assert log.startswith("==== gendergap ") and "(warm)" in log.splitlines()[0]
    # their CPU time, which an ST job's own rusage does not see (the server's children), reached its
    # done.json through the job's ledger: fairseq-train and fairseq-generate, one line each
    st_jobs = [d for d in (work / "study" / "sweep" / "jobs").iterdir()
               if json.loads((d / "done.json").read_text())["kind"] == "st"]
    assert len(st_jobs) == 6
    for d in st_jobs:
        forked = [float(x) for x in (d / "forked-cpu.txt").read_text().split()]
        assert len(forked) == 2 and json.loads((d / "done.json").read_text())["cpu_s"] >= sum(forked) > 1.0
    # a second run is a no-op
    again = run_stage("study", cfg, work)
    assert again.returncode == 0 and re.search(r"25 jobs: 25 done already, 0 to run", again.stdout + again.stderr)
