"""Probing whole models: every requested layer of each model, cached, stored, tabulated and plotted.

What `gendergap probe run` and the sweep's probes step do once the models are resolved. The
hidden states come through ``view_of(model)``, a feature-store view the caller builds
(ssl_pretrain.feature_store), so this package still imports no training package; a model is
anything with ``name`` and ``describe()`` (ssl_pretrain.checkpoints.CheckpointRef).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pandas as pd

from analysis.probing.recipe import Recipe
from analysis.probing.run import ProbeResult, f1_by_layer, probe_layers, rows_for_store
from analysis.store import ResultsStore
from corpora.base.atomic import atomic_open, write_json
from corpora.base.boundary import read_state_json
from corpora.base.provenance import config_hash, file_fingerprint
from corpora.feature_request import Layers, Request
from corpora.table import table_fingerprint, table_paths
from corpora.utterances import UtteranceTable


def probe_data(table: str | list[str], request: Request) -> tuple[dict, pd.DataFrame]:
    """(splits, rows): a probe ``request``'s rows of the table (Request.rows, the rows the study's
    features step extracts for it: the balanced train/valid/test draw), as its three splits and
    together (audio absolute)."""
    frame = UtteranceTable.load(table)   # one table, or several merged (corpora.merge)
    rows = request.rows(frame)
    splits = request.parts(rows)
    rows = UtteranceTable(rows, frame.sources).audio_rows()
    print("probe data: " + ", ".join(f"{s} {len(splits[s])} utts ({splits[s]['speaker'].nunique()} speakers)"
                                     for s in ("train", "valid", "test")))
    return splits, rows


def probe_models(models: list, view_of: Callable, table: str, splits: dict, out: str | Path, *,
                 corpus: str | None, layers, probes: list, control: bool, seed: int, recipe: Recipe,
                 runtime: dict, db: str | None = None, quiet: bool = False) -> dict:
    """Probe each model (ssl_pretrain.model_choice.ModelChoice values; results under ``out``/probes/<model>/,
    rows in ``db``), then write
    probe_results.json, probe_f1.tsv and the plots. Returns {model: [probe results]}."""
    out = Path(out).resolve()
    store = None
    if db:
        store = ResultsStore(db)
    summary, f1_rows, profiles = {}, [], {}
    try:
        for model in models:
            print(f"\n== {model.name}")
            results = _probe_one(model, view_of(model), splits, table=table, corpus=corpus, layers=layers,
                                 probes=probes, control=control, seed=seed, recipe=recipe, runtime=runtime, out=out,
                                 store=store, db=db, quiet=quiet)
            print_table(model.name, results)
            summary[model.name] = [r.as_dict() for r in results]
            f1_rows += [{"checkpoint": model.name, "layer": r.layer, "probe": r.probe, "value": r.test["f1_macro"]}
                        for r in results]
            att = [r for r in results if r.probe == "attention"]
            if att:
                best = max(att, key=lambda r: (r.valid_f1_macro, -r.layer))
                profiles[f"{model.name} · layer {best.layer}"] = best.profile
    finally:
        if store is not None:
            store.close()
    _write_outputs(out, summary, f1_rows, profiles)
    return summary


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "model"


def _probe_one(model, feats, splits, *, table: str, corpus: str | None, layers, probes: list, control: bool,
               seed: int, recipe: Recipe, runtime: dict, out: Path, store, db: str | None, quiet: bool) -> list:
    """One model's probe results: read back from its results.json when the config matches, else trained
    and written there; stored in the results DB once per config."""
    label = model.name
    layers = list(Layers.parse(layers).resolve(feats.n_layers, "--layers"))
    config = {"kind": "probe", "checkpoint": label, "ssl": model.ref.describe(), "runtime": runtime,
              "features": feats.describe()["entry"], "table": table_fingerprint(table), "corpus": corpus,
              "ids": config_hash({s: splits[s]["id"].tolist() for s in splits}), "layers": layers,
              "probes": probes, "control": control, "seed": seed, "recipe": recipe.__dict__}
    result_path = out / "probes" / _slug(label) / "results.json"
    done = read_state_json(result_path, "probe results")
    if done and done.get("config_hash") == config_hash(config):
        print(f"  already probed with this config: {result_path}")
        results = [ProbeResult(**r) for r in done["results"]]
    else:
        results = probe_layers(feats, splits, layers, probes, seed=seed, control=control,
                               recipe=recipe, progress=not quiet)
        write_json(result_path, {"config_hash": config_hash(config), "config": config,
                                 "results": [r.as_dict() for r in results]})
    if store is not None and store.find_done(config, kind="probe") is None:
        run_id = store.start_run("probe", config, name=label, seed=seed,
                                 inputs=[file_fingerprint(p) for p in table_paths(table)])
        n = store.add_scores(run_id, rows_for_store(results, label, seed, recipe), finish=True)
        print(f"  {n} rows -> {db} (run {run_id})")
    return results


def print_table(label: str, results: list) -> None:
    """Test macro F1 by layer, and each probe's layer chosen by validation F1."""
    table = f1_by_layer(results)
    print(f"\n{label}: test macro F1 (%) by layer")
    print(table.round(1).to_string())
    for probe in dict.fromkeys(r.probe for r in results):
        # the layer a user would pick without peeking at test: best validation F1
        best = max((r for r in results if r.probe == probe), key=lambda r: (r.valid_f1_macro, -r.layer))
        rec = best.test["recall"]
        print(f"  {probe:20s} best layer by valid F1: {best.layer}  test F1 {best.test['f1_macro']:.1f}  "
              f"recall F {rec['F']:.1f} M {rec['M']:.1f}")


def _write_outputs(out: Path, summary: dict, f1_rows: list, profiles: dict) -> None:
    """probe_results.json, probe_f1.tsv and the F1-by-layer and attention-profile plots under ``out``."""
    from analysis.probing.figures import plot_attention_profiles, plot_f1_by_layer

    write_json(out / "probe_results.json", summary)
    f1 = pd.DataFrame(f1_rows)
    with atomic_open(out / "probe_f1.tsv") as f:
        f1.to_csv(f, sep="\t", index=False, float_format="%.4f")
    plots = [p for p in (plot_f1_by_layer(f1, out / "f1_by_layer.png"),
                         plot_attention_profiles(profiles, out / "attention_profile.png")) if p]
    print(f"\nwrote {out / 'probe_results.json'}, {out / 'probe_f1.tsv'}" + "".join(f", {p}" for p in plots))
