"""`asr transcribe` (any local speech model, scored per gender) and `asr export` (a run as an EncoderASR
folder), with real models built here: a tiny fine-tuned run, a Wav2Vec2ForCTC converted from a shipped
checkpoint, a random Whisper-architecture model with a byte-level tokenizer. Nothing is downloaded."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}

# Loads the export with speechbrain + transformers only: the repo is off sys.path and importing any
# gendergap package raises, so a hidden dependency would fail here.
FRESH_ONE_BY_ONE = r"""
import json, sys
OURS = {"gendergap", "corpora", "manifests", "ssl_pretrain", "downstream_asr", "downstream_st", "analysis"}
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in OURS:
            raise ImportError(name + " imported")
sys.meta_path.insert(0, Refuse())
sys.path = [p for p in sys.path if p not in ("", ".") and p.rstrip("/") != sys.argv[3]]
import soundfile as sf, torch
from speechbrain.inference.ASR import EncoderASR
asr = EncoderASR.from_hparams(source=sys.argv[1])
wavs = json.loads(sys.argv[2])
# one utterance per call: SpeechBrain's own wav2vec 2.0 lobe normalises a padded batch over its
# padding, so only a batch of one gives the model's own hypothesis (what gendergap reports)
words = [asr.transcribe_batch(torch.tensor(sf.read(w, dtype="float32")[0])[None], torch.ones(1))[0][0]
         for w in wavs.values()]
unk = asr.tokenizer.unk_label
print(json.dumps({uid: " ".join(w.replace(unk, "").split()) for uid, w in zip(wavs, words)}))
"""


def cli(*args, check=True, **kw) -> subprocess.CompletedProcess:
    quiet = () if check else ("-q",)   # a refusal: only the error line on stderr
    p = subprocess.run([sys.executable, "-m", "gendergap.cli", *quiet, *map(str, args)], cwd=REPO, env=ENV,
                       capture_output=True, text=True, **kw)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def tsv(path) -> dict[str, str]:
    return dict(line.split("\t", 1) for line in Path(path).read_text(encoding="utf-8").splitlines())


def scores(db, task) -> dict:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT checkpoint, gender, metric, value, n_utts FROM scores WHERE task = ?", (task,))
        return {(c, g): (m, v, n) for c, g, m, v, n in rows}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny `asr finetune` run (2 optimizer steps), decoded and scored on the test split."""
    from gendergap.cmd_asr import asr_finetune
    root = tmp_path_factory.mktemp("run")
    paths = write_corpus(root / "data")
    tiny_wav2vec2(root / "w2v")
    asr_finetune(ckpt=str(root / "w2v"), train=str(paths["train"]), valid=str(paths["valid"]), out=str(root / "run"),
                 overrides=["batch_seconds=3", "valid_batch_seconds=6", "max_steps=2"], test=str(paths["test"]),
                 db=str(root / "r.db"), no_progress=True, device="cpu", bootstrap=20)
    return {"root": root, "run": root / "run", "db": root / "r.db", **paths}


