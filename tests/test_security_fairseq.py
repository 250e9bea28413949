"""Issue 29, fairseq side: nothing a user is handed runs code through a fairseq subprocess.

Each test makes the hostile file itself: a checkpoint whose pickle runs ``touch MARKER`` when it is
unpickled, or a Python package whose import does the same. The marker must never appear, and the
command must stop with exit 2 and one line naming the file. One tiny ST run (2 fairseq updates)
is trained once for the module and copied where a test needs to spoil it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from corpora.base.errors import UserError
from gendergap.cli import main
from st_helpers import tiny_wav2vec, toy_rows, write_toy_table, write_wavs_for


class Payload:
    """Unpickling it runs a shell command (what a crafted checkpoint does)."""
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def hostile_checkpoint(path: Path, marker: Path) -> Path:
    torch.save({"model": {"w": torch.zeros(2)}, "args": None, "cfg": Payload(marker)}, path)
    return path


def hostile_package(root: Path, marker: Path) -> Path:
    """A folder fairseq's --user-dir / common.user_dir would import."""
    pkg = root / "evil"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return pkg


def one_line(capsys) -> str:
    """The error, in one line (the progress log lines before it aside), no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if " INFO " not in line and " WARNING " not in line]
    assert len(lines) == 1 and lines[0].startswith("gendergap: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A study-like dir holding the SSL model, the feature store and one trained ST run (decoded
    once, so the store holds the test features too); the table and audio lie outside it."""
    root = tmp_path_factory.mktemp("sec")
    rows = toy_rows()
    write_wavs_for(root / "corpus", rows)
    table = write_toy_table(root / "corpus", rows)
    sdir = root / "study"
    tiny_wav2vec(sdir / "w2v")
    train = ["st", "train", "--ckpt", str(sdir / "w2v"), "--layer", "1", "--train", str(table), "--train-split",
             "train", "--valid", str(table), "--valid-split", "valid", "--src", "fr", "--tgt", "en",
             "--out", str(sdir / "st" / "w2v.fr-en"), "--feature-store", str(sdir / "features"), "--preset", "tiny",
             "data.vocab_size=40", "max-update=2", "save-interval-updates=1", "average_last=1"]
    assert main(train) == 0
    run = sdir / "st" / "w2v.fr-en"
    decode = ["st", "decode", "--test", str(table), "--test-split", "test", "--no-score"]
    assert main(decode + ["--model", str(run), "--out", str(root / "first.hyp")]) == 0
    return {"root": root, "dir": sdir, "run": run, "table": table, "train": train, "decode": decode,
            "hyps": (root / "first.hyp").read_text()}


def copy_run(study, tmp_path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(study["run"], dest)
    return dest


def test_st_json_names_its_inputs_relative_to_the_run(study):
    meta = json.loads((study["run"] / "st.json").read_text())
    assert meta["checkpoint"] == "checkpoint_avg.pt"
    assert meta["feature_store"] == "../../features" and meta["ssl_checkpoint"] == "../../w2v"
    assert meta["inputs"]["feature_store"]["abs"] == str(study["dir"] / "features")
    assert len(meta["ssl_sha256"]) == 64


def record_weights(run: Path) -> None:
    """st.json's sha256 record made to match the run dir's files (what whoever hands a crafted run
    dir can do too: the record ties results to a model, it does not stand in for the safe loader)."""
    from downstream_st.train import model_files
    meta = json.loads((run / "st.json").read_text())
    meta["weights"] = model_files(run)
    (run / "st.json").write_text(json.dumps(meta))


def test_decode_refuses_a_hostile_averaged_checkpoint(study, tmp_path, capsys):
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    hostile_checkpoint(run / "checkpoint_avg.pt", marker)
    record_weights(run)
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert f"{run / 'checkpoint_avg.pt'}" in err and "posix.system" in err and "--trust-checkpoint" in err
    assert not marker.exists()
    # the check is what stopped it: trusting the file (the user's own choice) lets fairseq unpickle it
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "t.hyp"), "--trust-checkpoint"]) == 2
    assert marker.exists()



def test_decode_refuses_a_checkpoint_of_another_shape_before_fairseq_runs(study, tmp_path, capsys):
    """A plain tensors file where the averaged model should be: fairseq's own load failed in its log
    (KeyError 'best_loss'); it is one line naming the file, before any process starts."""
    run = copy_run(study, tmp_path)
    torch.save({"weights": torch.zeros(2)}, run / "checkpoint_avg.pt")
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert f"{run / 'checkpoint_avg.pt'}" in err and "is not a fairseq checkpoint" in err
    assert not (tmp_path / "h.hyp.work" / "generate.log").exists()


