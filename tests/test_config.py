"""Study configs: the built-in ones validate, and every kind of bad config is refused before
anything runs, with one line naming the file, the line and the fix (exit 2)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpora.base.errors import UserError
from gendergap.config import CONFIG_DIR, load_config
from gendergap.plan import plan_jobs

GOOD = """\
name: t
corpus: {synth: tiny}
pretraining: {corpus: synth-fr, sets: {female: F, male: M}}
checkpoints:
  F-tiny: {shipped: tiny-female, pretrained_on: female}
  M-tiny: {shipped: tiny-male, pretrained_on: male}
tasks:
  asr-frozen: {corpus: synth-fr, overrides: [max_steps=2]}
  st: {corpus: synth-fr, pairs: [fr-en], checkpoints: [F-tiny]}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gendergap.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_builtin_configs_validate_and_plan():
    mini = load_config(CONFIG_DIR / "mini.yaml")
    jobs = plan_jobs(mini, "/tmp/never-written")
    names = [j["name"] for j in jobs]
    # three checkpoints x (e2e, frozen, st, gender-st, mustshe, probes) + their data and features
    for ck in ("F-tiny", "M-tiny", "B-tiny"):
        for prefix in ("asr-e2e:", "asr-frozen:", "probes:", "features:"):
            assert any(n.startswith(prefix + ck) for n in names), (prefix, ck)
        assert f"st:{ck}:fr-en" in names and f"gender-st:{ck}:en-fr" in names and f"mustshe:{ck}:en-fr" in names
    position = {n: i for i, n in enumerate(names)}
    for job in jobs:  # dependency order: every job after what it needs
        assert all(position[d] < position[job["name"]] for d in job["deps"])
    by = {j["name"]: j for j in jobs}
    assert by["mustshe:F-tiny:en-fr"]["deps"] == ["gender-st:F-tiny:en-fr"]       # ST before MuST-SHE scoring
    # one extraction per checkpoint feeds every frozen-feature task: every layer of both corpora
    assert by["st:F-tiny:fr-en"]["deps"] == ["features:F-tiny"]
    assert "features:F-tiny" in by["asr-frozen:F-tiny"]["deps"] and "features:F-tiny" in by["probes:F-tiny"]["deps"]
    assert sum(j["kind"] == "features" for j in jobs) == 4  # the three checkpoints and FBANK
    # the FBANK reference row: frozen ASR, fr-en ST and probes on its one output, nothing to fine-tune
    assert {"asr-frozen:FBANK", "st:FBANK:fr-en", "probes:FBANK", "features:FBANK"} <= set(names)
    assert not any(n.startswith(("asr-e2e:FBANK", "gender-st:FBANK")) for n in names)
    st_fbank = by["st:FBANK:fr-en"]["steps"][0]["cli"]
    assert st_fbank[st_fbank.index("--layer") + 1] == "0"
    assert "--no-random-init" in by["probes:FBANK"]["steps"][0]["cli"]
    assert "--no-random-init" not in by["probes:F-tiny"]["steps"][0]["cli"]
    assert "FBANK" not in str(by["checkpoints"]["steps"])   # never registered
    requests = by["features:F-tiny"]["steps"][0]["kwargs"]["requests"]
    assert sorted((r["corpus"], r["layers"], str(r["probe_seed"])) for r in requests) == [
        ("synth-fr", "1", "None"), ("synth-fr", "all", "0"), ("synth-fr", "all", "None"), ("synth-gender", "1", "None")]
    assert all("--device" in j["steps"][0]["cli"] for j in jobs if j["kind"] in ("asr-e2e", "asr-frozen", "st"))
    assert set(by["report"]["deps"]) >= {n for n in names if n.startswith(("asr-", "st:", "probes:", "mustshe:"))
                                         and not n.startswith("asr-data")}
    full = {j["name"]: j for j in plan_jobs(load_config(CONFIG_DIR / "mini-full.yaml"), "/tmp/never-written")}
    for ck in ("F-tiny", "FBANK"):  # three seeds, then one pooling job under the single-seed name
        for base in (f"asr-frozen:{ck}", f"st:{ck}:fr-en"):
            assert full[base]["kind"] == "seeds"
            assert full[base]["deps"] == [f"{base}:seed{s}" for s in (1, 2, 3)]
            assert full[base]["steps"][0]["kwargs"]["seeds"] == [1, 2, 3]
    assert "seed=2" in full["asr-frozen:B-tiny:seed2"]["steps"][0]["cli"]
    st2 = full["st:B-tiny:fr-en:seed2"]["steps"]
    assert st2[0]["cli"][st2[0]["cli"].index("--seed") + 1] == "2" and "test@seed2" in st2[1]["cli"]
    assert full["mustshe:F-tiny:en-fr"]["deps"] == ["gender-st:F-tiny:en-fr"]  # gender-st keeps one seed
    boito = load_config(CONFIG_DIR / "boito2022.yaml")
    bj = plan_jobs(boito, "/tmp/never-written")
    assert sum(j["kind"] == "st" for j in bj) == 4 * 3  # 4 feature extractors x fr-en/es/pt, as the study
    assert all(j["resources"]["gpus"] == 1 for j in bj if j["kind"] in ("asr-e2e", "st"))


