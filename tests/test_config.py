"""Study configs: the built-in ones validate, and every kind of bad config is refused before
anything runs, with one line naming the file, the line and the fix (exit 2)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import submitit
from pydantic import Field

from corpora.base.errors import UserError
from gendergap import config
from gendergap.config import CONFIG_DIR, TaskBase, load_config, schema_json, schema_text, task_types
from gendergap.plan import plan_jobs
from gendergap.sweep import slurm_parameters
from gendergap.tasks import register_task

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
    names = [j.name for j in jobs]
    by = {j.name: j for j in jobs}
    # five shares x two pretraining runs (the 25 % set's second run never left chance: one): frozen ASR
    # and ST on all nine, once each (the run is the replicate); fine-tuning, the gender set and the
    # probes on each share's first run
    runs = [f"{s}-tiny{r}" for s in ("F", "F75", "B", "F25", "M") for r in ("", "-2") if f"{s}{r}" != "F25-2"]
    firsts = [r for r in runs if not r.endswith("-2")]
    for ck in runs:
        assert f"asr-frozen:{ck}" in names and f"st:{ck}:fr-en" in names and f"features:{ck}" in by
        assert by[f"asr-frozen:{ck}"].kind == "asr-frozen" and by[f"st:{ck}:fr-en"].kind == "st"   # no seeds
        assert (f"asr-e2e:{ck}" in names) == (f"gender-st:{ck}:en-fr" in names) == (f"probes:{ck}" in names) \
            == (ck in firsts), ck
    assert sum(j.kind == "features" for j in jobs) == 10   # the nine checkpoints and FBANK
    position = {n: i for i, n in enumerate(names)}
    for job in jobs:  # dependency order: every job after what it needs
        assert all(position[d] < position[job.name] for d in job.deps)
    assert by["mustshe:F-tiny:en-fr"].deps == ["gender-st:F-tiny:en-fr"]       # ST before MuST-SHE scoring
    # the reference row has no pretraining run: its replicates are three training seeds, pooled
    assert by["st:FBANK:fr-en:seed0"].deps == ["features:FBANK"] and by["st:FBANK:fr-en"].kind == "seeds"
    assert by["asr-frozen:FBANK"].deps == [f"asr-frozen:FBANK:seed{s}" for s in (0, 1, 2)]
    assert "features:F-tiny" in by["asr-frozen:F-tiny"].deps and "features:F-tiny" in by["probes:F-tiny"].deps
    # each task's conditions compared once its rows are in, before the report
    assert by["conditions:asr-frozen"].deps == sorted([f"asr-frozen:{ck}" for ck in runs + ["FBANK"]] + ["checkpoints"])
    assert by["conditions:asr-frozen"].references == ["FBANK"] and by["conditions:st:fr-en"].result_key == "bleu"
    assert (len(by["conditions:st:fr-en"].results["FBANK"]) == 3
            and len(by["conditions:st:fr-en"].results["M-tiny"]) == 1)
    assert {"conditions:asr-e2e", "conditions:asr-frozen", "conditions:st:fr-en"} <= set(by["report"].deps)
    # two runs of a share differ in their pretraining seed only (run 2: the seed rule from 10)
    entries = {e["name"]: e for e in by["checkpoints"].entries}
    assert entries["F-tiny"]["make_up"] == entries["F-tiny-2"]["make_up"] and len(entries) == 9
    # the FBANK reference row: frozen ASR, fr-en ST and probes on its one output, nothing to fine-tune
    assert {"asr-frozen:FBANK", "st:FBANK:fr-en", "probes:FBANK", "features:FBANK"} <= set(names)
    assert not any(n.startswith(("asr-e2e:FBANK", "gender-st:FBANK")) for n in names)
    assert by["st:FBANK:fr-en:seed0"].layer == "0"
    assert not by["probes:FBANK"].random_init and by["probes:F-tiny"].random_init
    assert "FBANK" not in str(by["checkpoints"].entries)   # never registered
    requests = by["features:F-tiny"].requests
    assert sorted((r.corpus, r.layers.spec, str(r.probe_seed)) for r in requests) == [
        ("synth-fr", "1", "None"), ("synth-fr", "all", "0"), ("synth-fr", "all", "None"), ("synth-gender", "1", "None")]
    assert sorted((r.corpus, r.layers.spec, str(r.probe_seed)) for r in by["features:F-tiny-2"].requests) == [
        ("synth-fr", "1", "None"), ("synth-fr", "all", "None")]   # no probes, no gender set on a second run
    # the earlier three-share design stays runnable (its cost is compared with this one's)
    three = {j.name: j for j in plan_jobs(load_config(CONFIG_DIR / "mini-three-shares.yaml"), "/tmp/never-written")}
    assert three["asr-frozen:F-tiny"].deps == [f"asr-frozen:F-tiny:seed{s}" for s in (0, 1, 2)]
    assert sum(j.kind == "features" for j in three.values()) == 4
    # auto without resources.gpus runs on the CPU: a job never takes a GPU it did not ask for
    assert {(j.device, j.precision) for j in jobs if j.kind in ("asr-e2e", "asr-frozen", "st", "probes")} == {
        ("cpu", "fp32")}
    assert set(by["report"].deps) >= {n for n in names if n.startswith(("asr-", "st:", "probes:", "mustshe:"))
                                         and not n.startswith("asr-data") and ":seed" not in n}   # seeds: pooled first
    full = {j.name: j for j in plan_jobs(load_config(CONFIG_DIR / "mini-full.yaml"), "/tmp/never-written")}
    for ck in ("F-tiny", "FBANK"):  # three seeds, then one pooling job under the single-seed name
        for base in (f"asr-frozen:{ck}", f"st:{ck}:fr-en"):
            assert full[base].kind == "seeds"
            assert full[base].deps == [f"{base}:seed{s}" for s in (1, 2, 3)]
            assert full[base].seeds == [1, 2, 3]
    assert "seed=2" in full["asr-frozen:B-tiny:seed2"].overrides
    st2 = full["st:B-tiny:fr-en:seed2"]
    assert st2.train_seed == 2 and st2.subset == "test@seed2" and st2.out.endswith("seed2")
    assert full["mustshe:F-tiny:en-fr"].deps == ["gender-st:F-tiny:en-fr"]  # gender-st keeps one seed
    boito = load_config(CONFIG_DIR / "boito2022.yaml")
    bj = plan_jobs(boito, "/tmp/never-written")
    assert sum(j.kind == "st" for j in bj) == 4 * 3  # 4 feature extractors x fr-en/es/pt, as the study
    assert all(j.resources["gpus"] == 1 for j in bj if j.kind in ("asr-e2e", "st"))


def test_keys_change_downstream_only(tmp_path):
    a = {j.name: j.key for j in plan_jobs(load_config(write(tmp_path, GOOD)), tmp_path / "o")}
    b = {j.name: j.key for j in plan_jobs(load_config(write(tmp_path, GOOD.replace("max_steps=2", "max_steps=3"))),
                                                  tmp_path / "o")}
    changed = {n for n in a if a[n] != b[n]}
    assert changed == {"asr-frozen:F-tiny", "asr-frozen:M-tiny", "conditions:asr-frozen", "mixed-model", "report"}


def test_dry_run_prints_plan_and_writes_nothing(tmp_path):
    r = cli("sweep", "--config", str(CONFIG_DIR / "boito2022.yaml"), "--out", str(tmp_path / "o"), "--dry-run",
            "--verbose")
    # the plan is printed (with --verbose, each step's fields), then the inputs are checked: each /path/to/...
    # placeholder is a problem (exit 2)
    problems = [x for x in r.stderr.splitlines() if x.startswith(str(CONFIG_DIR / "boito2022.yaml") + ":")]
    assert r.returncode == 2 and f"{len(problems)} problem(s) with the study's inputs" in r.stderr, r.stderr
    assert all("/path/to/" in x for x in problems) and any(": corpus.table: " in x for x in problems), r.stderr
    assert ("43 jobs" in r.stdout and "conditions:fr-pt-st:fr-pt" in r.stdout and "st:LB-3K-Large:fr-pt" in r.stdout
            and "StStep(task_type='st', ckpt='LB-3K-Large'" in r.stdout and "preset='xs'" in r.stdout)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("edit, line, words", [
    (lambda t: t.replace("  asr-frozen: {corpus", "  asr-frozen: {corpsu"), 8,
     ["unknown key 'corpsu'", "did you mean 'corpus'"]),
    (lambda t: t.replace("checkpoints: [F-tiny]", "checkpoints: [X-tiny]"), 9,
     ["unknown checkpoint 'X-tiny'", "F-tiny, M-tiny"]),
    (lambda t: t.replace("seed", "seed") + "sed: 3\n", 10, ["unknown key 'sed'", "did you mean 'seed'"]),
    (lambda t: t + "executor: {name: cloud}\n", 10, ["'executor.name' is 'cloud'", "local, slurm"]),
    (lambda t: t.replace("overrides: [max_steps=2]", "overrides: max_steps=2"), 8,
     ["'tasks.asr-frozen.overrides' must be list"]),
    (lambda t: t.replace("pairs: [fr-en]", "pairs: [fren]"), 9, ["language pair 'fren' is not SRC-TGT"]),
    (lambda t: t.replace("{corpus: synth-fr, overrides: [max_steps=2]}", "{corpus: synth-fr, after: [st]}")
     .replace("checkpoints: [F-tiny]}", "checkpoints: [F-tiny], after: [asr-frozen]}"), 8,
     ["cycle", "asr-frozen", "st"]),
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
    r = cli("sweep", "--config", str(CONFIG_DIR / "boito2022.yaml"), "--out", str(tmp_path / "o"), "--executor",
            "local")
    assert r.returncode == 2 and "boito2022.yaml:" in r.stderr and "does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_schema_documents_every_key():
    r = cli("sweep", "--schema")
    assert r.returncode == 0
    for key in ("corpus:", "synth:", "pretraining:", "checkpoints:", "pretrained_on:", "tasks:", "overrides:",
                "pairs:", "mustshe:", "resources", "time_min:", "executor:", "parallel:", "bootstrap:"):
        assert key in r.stdout, key


def test_trust_checkpoints_reaches_every_job_that_loads_one(tmp_path):
    # the command line's --trust-checkpoint (cmd_sweep sets StudyConfig.trust); a config cannot say it
    trusted = load_config(write(tmp_path, GOOD))
    trusted.trust = True
    jobs = {j.name: j for j in plan_jobs(trusted, tmp_path / "o")}
    loaders = [j for j in jobs.values() if j.kind in ("asr-e2e", "asr-frozen", "st", "probes")]
    assert loaders and all(j.trust for j in loaders)
    assert all(j.trust for j in jobs.values() if j.kind in ("features", "checkpoints"))
    default = plan_jobs(load_config(write(tmp_path, GOOD)), tmp_path / "o")
    assert not any(getattr(j, "trust", False) for j in default)


def refused(tmp_path, text: str) -> tuple[str, str]:
    """The one line a bad config gives, and its file's name as it starts that line."""
    path = write(tmp_path, text)
    with pytest.raises(UserError) as e:
        load_config(path)
    return str(e.value), str(path)