def test_train_resume_refuses_a_hostile_last_checkpoint(study, tmp_path, capsys):
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    hostile_checkpoint(run / "checkpoints" / "checkpoint_last.pt", marker)
    args = [a if a != str(study["run"]) else str(run) for a in study["train"]]
    capsys.readouterr()
    assert main(args + ["max-update=3"]) == 2
    err = one_line(capsys)
    assert str(run / "checkpoints" / "checkpoint_last.pt") in err and "posix.system" in err
    assert not marker.exists()


@pytest.mark.parametrize("override", ["user-dir={pkg}", "restore-file={ckpt}", "decode.user-dir={pkg}",
                                      "finetune-from-model={ckpt}"])
def test_st_overrides_that_load_code_or_files_are_refused(study, tmp_path, capsys, override):
    marker = tmp_path / "MARKER"
    item = override.format(pkg=hostile_package(tmp_path, marker), ckpt=hostile_checkpoint(tmp_path / "e.pt", marker))
    args = [a if a != str(study["run"]) else str(tmp_path / "new") for a in study["train"]]
    capsys.readouterr()
    assert main(args + [item]) == 2
    err = one_line(capsys)
    assert item in err and "--trust-checkpoint" in err
    assert not marker.exists() and not (tmp_path / "new").exists()


def test_st_json_decode_flags_are_an_allowlist(study, tmp_path, capsys):
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    meta = json.loads((run / "st.json").read_text())
    meta["preset"]["decode"]["user-dir"] = str(hostile_package(tmp_path, marker))
    (run / "st.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert str(run / "st.json") in err and "--user-dir" in err
    assert not marker.exists()


def test_study_config_st_overrides_are_refused_at_their_line(tmp_path):
    from gendergap.config import load_config
    marker = tmp_path / "MARKER"
    pkg = hostile_package(tmp_path, marker)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\ncorpus: {synth: tiny}\npretraining: {corpus: synth-fr, sets: {female: F, male: M}}\n"
                   "checkpoints:\n  F-tiny: {shipped: tiny-female, pretrained_on: female}\ntasks:\n"
                   f"  st: {{corpus: synth-fr, pairs: [fr-en], overrides: [max-update=5, user-dir={pkg}]}}\n")
    with pytest.raises(UserError) as e:
        load_config(cfg)
    assert str(e.value).startswith(f"{cfg}:7: ") and "--user-dir" in str(e.value), str(e.value)
    assert not marker.exists()


def test_copied_study_decodes_from_the_copy_alone(study, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(study["dir"], copy)
    moved_away = tmp_path / "gone"
    os.rename(study["dir"], moved_away)   # the original is gone (put back after: the module shares it)
    try:
        out = tmp_path / "c.hyp"
        assert main(study["decode"] + ["--model", str(copy / "st" / "w2v.fr-en"), "--out", str(out)]) == 0
        assert out.read_text() == study["hyps"]
        log = (tmp_path / "c.hyp.work" / "generate.log").read_text()
        assert str(copy / "st" / "w2v.fr-en" / "checkpoint_avg.pt") in log and str(study["dir"]) not in log
        assert not study["dir"].exists()   # nothing was recreated at the original's place
    finally:
        os.rename(moved_away, study["dir"])


def test_a_checkpoint_name_meaning_another_model_is_refused(study, tmp_path, capsys):
    run = copy_run(study, tmp_path)
    meta = json.loads((run / "st.json").read_text())
    meta["ssl_sha256"] = "0" * 64   # as if ../../w2v had since been replaced by another model
    (run / "st.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert "000000000000" in err and "trained on features" in err


# --- issue 60: values, not only names ----------------------------------------------------------
# An allowed flag's value went onto fairseq's command line as a word of its own: the value
# "--user-dir=PKG" is then a flag, and fairseq's options.get_parser pre-parses --user-dir over the whole
# argv and imports PKG before anything else. Each route below hands such a value to an allowed flag.

ROOT = Path(__file__).resolve().parent.parent


def _st_json(run: Path, section: str, flag: str, value) -> Path:
    meta = json.loads((run / "st.json").read_text())
    meta["preset"][section][flag] = value
    (run / "st.json").write_text(json.dumps(meta))
    return run / "st.json"


def route_st_json(study, tmp_path, capsys, value):
    """(1) a handed run dir's st.json decoding flag, through `st decode`."""
    run = copy_run(study, tmp_path)
    source = _st_json(run, "decode", "beam", value)
    rc = main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")])
    return rc, None, [str(source), "--beam", "--trust-checkpoint"]


def route_profile(study, tmp_path, capsys, value):
    """(2) benchmarks/profile_st_train.py rebuilding a handed run's fairseq-train command."""
    run = copy_run(study, tmp_path)
    source = _st_json(run, "train", "lr", value)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_st_train.py"), "--run", str(run),
                        "--updates", "1"], capture_output=True, text=True, env=env, timeout=600)
    err = "\n".join(line for line in p.stderr.strip().splitlines() if "INFO" not in line and "WARNING" not in line)
    return p.returncode, err, [str(source), "--lr"]


