"""The FBANK reference row and seed pooling, through a real sweep: features, frozen ASR and ST
with two training seeds each, probes, the report's tables and plots."""
import sqlite3
import subprocess
import sys

import pandas as pd

CONFIG = """\
name: t
corpus: {synth: tiny}
pretraining: {corpus: synth-fr, sets: {female: F}}
checkpoints:
  F-tiny: {shipped: tiny-female, pretrained_on: female}
  FBANK: {baseline: fbank}
tasks:
  asr-frozen: {corpus: synth-fr, layer: all, seeds: [1, 2], overrides: [max_steps=3, number_of_epochs=1]}
  st: {corpus: synth-fr, pairs: [fr-en], layer: 1, preset: tiny, seeds: [1, 2],
       overrides: [max-update=2, data.vocab_size=50, save-interval-updates=1, average_last=1]}
  probes: {corpus: synth-fr, layers: all, probes: [mean], control: false}
report: {bootstrap: 20}
"""


def test_fbank_and_seeds_flow_through_every_table(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "o"
    p = subprocess.run([sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out", str(out),
                        "--parallel", "2"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    with sqlite3.connect(out / "results.db") as c:
        rows = pd.read_sql("SELECT checkpoint, task, subset, gender, metric, value FROM scores", c)
    # each seed keeps its own rows; the pooled rows are the mean of the two seeds
    for ck in ("F-tiny", "FBANK"):
        for task, metric in (("asr-frozen", "wer"), ("st", "bleu")):
            sel = rows[(rows.checkpoint == ck) & (rows.task == task) & (rows.gender == "all")]
            per_seed = sel[sel.subset.isin(["test@seed1", "test@seed2"]) & (sel.metric == metric)]
            assert sorted(per_seed.subset) == ["test@seed1", "test@seed2"]
            pooled = sel[(sel.subset == "test") & (sel.metric == metric)]
            assert abs(pooled.value.iloc[0] - per_seed.value.mean()) < 1e-9
            assert sel[(sel.subset == "test") & (sel.metric == f"{metric}:n_seeds")].value.iloc[0] == 2
            sd = sel[(sel.subset == "test") & (sel.metric == f"{metric}:seed_sd")].value.iloc[0]
            assert abs(sd - per_seed.value.std(ddof=1)) < 1e-9
    # FBANK has one "layer" (the filterbanks) and no random-init twin; F-tiny's twin is probed
    probes = rows[rows.task == "probe"]
    assert set(probes.checkpoint) == {"F-tiny", "F-tiny+random-init", "FBANK"}
    # FBANK was never registered as a checkpoint: Table 3 describes pretrained models only
    report = (out / "report" / "report.md").read_text()
    table3 = report.split("## Table 3")[1].split("## Table 4")[0]
    assert "FBANK" not in table3 and "F-tiny" in table3
    mark = "FBANK (reference: no pretraining)"
    t4 = (out / "report" / "table4_asr.md").read_text()
    t5 = (out / "report" / "table5_st.md").read_text()
    assert mark in t4 and mark in t5 and " ± " in t4 and " ± " in t5
    # the reference row is listed after the pretrained models
    assert t4.index("F-tiny") < t4.index(mark) and t5.index("F-tiny") < t5.index(mark)
    probe_section = report.split("## Gender probes")[1]
    assert f"| {mark} | 0 |" in probe_section and "| FBANK" not in probe_section.replace(mark, "")
    assert (out / "report" / "delta_rel.png").stat().st_size > 0
    assert (out / "report" / "probes_by_layer.png").stat().st_size > 0
    csv = pd.read_csv(out / "report" / "table4_asr.csv")
    assert {"n_seeds", "all_sd", "delta_rel_sd", "gap_called", "reference"} <= set(csv.columns)
    assert csv.set_index("checkpoint").loc["FBANK", "reference"]
    # re-running is a no-op
    again = subprocess.run([sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "done already" in again.stdout, again.stdout[-2000:]