BLOCK = GOOD + """\
  probes:
    corpus: synth-fr
    resources:
      cpus: 2
      gpus: 0
report:
  bootstrap: 10
"""


@pytest.mark.parametrize("old, new, line, words", [
    # duplicate keys at any depth, reported on the second one's line
    ("      gpus: 0\n", "      gpus: 0\n      cpus: 4\n", 15, ["key 'cpus' appears twice", "first on line 13"]),
    ("  bootstrap: 10\n", "  bootstrap: 10\n  subset: test\n  bootstrap: 20\n", 18, ["key 'bootstrap' appears twice",
                                                                                    "first on line 16"]),
    ("{shipped: tiny-female, pretrained_on: female}", "{shipped: tiny-female, shipped: tiny-male}", 5,
     ["key 'shipped' appears twice", "first on line 5"]),
    # unknown keys, deep in a block mapping, with the closest known key
    ("      gpus: 0\n", "      gpu: 0\n", 14, ["unknown key 'gpu' in 'tasks.probes.resources'", "did you mean 'gpus'"]),
    ("    corpus: synth-fr\n    resources", "    corpus: synth-fr\n    layer: all\n    resources", 12,
     ["unknown key 'layer' in 'tasks.probes'", "did you mean 'layers'"]),
    # wrong types name the key path and its own line; YAML types are kept ("2" is no number, yes no int)
    ("      cpus: 2\n", "      cpus: '2'\n", 13, ["'tasks.probes.resources.cpus' must be int, got str '2'",
                                                 "CPU cores"]),
    ("  bootstrap: 10\n", "  bootstrap: yes\n", 16, ["'report.bootstrap' must be int, got bool True"]),
    ("pairs: [fr-en]", "pairs: [fr-en, 3]", 9, ["'tasks.st.pairs[1]' must be str, got int 3"]),
    ("name: t\n", "name: [t]\n", 1, ["'name' must be str, got list"]),
    ("name: t\n", "name: !python/name:os.system t\n", 1, ["not a plain YAML value", "'!python/name:os.system'"]),
    ("{synth: tiny}", "{synth: huge}", 2, ["'corpus.synth' is 'huge'", "tiny, mini, small"]),
    ("    corpus: synth-fr\n    resources", "    corpus: synth-fr\n    control: 1\n    resources", 12,
     ["'tasks.probes.control' must be bool, got int 1"]),
    ("{corpus: synth-fr, overrides: [max_steps=2]}", "{overrides: [max_steps=2]}", 8,
     ["'tasks.asr-frozen.corpus' is required", "table corpus"]),
    # checks of one entry, kept from the hand-written validator
    ("      gpus: 0\n", "      gpus: 0\n    device: cuda:x\n", 15, ["task 'probes': device 'cuda:x'", "cuda:N"]),
    ("      gpus: 0\n", "      gpus: 0\n    device: cuda\n", 10, ["task 'probes': runs on cuda but asks for no GPU"]),
    ("checkpoints: [F-tiny]}", "checkpoints: [F-tiny], precision: bf16}", 9,
     ["task 'st': fairseq cannot train in bf16"]),
    ("overrides: [max_steps=2]", "overrides: [max_steps]", 8,
     ["task 'asr-frozen': override 'max_steps' is not KEY=VALUE"]),
    ("{shipped: tiny-female, pretrained_on: female}", "{pretrained_on: female}", 5,
     ["checkpoint 'F-tiny': needs exactly one of shipped, path, registered, pretrain, baseline (has none)"]),
    ("report:\n", "executor: {array_parallelism: 0}\nreport:\n", 15,
     ["'executor.array_parallelism': must be 1 or more"]),
])
def test_config_errors_name_the_key_and_its_line(tmp_path, old, new, line, words):
    assert old in BLOCK
    msg, path = refused(tmp_path, BLOCK.replace(old, new, 1))
    assert msg.startswith(f"{path}:{line}: ") and msg.count("\n") == 0, msg
    for w in words:
        assert w in msg, msg


