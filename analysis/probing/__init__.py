"""Gender probes on hidden-state sequences (Fucci et al. 2025, Appendices A and B).

Reads hidden states through a feature-store view the caller hands in; imports no training package.

    from analysis.probing import (probe_splits, parse_probes, probe_layers, rows_for_store, probe_table, Recipe)
    from corpora.feature_request import Layers
    splits = probe_splits(table, seed=0)
    feats = FeatureStore("runs/features").view(SSLExtractor(ref), rows, "all")   # ssl_pretrain.feature_store
    results = probe_layers(feats, splits, list(Layers.parse("all").resolve(feats.n_layers)),
                           parse_probes("attention,mean,max,positions"), seed=0, control=True)
    store.add_scores(run_id, rows_for_store(results, "F-tiny", seed=0))

Modules: recipe (lr halving / early stopping), attention (the probe and its loop),
baselines (Appendix A), data (what a feature source provides; the splits are
corpora.feature_request's probe draw), run (scoring, store encoding),
figures (plots, probe-F1 vs MuST-SHE accuracy correlation).
"""
from analysis.probing.attention import AttentionProbe, attention_profile, train_attention_probe
from analysis.probing.baselines import BASELINES, POSITIONS, pool, run_baseline
from analysis.probing.data import CLASSES, Features, standardise
from analysis.probing.recipe import Plateau, Recipe
from analysis.probing.run import (
                                  PROBE_GROUPS,
                                  ProbeResult,
                                  f1_by_layer,
                                  parse_probes,
                                  probe_layers,
                                  probe_table,
                                  rows_for_store,
                                  score,
)
from corpora.feature_request import probe_splits

__all__ = ["AttentionProbe", "attention_profile", "train_attention_probe", "BASELINES", "POSITIONS", "pool",
           "run_baseline", "CLASSES", "Features", "probe_splits", "standardise", "Plateau",
           "Recipe", "PROBE_GROUPS", "ProbeResult", "f1_by_layer", "parse_probes", "probe_layers", "probe_table",
           "rows_for_store", "score"]