def test_export_loads_without_gendergap_and_transcribe_equals_decode(trained, tmp_path):
    from downstream_asr.export import render_yaml
    decoded = tsv(trained["run"] / "test.hyp.tsv")
    assert len(decoded) == 4 and any(decoded.values())
    out = tmp_path / "B-tiny-asr"
    p = cli("asr", "export", trained["run"], "--out", out)
    assert "EncoderASR.from_hparams" in p.stdout
    assert {f.name for f in out.iterdir()} >= {"hyperparams.yaml", "wav2vec2", "head.ckpt", "label_encoder.txt",
                                             "README.md", "gendergap-export.json"}
    assert (out / "wav2vec2" / "model.safetensors").is_file()
    meta = json.loads((out / "gendergap-export.json").read_text())
    assert (out / "hyperparams.yaml").read_text() == render_yaml(meta["values"])
    card = (out / "README.md").read_text()
    wer = json.loads((trained["run"] / "test.wer.json").read_text())
    assert "## WER per gender" in card and f"| {wer['F']:.2f}" in card and f"{wer['M']:.2f}" in card
    assert "gendergap asr export" in card
    # SpeechBrain alone, in a fresh process
    table = __import__("pandas").read_csv(trained["table"], sep="\t")
    wavs = dict(zip(table["id"][table["split"] == "test"], table["audio"][table["split"] == "test"]))
    fresh = subprocess.run([sys.executable, "-I", "-c", FRESH_ONE_BY_ONE, str(out), json.dumps(wavs), str(REPO)],
                           env=ENV, capture_output=True, text=True, cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert json.loads(fresh.stdout.splitlines()[-1]) == decoded
    # asr transcribe, on the run directory and on the export (no --trust-checkpoint needed for either)
    for model, sub in ((trained["run"], "from-run"), (out, "from-export")):
        cli("asr", "transcribe", "--model", model, "--table", trained["table"], "--out", tmp_path / sub,
            "--device", "cpu", "--db", tmp_path / "t.db", "--bootstrap", 20, "--name", sub, "--no-progress")
        assert tsv(tmp_path / sub / f"{sub}.hyp.tsv") == decoded
        assert tsv(tmp_path / sub / f"{sub}.ref.tsv") == tsv(trained["run"] / "test.ref.tsv")
        got = json.loads((tmp_path / sub / f"{sub}.wer.json").read_text())
        assert (got["all"], got["F"], got["M"]) == (wer["all"], wer["F"], wer["M"])
    assert scores(tmp_path / "t.db", "asr-e2e")[("from-run", "F")][1] == pytest.approx(wer["F"])
    assert scores(tmp_path / "t.db", "asr-released")[("from-export", "M")][1] == pytest.approx(wer["M"])
    # the same folder as any SpeechBrain folder (no export record): loaded by EncoderASR.from_hparams, which
    # evaluates its yaml, so only with --trust-checkpoint
    import shutil
    plain = tmp_path / "plain-sb"
    shutil.copytree(out, plain)
    (plain / "gendergap-export.json").unlink()
    p = cli("asr", "transcribe", "--model", plain, "--table", trained["table"], "--out", tmp_path / "sb", check=False)
    assert p.returncode == 2 and "--trust-checkpoint" in p.stderr and not (tmp_path / "sb").exists()
    cli("asr", "transcribe", "--model", plain, "--table", trained["table"], "--out", tmp_path / "sb",
        "--trust-checkpoint", "--device", "cpu", "--bootstrap", 0, "--no-progress")
    assert tsv(tmp_path / "sb" / "test.hyp.tsv") == decoded
    assert json.loads((tmp_path / "sb" / "test.json").read_text())["kind"] == "speechbrain"
    # an edited export yaml is not evaluated
    y = out / "hyperparams.yaml"
    y.write_text(y.read_text() + "\nx: !apply:os.getcwd []\n")
    p = cli("asr", "transcribe", "--model", out, "--table", trained["table"], "--out", tmp_path / "edited", check=False)
    assert (p.returncode == 2 and "not the one `asr export` wrote" in p.stderr
            and len(p.stderr.strip().splitlines()) == 1)


def _long_table(root: Path, n: int = 10, seconds: float = 6.0) -> Path:
    """n utterances of a few seconds (slow enough to kill between batches): 16 kHz files, one at 8 kHz
    (resampled where read) and two segments of one file (offset/duration)."""
    from corpora.table import new_table, write_table
    rng = np.random.default_rng(0)
    (root / "wav").mkdir(parents=True)
    rows = []
    for i in range(n):
        rate = 8000 if i == 1 else 16000
        dur = seconds * (0.6 + 0.4 * i / n)
        path = root / "wav" / f"u{i}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(dur * rate))).astype(np.float32), rate)
        g = "FM"[i % 2]
        rows.append({"id": f"u{i:02d}", "audio": f"wav/u{i}.wav", "offset": 0.0, "duration": dur, "sample_rate": rate,
                     "speaker": f"{g.lower()}{i % 4}", "gender": g, "corpus": "tiny", "lang": "fr", "split": "test",
                     "text": "Le chat dort."})
    rows += [dict(rows[0], id=f"seg{k}", offset=1.0 * k, duration=1.0, speaker=f"f{k}", gender="F") for k in (1, 2)]
    write_table(new_table(rows), root / "table.tsv")
    return root / "table.tsv"


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "base"
    cli("asr", "export", trained["run"], "--out", out)
    return out


@pytest.mark.parametrize("edit", [("ssl_dim", 1_000_000_000), ("sample_rate", 10**20), ("n_chars", 0),
                                  ("dnn_neurons", 0), ("label_encoder", 2 << 20)])
def test_an_export_records_numbers_are_bounded_before_a_head_is_built(trained, exported, tmp_path, capsys, edit):
    """An export folder's record sizes the head SpeechBrain builds: ssl_dim 1e9 was a 1e9-row Linear, the
    label file was read whole by SpeechBrain; now one line naming the record or the file (issue 60)."""
    import shutil

    from downstream_asr.export import render_yaml
    from gendergap.cli import main
    key, value = edit
    out = tmp_path / "exp"
    shutil.copytree(exported, out)
    if key == "label_encoder":
        (out / "label_encoder.txt").write_text("a\n" * (value // 2))
    else:
        meta = json.loads((out / "gendergap-export.json").read_text())
        meta["values"][key] = value
        (out / "gendergap-export.json").write_text(json.dumps(meta))
        (out / "hyperparams.yaml").write_text(render_yaml(meta["values"]))   # the yaml check alone would not stop it
    rc = main(["asr", "transcribe", "--model", str(out), "--table", str(trained["table"]), "--out",
               str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err[-2000:]
    assert ("label_encoder.txt" if key == "label_encoder" else key) in err
    assert not (tmp_path / "t").exists()


@pytest.fixture(scope="module")
def hf_ctc(tmp_path_factory):
    """Wav2Vec2ForCTC on the shipped tiny-balanced encoder (converted to transformers) + a character
    vocabulary; the CTC layer is random."""
    import torch
    from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC, Wav2Vec2Processor

    from ssl_pretrain.convert import convert_checkpoint
    root = tmp_path_factory.mktemp("hfctc")
    conv = convert_checkpoint(REPO / "ssl_pretrain" / "shipped" / "tiny-balanced.safetensors", root / "conv")
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{c: i + 3 for i, c in enumerate("abcdefghijklmnopqrstuvwxyzéèàù'-")}}
    (root / "vocab.json").write_text(json.dumps(vocab))
    torch.manual_seed(0)
    model = Wav2Vec2ForCTC.from_pretrained(str(conv), vocab_size=len(vocab), pad_token_id=0)
    model.save_pretrained(root / "ctc")
    tok = Wav2Vec2CTCTokenizer(str(root / "vocab.json"), unk_token="<unk>", pad_token="<pad>", word_delimiter_token="|")
    Wav2Vec2Processor(feature_extractor=Wav2Vec2FeatureExtractor.from_pretrained(str(conv)),
                      tokenizer=tok).save_pretrained(root / "ctc")
    return {"model": root / "ctc", "table": _long_table(root / "data")}


def test_hf_ctc_batches_resumes_after_a_kill_and_scores(hf_ctc, tmp_path):
    args = ["asr", "transcribe", "--model", hf_ctc["model"], "--table", hf_ctc["table"], "--device", "cpu",
            "--bootstrap", 20, "--no-progress"]
    # uninterrupted, one utterance per batch
    cli(*args, "--out", tmp_path / "full", "--max-batch-size", 1, "--db", tmp_path / "r.db")
    full = tsv(tmp_path / "full" / "test.hyp.tsv")
    assert len(full) == 12 and not (tmp_path / "full" / "test.partial.jsonl").exists()
    info = json.loads((tmp_path / "full" / "test.json").read_text())
    assert info["batches_run"] == info["batches"] == 12 and info["kind"] == "hf-ctc"
    rows = scores(tmp_path / "r.db", "asr-released")
    assert {g for _, g in rows} == {"F", "M", "all", "delta_rel"} and rows[("ctc", "F")][2] == 7
    # batched by length: every utterance once. (Not the same text: this base-style encoder group-normalises
    # over time and takes no attention mask, so zero padding shifts its features, as in any batched use.)
    cli(*args, "--out", tmp_path / "batched", "--batch-seconds", 30, "--precision", "bf16")
    assert tsv(tmp_path / "batched" / "test.hyp.tsv").keys() == full.keys()
    info = json.loads((tmp_path / "batched" / "test.json").read_text())
    assert info["batches"] < 12 and info["runtime"] == {"device": "cpu", "precision": "bf16"}
    # killed after some batches, then run again: only the rest is transcribed
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "gendergap.cli", *map(str, [*args, "--out", out,
                             "--max-batch-size", 1])], cwd=REPO, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    partial = out / "test.partial.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.is_file() and len(partial.read_text().splitlines()) >= 3:   # header + 2 batches
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    assert proc.wait() == -signal.SIGKILL, "the run ended before it could be killed"
    done = len(partial.read_text().splitlines()) - 1
    assert 2 <= done < 12
    p = cli(*args, "--out", out, "--max-batch-size", 1)
    assert f"{12 - done} of 12 batches run now" in p.stdout
    assert f"resuming: {done} of 12 utterances already transcribed" in p.stderr
    assert tsv(out / "test.hyp.tsv") == full and not partial.exists()


def build_tiny_whisper(folder: Path) -> Path:
    """A random WhisperForConditionalGeneration (d_model 16) with a byte-level BPE tokenizer built here."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    vocab["<|endoftext|>"] = len(vocab)
    tok = WhisperTokenizer(vocab=vocab, merges=[])
    specials = ["<|startoftranscript|>", "<|en|>", "<|fr|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
                "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
    tok.add_special_tokens({"additional_special_tokens": specials})
    ids = {s: tok.convert_tokens_to_ids(s) for s in ["<|endoftext|>", *specials]}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    torch.manual_seed(0)
    cfg = WhisperConfig(vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=80,
                        max_target_positions=32, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
                        decoder_start_token_id=sot)
    model = WhisperForConditionalGeneration(cfg)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, max_length=12, is_multilingual=True,
        lang_to_id={"<|en|>": ids["<|en|>"], "<|fr|>": ids["<|fr|>"]},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"])
    model.save_pretrained(folder)
    WhisperProcessor(WhisperFeatureExtractor(feature_size=80), tok).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """The tiny Whisper-architecture model and a 6-utterance test table with English translations."""
    from corpora.table import read_table, write_table
    root = tmp_path_factory.mktemp("whisper")
    paths = write_corpus(root / "data", {"test": 6})
    df = read_table(paths["table"])
    df["tgt_text_en"] = [f"the cat number {i} sleeps." for i in range(len(df))]
    write_table(df, paths["table"])
    return {"model": build_tiny_whisper(root / "whisper"), "table": paths["table"], "ids": df["id"].tolist(),
            "genders": df["gender"].tolist()}


def test_whisper_architecture_end_to_end(whisper, tmp_path):
    from gendergap.runs.transcribe import asr_transcribe
    r = asr_transcribe(model=str(whisper["model"]), table=str(whisper["table"]), out=str(tmp_path / "out"),
                       language="fr", batch_seconds=2.0, device="cpu", db=str(tmp_path / "r.db"), bootstrap=20,
                       no_progress=True)
    assert r["n_utts"] == {"F": 3, "M": 3, "all": 6} and r["all"] is not None
    info = json.loads((tmp_path / "out" / "test.json").read_text())
    assert info["kind"] == "hf-seq2seq" and info["model"]["language"] == "fr" and info["batches"] > 1
    assert len(tsv(tmp_path / "out" / "test.hyp.tsv")) == 6
    assert scores(tmp_path / "r.db", "asr-released")[("whisper", "all")][2] == 6


def _mustshe_tsv(path: Path, ids: list[str], genders: list[str]) -> Path:
    """A MuST-SHE-format TSV over the table's test ids (one gendered term pair per row)."""
    head = "ID\tLANG\tTALK\tSRC\tREF\tWRONG-REF\tSPEAKER\tGENDER\tCATEGORY\tTEXT-CATEGORY\tGENDERTERMS\n"
    rows = [f"{i}\tfr-en\tt\tle chat\tthe cat\tthe cat\t{'She' if g == 'F' else 'He'}\t{g}\t1{g}\t-\t"
            f"{'actress actor' if g == 'F' else 'actor actress'}\n" for i, g in zip(ids, genders)]
    path.write_text(head + "".join(rows), encoding="utf-8")
    return path


def test_released_translation_scored_per_gender_like_st_decode(whisper, tmp_path):
    """--task translate --tgt en: BLEU per gender against tgt_text_en (sacreBLEU's signature), rows under
    st-released, and MuST-SHE gender accuracy with --mustshe. The model is random: only the rows are checked."""
    mustshe = _mustshe_tsv(tmp_path / "mustshe.tsv", whisper["ids"], whisper["genders"])
    p = cli("asr", "transcribe", "--model", whisper["model"], "--table", whisper["table"], "--out", tmp_path / "st",
            "--language", "fr", "--task", "translate", "--tgt", "en", "--mustshe", mustshe, "--device", "cpu",
            "--db", tmp_path / "r.db", "--bootstrap", 20, "--no-progress")
    assert "BLEU fr-en: all" in p.stdout and "MuST-SHE: coverage" in p.stdout
    refs = {i: f"the cat number {k} sleeps." for k, i in enumerate(whisper["ids"])}
    assert tsv(tmp_path / "st" / "test.ref.tsv") == refs
    written = json.loads((tmp_path / "st" / "test.bleu.json").read_text())
    assert written["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert written["mustshe"]["overall"]["terms"] == 6 and written["transcripts"]["text_norm_name"] == "none"
    with sqlite3.connect(tmp_path / "r.db") as con:
        rows = con.execute("SELECT checkpoint, task, lang_pair, gender, metric, n_utts, signature "
                           "FROM scores").fetchall()
    bleu = {r[3]: r for r in rows if r[1] == "st-released"}
    assert {"F", "M", "all"} <= set(bleu) and all(r[0] == "whisper" and r[2] == "fr-en" and r[4] == "bleu"
                                                  for r in bleu.values())
    assert (bleu["F"][5], bleu["M"][5], bleu["all"][5]) == (3, 3, 6) and bleu["all"][6].startswith("nrefs:1|")
    assert {r[1] for r in rows} == {"st-released", "mustshe"}
    assert {r[0] for r in rows if r[1] == "mustshe"} == {"whisper"}


def test_translate_without_a_target_is_one_line(whisper, tmp_path):
    args = ["asr", "transcribe", "--model", whisper["model"], "--table", whisper["table"], "--out", tmp_path / "o",
            "--language", "fr", "--task", "translate"]
    p = cli(*args, check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--tgt" in p.stderr and "tgt_text_" in p.stderr and not (tmp_path / "o").exists()
    p = cli(*args, "--tgt", "de", check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "no target text column 'tgt_text_de' for --tgt de" in p.stderr and "tgt_text_en" in p.stderr
    assert str(whisper["table"]) in p.stderr and not (tmp_path / "o").exists()
    p = cli(*args, "--tgt", "en", "--per-corpus", check=False)   # per-corpus scoring is WER's
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--per-corpus" in p.stderr, p.stderr


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_several_corpora_scored_apart_in_one_pass(hf_ctc, tmp_path):
    """--per-corpus: one transcription of a two-corpus table, rows NAME@CORPUS per gender, each equal
    to what transcribing that corpus alone (--corpus) gives."""
    from corpora.table import read_table, write_table
    df = read_table(hf_ctc["table"])
    df["corpus"] = ["cv" if i < 5 else "mls" for i in range(len(df))]
    two = Path(hf_ctc["table"]).with_name("two_corpora.tsv")
    write_table(df, two)
    args = ["asr", "transcribe", "--model", hf_ctc["model"], "--table", two, "--device", "cpu", "--bootstrap", 20,
            "--no-progress", "--max-batch-size", 1, "--name", "m"]
    cli(*args, "--per-corpus", "--out", tmp_path / "both", "--db", tmp_path / "both.db")
    both = scores(tmp_path / "both.db", "asr-released")
    assert {c for c, _ in both} == {"m@cv", "m@mls"}
    n = df["corpus"].value_counts()
    assert both[("m@cv", "all")][2] == n["cv"] and both[("m@mls", "all")][2] == n["mls"]
    assert (len(tsv(tmp_path / "both" / "m@cv.hyp.tsv")) == n["cv"]
            and len(tsv(tmp_path / "both" / "m.hyp.tsv")) == len(df))
    for corpus in ("cv", "mls"):
        cli(*args, "--corpus", corpus, "--out", tmp_path / corpus, "--db", tmp_path / f"{corpus}.db")
        alone = scores(tmp_path / f"{corpus}.db", "asr-released")
        assert {g: v for (_, g), v in alone.items()} == {g: v for (c, g), v in both.items() if c == f"m@{corpus}"}


def test_pickle_payload_refused_unless_trusted(hf_ctc, tmp_path):
    import shutil

    import torch
    from safetensors.torch import load_file
    folder = tmp_path / "evil"
    shutil.copytree(hf_ctc["model"], folder)
    # a plain pytorch_model.bin (tensors only) loads without any flag
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    args = ["asr", "transcribe", "--model", folder, "--table", hf_ctc["table"], "--device", "cpu", "--bootstrap", 0,
            "--no-progress"]
    cli(*args, "--out", tmp_path / "plain")
    # one that runs a command on unpickling is refused before anything unpickles it
    marker = tmp_path / "pwned"
    torch.save({**state, "x": _Payload(marker)}, folder / "pytorch_model.bin")
    p = cli(*args, "--out", tmp_path / "o", check=False)
    assert p.returncode == 2 and not marker.exists(), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "pytorch_model.bin" in p.stderr
    assert "refusing to unpickle" in p.stderr and "--trust-checkpoint" in p.stderr
    assert not (tmp_path / "o" / "test.partial.jsonl").exists()
    # a SpeechBrain folder someone hands you needs the flag too (its yaml builds objects)
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "hyperparams.yaml").write_text(f"x: !apply:os.system ['touch {marker}']\n")
    p = cli("asr", "transcribe", "--model", sb, "--table", hf_ctc["table"], "--out", tmp_path / "o", check=False)
    assert p.returncode == 2 and not marker.exists() and "--trust-checkpoint" in p.stderr


def test_not_a_local_folder_is_one_line(hf_ctc, tmp_path):
    p = cli("asr", "transcribe", "--model", "openai/whisper-small", "--table", hf_ctc["table"], "--out", tmp_path,
            check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "never downloads" in p.stderr and "hf download" in p.stderr


def test_help_teaches_with_examples():
    for leaf, needles in (("transcribe", ("examples:", "--trust-checkpoint", "partial.jsonl", "downloaded")),
                          ("export", ("examples:", "EncoderASR.from_hparams", "source_dir"))):
        p = cli("asr", leaf, "--help")
        assert all(n in p.stdout for n in needles), (leaf, p.stdout)


def test_two_external_models_and_three_shipped_checkpoints_in_one_sweep(hf_ctc, whisper, tmp_path):
    """Issue #32's acceptance: two released models (a transformers CTC folder, a Whisper folder; task
    asr-released, one step per model x corpus) and the three shipped checkpoints (asr-frozen, 2 steps)
    run as one sweep; the report's Table 4 shows all five rows, and `score compare` pairs a released
    model's row (the baseline) with a checkpoint's."""
    from gendergap.cli import main
    from gendergap.config import load_config
    from gendergap.plan import plan_jobs
    from gendergap.sweep import run_sweep
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""\
name: released
corpus: {{synth: tiny}}
checkpoints:
  F-tiny: {{shipped: tiny-female}}
  M-tiny: {{shipped: tiny-male}}
  B-tiny: {{shipped: tiny-balanced}}
tasks:
  asr-frozen: {{corpus: synth-fr, layer: last, overrides: [max_steps=2, number_of_epochs=1]}}
  released:
    type: asr-released
    device: cpu
    models:
      ctc: {{path: {hf_ctc['model']}}}
      whisper: {{path: {whisper['model']}, language: fr}}
    corpora: [synth-fr]
report: {{bootstrap: 10}}
""")
    out = tmp_path / "o"
    steps = plan_jobs(load_config(cfg), out)
    by = {s.name: s for s in steps}
    assert {"released:ctc:synth-fr", "released:whisper:synth-fr"} <= set(by)
    from gendergap.runs import leaf_of
    assert leaf_of(by["released:ctc:synth-fr"].calls()[0][0]) == "asr transcribe"
    run_sweep(steps, out)
    rows = {**scores(out / "results.db", "asr-released"), **scores(out / "results.db", "asr-frozen")}
    five = ["F-tiny", "M-tiny", "B-tiny", "ctc@synth-fr", "whisper@synth-fr"]
    assert {c for c, _ in rows} == set(five)
    assert len({rows[(c, "all")][2] for c in five}) == 1   # the same test rows for all five
    table4 = (out / "report" / "table4_asr.md").read_text(encoding="utf-8")
    assert "Released speech models" in table4 and all(f"| {c} |" in table4 for c in five), table4
    csv = (out / "report" / "table4_asr.csv").read_text(encoding="utf-8")
    assert all(c in csv for c in five) and "asr-released" in csv and "asr-frozen" in csv
    report = (out / "report" / "report.md").read_text(encoding="utf-8")
    table4_section = report[report.index("## Table 4"):]
    assert all(f"| {c} |" in table4_section.split("\n## ")[0] for c in five)
    with sqlite3.connect(out / "results.db") as con:
        run_of = dict(con.execute("SELECT checkpoint, run_id FROM scores WHERE gender = 'all' AND metric = 'wer'"))
    res = tmp_path / "compare.json"
    assert main(["score", "compare", "--db", str(out / "results.db"), "--run-a", str(run_of["ctc@synth-fr"]),
                 "--run-b", str(run_of["F-tiny"]), "--resamples", "50", "--json", str(res)]) == 0
    test = json.loads(res.read_text())   # A: the released model (the baseline), B: a shipped checkpoint
    assert test["metric"] == "wer" and test["a"]["all"] == rows[("ctc@synth-fr", "all")][1]
    assert test["b"]["all"] == rows[("F-tiny", "all")][1] and set(test["p_value"]) == {"F", "M", "all", "delta_rel"}


def released_study(cfg: Path, name: str, model: str) -> Path:
    """A study config on the tiny built-in corpus with one released model (``model``: the inside of
    its YAML flow mapping) on synth-fr."""
    cfg.write_text(f"""\
name: released
corpus: {{synth: tiny}}
checkpoints:
  F-tiny: {{shipped: tiny-female}}
tasks:
  released:
    type: asr-released
    device: cpu
    corpora: [synth-fr]
    models:
      {name}: {{{model}}}
report: {{bootstrap: 10}}
""")
    return cfg


def dry_run_refusal(cfg: Path, out: Path, capsys) -> str:
    """`sweep --dry-run` exits 2 with one line naming the config: that line."""
    from gendergap.cli import main
    assert main(["sweep", "--config", str(cfg), "--out", str(out), "--dry-run"]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if str(cfg) in x]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_released_model_is_found_by_the_dry_run(tmp_path, capsys):
    """The sweep's input checks name a model folder that is not there before any job runs."""
    cfg = released_study(tmp_path / "c.yaml", "gone", f"path: {tmp_path / 'no-such-model'}")
    line = dry_run_refusal(cfg, tmp_path / "o", capsys)
    assert "model 'gone@synth-fr'" in line and "is not a local folder" in line
    assert not (tmp_path / "o").exists()


def test_a_translating_released_model_in_a_sweep(whisper, tmp_path, capsys):
    """task translate with `tgt`: BLEU per gender rows (st-released) in the study's DB and its Table 5;
    without `tgt`, or with a target the table has no column for, the dry run refuses it in one line."""
    from gendergap.cli import main
    model = f"path: {whisper['model']}, language: fr, task: translate"

    def refused(tgt: str, needle: str) -> None:
        line = dry_run_refusal(released_study(tmp_path / "c.yaml", "st", model + tgt), tmp_path / "o", capsys)
        assert "model 'st@synth-fr'" in line and needle in line

    refused("", "add `tgt: LANG`")
    cfg = released_study(tmp_path / "c.yaml", "st", model + ", tgt: en")
    assert main(["sweep", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 0
    rows = scores(tmp_path / "o" / "results.db", "st-released")
    assert {g for _, g in rows} >= {"F", "M", "all"} and rows[("st@synth-fr", "all")][0] == "bleu"
    table5 = (tmp_path / "o" / "report" / "table5_st.md").read_text(encoding="utf-8")
    assert "st@synth-fr" in table5
    refused(", tgt: de", "no tgt_text_de column")   # the corpus is written now: its columns are checked


@pytest.mark.parametrize("which", ["hf_ctc", "whisper"])
def test_released_models_give_each_utterance_the_same_hypothesis_in_any_batch(which, request, tmp_path):
    """transformers CTC (a GroupNorm encoder: the invariant forward) and Whisper (padded to 30 s by its
    processor): one utterance per batch = the default batching = the rows shuffled."""
    from downstream_asr.transcribe import load_model, select_rows, transcribe_table
    fx = request.getfixturevalue(which)
    model = load_model(fx["model"], language="fr" if which == "whisper" else None)
    assert "batched" in model.batching
    rows = select_rows(str(fx["table"]), None, None)
    assert rows["duration"].max() > 1.4 * rows["duration"].min()
    shuffled = rows.sample(frac=1.0, random_state=5).reset_index(drop=True)
    hyps = {}
    for name, table, size in (("alone", rows, 1), ("batched", rows, 32), ("shuffled", shuffled, 32)):
        meta = transcribe_table(model, table, tmp_path, name=name, batch_seconds=600, max_batch_size=size,
                                progress=False)
        hyps[name] = tsv(meta["hyps"])
        assert json.loads((tmp_path / f"{name}.json").read_text())["batching"]["max_batch_size"] == size
    assert sum(bool(h) for h in hyps["batched"].values()) >= len(rows) // 2
    assert hyps["alone"] == hyps["batched"] == hyps["shuffled"]