def test_null_means_the_default_and_defaults_fill_every_key(tmp_path):
    cfg = load_config(write(tmp_path, BLOCK.replace("  bootstrap: 10", "  bootstrap: null")
                            + "executor: {partition: null, parallel: 3}\n"))
    assert cfg.data["report"] == {"bootstrap": 1000, "subset": "test", "equivalence_margin": None}
    assert cfg.data["executor"] == {"name": "local", "parallel": 3, "partition": None, "account": None,
                                    "qos": None, "constraint": None, "setup": [], "array_parallelism": None}
    assert cfg.tasks["probes"] == {"type": "probes", "checkpoints": None, "after": [], "device": "auto",
                                   "precision": "fp32",
                                   "resources": {"cpus": 2, "mem_gb": 4, "gpus": 0, "time_min": 60},
                                   "corpus": "synth-fr", "layers": "all", "probes": ["attention", "mean"],
                                   "control": True, "random_init": True}
    assert cfg.lines == {"checkpoints.F-tiny": 5, "checkpoints.M-tiny": 6, "tasks.asr-frozen": 8, "tasks.st": 9,
                         "tasks.probes": 10}


def _schema_block(text: str, header: str) -> str:
    """The lines of schema_text under ``header`` (indented deeper), up to the next header."""
    lines = text.splitlines()
    start = lines.index(header)
    depth = len(header) - len(header.lstrip())
    block = []
    for ln in lines[start + 1:]:
        if len(ln) - len(ln.lstrip()) <= depth:
            break
        block.append(ln.strip())
    return "\n".join(block)