def test_keys_change_downstream_only(tmp_path):
    a = {j["name"]: j["key"] for j in plan_jobs(load_config(write(tmp_path, GOOD)), tmp_path / "o")}
    b = {j["name"]: j["key"] for j in plan_jobs(load_config(write(tmp_path, GOOD.replace("max_steps=2", "max_steps=3"))),
                                                  tmp_path / "o")}
    changed = {n for n in a if a[n] != b[n]}
    assert changed == {"asr-frozen:F-tiny", "asr-frozen:M-tiny", "report"}


def test_dry_run_prints_plan_and_writes_nothing(tmp_path):
    r = cli("sweep", "--config", str(CONFIG_DIR / "boito2022.yaml"), "--out", str(tmp_path / "o"), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "35 jobs" in r.stdout and "st:LB-3K-Large:fr-pt" in r.stdout and "--preset xs" in r.stdout
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("edit, line, words", [
    (lambda t: t.replace("  asr-frozen: {corpus", "  asr-frozen: {corpsu"), 8, ["unknown key 'corpsu'", "did you mean 'corpus'"]),
    (lambda t: t.replace("checkpoints: [F-tiny]", "checkpoints: [X-tiny]"), 9, ["unknown checkpoint 'X-tiny'", "F-tiny, M-tiny"]),
    (lambda t: t.replace("seed", "seed") + "sed: 3\n", 10, ["unknown key 'sed'", "did you mean 'seed'"]),
    (lambda t: t + "executor: {name: cloud}\n", 10, ["'executor.name' is 'cloud'", "local, slurm"]),
    (lambda t: t.replace("overrides: [max_steps=2]", "overrides: max_steps=2"), 8, ["'tasks.asr-frozen.overrides' must be list"]),
    (lambda t: t.replace("pairs: [fr-en]", "pairs: [fren]"), 9, ["language pair 'fren' is not SRC-TGT"]),
    (lambda t: t.replace("{corpus: synth-fr, overrides: [max_steps=2]}", "{corpus: synth-fr, after: [st]}")
     .replace("checkpoints: [F-tiny]}", "checkpoints: [F-tiny], after: [asr-frozen]}"), 8, ["cycle", "asr-frozen", "st"]),
    (lambda t: t.replace("pretrained_on: female", "pretrained_on: femal"), 5, ["pretraining set 'femal'"]),
    (lambda t: t + "tasks2: {}\n", 10, ["unknown key 'tasks2'", "did you mean 'tasks'"]),
    (lambda t: t.replace("  st: {", "  mt: {"), 9, ["task 'mt' has no known type"]),
    # a second asr-frozen task would silently replace the first (YAML keeps the last key)
    (lambda t: t + "  asr-frozen: {corpus: synth-fr}\n", 10, ["key 'asr-frozen' appears twice", "first on line 8"]),
    (lambda t: t.replace("name: t", "name: t\nname: u"), 2, ["key 'name' appears twice", "first on line 1"]),
    # the filterbank baseline is FBANK, has no model to fine-tune, and seeds are distinct integers
    (lambda t: t.replace("  M-tiny: {shipped: tiny-male, pretrained_on: male}", "  FB: {baseline: fbank}"), 6,
     ["the checkpoint named FBANK", "FBANK: {baseline: fbank}"]),
    (lambda t: t.replace("  M-tiny: {shipped: tiny-male, pretrained_on: male}", "  FBANK: {shipped: tiny-male}"), 6,
     ["the checkpoint named FBANK"]),
    (lambda t: t.replace("  M-tiny: {shipped: tiny-male, pretrained_on: male}", "  FBANK: {baseline: mfcc}"), 6,
     ["'checkpoints.FBANK.baseline' is 'mfcc'", "fbank"]),
    (lambda t: t.replace("M-tiny: {shipped: tiny-male, pretrained_on: male}", "FBANK: {baseline: fbank}")
     + "  asr-e2e: {corpus: synth-fr, checkpoints: [FBANK]}\n", 10, ["fine-tunes 'FBANK'"]),
    (lambda t: t.replace("overrides: [max_steps=2]}", "overrides: [max_steps=2], seeds: [1, 1]}"), 8,
     ["seeds must be a list of distinct integers"]),
])
def test_bad_configs_fail_before_anything_runs(tmp_path, edit, line, words):
    path = write(tmp_path, edit(GOOD))
    with pytest.raises(UserError) as e:
        load_config(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    for w in words:
        assert w in msg, msg
    r = cli("sweep", "--config", str(path), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"{path}:{line}:" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_unavailable_executor_is_refused_before_anything_runs(tmp_path):
    path = write(tmp_path, GOOD)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no sbatch on this PATH
    r = cli("sweep", "--config", str(path), "--out", str(tmp_path / "o"), "--executor", "slurm", env=env)
    assert r.returncode == 2 and "executor 'slurm' is not available here: no `sbatch`" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_missing_inputs_are_refused_before_anything_runs(tmp_path):
    r = cli("sweep", "--config", str(CONFIG_DIR / "boito2022.yaml"), "--out", str(tmp_path / "o"), "--executor", "local")
    assert r.returncode == 2 and "boito2022.yaml:" in r.stderr and "does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_schema_documents_every_key():
    r = cli("sweep", "--schema")
    assert r.returncode == 0
    for key in ("corpus:", "synth:", "pretraining:", "checkpoints:", "pretrained_on:", "tasks:", "overrides:",
                "pairs:", "mustshe:", "resources", "time_min:", "executor:", "parallel:", "bootstrap:"):
        assert key in r.stdout, key


def test_trust_checkpoints_reaches_every_job_that_loads_one(tmp_path):
    trusted = load_config(write(tmp_path, GOOD + "trust_checkpoints: true\n"))
    jobs = {j["name"]: j for j in plan_jobs(trusted, tmp_path / "o")}
    loaders = [j for j in jobs.values() if j["kind"] in ("asr-e2e", "asr-frozen", "st", "probes")]
    assert loaders and all("--trust-checkpoint" in j["steps"][0]["cli"] for j in loaders)
    assert all(j["steps"][0]["kwargs"]["trust"] for j in jobs.values() if j["kind"] in ("features", "checkpoints"))
    default = {j["name"]: j for j in plan_jobs(load_config(write(tmp_path, GOOD)), tmp_path / "o")}
    assert not any("--trust-checkpoint" in str(j["steps"]) for j in default.values())
