"""`asr transcribe` on a SpeechBrain EncoderDecoderASR folder laid out as SpeechBrain publishes one:
hyperparams.yaml (modules encoder + decoder, a sentencepiece tokenizer, a Pretrainer naming the
weights file), asr.ckpt, tokenizer.model. The model is built here with random weights (a Fbank +
linear encoder, an attentional GRU decoder searched greedily): the words are noise; the test checks
the path SpeechBrain's own interface takes, batching, the rows stored per gender, and that the
folder's HyperPyYAML is evaluated only under --trust-checkpoint."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from asr_helpers import one_thread, write_corpus  # noqa: F401 (fixture)
from cli_helpers import one_error_line, run_lines, run_text

pytestmark = pytest.mark.usefixtures("one_thread")

HPARAMS = """\
sample_rate: 16000
folder: {folder}
tokenizer: !new:sentencepiece.SentencePieceProcessor
  model_file: !ref <folder>/tokenizer.model
fbank: !new:speechbrain.lobes.features.Fbank
  n_mels: 20
enc_lin: !new:speechbrain.nnet.linear.Linear
  input_size: 20
  n_neurons: 32
encoder: !new:speechbrain.nnet.containers.LengthsCapableSequential
  - !ref <fbank>
  - !ref <enc_lin>
emb: !new:speechbrain.nnet.embedding.Embedding
  num_embeddings: {vocab}
  embedding_dim: 16
dec: !new:speechbrain.nnet.RNN.AttentionalRNNDecoder
  enc_dim: 32
  input_size: 16
  rnn_type: gru
  attn_type: content
  hidden_size: 32
  attn_dim: 32
  num_layers: 1
out_lin: !new:speechbrain.nnet.linear.Linear
  input_size: 32
  n_neurons: {vocab}
decoder: !new:speechbrain.decoders.seq2seq.S2SRNNGreedySearcher
  embedding: !ref <emb>
  decoder: !ref <dec>
  linear: !ref <out_lin>
  bos_index: 1
  eos_index: 2
  min_decode_ratio: 0.0
  max_decode_ratio: 0.1
modules:
  encoder: !ref <encoder>
  decoder: !ref <decoder>
asr_model: !new:torch.nn.ModuleList
  - [!ref <enc_lin>, !ref <emb>, !ref <dec>, !ref <out_lin>]
pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
  loadables:
    asr: !ref <asr_model>
  paths:
    asr: !ref <folder>/asr.ckpt
"""


def build_encoder_decoder(folder: Path) -> Path:
    """A character sentencepiece tokenizer and random weights saved where the Pretrainer looks."""
    import sentencepiece as spm
    import torch
    from hyperpyyaml import load_hyperpyyaml

    folder.mkdir(parents=True)
    text = ["le chat dort sur le tapis", "la femme parle avec le garçon", "un homme lit le journal"] * 20
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_prefix=str(folder / "tokenizer"),
                                   vocab_size=64, hard_vocab_limit=False, model_type="char", character_coverage=1.0,
                                   unk_id=0, bos_id=1, eos_id=2, minloglevel=2)
    vocab = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model")).get_piece_size()
    (folder / "hyperparams.yaml").write_text(HPARAMS.format(folder=folder, vocab=vocab), encoding="utf-8")
    torch.manual_seed(0)
    model = load_hyperpyyaml((folder / "hyperparams.yaml").read_text(encoding="utf-8"))["asr_model"]
    torch.save(model.state_dict(), folder / "asr.ckpt")
    return folder


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    root = tmp_path_factory.mktemp("sb-s2s")
    paths = write_corpus(root / "data", {"test": 6})
    return {"model": build_encoder_decoder(root / "asr-crdnn-tiny"), **paths}


def test_encoder_decoder_folder_transcribed_with_speechbrains_interface(seq2seq, tmp_path, capsys):
    out, db = tmp_path / "out", tmp_path / "r.db"
    rc, stdout, err = run_text(capsys, "asr", "transcribe", "--model", seq2seq["model"], "--table", seq2seq["table"],
                               "--out", out, "--db", db, "--device", "cpu", "--batch-seconds", 2, "--bootstrap", 10,
                               "--no-progress", "--trust-checkpoint")
    assert rc == 0, err
    hyps = dict(line.split("\t", 1) for line in (out / "test.hyp.tsv").read_text(encoding="utf-8").splitlines())
    assert len(hyps) == 6
    info = json.loads((out / "test.json").read_text())
    assert info["kind"] == "speechbrain" and info["batches"] >= 2   # several length-sorted batches
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT s.gender, s.metric, s.n_utts, r.config FROM scores s JOIN runs r "
                           "ON s.run_id = r.id WHERE s.task = 'asr-released'").fetchall()
    by_gender = {g: (m, n) for g, m, n, _ in rows}
    assert by_gender["F"] == ("wer", 3) and by_gender["M"] == ("wer", 3) and by_gender["all"] == ("wer", 6)
    assert json.loads(rows[0][3])["released"]["interface"] == "EncoderDecoderASR"


def test_its_hyperpyyaml_is_not_evaluated_without_trust(seq2seq, tmp_path, capsys):
    marker = tmp_path / "ran"
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "hyperparams.yaml").write_text(
        f"decoder: !apply:os.system ['touch {marker}']\nmodules: {{}}\n", encoding="utf-8")
    rc, _, err = run_lines(capsys, "asr", "transcribe", "--model", folder, "--table", seq2seq["table"],
                           "--out", tmp_path / "out", "--device", "cpu", "--no-progress")
    assert rc == 2 and not marker.exists()
    line = one_error_line("\n".join(err))
    assert "hyperparams.yaml" in line and "--trust-checkpoint" in line