def test_schema_text_lists_every_field_of_every_task_type():
    text = schema_text()
    common = _schema_block(text, "  every task takes:")
    assert "type: str, default None (asr-e2e|asr-frozen|st|gender-st|probes|asr-released)" in common
    assert "time_min: int, default 60 -- time limit per job, minutes (SLURM)" in common
    assert set(task_types()) >= {"asr-e2e", "asr-frozen", "st", "gender-st", "probes"}
    for type_ in task_types():
        model = config.TASKS[type_].schema
        own = _schema_block(text, f"  <name> (type {type_}) also takes:")
        for name, field in model.model_fields.items():
            assert f"{name}: " in own or f"{name}: " in common or f"{name}:  " in common, (type_, name)
            if field.description and name not in TaskBase.model_fields:
                assert f"{name}: " in own and field.description in own, (type_, name)
    assert "pairs: list of str, required -- language pairs" in _schema_block(text, "  <name> (type st) also takes:")
    assert "layer: str/int, default 'all'" in _schema_block(text, "  <name> (type asr-frozen) also takes:")
    assert "  synth: str, default None (tiny|mini|small)" in text and "name: str, default 'study'" in text


class ToyTask(TaskBase):
    """A task type declared outside gendergap/config*.py, as a step module would."""
    corpus: str = Field(description="toy corpus")
    rounds: int = Field(3, description="how many toy rounds")
    tag: str | None = Field(None, description="a free toy tag")