def route_preset_file(study, tmp_path, capsys, value):
    """(3) `st train --preset FILE`: a preset file handed with a study."""
    import yaml
    preset = yaml.safe_load((ROOT / "downstream_st" / "presets" / "tiny.yaml").read_text())
    preset["train"]["seed"] = value
    path = tmp_path / "handed.yaml"
    path.write_text(yaml.safe_dump(preset))
    args = [a if a != str(study["run"]) else str(tmp_path / "new") for a in study["train"]]
    args[args.index("--preset") + 1] = str(path)
    rc = main(args)
    return rc, None, [str(path), "--seed", "--trust-checkpoint"]


def route_override(study, tmp_path, capsys, value):
    """(4) a `key=value` override on the command line."""
    args = [a if a != str(study["run"]) else str(tmp_path / "new") for a in study["train"]]
    rc = main(args + [f"clip-norm={value}"])
    return rc, None, [f"clip-norm={value}", "--clip-norm", "--trust-checkpoint"]


def route_study_config(study, tmp_path, capsys, value):
    """(5) a study config's `overrides:`: the dry run refuses what the real sweep would run."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\ncorpus: {synth: tiny}\npretraining: {corpus: synth-fr, sets: {female: F, male: M}}\n"
                   "checkpoints:\n  F-tiny: {shipped: tiny-female, pretrained_on: female}\ntasks:\n"
                   f"  st: {{corpus: synth-fr, pairs: [fr-en], overrides: [max-update=5, 'lr={value}']}}\n")
    rc = main(["sweep", "--config", str(cfg), "--dry-run", "--out", str(tmp_path / "study")])
    return rc, None, [f"{cfg}:7: ", "--lr"]


@pytest.mark.parametrize("route", [route_st_json, route_profile, route_preset_file, route_override,
                                   route_study_config], ids=lambda r: r.__name__[len("route_"):])
def test_a_flag_value_that_is_a_flag_is_refused_on_every_route(study, tmp_path, capsys, route):
    marker = tmp_path / "MARKER"
    value = f"--user-dir={hostile_package(tmp_path, marker)}"
    capsys.readouterr()
    rc, err, words = route(study, tmp_path, capsys, value)   # err: None when it went to capsys
    assert not marker.exists(), "fairseq imported the package a flag's value named"
    assert rc == 2, err
    err = one_line(capsys) if err is None else err
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err
    assert not (tmp_path / "new").exists() and not (tmp_path / "study").exists()


@pytest.mark.parametrize("item, says", [
    ("adam-betas=__import__('os').system('touch {marker}')", "list of numbers"),   # fairseq eval()s it
    ("arch=../{marker}", "registered name"), ("lr={marker}", "number"), ("decode.beam=5 --user-dir x", "integer"),
    ("conv-kernel-sizes=5,5;x", "integers joined by commas"), ("log-format=html", "json|none|simple|tqdm"),
    ("cpu=1", "true or false"), ("data.vocab_type=../../x", "unigram|bpe|char|word"), ("average_last=x", "integer")])
def test_each_flag_value_is_checked_against_its_type(tmp_path, item, says):
    from downstream_st.presets import apply_overrides, load_preset
    with pytest.raises(UserError) as e:
        apply_overrides(load_preset("tiny"), [item.format(marker=tmp_path / "MARKER")])
    assert says in str(e.value), str(e.value)
    # only a fairseq flag's check is lifted by --trust-checkpoint (a data option or gendergap's own
    # number of the wrong type is wrong whatever the source)
    assert ("--trust-checkpoint" in str(e.value)) == (not item.startswith(("data.", "average_last"))), str(e.value)


def test_every_flag_and_preset_passes_fairseqs_own_parser_as_one_word(monkeypatch):
    """The shipped presets pass the table; each flag of the table, with a value of its type, is parsed
    by fairseq 0.12's own argparse in the joined --flag=value form (a list too: --adam-betas=(0.9, 0.98))."""
    from fairseq import options

    from downstream_st.fairseq_flags import FLAGS, FLOATS, INT_CSV, INTS, NAME, SWITCH, as_flags, flag_problem
    from downstream_st.presets import apply_overrides, load_preset, preset_names
    for name in preset_names():
        apply_overrides(load_preset(name), [])
    sample = {FLOATS: "(0.9, 0.98)", INTS: "[8]", INT_CSV: "5,5", SWITCH: True, NAME: "adam"}
    names = {"arch": "s2t_transformer_xs", "criterion": "label_smoothed_cross_entropy_with_ctc",
             "lr-scheduler": "inverse_sqrt", "best-checkpoint-metric": "loss", "lr": "[0.001]"}
    # not flags of these tools in fairseq 0.12 (min-lr, share-all-embeddings: other schedulers and
    # architectures), or needing a GPU (fp16, amp) or several processes
    absent = {"min-lr", "share-all-embeddings", "fp16", "memory-efficient-fp16", "amp", "distributed-world-size"}
    sections = {"train": {}, "decode": {}}
    for flag, (kind, where) in FLAGS.items():
        value = names.get(flag, sample.get(kind, 1 if kind.says == "an integer" else 0.5))
        if kind.says.startswith("one of"):
            value = kind.says.split()[-1].split("|")[0]
        for section in where:
            assert flag_problem(section, flag, value) is None, (flag, value)
            if flag not in absent:
                sections[section][flag] = value
    words = {k: as_flags(v) for k, v in sections.items()}
    assert all(w.startswith("--") for ws in words.values() for w in ws) and "--adam-betas=(0.9, 0.98)" in words["train"]
    monkeypatch.setattr(sys, "argv", ["fairseq"])   # options.get_parser pre-parses sys.argv for --user-dir
    train = options.parse_args_and_arch(options.get_training_parser(default_task="speech_to_text"),
                                        input_args=["data", "--task", "speech_to_text", *words["train"]])
    generate = options.parse_args_and_arch(options.get_generation_parser(default_task="speech_to_text"),
                                           input_args=["data", "--task", "speech_to_text", "--path", "x.pt",
                                                       *words["decode"]])
    assert train.adam_betas == "(0.9, 0.98)" and train.update_freq == [8] and train.conv_kernel_sizes == "5,5"
    assert train.lr == [0.001] and train.report_accuracy is True and train.arch == "s2t_transformer_xs"
    assert generate.beam == 1 and generate.lenpen == 0.5 and generate.sampling is True


