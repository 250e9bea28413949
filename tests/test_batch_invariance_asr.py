"""A score depends only on the model and the data: every end-to-end ASR path gives each utterance the
same hypothesis whether it is decoded alone, in the default length batches, or with the rows shuffled.

The model is a tiny fine-tuned run on a GroupNorm ("base"-style) encoder, the case where padding used
to change every frame; utterances are 0.4-1.0 s, so batches pad short ones by more than their length.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from asr_helpers import edit_csv, one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from test_transcribe import ENV, FRESH_ONE_BY_ONE, REPO, tsv

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """20 steps of fine-tuning on 12 utterances: hypotheses that are not empty, from a GroupNorm encoder."""
    from downstream_asr.finetune import train_finetune
    from ssl_pretrain.model_choice import ModelChoice
    root = tmp_path_factory.mktemp("invariant")
    paths = write_corpus(root / "data", {"train": 12, "valid": 4, "test": 8}, seed=3)
    tiny_wav2vec2(root / "w2v", seed=1)
    train_finetune(ModelChoice.resolve(str(root / "w2v")), paths["train"], paths["valid"], root / "run",
                   overrides={"batch_seconds": 4, "valid_batch_seconds": 8, "max_steps": 20, "lr_head": 5e-3,
                              "lr_wav2vec": 5e-3},
                   progress=False)
    return {"root": root, "run": root / "run", **paths}


def _shuffled(csv: Path, out: Path) -> Path:
    return edit_csv(csv, out, lambda df: df.sample(frac=1.0, random_state=7))


def test_decode_alone_batched_and_shuffled_agree(run, tmp_path):
    from downstream_asr.finetune import decode_finetuned
    durations = pd.read_csv(run["test"])["duration"]
    assert durations.max() > 1.6 * durations.min()   # batches really pad
    batched = decode_finetuned(run["run"], run["test"], name="batched", batch_seconds=60)
    alone = decode_finetuned(run["run"], run["test"], name="alone", max_batch_size=1)
    shuffled = decode_finetuned(run["run"], _shuffled(run["test"], tmp_path / "s.csv"), name="shuffled",
                                batch_seconds=60)
    hyps = tsv(batched["hyps"])
    assert sum(bool(h.strip()) for h in hyps.values()) >= 4      # a model that outputs something
    assert tsv(alone["hyps"]) == hyps and tsv(shuffled["hyps"]) == hyps
    record = json.loads((run["run"] / "alone.json").read_text())
    assert record["batching"]["max_batch_size"] == 1 and record["batching"]["order"] == "by length"


def test_validation_scores_do_not_depend_on_the_batching(run):
    """The validation pass that picks the checkpoint: its error counts under two batchings."""
    from downstream_asr.data import audio_dataset, length_batch_sampler, read_csv
    from downstream_asr.decode import read_run
    from downstream_asr.finetune import build_brain
    from downstream_asr.text import TextNorm, load_vocab
    rd = read_run(run["run"])
    vocab = load_vocab(run["run"] / "vocab.txt")
    brain, _ = build_brain(run["run"], rd, vocab, {"device": "cpu", "noprogressbar": True})
    brain.recover_for_decoding()
    ds = audio_dataset(read_csv(run["test"], TextNorm.from_dict(rd["text_norm"]), training=False), vocab)
    scores = []
    for size in (1, None):
        sampler = length_batch_sampler(ds, 60, shuffle=False, seed=0, max_batch_size=size)
        brain.evaluate(ds, progressbar=False, test_loader_kwargs={"batch_sampler": sampler})
        scores.append((brain.cer_metric.summarize("error_rate"), brain.last_stats["WER"]))
    assert scores[0] == scores[1]


def test_transcribe_run_export_and_speechbrain_alone_equal_the_decode(run, tmp_path):
    from downstream_asr.export import export_run
    from downstream_asr.finetune import decode_finetuned
    from downstream_asr.transcribe import load_model, select_rows, transcribe_table
    decoded = tsv(decode_finetuned(run["run"], run["test"], name="test")["hyps"])
    out = tmp_path / "export"
    export_run(run["run"], out)
    rows = select_rows(str(run["table"]), "test", None)
    shuffled = rows.sample(frac=1.0, random_state=3).reset_index(drop=True)
    for folder in (run["run"], out):
        model = load_model(folder)
        for name, table, size in (("alone", rows, 1), ("batched", rows, 32), ("shuffled", shuffled, 32)):
            meta = transcribe_table(model, table, tmp_path / folder.name, name=name, max_batch_size=size,
                                    progress=False, text_norm=model.info.get("text_norm"))
            assert tsv(meta["hyps"]) == decoded, (folder.name, name)
    # SpeechBrain's own EncoderASR on the export, one utterance per call, gendergap not importable
    wavs = dict(zip(rows["id"], rows["audio"]))
    fresh = subprocess.run([sys.executable, "-I", "-c", FRESH_ONE_BY_ONE, str(out), json.dumps(wavs), str(REPO)],
                           env=ENV, capture_output=True, text=True, cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert json.loads(fresh.stdout.splitlines()[-1]) == decoded


def test_the_weighted_layers_variant_is_batch_invariant_and_files_its_own_rows(run, tmp_path):
    """ssl_layers=all (every layer, layer-normalised, softmax-weighted into the head): the same forward,
    so the same property; its rows are asr-e2e-layers, and it is not exported as the recipe's EncoderASR."""
    import torch

    from corpora.base.errors import UserError
    from downstream_asr.decode import read_run
    from downstream_asr.export import export_run
    from downstream_asr.finetune import decode_finetuned, train_finetune
    from downstream_asr.runs import task_of
    from ssl_pretrain.model_choice import ModelChoice
    out = tmp_path / "layers"
    train_finetune(ModelChoice.resolve(str(run["root"] / "w2v")), run["train"], run["valid"], out,
                   overrides={"batch_seconds": 4, "valid_batch_seconds": 8, "max_steps": 8, "lr_head": 5e-3,
                              "lr_wav2vec": 5e-3, "ssl_layers": "all"}, progress=False)
    weights = torch.load(next((out / "save").glob("CKPT*/wav2vec2.ckpt")), map_location="cpu")["weights"]
    assert weights.shape == (3,) and weights.abs().sum() > 0        # 2 layers + their input, trained
    batched = decode_finetuned(out, run["test"], name="batched", batch_seconds=60)
    alone = decode_finetuned(out, run["test"], name="alone", max_batch_size=1)
    assert tsv(alone["hyps"]) == tsv(batched["hyps"])
    assert task_of(read_run(out)) == "asr-e2e-layers" and task_of(read_run(run["run"])) == "asr-e2e"
    with pytest.raises(UserError, match="variant"):
        export_run(out, tmp_path / "export")
    from downstream_asr.rundir import check_overrides  # what a sweep's dry run checks: the word, too
    with pytest.raises(UserError, match="ssl_layers.*use one of: last, all"):
        check_overrides({"ssl_layers": "first"}, "finetune")