def plan_toy(g, name, t) -> None:
    """A toy planner: adds no step."""


@pytest.fixture
def toy_registered():
    task_types()   # the built-in types first
    saved = dict(config.TASKS)   # the one registry (gendergap.tasks), restored after this test
    register_task("toy", ToyTask, plan_toy)
    yield ToyTask
    config.TASKS.clear()
    config.TASKS.update(saved)


def test_a_task_type_registered_from_outside(tmp_path, toy_registered):
    cfg = load_config(write(tmp_path, GOOD + "  toy: {corpus: synth-fr, rounds: 5}\n"
                                             "  toy2: {type: toy, corpus: synth-gender, checkpoints: [M-tiny]}\n"))
    assert cfg.tasks["toy"] == {"type": "toy", "checkpoints": None, "after": [], "device": "auto", "precision": "fp32",
                                "resources": {"cpus": 1, "mem_gb": 4, "gpus": 0, "time_min": 60},
                                "corpus": "synth-fr", "rounds": 5, "tag": None}
    assert cfg.tasks["toy2"]["type"] == "toy" and cfg.tasks["toy2"]["rounds"] == 3
    assert cfg.lines["tasks.toy2"] == 11
    assert "toy" in task_types() and "toy" not in config.TASK_TYPES   # TASK_TYPES: the built-in ones
    # its keys are checked like the built-in ones', and the shared checks apply to it
    msg, path = refused(tmp_path, GOOD + "  toy: {corpus: synth-fr, round: 5}\n")
    assert msg.startswith(f"{path}:10: unknown key 'round' in 'tasks.toy'") and "did you mean 'rounds'" in msg, msg
    msg, path = refused(tmp_path, GOOD + "  toy: {corpus: synth-fr, rounds: many}\n")
    assert msg.startswith(f"{path}:10: 'tasks.toy.rounds' must be int, got str 'many'") and "toy rounds" in msg
    msg, path = refused(tmp_path, GOOD + "  toy: {corpus: synth-fr, checkpoints: [X]}\n")
    assert msg.startswith(f"{path}:10: task 'toy' refers to unknown checkpoint 'X'"), msg
    # an unknown type is refused, naming every registered one
    msg, path = refused(tmp_path, GOOD + "  mt: {corpus: synth-fr}\n")
    assert msg.startswith(f"{path}:10: task 'mt' has no known type"), msg
    assert "asr-e2e, asr-frozen, st, gender-st, probes, asr-released, toy" in msg
    # the schema lists it, in text and in JSON
    text = schema_text()
    assert "(asr-e2e|asr-frozen|st|gender-st|probes|asr-released|toy)" in text
    toy = _schema_block(text, "  <name> (type toy) also takes:")
    assert toy.splitlines() == ["corpus: str, required -- toy corpus", "rounds: int, default 3 -- how many toy rounds",
                                "tag: str, default None -- a free toy tag"]
    assert "ToyTask" in schema_json()["$defs"]