def test_a_trusted_value_never_becomes_a_flag_of_its_own(study, tmp_path, capsys):
    """--trust-checkpoint lets any name and value through, but a value stays its flag's: the
    command holds --beam=--user-dir=PKG (fairseq refuses it as --beam's), never --user-dir=PKG."""
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    _st_json(run, "decode", "beam", f"--user-dir={hostile_package(tmp_path, marker)}")
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp"), "--trust-checkpoint"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]   # after the feature extraction's progress
    assert last.startswith("gendergap: error: ") and "fairseq exited" in last
    assert not marker.exists()
    log = (tmp_path / "h.hyp.work" / "generate.log").read_text()
    assert "argument --beam: invalid int value: '--user-dir=" in log


# --- a result belongs to its model: st.json records what decoding loads, by content -------------

def test_st_json_records_the_sha256_of_what_decoding_loads(study):
    import hashlib
    weights = json.loads((study["run"] / "st.json").read_text())["weights"]
    assert weights["checkpoint_avg.pt"] == hashlib.sha256((study["run"] / "checkpoint_avg.pt").read_bytes()).hexdigest()
    assert "data/config.yaml" in weights and any(n.endswith(".model") for n in weights) and len(weights) == 4


def _other_checkpoint(run: Path) -> None:
    """checkpoint_avg.pt replaced by a clean, loadable model of the same shape, other weights."""
    state = torch.load(run / "checkpoint_avg.pt", weights_only=False)   # the test's own file
    key = next(k for k, v in state["model"].items() if v.is_floating_point())
    state["model"][key] = state["model"][key] + 1e-3
    torch.save(state, run / "checkpoint_avg.pt")


