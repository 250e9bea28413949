"""The hostile-input suite (issue 37, DESIGN.md "Trust boundary"): one table of hostile inputs by class
(names that become paths, paths read from handed files, special files as outputs or inputs, NaN/inf
and out-of-range numbers), each run through the real command line.

Every case must be refused by corpora.base.boundary's layer: exit 2, exactly one line on stderr
holding the expected words, no marker file, nothing written outside the case's output folder, and
no hang (a per-case timeout). Each case runs the CLI in-process, as a fresh process would show it
(tests/cli_helpers.run_fresh). A new command or input field joins the suite by one CASES entry."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_helpers import run_fresh  # noqa: E402

CONFIG = """name: {study}
corpus: {{synth: tiny}}
checkpoints:
  {ckpt}: {{shipped: tiny-female{extra}}}
tasks:
  {task}: {{type: probes}}
"""


def config(ckpt='F', extra='', task='probes', study='s'):
    """A setup writing a study config whose one checkpoint, task or study name (or Table 3 facts) is hostile."""
    def setup(tmp: Path) -> None:
        (tmp / "study.yaml").write_text(CONFIG.format(ckpt=ckpt, extra=extra, task=task, study=study), encoding="utf-8")
    return setup


def registered(registry: str | None = None, registry_fifo: bool = False):
    """A study config naming its checkpoint from a registry file that is hostile (a FIFO, or JSON
    of another shape)."""
    def setup(tmp: Path) -> None:
        text = CONFIG.format(ckpt="F", extra="", task="probes", study="s").replace(
            "{shipped: tiny-female}", "{registered: F}")
        (tmp / "study.yaml").write_text("registry: reg.json\n" + text, encoding="utf-8")
        if registry_fifo:
            os.mkfifo(tmp / "reg.json")
        else:
            (tmp / "reg.json").write_text(registry, encoding="utf-8")
    return setup


def nothing(tmp: Path) -> None:
    """No file needed: the hostile value is in the arguments."""


def fifo(name: str):
    def setup(tmp: Path) -> None:
        os.mkfifo(tmp / name)
    return setup


def table(audio_fifo: bool = False, column: str | None = None, value: str | None = None):
    """A small real table (manifest_fixtures); a FIFO in place of one wav, or one cell made hostile."""
    def setup(tmp: Path) -> None:
        from manifest_fixtures import write_corpus
        path = write_corpus(tmp / "c", speakers={"f0": "F", "m0": "M"}, utts_per_speaker=1, long_recording=False)
        if audio_fifo:
            wav = tmp / "c" / "wav" / "f0_0.wav"
            wav.unlink()
            os.mkfifo(wav)
        if column:
            lines = path.read_text(encoding="utf-8").splitlines()
            header, row = lines[0].split("\t"), lines[1].split("\t")
            row[header.index(column)] = value
            path.write_text("\n".join([lines[0], "\t".join(row), *lines[2:]]) + "\n", encoding="utf-8")
    return setup


def st_run(vocab: str = "vocab.txt", vocab_fifo: bool = False, st_json: str | None = None, **named):
    """A finished-looking ST run dir whose data/config.yaml names ``vocab`` (a victim beside --out);
    ``named``: st.json keys naming a file outside the run dir (made a FIFO there); ``st_json``: the
    st.json text itself, when that is the hostile file."""
    def setup(tmp: Path) -> None:
        run = tmp / "run"
        (run / "data").mkdir(parents=True)
        (run / "checkpoint_avg.pt").write_bytes(b"not read: the data config is refused first")
        (run / "st.json").write_text(json.dumps({"status": "done", "src_lang": "fr", "tgt_lang": "en",
                                                 "feature_dim": 8, "checkpoint": "checkpoint_avg.pt",
                                                 "preset": {"train": {}}, **named}))
        if st_json is not None:
            (run / "st.json").write_text(st_json)
        for value in named.values():
            os.mkfifo(run / value)
        if named:   # the data config whole, so only the named file is hostile
            (run / "data" / vocab).write_text("a 1\n")
        (run / "data" / "config.yaml").write_text(
            f"vocab_filename: {vocab}\nbpe_tokenizer: {{bpe: sentencepiece, sentencepiece_model: spm.model}}\n")
        (run / "data" / "spm.model").write_bytes(b"x")
        if vocab_fifo:
            os.mkfifo(run / "data" / vocab)
        table()(tmp)
    return setup


def checkpoint_file(text: str | None = None):
    """A study config whose one checkpoint is a file that is no checkpoint: /etc/passwd, or ``text``
    saved as ck.pt (what the run's registering refuses, the dry run refuses too)."""
    def setup(tmp: Path) -> None:
        path = "/etc/passwd"
        if text is not None:
            (tmp / "ck.pt").write_text(text)
            path = str(tmp / "ck.pt")
        config(ckpt="F")(tmp)
        study = tmp / "study.yaml"
        study.write_text(study.read_text().replace("{shipped: tiny-female}", f"{{path: {path}}}"))
    return setup


def wide_tables(extra: int = 1_000):
    """Two real tables, each with ``extra`` extra columns of its own: each is readable, merged they are
    wider than read_table accepts."""
    def setup(tmp: Path) -> None:
        table()(tmp)
        lines = (tmp / "c" / "table.tsv").read_text(encoding="utf-8").splitlines()
        for name in ("a", "b"):
            header = lines[0] + "".join(f"\t{name}{i}" for i in range(extra))
            (tmp / "c" / f"{name}.tsv").write_text("\n".join([header, *(r + "\t" * extra for r in lines[1:])]) + "\n",
                                                   encoding="utf-8")
    return setup


def generic_csv(header_extra: str):
    """A real wav and a CSV for `corpus index --kind generic` whose header ends with ``header_extra``."""
    def setup(tmp: Path) -> None:
        table()(tmp)
        cells = header_extra.count(",") + 1
        (tmp / "g.csv").write_text(f"path,spk,sex,{header_extra}\n{tmp}/c/wav/f0_0.wav,f0,F" + ",1" * cells + "\n",
                                   encoding="utf-8")
    return setup


def kaldi_dir(rate: str = "16000", spk2gender_bytes: int = 0):
    """A Kaldi data dir of one piped recording (duration from utt2dur, rate from the sox command: no
    audio is read); spk2gender a sparse file of ``spk2gender_bytes`` when given."""
    def setup(tmp: Path) -> None:
        d = tmp / "data" / "train"
        d.mkdir(parents=True)
        (d / "wav.scp").write_text(f"r1 sox r1.wav -t wav -r {rate} -c 1 - |\n")
        (d / "utt2spk").write_text("r1 s1\n")
        (d / "utt2dur").write_text("r1 1.5\n")
        (d / "text").write_text("r1 bonjour\n")
        with open(d / "spk2gender", "w") as f:
            f.write("s1 f\n")
            f.truncate(max(spk2gender_bytes, 5))   # sparse: costs no disk
    return setup


SWEEP = ["sweep", "--config", "{tmp}/study.yaml", "--dry-run", "--out", "{out}"]
BUILD = ["manifest", "build", "--table", "{tmp}/c/table.tsv", "--gender", "any", "--out", "{out}/m"]
DECODE = ["st", "decode", "--model", "{tmp}/run", "--test", "{tmp}/c/table.tsv", "--out", "{out}/test.hyp"]

# (id, argv with {tmp} and {out} placeholders, setup writing the hostile input under tmp, words of the error line)
CASES = [
    # names that become paths
    ("config-ckpt-traversal", SWEEP, config(ckpt="../../x"), "path separator"),
    ("config-ckpt-slash", SWEEP, config(ckpt="a/b"), "path separator"),
    ("config-ckpt-tab", SWEEP, config(ckpt='"F\\tx"'), "control or bidi"),
    ("config-ckpt-nul", SWEEP, config(ckpt='"F\\0x"'), "control or bidi"),
    ("config-ckpt-bidi", SWEEP, config(ckpt='"F\\u202ex"'), "control or bidi"),
    ("config-task-traversal", SWEEP, config(task=".."), "task name"),
    ("config-study-name", SWEEP, config(study="../s"), "study name"),
    ("ckpt-add-traversal", ["ckpt", "add", "../../x", "{tmp}/m.pt", "--registry", "{out}/reg.json"], nothing,
     "path separator"),
    ("ckpt-add-bidi", ["ckpt", "add", "F\u202ex", "{tmp}/m.pt", "--registry", "{out}/reg.json"], nothing,
     "control or bidi"),
    ("transcribe-name", ["asr", "transcribe", "--model", "{tmp}", "--table", "{tmp}/t.tsv", "--out", "{out}",
                         "--name", "../../x"], nothing, "path separator"),
    ("st-decode-name", DECODE + ["--name", "a/b"], nothing, "path separator"),
    ("probe-name-tab", ["probe", "run", "--ckpt", "F", "--table", "{tmp}/t.tsv", "--out", "{out}",
                        "--name", "F\tx"], nothing, "control or bidi"),
    # paths read from handed files
    ("st-vocab-traversal", DECODE, st_run(vocab="../../victim.txt"), "path separator"),
    ("st-vocab-fifo", DECODE, st_run(vocab_fifo=True), "not a regular file"),
    ("st-json-registry-fifo", DECODE, st_run(registry="../reg.fifo"), "registry named by st.json"),
    ("st-json-index-fifo", DECODE, st_run(feature_index="../index.fifo"), "feature_index named by st.json"),
    ("st-json-threads-many", DECODE, st_run(st_json=json.dumps({"status": "done", "feature_dim": 8, "preset": {
        "train": {}, "cpu_threads": "many"}})), "'preset.cpu_threads' is wrong"),
    ("st-json-no-preset", DECODE, st_run(st_json=json.dumps({"status": "done", "feature_dim": 8})),
     "st.json's 'preset' is wrong: Field required"),
    ("st-json-preset-no-train", DECODE, st_run(st_json=json.dumps({"status": "done", "feature_dim": 8, "preset": {
        "decode": {}}})), "st.json's 'preset.train' is wrong: Field required"),
    ("st-json-deep", DECODE, st_run(st_json="[" * 100_000 + "]" * 100_000), "nests more than 64"),
    ("st-json-nan", DECODE, st_run(st_json='{"status": "done", "feature_dim": NaN}'), "NaN is not standard JSON"),
    ("st-json-dim-string", DECODE, st_run(st_json='{"status": "done", "feature_dim": "8"}'), "'feature_dim' is wrong"),
    # special files
    ("merge-out-dev-full", ["corpus", "merge", "{tmp}/a.tsv", "--out", "/dev/full"], nothing, "not a regular file"),
    ("index-out-fifo", ["corpus", "index", "--kind", "generic", "--root", "{tmp}", "--out", "{tmp}/out.fifo"],
     fifo("out.fifo"), "not a regular file"),
    ("report-out-fifo", ["report", "--db", "{tmp}/r.db", "--out", "{tmp}/out.fifo"], fifo("out.fifo"),
     "not a directory"),
    ("merge-out-proc", ["corpus", "merge", "{tmp}/c/table.tsv", "--out", "/proc/self/x"], table(),
     "kernel file system"),
    ("build-out-proc", ["manifest", "build", "--table", "{tmp}/c/table.tsv", "--gender", "any", "--out",
                        "/proc/self/m"],
     table(), "kernel file system"),
    ("fairseq-audio-fifo", BUILD + ["--format", "fairseq"], table(audio_fifo=True), "not a regular file"),
    # numbers
    ("config-registry-fifo", SWEEP, registered(registry_fifo=True), "not a regular file"),
    ("config-registry-list", SWEEP, registered(registry='[{"name": "F", "path": "/etc"}]'), "registry is a JSON array"),
    ("config-registry-deep", SWEEP, registered(registry="[" * 100000 + "]" * 100000), "nests more than 64"),
    # a registry's facts are read through its declared shape (they print in Table 3)
    *[(f"config-registry-{case}", SWEEP, registered(registry=json.dumps({"checkpoints": [
        {"name": "F", "path": "f.pt", "kind": "fairseq", **entry}]}).replace('"NAN"', "NaN")), words)
      for case, entry, words in [
          ("hours-negative", {"hours": -5}, "'checkpoints.0.hours' is wrong"),
          ("hours-string", {"hours": "lots"}, "'checkpoints.0.hours' is wrong"),
          ("hours-nan", {"hours": "NAN"}, "NaN is not standard JSON"),
          ("pct-150", {"male_pct": 150}, "'checkpoints.0.male_pct' is wrong"),
          ("path-number", {"path": 7}, "'checkpoints.0.path' is wrong"),
          ("path-etc-passwd", {"path": "/etc/passwd"}, "does not end in .pt"),
          ("kind-unknown", {"kind": "pickle"}, "'checkpoints.0.kind' is wrong"),
          ("name-traversal", {"name": "../../x"}, "path separator")]],
    ("config-registry-key-twice", SWEEP, registered(
        registry='{"checkpoints": [{"name": "F", "name": "G", "path": "f.pt", "kind": "fairseq"}]}'), "given twice"),
    ("config-hours-negative", SWEEP, config(extra=", hours: -3"), "hours -3"),
    ("config-hours-nan", SWEEP, config(extra=", hours: .nan"), "hours nan"),
    ("config-pct-inf", SWEEP, config(extra=", male_pct: .inf"), "percentage inf"),
    ("manifest-hours-nan", BUILD + ["--format", "speechbrain", "--hours", "nan"], table(), "--hours 'nan'"),
    ("table-duration-1e308", BUILD + ["--format", "speechbrain"], table(column="duration", value="1e308"),
     "duration 1e+308"),
    ("table-offset-inf", BUILD + ["--format", "speechbrain"], table(column="offset", value="inf"), "offset inf"),
    ("transcribe-audio-fifo", ["asr", "transcribe", "--model", "{tmp}/model", "--table", "{tmp}/c/table.tsv",
                               "--split", "train", "--out", "{out}"], table(audio_fifo=True), "not a regular file"),
    # a FIFO given as any command's input or output (cli.main's one check: options.refuse_special_paths)
    *[(f"fifo-arg-{'-'.join(a[:2])}", a, fifo("f.fifo"), "not a") for a in [
        ["corpus", "stats", "{tmp}/f.fifo"],
        ["corpus", "measure", "{tmp}/f.fifo", "--out", "{out}/m.tsv"],
        ["corpus", "filter", "{tmp}/f.fifo", "--drop-unknown-gender", "test", "--out", "{out}/f.tsv"],
        ["corpus", "synth", "--out", "{tmp}/f.fifo"],
        ["manifest", "stats", "{tmp}/f.fifo"],
        ["pretrain", "run", "--preset", "tiny", "--manifest", "{tmp}/f.fifo", "--out", "{out}"],
        ["pretrain", "launch", "--preset", "tiny", "--manifest", "{tmp}/f.fifo", "--out", "{out}", "--dry-run"],
        ["pretrain", "plan", "--preset", "tiny", "--hardware", "cpu", "--manifest", "{tmp}/f.fifo"],
        ["ckpt", "convert", "{tmp}/f.fifo", "--out", "{out}/c"],
        ["ckpt", "eval", "{tmp}/f.fifo", "--manifest", "{tmp}"],
        ["ckpt", "pack", "{tmp}/f.fifo", "--out", "{out}/p.safetensors"],
        ["ckpt", "features", "F", "--table", "{tmp}/f.fifo", "--out", "{out}"],
        ["asr", "finetune", "--ckpt", "F", "--train", "{tmp}/f.fifo", "--valid", "{tmp}/f.fifo", "--out", "{out}"],
        ["asr", "frozen", "--ckpt", "F", "--layer", "1", "--train", "{tmp}/f.fifo", "--valid", "{tmp}/f.fifo",
         "--out", "{out}"],
        ["asr", "decode", "--model", "{tmp}", "--test", "{tmp}/f.fifo"],
        ["asr", "kaldi-export", "--ckpt", "F", "--layer", "1", "--table", "{tmp}/f.fifo", "--out", "{out}"],
        ["asr", "kaldi-import", "--text", "{tmp}/f.fifo", "--data-dir", "{tmp}", "--out", "{out}/h.tsv"],
        ["asr", "export", "{tmp}/f.fifo", "--out", "{out}/e"],
        ["st", "train", "--ckpt", "F", "--layer", "1", "--train", "{tmp}/f.fifo", "--valid", "{tmp}/f.fifo", "--src",
         "fr", "--tgt", "en", "--out", "{out}"],
        ["probe", "correlate", "--db", "{tmp}/f.fifo", "--out", "{out}/c.tsv"],
        ["score", "st", "--refs", "{tmp}/f.fifo", "--hyps", "{tmp}/f.fifo", "--speakers", "{tmp}/f.fifo"],
        ["score", "compare", "--a", "{tmp}/f.fifo", "--b", "{tmp}/f.fifo"],
        ["score", "mustshe", "--tsv", "{tmp}/f.fifo", "--hyps", "{tmp}/f.fifo", "--json", "{out}/m.json"],
        ["score", "winomt", "--gold", "{tmp}/f.fifo", "--translations", "{tmp}/f.fifo", "--lang", "fr",
         "--json", "{out}/w.json"],
        ["study", "--config", "{tmp}/f.fifo", "--out", "{out}"],
        ["study", "--out", "{out}", "--record", "{tmp}/f.fifo"],
        ["trace", "--report", "{tmp}/f.fifo"],
        ["bench", "--quick", "--out", "{tmp}/f.fifo"],
    ]],
    ("sweep-profile-fifo", SWEEP + ["--dry-run", "--profile", "{tmp}/f.fifo"], fifo("f.fifo"), "not a"),
    # issue 60: command-line and reader bounds
    ("ckpt-features-repeat-1e9", ["ckpt", "features", "F", "--table", "{tmp}/t.tsv", "--repeat", "1e9"], nothing,
     "--repeat 1e9 is not a whole number in [1, 16]"),
    ("ckpt-features-shard-mb-nan", ["ckpt", "features", "F", "--table", "{tmp}/t.tsv", "--shard-mb", "nan"], nothing,
     "--shard-mb 'nan' is outside"),
    ("bench-threads-0", ["bench", "--quick", "--threads", "0", "--out", "{out}/p.json"], nothing,
     "--threads 0 is not a whole number in [1, 1024]"),
    ("index-workers-0", ["corpus", "index", "--kind", "kaldi", "--root", "{tmp}/data/train", "--workers", "0",
                         "--out", "{out}/k.tsv"], kaldi_dir(), "--workers 0 is not a whole number"),
    ("index-sample-rates-1e20", ["corpus", "index", "--kind", "kaldi", "--root", "{tmp}/data/train", "--sample-rates",
                                 "100000000000000000000", "--out", "{out}/k.tsv"], kaldi_dir(), "bad --sample-rates"),
    ("stats-sample-rate-1e20", ["corpus", "stats", "{tmp}/c/table.tsv"], table(column="sample_rate", value="1e20"),
     "sample_rate 1e20 is not a whole number in [1000, 384000]"),
    ("measure-sample-rate-1e20", ["corpus", "measure", "{tmp}/c/table.tsv", "--out", "{out}/m.tsv"],
     table(column="sample_rate", value="1e20"), "sample_rate 1e20 is not a whole number in [1000, 384000]"),
    ("kaldi-pipe-rate-1e20", ["corpus", "index", "--kind", "kaldi", "--root", "{tmp}/data/train", "--sample-rates",
                              "any", "--out", "{out}/k.tsv"], kaldi_dir(rate="100000000000000000000"),
     "the sample rate the piped command names 100000000000000000000 is not a whole number"),
    ("kaldi-spk2gender-huge", ["corpus", "index", "--kind", "kaldi", "--root", "{tmp}/data/train",
                               "--out", "{out}/k.tsv"], kaldi_dir(spk2gender_bytes=(64 << 20) + 1),
     "spk2gender is 67,108,865 bytes"),
    ("merge-wider-than-read", ["corpus", "merge", "{tmp}/c/a.tsv", "{tmp}/c/b.tsv", "--out", "{out}/m.tsv"],
     wide_tables(), "the table would have 2,013 columns"),
    ("index-wider-than-read", ["corpus", "index", "--kind", "generic", "--root", "{tmp}/g.csv", "--map",
                               "audio=path,speaker=spk,gender=sex", "--out", "{out}/g.tsv"],
     generic_csv(",".join(f"e{i}" for i in range(2_100))), "the table would have 2,112 columns"),
    ("index-column-name-tab", ["corpus", "index", "--kind", "generic", "--root", "{tmp}/g.csv", "--map",
                               "audio=path,speaker=spk,gender=sex", "--out", "{out}/g.tsv"],
     generic_csv('"x\ty"'), "column name 'x\\ty' contains a tab"),
    ("config-ckpt-etc-passwd", SWEEP, checkpoint_file(), "/etc/passwd: a checkpoint file is a fairseq .pt"),
    ("config-ckpt-text-pt", SWEEP, checkpoint_file("root:x:0:0:root:/root:/bin/bash\n"),
     "cannot read as a torch fairseq checkpoint"),
]
# commands that take no path and no name (nothing of theirs crosses the boundary)
NO_PATH_OR_NAME = {"ckpt list": "reads only the registry $GENDERGAP_CHECKPOINTS names",
                   "score delta": "takes two numbers"}


def _files(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file() and not p.is_symlink()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv,setup,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_in_one_line(tmp_path, capfd, monkeypatch, argv, setup, expected):
    case, out = tmp_path / "case", tmp_path / "out"
    case.mkdir()
    setup(case)
    (tmp_path / "victim.txt").write_text("the user's file\n")
    before = _files(tmp_path)
    args = [a.format(tmp=case, out=out) for a in argv]
    monkeypatch.chdir(tmp_path)             # a write relative to the working folder is caught below too
    rc, _, lines = run_fresh(capfd, "-q", *args)
    assert rc == 2, lines[-20:]
    assert len(lines) == 1 and lines[0].startswith("gendergap: error: "), lines[-20:]
    assert expected in lines[0], lines[0]
    assert (tmp_path / "victim.txt").read_text() == "the user's file\n"
    after = {k: v for k, v in _files(tmp_path).items() if not k.startswith("out/")}
    assert after == before, set(after) ^ set(before)
    assert not list(tmp_path.rglob("MARKER*"))


def test_suite_covers_every_class():
    """Each class of the boundary has cases; removing a class's cases fails here."""
    ids = [c[0] for c in CASES]
    for words in ("config-ckpt", "ckpt-add", "st-vocab", "out-", "fifo", "nan", "1e308"):
        assert any(words in i for i in ids), words


def _leaf_commands() -> list[str]:
    """Every leaf command of the CLI ("asr transcribe", "sweep", ...), read from its parser."""
    import argparse

    from gendergap.cli import build_parser

    def walk(parser, prefix):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [" ".join(prefix)]
        return [leaf for name, sp in subs[0].choices.items() for leaf in walk(sp, prefix + [name])]
    return walk(build_parser(), [])


def test_every_command_is_in_a_hostile_table():
    """A command that takes a path or a name has a case in one of the hostile suites' tables (this
    file's CASES, the model suite's, the DB suite's); a new command fails here until it joins one."""
    import test_hostile_models
    import test_hostile_stores
    argvs = [c[1] for c in CASES] + [c for c in (test_hostile_models.TRANSCRIBE, test_hostile_models.CKPT_ADD)]
    argvs += [make(Path("d"), Path("db")) for make in test_hostile_stores.DB_COMMANDS.values()]
    covered = {leaf for leaf in _leaf_commands() for argv in argvs
               if [str(a) for a in argv[:len(leaf.split())]] == leaf.split()}
    missing = sorted(set(_leaf_commands()) - covered - set(NO_PATH_OR_NAME))
    assert not missing, f"commands with no hostile-input case (add one to a CASES table): {missing}"
    assert set(NO_PATH_OR_NAME) <= set(_leaf_commands())


def test_decode_never_writes_a_store_its_run_dir_names(tmp_path):
    """st.json naming a store outside its run dir (anywhere, or the study it was moved out of) is not
    written to: the decode uses the store the command names, else a fresh one beside --out."""
    from downstream_st.runs import decode_store
    run = tmp_path / "run"
    run.mkdir()
    out = tmp_path / "mine" / "test.hyp"
    outside = {"feature_store": "../../elsewhere/features"}
    assert decode_store(None, outside, str(run), str(out)) == str(out.resolve().with_name("test.hyp.work") / "features")
    assert decode_store(str(tmp_path / "named"), outside, str(run), str(out)) == str(tmp_path / "named")
    inside = {"feature_store": "features"}
    assert decode_store(None, inside, str(run), str(out)) == str((run / "features").resolve())