def test_register_task_refuses_what_would_change_a_config(toy_registered):
    register_task("toy", ToyTask, plan_toy)      # the same type again: nothing changes
    with pytest.raises(ValueError, match="already registered"):
        register_task("st", ToyTask, plan_toy)
    with pytest.raises(ValueError, match="already registered"):
        register_task("toy", ToyTask, lambda g, n, t: None)   # another planner under the name
    with pytest.raises(TypeError, match="TaskBase"):
        register_task("plain", dict, plan_toy)
    with pytest.raises(TypeError, match="planner"):
        register_task("noplan", ToyTask, None)               # a schema without a planner: no such type
    assert config.TASKS["st"].schema.__name__ == "StTask" and "noplan" not in config.TASKS


def test_steps_take_their_device_and_precision_from_the_task(tmp_path):
    """`auto` is the GPU only for a job that asked SLURM for one, else the CPU; a task in another
    precision gets its own features step (the store keys entries by precision)."""
    boito = plan_jobs(load_config(CONFIG_DIR / "boito2022.yaml"), tmp_path / "b")
    models = [j for j in boito if j.kind in ("asr-e2e", "st", "features")]
    assert models and {j.device for j in models} == {"auto"} and all(j.resources["gpus"] == 1 for j in models)
    text = GOOD + "  probes: {corpus: synth-fr, checkpoints: [F-tiny], precision: bf16}\n"
    by = {j.name: j for j in plan_jobs(load_config(write(tmp_path, text)), tmp_path / "o")}
    assert (by["probes:F-tiny"].device, by["probes:F-tiny"].precision) == ("cpu", "bf16")
    bf16 = by["features:F-tiny:bf16"]
    assert (bf16.device, bf16.precision) == ("cpu", "bf16") and [r.probe_seed for r in bf16.requests] == [0]
    assert "features:F-tiny:bf16" in by["probes:F-tiny"].deps and "features:F-tiny" not in by["probes:F-tiny"].deps
    assert all(r.probe_seed is None for r in by["features:F-tiny"].requests)  # fp32: frozen ASR and ST only