def _other_vocabulary(run: Path) -> None:
    vocab = next((run / "data").glob("spm_*.txt"))
    lines = vocab.read_text().splitlines()
    vocab.write_text("\n".join(lines[1:] + lines[:1]) + "\n")   # the same pieces, other ids


@pytest.mark.parametrize("swap, name", [(_other_checkpoint, "checkpoint_avg.pt"), (_other_vocabulary, "data/spm_")],
                         ids=["checkpoint", "vocabulary"])
def test_decode_refuses_files_other_than_the_ones_the_run_trained(study, tmp_path, capsys, swap, name):
    run = copy_run(study, tmp_path)
    swap(run)
    capsys.readouterr()
    for trust in ([], ["--trust-checkpoint"]):   # the record is checked whatever the flags
        assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp"), *trust]) == 2
        err = one_line(capsys)
        assert str(run / "st.json") in err and name in err and "is not the file this run trained" in err, err
    assert not (tmp_path / "h.hyp.work").exists()   # refused before features or fairseq


def test_a_run_without_the_record_decodes_only_when_trusted(study, tmp_path, capsys):
    run = copy_run(study, tmp_path)
    meta = json.loads((run / "st.json").read_text())
    meta.pop("weights", None)   # a run trained before the record was kept
    (run / "st.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert "records no sha256" in err and "st train" in err and "--trust-checkpoint" in err
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "t.hyp"), "--trust-checkpoint"]) == 0
    assert len((tmp_path / "t.hyp").read_text().splitlines()) == len(study["hyps"].splitlines())


# --- pretraining -----------------------------------------------------------------------------------

@pytest.fixture()
def manifest(tmp_path):
    from ssl_helpers import write_manifest, write_wavs
    return write_manifest(tmp_path, write_wavs(tmp_path, n=4), tmp_path / "m")


@pytest.mark.parametrize("override", ["common.user_dir={pkg}", "checkpoint.restore_file={ckpt}",
                                      "+checkpoint.finetune_from_model={ckpt}", "model.w2v_path={ckpt}",
                                      "hydra.callbacks.x._target_=os.system", "--config-dir={pkg}"])
def test_pretrain_overrides_that_load_code_or_files_are_refused(tmp_path, manifest, capsys, override):
    marker = tmp_path / "MARKER"
    item = override.format(pkg=hostile_package(tmp_path, marker), ckpt=hostile_checkpoint(tmp_path / "e.pt", marker))
    capsys.readouterr()
    assert main(["pretrain", "run", "--manifest", str(manifest), "--out", str(tmp_path / "o"), "--", item]) == 2
    err = one_line(capsys)
    assert item in err and "--trust-checkpoint" in err
    assert not marker.exists() and not (tmp_path / "o" / "train.log").exists()


