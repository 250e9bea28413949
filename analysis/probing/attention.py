"""The attention probe of the probing paper (its §2) and its training loop.

The states X [T, D] of one utterance are projected to keys K = X W_K and values V = X W_V
(W_K, W_V: D x D); one learnable query q scores every frame, a = softmax(K q / sqrt(D)),
o = a^T V is classified by one linear layer (Xavier-initialised) and a softmax. The weights
``a`` say which frames the probe used; their mean profile is what the paper's Appendix E plots.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from analysis.probing.recipe import Plateau, Recipe


class AttentionProbe(nn.Module):
    """One learnable query attending over a padded batch of hidden-state sequences."""

    def __init__(self, dim: int, n_classes: int = 2):
        super().__init__()
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.query = nn.Parameter(torch.randn(dim) / math.sqrt(dim))
        self.classify = nn.Linear(dim, n_classes)
        nn.init.xavier_uniform_(self.classify.weight)  # Appendix B: Xavier-initialised output layer
        nn.init.zeros_(self.classify.bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, D], mask [B, T] (True = real frame) -> (logits [B, C], attention [B, T])."""
        # The same numbers as softmax(K q / sqrt(D)) and a^T V with K = X W_K^T, V = X W_V^T, in the
        # cheaper order: K q = X (W_K^T q) and a^T (X W_V^T) = (a^T X) W_V^T, so no [T, D] x [D, D]
        # product per frame (T times fewer flops; the parameters are exactly the paper's).
        scores = x @ (self.key.weight.t() @ self.query) / math.sqrt(x.shape[-1])
        attn = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        pooled = self.value(torch.einsum("bt,btd->bd", attn, x))
        return self.classify(pooled), attn


def _tensors(seqs: list[np.ndarray]) -> list[torch.Tensor]:
    return [torch.from_numpy(np.ascontiguousarray(s, dtype=np.float32)) for s in seqs]


def _pad(seqs: list[torch.Tensor], idx) -> tuple[torch.Tensor, torch.Tensor]:
    xs = [seqs[i] for i in idx]
    lengths = torch.tensor([len(x) for x in xs])
    x = nn.utils.rnn.pad_sequence(xs, batch_first=True)
    return x, torch.arange(x.shape[1])[None, :] < lengths[:, None]


class Padded:
    """A split's sequences zero-padded once, [N, T_max, D], so that a batch is one gather (or a
    view, for consecutive rows) cut to its own longest utterance: the tensor ``_pad`` builds for
    it, without padding every batch again each epoch (a quarter of a probe's training time). A
    split larger than ``max_mb`` padded is padded per batch instead (real corpora, 768-d states)."""

    def __init__(self, seqs: list[torch.Tensor], max_mb: float = 256):
        self.seqs = seqs
        self.lengths = torch.tensor([len(x) for x in seqs])
        t_max, dim = (int(self.lengths.max()), int(seqs[0].shape[-1])) if seqs else (0, 0)
        self.all = nn.utils.rnn.pad_sequence(seqs, batch_first=True) if len(seqs) * t_max * dim * 4 <= max_mb * 2**20 \
            else None

    def __len__(self) -> int:
        return len(self.seqs)

    def batch(self, idx) -> tuple[torch.Tensor, torch.Tensor]:
        if self.all is None:
            return _pad(self.seqs, idx)
        if isinstance(idx, range):
            rows = slice(idx.start, idx.stop)
            lengths = self.lengths[rows]
        else:
            rows = torch.as_tensor(idx)
            lengths = self.lengths[rows]
        t = int(lengths.max())
        return self.all[rows, :t].contiguous(), torch.arange(t)[None, :] < lengths[:, None]


@torch.no_grad()
def evaluate(model, seqs, labels, batch_size) -> tuple[float, np.ndarray, list[np.ndarray]]:
    """Mean cross-entropy, predictions and per-utterance attention weights of ``seqs`` (a list of
    [T, D] tensors, or Padded) in their order, ``batch_size`` at a time. Batch-invariant: padding gets no
    attention (masked to -inf before the softmax) and adds nothing to the pooled vector, so an
    utterance's numbers do not depend on its batch (tests/test_batch_invariance_probes.py)."""
    model.eval()
    total, preds, weights = 0.0, [], []
    y = torch.tensor(np.asarray(labels), dtype=torch.long)
    padded = seqs if isinstance(seqs, Padded) else None
    for start in range(0, len(seqs), batch_size):
        idx = range(start, min(start + batch_size, len(seqs)))
        x, mask = padded.batch(idx) if padded is not None else _pad(seqs, idx)
        logits, attn = model(x, mask)
        total += float(nn.functional.cross_entropy(logits, y[start:idx.stop], reduction="sum"))
        preds.append(logits.argmax(-1).numpy())
        lengths = mask.sum(1).tolist()
        weights += [attn[b, :n].numpy().copy() for b, n in enumerate(lengths)]
    return total / max(len(seqs), 1), np.concatenate(preds) if preds else np.zeros(0, int), weights


