"""Several training seeds for one row: one step per seed, then a step pooling them."""
from __future__ import annotations

from dataclasses import dataclass

from gendergap.steps.base import Graph, Step

SUBSET = "test"   # the score subset of the tasks' test split; a seed's own rows are test@seed<N>


@dataclass(kw_only=True)
class PoolSeedsStep(Step):
    """Pool the per-seed scoring results of one row into mean ± sd and the seed-and-speaker CI,
    stored as one run under ``subset`` (analysis.seeds.pool_and_store)."""
    KIND = "seeds"
    results: list
    seeds: list
    result_key: str | None      # where the scoring result sits in each JSON (bleu), or None
    db: str
    ckpt: str
    task_type: str
    lang_pair: str
    subset: str
    bootstrap: int
    bootstrap_seed: int

    KEY_NAMES = {"bootstrap_seed": "seed"}

    def run(self) -> None:
        from analysis.seeds import pool_and_store

        pool_and_store(self.results, self.seeds, self.result_key, self.db, self.ckpt, self.task_type, self.lang_pair,
                       self.subset, self.bootstrap, self.bootstrap_seed)


def add_seeded(g: Graph, base: Step, per_seed: list[tuple[int, Step, str]], result_key: str | None = None) -> None:
    """Add one step per training seed (``per_seed``: (seed, its step, its result JSON)), each
    storing its own rows under test@seed<N>, then the pooling step, named and placed as the
    single-seed step ``base`` would be, storing mean ± sd and the pooled CI under ``test``.
    ``result_key``: where the scoring result sits in each JSON (ST's: "bleu"; None: the top)."""
    for _, step, result in per_seed:
        g.add(step)
    g.add(PoolSeedsStep(
        name=base.name, results=[r for _, _, r in per_seed], seeds=[s for s, _, _ in per_seed],
        result_key=result_key, db=g.db, ckpt=base.checkpoint,
        task_type=base.kind, lang_pair=base.pair or "", subset=SUBSET, bootstrap=g.bootstrap, bootstrap_seed=g.seed,
        deps=[s.name for _, s, _ in per_seed], task=base.task, checkpoint=base.checkpoint, pair=base.pair))