def test_a_study_names_checkpoints_registered_by_ckpt_add(tmp_path):
    """`ckpt add` and the study share one registry: a checkpoint `registered: NAME` takes the entry's
    file and Table 3 facts (a fact the config gives wins); what is wrong is one line naming the place."""
    from gendergap.cli import main
    from ssl_pretrain.registry import Registry

    shipped = Path(config.__file__).resolve().parent.parent / "ssl_pretrain" / "shipped" / "tiny-female.safetensors"
    reg = tmp_path / "reg" / "checkpoints.json"
    assert main(["ckpt", "add", "F-mine", str(shipped), "--registry", str(reg), "--hours", "2.5", "--male-pct", "0",
                 "--female-pct", "100", "--unknown-pct", "0"]) == 0
    text = GOOD.replace("checkpoints:\n", "registry: reg/checkpoints.json\ncheckpoints:\n").replace(
        "F-tiny: {shipped: tiny-female, pretrained_on: female}", "F-tiny: {registered: F-mine, unknown_pct: 0.0}")
    cfg = load_config(write(tmp_path, text))
    c = cfg.checkpoints["F-tiny"]
    assert Path(c["path"]) == shipped.resolve() and c["hours"] == 2.5 and c["female_pct"] == 100
    jobs = {j.name: j for j in plan_jobs(cfg, tmp_path / "o")}
    entry = next(e for e in jobs["checkpoints"].entries if e["name"] == "F-tiny")
    assert Path(entry["path"]) == shipped.resolve() and entry["table3"]["hours"] == 2.5
    assert Registry(reg).get("F-mine")["hours"] == 2.5          # read, never written

    msg, path = refused(tmp_path, text.replace("registered: F-mine", "registered: F-other"))
    assert f"{reg.resolve()}: no checkpoint named 'F-other' in the registry (known: F-mine)" in msg
    msg, path = refused(tmp_path, text.replace("registry: reg/checkpoints.json\n", ""))
    assert msg.startswith(f"{path}:5: checkpoint 'F-tiny' is `registered: F-mine`, but the config names no registry")
    msg, _ = refused(tmp_path, text.replace("reg/checkpoints.json", "reg/none.json"))
    assert "cannot read the study's checkpoint registry" in msg and "none.json" in msg
    msg, path = refused(tmp_path, text.replace("{registered: F-mine,", "{registered: F-mine, path: /x.pt,"))
    assert "needs exactly one of shipped, path, registered, pretrain, baseline (has path, registered)" in msg


def test_the_slurm_executor_settings_reach_each_array_sbatch_script(tmp_path):
    """qos, a node constraint and set-up lines from the config's executor section become the
    #SBATCH lines and the set-up block of the script submitit would submit (no running cluster
    needed, but submitit's SLURM executor refuses to start without ``srun`` on PATH;
    tests/test_slurm_sweep.py runs a set-up line on the one-node cluster)."""
    if shutil.which("srun") is None:
        # A real condition, not a flake: where scripts/slurm/install.sh cannot install SLURM (no root
        # or apt), the one-node cluster tests skip with their reason too; under `make test` it runs.
        pytest.skip("submitit's SLURM executor needs srun on PATH (`make test` installs slurm-wlm)")
    cfg = load_config(write(tmp_path, GOOD + "executor: {name: slurm, partition: gpu, account: acc, qos: qos_gpu-t3, "
                                             "constraint: v100-32g, setup: ['module load cuda/12.1', 'export X=1']}\n"))
    job = plan_jobs(cfg, tmp_path / "o")[0]
    ex = submitit.AutoExecutor(folder=tmp_path / "logs", cluster="slurm")
    ex.update_parameters(**slurm_parameters(job.resources, "st", cfg.data["executor"], ["123"]))
    script = ex._executor._make_submission_file_text("python -m job", "uid")
    for line in ("#SBATCH --qos=qos_gpu-t3", "#SBATCH --constraint=v100-32g", "#SBATCH --partition=gpu",
                 "#SBATCH --account=acc", "#SBATCH --dependency=afterok:123"):
        assert line in script.splitlines(), script
    setup = script.split("# setup\n")[1].split("\n\n")[0].splitlines()
    assert setup == ["module load cuda/12.1", "export X=1"], script


