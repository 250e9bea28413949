"""The gender probes' test predictions are batch-invariant (DESIGN "Measurement invariance"): the
attention probe read one utterance per batch, in its default batches of 32, in one batch, and
with the test utterances shuffled gives the same prediction, attention weights and F1 for every
utterance; the mean/max/position baselines likewise; `probe_layers` with the test rows shuffled
scores the same. Tiny random features with a gender cue, of clearly different lengths (4 to 60
frames), so every batch pads most of its utterances."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.probing import Recipe, probe_layers, run_baseline, score, train_attention_probe
from analysis.probing.attention import evaluate
from analysis.probing.baselines import BASELINES, fit_logistic, pool

FAST = Recipe(lr=3e-3, max_epochs=15)


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny probes: one thread is faster on a shared machine
    yield
    torch.set_num_threads(old)


def _split(rng, n: int, dim: int = 6):
    """n sequences [T, D] (T 4..60) and labels; class 1 shifts a few random frames' first dims."""
    labels = np.arange(n) % 2
    seqs = []
    for y in labels:
        x = rng.normal(size=(int(rng.integers(4, 61)), dim)).astype(np.float32)
        cue = rng.choice(len(x), size=max(1, len(x) // 8), replace=False)
        x[cue, :2] += 1.5 * (2 * y - 1)
        seqs.append(x)
    return seqs, labels


@pytest.fixture(scope="module")
def splits():
    rng = np.random.default_rng(0)
    return {name: _split(rng, n) for name, n in (("train", 96), ("valid", 32), ("test", 70))}


def test_attention_probe_predictions_do_not_depend_on_batching_or_order(splits):
    r = train_attention_probe(splits["train"], splits["valid"], splits["test"], seed=0, recipe=FAST)
    seqs, labels = [torch.from_numpy(s) for s in splits["test"][0]], splits["test"][1]
    assert 0 < r.test_pred.sum() < len(labels), r.test_pred    # both classes predicted
    _, pred, attn = evaluate(r.model, seqs, labels, batch_size=1)
    assert (pred == r.test_pred).all()                          # the default batches of 32 said the same
    assert score(labels, pred) == score(labels, r.test_pred)
    order = np.random.default_rng(1).permutation(len(seqs))
    for batch_size, idx in ((len(seqs), np.arange(len(seqs))), (32, order), (5, order)):
        loss, p, a = evaluate(r.model, [seqs[i] for i in idx], labels[idx], batch_size)
        assert (p == pred[idx]).all(), batch_size
        for k, i in enumerate(idx):   # the padding got no weight: each utterance's own weights sum to 1
            np.testing.assert_allclose(a[k], attn[i], rtol=1e-5, atol=1e-7)
        assert loss == pytest.approx(evaluate(r.model, seqs, labels, 1)[0], rel=1e-6)
    assert all(abs(a.sum() - 1) < 1e-5 for a in attn)


def test_baselines_predict_each_utterance_alone(splits):
    """No batching there: each utterance pools to one vector. Fitting on the same train rows
    and predicting the test rows shuffled, or one at a time, gives the same predictions."""
    train, valid, test = splits["train"], splits["valid"], splits["test"]
    order = np.random.default_rng(2).permutation(len(test[0]))
    shuffled = ([test[0][i] for i in order], test[1][order])
    for how in BASELINES:
        _, pred = run_baseline(how, train, valid, test, seed=0)
        _, pred_shuffled = run_baseline(how, train, valid, shuffled, seed=0)
        assert (pred_shuffled == pred[order]).all(), how
        clf = fit_logistic(pool(train[0], how), np.asarray(train[1]), seed=0)
        one_by_one = np.concatenate([clf.predict(pool([s], how)) for s in test[0]])
        assert (one_by_one == pred).all(), how


class ArrayFeatures:
    """Hidden states by id, as a feature-store view hands them to the probes (one layer)."""
    n_layers = 1

    def __init__(self, by_id: dict):
        self.by_id = by_id

    def layer(self, ids, layer: int):
        return [self.by_id[i] for i in ids]


def test_probe_layers_scores_do_not_depend_on_the_test_rows_order(splits):
    rows, by_id = {}, {}
    for name, (seqs, labels) in splits.items():
        ids = [f"{name}{i:03d}" for i in range(len(seqs))]
        by_id.update(zip(ids, seqs))
        rows[name] = pd.DataFrame({"id": ids, "gender": np.where(labels == 0, "F", "M")})
    feats = ArrayFeatures(by_id)
    shuffled = {**rows, "test": rows["test"].sample(frac=1.0, random_state=3).reset_index(drop=True)}
    a, b = (probe_layers(feats, s, [0], ["attention", "mean"], seed=0, recipe=FAST, progress=False)
            for s in (rows, shuffled))
    assert [(r.probe, r.test, r.valid_f1_macro, r.best_epoch) for r in a] == \
           [(r.probe, r.test, r.valid_f1_macro, r.best_epoch) for r in b]
    assert 50 < a[0].test["f1_macro"] < 100    # learnt something, not everything: a real test


def test_padding_each_split_once_trains_the_probe_padding_each_batch_trains(splits, monkeypatch):
    """Padded (a split zero-padded once, batches cut from it) against padding every batch anew:
    the same losses every epoch, the same predictions and attention weights."""
    import analysis.probing.attention as attention
    once = train_attention_probe(splits["train"], splits["valid"], splits["test"], seed=0, recipe=FAST)
    plain_init = attention.Padded.__init__

    def per_batch(self, seqs, max_mb=256):
        plain_init(self, seqs, max_mb=0)     # over budget: the per-batch path
        assert self.all is None
    monkeypatch.setattr(attention.Padded, "__init__", per_batch)
    each = train_attention_probe(splits["train"], splits["valid"], splits["test"], seed=0, recipe=FAST)
    assert [h["valid_loss"] for h in once.history] == [h["valid_loss"] for h in each.history]
    assert [h["train_loss"] for h in once.history] == [h["train_loss"] for h in each.history]
    assert np.array_equal(once.test_pred, each.test_pred) and once.best_epoch == each.best_epoch
    assert all(np.array_equal(a, b) for a, b in zip(once.test_attention, each.test_attention))
