"""The frozen-feature ASR head is batch-invariant (docs: DESIGN "Measurement invariance"): one
trained run decoding one test CSV one utterance per batch, with its default batching, and with
the CSV's rows shuffled gives the same hypothesis for every id; its validation pass (CER, WER
and the loss that can pick the checkpoint) gives the same numbers whatever the batches.

The run is a tiny one (random-init wav2vec 2.0; 30 steps at lr 1e-6, so that batch norm's running
statistics settle while the weights stay random): its frames' most likely characters differ from
frame to frame by small margins, so a padded frame reaching a real one changes hypotheses. Two
architectures: the built-in default (global feature norm, TDNN only) and TDNN + BiLSTM over
frames stacked by two (subsample)."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from asr_helpers import edit_csv, one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

# hidden_size 256: the output layer's initial bias (1 / sqrt(2 x 256)) no longer outweighs the
# random LSTM's frame-to-frame differences (at 8 every frame said the same character)
ARCHS = {"tdnn": {}, "tdnn+lstm/2": {"num_lstm_layers": 1, "subsample": 2, "hidden_size": 256}}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from ssl_pretrain.checkpoints import CheckpointRef
    root = tmp_path_factory.mktemp("frozen_batching")
    data = write_corpus(root / "data")   # test utterances 0.3, 0.5, 0.55 and 0.7 s
    return root, data, CheckpointRef.resolve(tiny_wav2vec2(root / "w2v"))


@pytest.fixture(scope="module", params=list(ARCHS))
def trained(request, corpus):
    from downstream_asr.frozen import train_frozen
    from ssl_pretrain.model_choice import ModelChoice
    root, data, ref = corpus
    over = {"max_steps": 30, "lr": 1e-6, "batch_seconds": 3, "valid_batch_seconds": 6, "proj_dim": 16, "hidden_size": 8,
            "tdnn_layers": 3, **ARCHS[request.param]}
    out = root / request.param.replace("/", "_")
    summary = train_frozen(ModelChoice(ref), "all", data["train"], data["valid"], out, feature_store=root / "features",
                           overrides=over, progress=False)
    return out, data, summary["brain"], ref


def _hyps(out, name) -> dict:
    lines = (out / f"{name}.hyp.tsv").read_text(encoding="utf-8").splitlines()
    return dict(line.split("\t", 1) for line in lines)


def test_decode_hypotheses_do_not_depend_on_batching_or_order(trained, tmp_path):
    import json

    from downstream_asr.frozen import decode_frozen
    out, data, _, _ = trained
    test = pd.read_csv(data["test"])
    assert test["duration"].max() >= 2 * test["duration"].min()   # clearly different lengths
    shuffled = edit_csv(data["test"], tmp_path / "shuffled.csv", lambda df: df.iloc[[2, 0, 3, 1]])
    decode_frozen(out, data["test"], name="one", batch_seconds=0.01)   # grown to the longest utterance
    decode_frozen(out, data["test"], name="default")
    decode_frozen(out, shuffled, name="shuffled")
    record = {n: json.loads((out / f"{n}.json").read_text()) for n in ("one", "default", "shuffled")}
    # the batching is in each record: four batches of one, one batch of four (shuffled: the same
    # one batch, its utterances in another order)
    assert record["one"]["batching"]["batches"] == len(test) == 4            # one utterance per batch
    assert record["default"]["batching"] == {"batch_seconds": 6.0, "requested_batch_seconds": 6.0,
                                             "order": "by length", "batches": 1}
    assert record["one"]["batching"]["batch_seconds"] == pytest.approx(0.7 * 1.001, abs=1e-3)
    hyps = {n: _hyps(out, n) for n in record}
    # not a blank-only model: characters that differ from utterance to utterance
    assert all(hyps["one"].values()) and len(set(hyps["one"].values())) >= 3, hyps["one"]
    assert hyps["default"] == hyps["one"]
    assert hyps["shuffled"] == hyps["one"]


def test_validation_scores_and_log_probs_do_not_depend_on_batching_or_order(trained):
    """Brain.evaluate runs the validation pass's compute_objectives and on_stage_end: batches of
    one, one batch, batches of 3 and 1 (which SpeechBrain's mean of batch means weighs unevenly),
    and the rows shuffled. Below the hypotheses, every utterance's log-probabilities are the same."""
    import speechbrain as sb

    from downstream_asr.data import read_csv
    from downstream_asr.frozen import csv_segments, feature_dataset
    from downstream_asr.text import TextNorm
    from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
    out, data, brain, ref = trained
    valid = read_csv(data["valid"], TextNorm.from_dict(brain.hparams.text_norm), training=False)
    view = FeatureStore(out.parent / "features").view(SSLExtractor(ref), csv_segments(valid, 16000), "all",
                                                      progress=False)

    def run(rows: pd.DataFrame, batch_size: int) -> tuple[dict, dict]:
        loader = sb.dataio.dataloader.make_dataloader(feature_dataset(rows, view, brain.vocab), batch_size=batch_size)
        brain.evaluate(loader, progressbar=False)
        out = {}
        with torch.no_grad():   # evaluate left the modules in eval mode
            for batch in loader:
                log_probs, rel = brain.forward_logprobs(batch, sb.Stage.TEST)
                n = torch.round(rel * log_probs.shape[1]).long()
                out.update({uid: log_probs[i, :n[i]] for i, uid in enumerate(batch.id)})
        return brain.last_stats, out

    one, probs = run(valid, 1)
    for rows, size in ((valid, len(valid)), (valid, 3), (valid.iloc[[3, 1, 0, 2]], 3)):
        other, other_probs = run(rows, size)
        assert (other["CER"], other["WER"]) == (one["CER"], one["WER"])
        assert float(other["loss"]) == pytest.approx(float(one["loss"]), rel=1e-5, abs=1e-6)
        for uid, lp in probs.items():
            torch.testing.assert_close(other_probs[uid], lp, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(torch.tensor(float(one["loss"])))
