"""One study config with a wav2vec 2.0, a HuBERT, a WavLM and a data2vec row runs as one sweep
(submitit's local executor, real engines, the tiny synthetic corpus) to a report with one row per
family in Table 3, Table 4 (frozen-feature and fine-tuned ASR) and the probe table; and the dry run
refuses, in one line each, an unsupported model type, a folder needing remote code, and a w2v-BERT
row under asr-e2e."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from family_helpers import tiny_family_model

FAMILIES = {"W2V": "wav2vec2", "HuBERT": "hubert", "WavLM": "wavlm", "D2V": "data2vec-audio"}
CONFIG = """\
name: families
corpus: {synth: tiny}
checkpoints:
%s
tasks:
  asr-frozen: {corpus: synth-fr, layer: last, overrides: [max_steps=2, number_of_epochs=1]}
  asr-e2e: {corpus: synth-fr, overrides: [max_steps=2, batch_seconds=6, valid_batch_seconds=12]}
  probes: {corpus: synth-fr, layers: all, probes: [mean], control: false}
report: {bootstrap: 20}
executor: {parallel: 2}
"""


def sweep(cfg: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=900)


def config(tmp_path: Path, folders: dict[str, Path], name: str = "c.yaml") -> Path:
    rows = "\n".join(f"  {n}: {{path: {p}}}" for n, p in folders.items())
    cfg = tmp_path / name
    cfg.write_text(CONFIG % rows)
    return cfg


def test_four_families_in_one_sweep_to_a_report(tmp_path):
    folders = {name: tiny_family_model(tmp_path / "models" / t, t, seed=1, dropout=0.1) for name, t in FAMILIES.items()}
    out = tmp_path / "study"
    r = sweep(config(tmp_path, folders), out)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = out / "report"
    registry = json.loads((out / "checkpoints.json").read_text())["checkpoints"]
    assert {e["name"]: e["family"] for e in registry} == FAMILIES

    t3 = (report / "table3_pretraining.md").read_text(encoding="utf-8")
    rows3 = {ln.split(" | ")[0].strip("| "): ln.split(" | ")[1] for ln in t3.splitlines()[2:] if ln.startswith("| ")}
    assert rows3 == FAMILIES

    import pandas as pd
    asr = pd.read_csv(report / "table4_asr.csv")
    for task in ("asr-frozen", "asr-e2e"):
        assert sorted(asr[asr["task"] == task]["checkpoint"]) == sorted(FAMILIES), task
    probes = pd.read_csv(report / "probes.csv")
    assert set(probes["checkpoint"]) == {*FAMILIES, "W2V+random-init"}
    assert all(sorted(g["layer"]) == [0, 1, 2] for _, g in probes.groupby("checkpoint"))
    md = (report / "report.md").read_text(encoding="utf-8")
    assert "| HuBERT | hubert |" in md and (report / "probes_by_layer.png").is_file()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("families_dry")
    good = tiny_family_model(root / "w2v", "wav2vec2", seed=1)
    bert = tiny_family_model(root / "bert", "wav2vec2-bert", seed=1)
    unsupported = root / "speecht5"
    unsupported.mkdir()
    (unsupported / "config.json").write_text(json.dumps({"model_type": "speecht5"}))
    (unsupported / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    custom = root / "custom"
    custom.mkdir()
    cfg = json.loads((good / "config.json").read_text())
    (custom / "config.json").write_text(json.dumps({**cfg, "auto_map": {"AutoModel": "modeling_x.XModel"}}))
    (custom / "modeling_x.py").write_text("open('PWNED', 'w')\n")
    (custom / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    return root, good, bert, unsupported, custom


@pytest.mark.parametrize("case", ["unsupported", "custom-code", "w2v-bert-e2e"])
def test_dry_run_refuses_in_one_line(hostile, case, tmp_path):
    root, good, bert, unsupported, custom = hostile
    bad = {"unsupported": unsupported, "custom-code": custom, "w2v-bert-e2e": bert}[case]
    cfg = config(tmp_path, {"W2V": good, "Bad": bad})
    r = sweep(cfg, tmp_path / "study", "--dry-run")
    assert r.returncode == 2, r.stdout + r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, err
    line = r.stderr.strip()
    assert line.startswith(f"gendergap: error: {cfg}:") and "Bad" in line, line
    assert {"unsupported": "'speecht5' is not a supported self-supervised family",
            "custom-code": "custom code", "w2v-bert-e2e": "w2v-BERT 2.0"}[case] in line, line
    assert not (root / "PWNED").exists() and not Path("PWNED").exists()
    assert not (tmp_path / "study" / "sweep" / "jobs").exists()