def test_study_pretrain_makes_all_nine_runs_again_with_their_own_seeds():
    """`gendergap study --pretrain`: every shipped checkpoint of the built-in study becomes a pretraining
    job on its set; a share's two runs differ in the seed their seed rule starts from (0 and 10)."""
    from gendergap.study import with_pretraining
    jobs = {j.name: j for j in plan_jobs(with_pretraining(load_config(CONFIG_DIR / "mini.yaml")), "/tmp/never-written")}
    pre = {n.split(":", 1)[1]: j for n, j in jobs.items() if j.kind == "pretrain"}
    assert len(pre) == 9
    assert {ck: j.seed for ck, j in pre.items()} == {ck: 10 if ck.endswith("-2") else 0 for ck in pre}
    assert {Path(j.manifest).name for j in pre.values()} == {"female", "f75", "balanced", "f25", "male"}
    assert pre["F75-tiny"].manifest == pre["F75-tiny-2"].manifest and pre["F75-tiny"].key != pre["F75-tiny-2"].key
    assert all(j.updates == 1000 and j.continue_updates == 5000 for j in pre.values())
    assert all(e["pretrain_dir"] and e["path"] is None for e in jobs["checkpoints"].entries)


def test_a_checkpoint_seed_is_an_integer(tmp_path):
    bad = write(tmp_path, GOOD.replace("F-tiny: {shipped: tiny-female, pretrained_on: female}",
                                    "F-tiny: {shipped: tiny-female, pretrained_on: female, seed: ten}"))
    err = cli("sweep", "--config", str(bad), "--out", str(tmp_path / "o"), "--dry-run")
    assert err.returncode == 2 and "seed" in err.stderr and len(err.stderr.strip().splitlines()) == 1, err.stderr


def test_reference_seeds_replicate_the_reference_row_only(tmp_path):
    """`reference_seeds`: FBANK (no pretraining run to replicate) trains once per seed and pools them;
    the pretrained rows keep `seeds` (here none: one run each, the pretraining run the replicate)."""
    text = GOOD.replace("  M-tiny: {shipped: tiny-male, pretrained_on: male}\n",
                        "  M-tiny: {shipped: tiny-male, pretrained_on: male}\n  FBANK: {baseline: fbank}\n")
    text = text.replace("asr-frozen: {corpus: synth-fr, overrides: [max_steps=2]}",
                        "asr-frozen: {corpus: synth-fr, overrides: [max_steps=2], reference_seeds: [4, 5]}")
    text = text.replace("checkpoints: [F-tiny]}", "checkpoints: [F-tiny, FBANK], reference_seeds: [1, 2, 3]}")
    by = {j.name: j for j in plan_jobs(load_config(write(tmp_path, text)), tmp_path / "o")}
    assert by["asr-frozen:F-tiny"].kind == "asr-frozen" and "asr-frozen:F-tiny:seed4" not in by
    assert by["asr-frozen:FBANK"].kind == "seeds" and by["asr-frozen:FBANK"].seeds == [4, 5]
    assert "seed=5" in by["asr-frozen:FBANK:seed5"].overrides
    assert by["st:FBANK:fr-en"].seeds == [1, 2, 3] and by["st:FBANK:fr-en:seed3"].train_seed == 3
    assert by["st:F-tiny:fr-en"].kind == "st"
    assert [len(by["conditions:asr-frozen"].results[c]) for c in ("F-tiny", "M-tiny", "FBANK")] == [1, 1, 2]
    bad = write(tmp_path, text.replace("reference_seeds: [4, 5]", "reference_seeds: [4, 4]"))
    err = cli("sweep", "--config", str(bad), "--out", str(tmp_path / "o"), "--dry-run")
    assert err.returncode == 2 and "distinct" in err.stderr and len(err.stderr.strip().splitlines()) == 1, err.stderr
