"""Probe every requested layer with every requested probe; scores, store rows, the probe table.

Results-store encoding (task ``probe``; read back by ``probe_table``):

    checkpoint  the model's name (``NAME+random-init`` for its random-init twin)
    task        probe
    subset      test                     (the evaluation split, like every other row)
    metric      f1_macro:L<layer>:<probe>   gender all   macro F1 in percent
                accuracy:L<layer>:<probe>   gender all   accuracy in percent
                recall:L<layer>:<probe>     gender F / M recall of that class in percent
    <probe>     attention, mean, max, pos0, pos25, pos50, pos75, pos100; with ``+shuffled``
                for the shuffled-label control

Layer and probe live in the metric (as MuST-SHE's ``coverage:1F`` does) so that the report's
``--subset test`` still sees probe rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, f1_score, recall_score
from tqdm.auto import tqdm

from analysis.probing.attention import attention_profile, train_attention_probe
from analysis.probing.baselines import BASELINES, POSITIONS, run_baseline
from analysis.probing.data import CLASSES, Features, labels_of, standardise
from analysis.probing.recipe import Recipe
from corpora.base.errors import UserError

PROBE_GROUPS = {"attention": ("attention",), "mean": ("mean",), "max": ("max",),
                "positions": tuple(f"pos{p}" for p in POSITIONS)}
CONTROL_SUFFIX = "+shuffled"
SIGNATURE = "probe:{probe}|recipe:bs{bs}-lr{lr:g}-half{lp}-stop{sp}@{md:g}|zscore:train|seed:{seed}"


def parse_probes(text: str) -> list[str]:
    """'attention,mean,max,positions' -> the individual probes (positions = pos0..pos100)."""
    out = []
    for name in (t.strip().lower() for t in str(text).split(",") if t.strip()):
        if name in PROBE_GROUPS:
            out += PROBE_GROUPS[name]
        elif name in BASELINES:
            out.append(name)
        else:
            raise UserError(f"unknown probe {name!r}", path="--probes",
                            fix=f"choose from {', '.join(PROBE_GROUPS)} (or one position: pos0, pos25, ...)")
    if not out:
        raise UserError("no probe named", path="--probes", fix="e.g. --probes attention,mean,max,positions")
    return list(dict.fromkeys(out))


def score(y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    """Macro F1, accuracy and per-class recall, in percent."""
    recall = recall_score(y_true, y_pred, labels=[0, 1], average=None, zero_division=0)
    return {"f1_macro": 100 * f1_score(y_true, y_pred, labels=[0, 1], average="macro", zero_division=0),
            "accuracy": 100 * accuracy_score(y_true, y_pred),
            "recall": {g: 100 * float(r) for g, r in zip(CLASSES, recall)}}


@dataclass
class ProbeResult:
    layer: int
    probe: str
    test: dict                      # score() on the test split
    valid_f1_macro: float
    n: dict                         # utterances per split
    best_epoch: int | None = None
    epochs: int | None = None
    profile: list | None = None     # attention probes: mean attention over 100 relative positions
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


def probe_layers(features: Features, splits: dict[str, pd.DataFrame], layers: list[int], probes: list[str], *,
                 seed: int = 0, control: bool = False, recipe: Recipe = Recipe(),
                 progress: bool = True) -> list[ProbeResult]:
    """Train and test every probe on every layer; with ``control`` also each on shuffled labels.

    The shuffled-label control permutes the train and valid labels (seeded) and tests on the
    true labels: it should stay near chance (50 % F1), showing the probe cannot memorise.
    """
    ids = {s: splits[s]["id"].astype(str).tolist() for s in ("train", "valid", "test")}
    y = {s: labels_of(splits[s]) for s in ("train", "valid", "test")}
    rng = np.random.default_rng(seed + 7919)
    y_shuffled = {s: rng.permutation(y[s]) for s in ("train", "valid")}
    n = {s: len(ids[s]) for s in ids}
    results = []
    runs = [(p, False) for p in probes] + ([(p, True) for p in probes] if control else [])
    for layer in tqdm(layers, desc="layers", unit="layer", disable=not progress):
        x_train, x_valid, x_test = standardise(*(features.layer(ids[s], layer) for s in ("train", "valid", "test")))
        for probe, shuffled in runs:
            y_tr, y_va = (y_shuffled["train"], y_shuffled["valid"]) if shuffled else (y["train"], y["valid"])
            name = probe + (CONTROL_SUFFIX if shuffled else "")
            if probe == "attention":
                r = train_attention_probe((x_train, y_tr), (x_valid, y_va), (x_test, y["test"]),
                                          seed=seed, recipe=recipe, progress=progress)
                results.append(ProbeResult(layer, name, score(y["test"], r.test_pred),
                                           score(y_va, r.valid_pred)["f1_macro"], n, r.best_epoch,
                                           len(r.history), attention_profile(r.test_attention).tolist()))
            else:
                valid_pred, test_pred = run_baseline(probe, (x_train, y_tr), (x_valid, y_va), (x_test, y["test"]), seed)
                results.append(ProbeResult(layer, name, score(y["test"], test_pred),
                                           score(y_va, valid_pred)["f1_macro"], n))
    return results


def rows_for_store(results: list[ProbeResult], checkpoint: str, seed: int, recipe: Recipe = Recipe(),
                   subset: str = "test") -> list[dict]:
    """ResultsStore rows (task ``probe``), encoded as the module docstring says."""
    rows = []
    for r in results:
        sig = SIGNATURE.format(probe=r.probe, bs=recipe.batch_size, lr=recipe.lr, lp=recipe.lr_patience,
                               sp=recipe.stop_patience, md=recipe.min_delta, seed=seed)
        if r.probe.split("+")[0] != "attention":
            sig = f"probe:{r.probe}|sklearn:SGDClassifier(log_loss)|zscore:train|seed:{seed}"
        base = {"checkpoint": checkpoint, "task": "probe", "lang_pair": "", "subset": subset,
                "n_utts": r.n["test"], "signature": sig}
        tag = f"L{r.layer}:{r.probe}"
        rows.append({**base, "gender": "all", "metric": f"f1_macro:{tag}", "value": float(r.test["f1_macro"])})
        rows.append({**base, "gender": "all", "metric": f"accuracy:{tag}", "value": float(r.test["accuracy"])})
        for g in CLASSES:
            rows.append({**base, "gender": g, "metric": f"recall:{tag}", "value": float(r.test["recall"][g]),
                         "n_utts": r.n["test"] // 2})
    return rows


def probe_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Probe rows of a store's scores() as columns checkpoint, layer, probe, measure, gender, value.
    A probe-task row whose metric is not ``measure:L<layer>:probe`` (an imported score) is left out
    here; the report lists it with the other scores."""
    sub = scores[(scores["task"] == "probe") & scores["metric"].str.fullmatch(r"[^:]+:L\d+:.+")]
    parts = sub["metric"].str.split(":", n=2, expand=True)
    if sub.empty or parts.shape[1] < 3:
        return pd.DataFrame(columns=["checkpoint", "layer", "probe", "measure", "gender", "value", "subset", "id"])
    out = pd.DataFrame({"checkpoint": sub["checkpoint"].to_numpy(), "layer": parts[1].str[1:].astype(int).to_numpy(),
                        "probe": parts[2].to_numpy(), "measure": parts[0].to_numpy(),
                        "gender": sub["gender"].to_numpy(), "value": sub["value"].astype(float).to_numpy(),
                        "subset": sub["subset"].to_numpy(), "id": sub["id"].to_numpy()})
    return out


def f1_by_layer(results: list[ProbeResult]) -> pd.DataFrame:
    """Layer x probe table of test macro F1 (percent), from in-memory results."""
    df = pd.DataFrame([{"layer": r.layer, "probe": r.probe, "f1_macro": r.test["f1_macro"]} for r in results])
    return df.pivot(index="layer", columns="probe", values="f1_macro") if len(df) else df
