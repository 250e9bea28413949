"""The cost table of `sweep --dry-run` (gendergap/cost.py): disk and time per stage from the data
and the models; the feature-store estimate against what an extraction really writes; a plan that
does not fit a file system refused in one line per location (free space faked through
gendergap.cost.free_bytes, the one function that reads it), and run anyway with --force."""
from __future__ import annotations

import re

import pytest

from asr_helpers import write_corpus
from gendergap.cli import main

CONFIG = """\
name: costed
corpus: {table: %s}
checkpoints:
  F-tiny: {shipped: tiny-female}
  FBANK: {baseline: fbank}
tasks:
  asr-frozen: {corpus: tiny, layer: all, overrides: [max_steps=300]}
  probes: {corpus: tiny, layers: all, probes: [mean], control: false}
report: {bootstrap: 20}
"""


@pytest.fixture(autouse=True)
def no_measured_profile(tmp_path, monkeypatch):
    """The defaults, whatever `gendergap bench` wrote on this machine."""
    import gendergap.cost as cost
    monkeypatch.setattr(cost, "PROFILE_PATH", tmp_path / "no-profile.json")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost")
    data = write_corpus(root / "data", {"train": 8, "valid": 4, "test": 4})
    cfg = root / "c.yaml"
    cfg.write_text(CONFIG % data["table"])
    return root, cfg, data


def _table(out: str) -> dict[str, list[str]]:
    start = out.index("cost estimate")
    rows = {}
    for line in out[start:].splitlines()[2:]:
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) >= 2 and not line.strip().startswith("wall"):
            rows[parts[0]] = parts[1:]
    return rows


def test_dry_run_prints_the_cost_table_and_the_store_estimate_holds(study, tmp_path, capsys):
    root, cfg, data = study
    out = tmp_path / "o"
    assert main(["sweep", "--config", str(cfg), "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    rows = _table(text)
    assert {"features", "asr-frozen", "probes", "report", "total"} <= set(rows), text
    assert "throughput: default" in text and "wall time with 2 job(s) at once" in text
    assert rows["asr-frozen"][0] == "2"    # two jobs: F-tiny and FBANK

    import argparse

    from gendergap.cmd_sweep import load
    from gendergap.cost import DEFAULTS, estimate, load_profile
    from gendergap.sweep import summary
    _, _, jobs = load(argparse.Namespace(config=str(cfg), out=str(out), executor=None, action=None, only=None,
                                         trust_checkpoint=False))
    states = {r["job"]: r["state"] for r in summary(jobs, out)}
    est = {e.step: e for e in estimate(jobs, states, load_profile())}
    # the frozen-ASR time follows its steps; the features' disk is frames x dim x layers x 2 bytes
    cpu = DEFAULTS["cpu"]
    assert est["asr-frozen:F-tiny"].seconds == pytest.approx(300 * cpu["frozen_s_per_step"] + cpu["job_overhead_s"])
    store_estimate = sum(sum(est[n].disk.values()) for n in ("features:F-tiny", "features:FBANK"))
    # run the two extraction steps for real and weigh what they wrote
    for job in jobs:   # in plan order: the registry, then the extractions
        if job.kind in ("merge", "checkpoints", "features"):
            job.run()
    from ssl_pretrain.feature_store import bytes_on_disk
    written = bytes_on_disk(out / "features")
    assert abs(store_estimate - written) <= 0.25 * written, (store_estimate, written)
    # the dry run's store plan: per features step its layers and one layer's size, summing to its disk
    f = est["features:F-tiny"].store
    assert f["layers"] > 1 and f["bytes"] == pytest.approx(sum(est["features:F-tiny"].disk.values()))
    assert f["per_layer"] * f["layers"] == pytest.approx(f["bytes"], rel=0.01)
    plan = text[text.index("feature store "):]
    assert re.search(rf"features:F-tiny +{f['layers']} layer\(s\), [\d.]+ [KMGT]?B per layer -> ", plan), plan
    assert re.search(r"^  total +[\d.]+ [KMGT]?B; [\d.]+ [KMGT]?B free on its file system$", plan, re.M), plan


def test_a_plan_that_does_not_fit_is_refused_per_file_system(study, tmp_path, capsys, monkeypatch):
    import gendergap.cost as cost
    root, cfg, data = study
    monkeypatch.setattr(cost, "free_bytes", lambda path: 1000)
    out = tmp_path / "o"
    capsys.readouterr()
    assert main(["sweep", "--config", str(cfg), "--out", str(out), "--dry-run"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("gendergap: error")]
    print(err)
    assert len(err) == 1 and "which has 1 KB free" in err[0] and "--force" in err[0], err
    assert re.search(r"needs \d[\d.]* MB on the file system of", err[0]), err
    assert main(["sweep", "--config", str(cfg), "--out", str(out), "--dry-run", "--force"]) == 0
    captured = capsys.readouterr()
    assert "warning: needs" in captured.out and "cost estimate" in captured.out
    # the store plan says which folder is too small and what to do about it
    assert re.search(r"^  total +[\d.]+ [KMGT]?B; more than the 1 KB free on its file system: store fewer layers",
                     captured.out, re.M), captured.out
    assert not (out / "sweep" / "jobs").exists()


def test_bench_measures_a_profile_the_dry_run_reads(study, tmp_path, capsys):
    import json
    root, cfg, data = study
    profile = tmp_path / "profile.json"
    # an existing profile: the other device's figures and a key of the user's own stay (issue 47)
    gpu = {"extract_gflops": 9000.0, "train_gflops": 3000.0}
    profile.write_text(json.dumps({"devices": {"cuda": gpu}, "cluster": "node-a100-17"}))
    assert main(["bench", "--quick", "--seconds", "0.2", "--device", "cpu", "--out", str(profile)]) == 0
    written = json.loads(profile.read_text())
    assert written["devices"]["cuda"] == gpu and written["cluster"] == "node-a100-17"
    figures = written["devices"]["cpu"]
    assert figures["extract_gflops"] > 0 and figures["train_gflops"] > 0
    assert figures["extract_overhead_s_per_audio_s"] >= 0
    capsys.readouterr()
    assert main(["sweep", "--config", str(cfg), "--out", str(tmp_path / "o"), "--dry-run", "--profile",
                 str(profile)]) == 0
    out = capsys.readouterr().out
    assert f"throughput: measured ({profile})" in out
    from gendergap.cost import DEFAULTS, load_profile
    loaded = load_profile(profile)
    assert loaded["cpu"]["extract_gflops"] == pytest.approx(figures["extract_gflops"])
    assert loaded["cpu"]["frozen_s_per_step"] == DEFAULTS["cpu"]["frozen_s_per_step"]   # not measured: the default


def test_more_threads_than_cores_is_said_by_the_local_dry_run(study, tmp_path, capsys, monkeypatch):
    """Boito's 8-core resources run locally, 2 jobs at once on a 2-core machine: a warning with the
    numbers and what to lower; resources that fit say nothing."""
    import os
    root, cfg, data = study
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    wide = tmp_path / "wide.yaml"
    wide.write_text(cfg.read_text().replace("overrides: [max_steps=300]}",
                                            "overrides: [max_steps=300], resources: {cpus: 8}}"))
    assert main(["sweep", "--config", str(wide), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("warning: jobs ask for up to 8 CPU core(s) each (resources.cpus: their torch threads) and 2 run at once: "
            "16 threads on this machine's 2 core(s)") in out, out
    assert main(["sweep", "--config", str(cfg), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    assert "threads on this machine" not in capsys.readouterr().out
