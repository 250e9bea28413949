"""`probe run` as a keyword function: features from the feature store (ssl_pretrain), gender probes,
scores, store rows and plots from analysis.probing. The CLI leaf and the sweep's probe steps call it."""
from __future__ import annotations

from corpora.base.errors import UserError
from corpora.feature_request import Request
from gendergap.options import store_path
from gendergap.runs.leaf import cli_leaf


@cli_leaf("probe run")
def probe_run(*, ckpt: list[str], table: str | list[str], out: str, name: str | None = None,
              registry: str | None = None,
              corpus: str | None = None, layers: str = "all", probes: str = "attention,mean,max,positions",
              db: str | None = None, seed: int = 0, control: bool = False, random_init: bool = True,
              max_train: int = 1000, max_valid: int = 200, max_test: int = 400, lr: float = 1e-4,
              trust_checkpoint: bool = False, device: str = "auto", precision: str = "fp32",
              feature_store: str | None = None, max_epochs: int = 400, quiet: bool = False) -> dict:
    """Train and score gender probes on every requested layer of each checkpoint in ``ckpt`` (a list of
    names or paths, each possibly comma-separated; with ``random_init`` also its random-init twin),
    store the rows in ``db`` and write results, TSV and plots under ``out``. The `probe run` CLI leaf
    and the sweep's step both call it. Returns {checkpoint: [probe results]} (probe_results.json)."""
    from analysis.probing import Recipe, parse_probes
    from analysis.probing.checkpoints import probe_data, probe_models
    from ssl_pretrain.device import device_and_precision, runtime_info

    device, precision = device_and_precision(device, precision)
    probes = parse_probes(probes)
    ckpts = [c.strip() for arg in ckpt for c in arg.split(",") if c.strip()]
    if name and len(ckpts) != 1:
        raise UserError("--name needs exactly one --ckpt", fix="drop --name to file each under its own name")
    # the rows the study's features step extracted for these probes (Request.rows), drawn with the seed
    request = Request.probes(corpus, layers, seed, max_utts={"train": max_train, "valid": max_valid, "test": max_test})
    splits, rows = probe_data(table, request)
    models = _models(ckpts, registry, name=name, trust=trust_checkpoint, random_init=random_init, seed=seed,
                     device=device, precision=precision)
    store = store_path(feature_store)

    def view_of(model):   # only the layers probed: the entry the study's features step extracted for them
        wanted = request.layers.resolve(model.extractor.n_outputs, "--layers")
        return model.features(store, rows, wanted, progress=not quiet)

    return probe_models(models, view_of, table, splits, out, corpus=corpus, layers=request.layers, probes=probes,
                        control=control, seed=seed, recipe=Recipe(lr=lr, max_epochs=max_epochs),
                        runtime=runtime_info(device, precision), db=db, quiet=quiet)


def _models(ckpts: list[str], registry: str | None, *, name: str | None, trust: bool, random_init: bool,
            seed: int, device: str, precision: str) -> list:
    """The models to probe (ssl_pretrain.model_choice.ModelChoice), each followed by its seeded
    random-init twin when asked."""
    from ssl_pretrain.model_choice import ModelChoice

    models = []
    for ckpt in ckpts:
        model = ModelChoice.resolve(ckpt, registry, name=name, trust=trust, device=device, precision=precision)
        models.append(model)
        if random_init and not model.ref.is_fbank:  # filterbanks have no weights to randomise
            models.append(model.twin(seed))
    return models