@dataclass
class AttentionResult:
    """A trained probe's test predictions and what its training did."""
    test_pred: np.ndarray
    valid_pred: np.ndarray
    test_attention: list[np.ndarray]
    history: list[dict]          # per epoch: train_loss, valid_loss, lr, improved
    best_epoch: int
    model: AttentionProbe | None = None   # with the best validation epoch's weights (evaluate() reads it)


def train_attention_probe(train: tuple[list[np.ndarray], np.ndarray], valid: tuple[list[np.ndarray], np.ndarray],
                          test: tuple[list[np.ndarray], np.ndarray], *, n_classes: int = 2, seed: int = 0,
                          recipe: Recipe = Recipe(), progress: bool = False) -> AttentionResult:
    """Train on ``train`` (list of [T, D] arrays, int labels) with early stopping on ``valid``;
    the weights of the best validation epoch predict ``test``. Deterministic for a seed."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    seqs, labels = Padded(_tensors(train[0])), train[1]
    valid, test = (Padded(_tensors(valid[0])), valid[1]), (_tensors(test[0]), test[1])
    dim = int(seqs.seqs[0].shape[-1])
    model = AttentionProbe(dim, n_classes)
    optimiser = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    plateau = Plateau(recipe)
    y = torch.tensor(np.asarray(labels), dtype=torch.long)
    best_state, best_epoch, history = copy.deepcopy(model.state_dict()), 0, []
    bar = tqdm(range(recipe.max_epochs), desc="attention probe", unit="epoch", disable=not progress, leave=False)
    for epoch in bar:
        model.train()
        order = torch.randperm(len(seqs), generator=gen)
        train_loss = 0.0
        for start in range(0, len(seqs), recipe.batch_size):
            idx = order[start:start + recipe.batch_size]
            x, mask = seqs.batch(idx)
            logits, _ = model(x, mask)
            loss = nn.functional.cross_entropy(logits, y[idx])
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            train_loss += float(loss.detach()) * len(idx)
        valid_loss, _, _ = evaluate(model, valid[0], valid[1], recipe.batch_size)
        improved, lr, stop = plateau.step(valid_loss)
        for group in optimiser.param_groups:
            group["lr"] = lr
        history.append({"epoch": epoch + 1, "train_loss": train_loss / len(seqs), "valid_loss": valid_loss,
                        "lr": lr, "improved": improved})
        if improved:
            best_state, best_epoch = copy.deepcopy(model.state_dict()), epoch + 1
        bar.set_postfix(valid_loss=f"{valid_loss:.4f}", lr=f"{lr:.1e}")
        if stop:
            break
    model.load_state_dict(best_state)
    _, valid_pred, _ = evaluate(model, valid[0], valid[1], recipe.batch_size)
    _, test_pred, test_attn = evaluate(model, test[0], test[1], recipe.batch_size)
    return AttentionResult(test_pred, valid_pred, test_attn, history, best_epoch, model)


def attention_profile(weights: list[np.ndarray], points: int = 100) -> np.ndarray:
    """Mean attention over relative positions: each utterance's weights linearly interpolated
    to ``points`` positions in [0, 1] (Appendix E) and renormalised to sum 1, so long and
    short utterances count alike; then averaged. A flat profile is 1/points everywhere."""
    grid = np.linspace(0.0, 1.0, points)
    rows = []
    for a in weights:
        a = np.asarray(a, dtype=float)
        pos = np.linspace(0.0, 1.0, len(a)) if len(a) > 1 else np.zeros(1)
        r = np.interp(grid, pos, a) if len(a) > 1 else np.full(points, a[0])
        rows.append(r / r.sum())
    return np.mean(rows, axis=0) if rows else np.full(points, np.nan)