@pytest.mark.parametrize("key", ["common.log_file", "common.tensorboard_logdir", "common.wandb_project"])
def test_pretrain_overrides_that_write_outside_the_run_are_refused(tmp_path, manifest, capsys, key):
    """fairseq appends its log to common.log_file wherever it points (a user's ~/.bashrc): a config or
    override may not choose where a run writes (issue 60)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    capsys.readouterr()
    assert main(["pretrain", "run", "--manifest", str(manifest), "--out", str(tmp_path / "o"), "--",
                 f"{key}={victim}", "optimization.max_update=1"]) == 2
    err = one_line(capsys)
    assert key in err and "write outside the run" in err
    assert victim.read_text() == "mine\n" and not (tmp_path / "o" / "train.log").exists()


@pytest.mark.parametrize("override", [
    "common={{user_dir:{pkg}}}",   # a dict value sets common.user_dir past the key check
    "optimizer.adam_betas='__import__(\"os\").system(\"touch {marker}\")'",   # fairseq eval()s it
    "model.conv_feature_layers='[(64,10,5)]+[__import__(\"os\").system(\"touch {marker}\")]'",
    "common.seed=${{oc.create:x}}"])   # an interpolation (oc.create builds a dict such as the first)
def test_pretrain_override_values_that_run_code_are_refused(tmp_path, manifest, capsys, override):
    marker = tmp_path / "MARKER"
    item = override.format(pkg=hostile_package(tmp_path, marker), marker=marker)
    capsys.readouterr()
    rc = main(["pretrain", "run", "--manifest", str(manifest), "--out", str(tmp_path / "o"), "--", item,
               "optimization.max_update=1"])
    assert not marker.exists(), "fairseq ran the code a value held"
    assert rc == 2
    err = one_line(capsys)
    assert item.partition("=")[0] in err and "--trust-checkpoint" in err
    assert not (tmp_path / "o" / "train.log").exists()


def test_a_pretrain_preset_file_whose_value_runs_code_is_refused(tmp_path, manifest, capsys):
    import yaml
    marker = tmp_path / "MARKER"
    preset = yaml.safe_load((ROOT / "ssl_pretrain" / "presets" / "tiny.yaml").read_text())
    preset["optimizer"]["adam_betas"] = f"__import__('os').system('touch {marker}')"
    preset["optimization"]["max_update"] = 1
    path = tmp_path / "handed.yaml"
    path.write_text(yaml.safe_dump(preset))
    capsys.readouterr()
    rc = main(["pretrain", "run", "--preset", str(path), "--manifest", str(manifest), "--out", str(tmp_path / "o")])
    assert not marker.exists(), "fairseq ran the code a value held"
    assert rc == 2
    err = one_line(capsys)
    assert str(path) in err and "optimizer.adam_betas" in err and "--trust-checkpoint" in err
    assert not (tmp_path / "o" / "train.log").exists()


def test_pretrain_refuses_a_hostile_resume_checkpoint_before_fairseq_starts(tmp_path, manifest, capsys):
    marker = tmp_path / "MARKER"
    (tmp_path / "o" / "checkpoints").mkdir(parents=True)
    hostile_checkpoint(tmp_path / "o" / "checkpoints" / "checkpoint_last.pt", marker)
    capsys.readouterr()
    assert main(["pretrain", "run", "--manifest", str(manifest), "--out", str(tmp_path / "o"),
                 "optimization.max_update=1"]) == 2
    err = one_line(capsys)
    assert str(tmp_path / "o" / "checkpoints" / "checkpoint_last.pt") in err and "posix.system" in err
    assert not marker.exists() and not (tmp_path / "o" / "train.log").exists()


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"cfg": {"model": {"_name": "wav2vec2"}}, "model": {"w": torch.randn(3, generator=g)}}


def test_init_from_always_wins_over_a_stale_init_pt(tmp_path, capsys):
    from ssl_pretrain.run import warm_start
    out, marker = tmp_path / "o", tmp_path / "MARKER"
    out.mkdir()
    hostile_checkpoint(out / "init.pt", marker)   # a stale (here crafted) init.pt, no record of its source
    warm_start(_state(1), out, source="A.safetensors")
    assert torch.equal(torch.load(out / "init.pt", weights_only=True)["model"]["w"], _state(1)["model"]["w"])
    warm_start(_state(2), out, source="B.safetensors")   # a failed run from A, then --init-from B
    assert torch.equal(torch.load(out / "init.pt", weights_only=True)["model"]["w"], _state(2)["model"]["w"])
    assert json.loads((out / "init.json").read_text())["source"] == "B.safetensors"
    assert not marker.exists()
    # once B's run has a checkpoint_last.pt, starting it over from A is refused, naming both
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "checkpoint_last.pt").write_bytes(b"x")
    with pytest.raises(UserError) as e:
        warm_start(_state(1), out, source="A.safetensors")
    b_sha = json.loads((out / "init.json").read_text())["sha256"][:12]
    assert "B.safetensors" in str(e.value) and b_sha in str(e.value) and "A.safetensors" in str(e.value)


def test_fairseq_runs_weights_only_unless_trusted(tmp_path, monkeypatch):
    """The env var that switches torch's check off reaches a fairseq process only with trust."""
    from ssl_pretrain.run import start_fairseq
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")   # even when the caller's shell sets it
    probe = [sys.executable, "-c", "import os; print('VAR', os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'))"]
    for trust, want in ((False, "VAR None"), (True, "VAR 1")):
        log = tmp_path / f"{trust}.log"
        assert start_fairseq(probe, log, trust=trust).wait() == 0
        assert want in log.read_text()
