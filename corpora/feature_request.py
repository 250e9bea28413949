"""Which rows of an utterance table at which layers of a model: one typed value.

``Layers`` is the one grammar of every ``--layer``/``--layers`` option and every ``layer``/``layers``
config key: comma-separated items, each ``all`` (every output), ``last`` or a layer number (0 = the
transformer's input), in any case and spacing. ``Layers.resolve(n_outputs)`` turns it into the
layer numbers of a model with that many outputs; ``one`` / ``one_or_all`` are what a consumer of a
single layer (ST, the Kaldi export; frozen ASR, which also takes ``all`` as a learned weighted sum)
accepts of it.

``Request`` is what a frozen-feature consumer reads: the rows of some splits of a corpus (a comma
list of corpora) at some layers, and for the gender probes the balanced, speaker-disjoint
train/valid/test draw made with a seed (``probe_splits``). ``Request.rows(table)`` is the one
choice of those rows: the study's features step extracts them (ssl_pretrain.feature_cover), its
cost estimate weighs them (gendergap.cost), and the probes train and test on them
(analysis.probing.checkpoints.probe_data), so a probe reads exactly what was extracted for it.

Light at import (no pandas, no numpy): the command line's option types use ``Layers``.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corpora.base.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

FORMS = "all, last, a layer number (0 = the transformer's input) or a comma list of them such as 0,3,6"

# The probes' three splits and the table split labels each is drawn from: the one valid|dev mapping.
# (corpora.readers.common.TASK_SPLIT_NAMES also maps `validation`; the probes never read it: adding
# it would change their draw on a table that has such rows.)
PROBE_SPLIT_LABELS = {"train": ("train",), "valid": ("valid", "dev"), "test": ("test",)}
PROBE_SPLITS = tuple(label for labels in PROBE_SPLIT_LABELS.values() for label in labels)
CLASSES = ("F", "M")            # label 0 = F (the paper's She), 1 = M (He)
DEFAULT_MAX_UTTS = {"train": 1000, "valid": 200, "test": 400}


@dataclass(frozen=True)
class Layers:
    """Outputs of a model: every one (``every``), the last (``last``) and/or ``numbers``. ``spec`` is
    the text as given, kept for what records it (a step's key, a run's config); two specs naming
    the same outputs are equal."""
    spec: str = field(compare=False)
    every: bool = False
    last: bool = False
    numbers: tuple[int, ...] = ()

    @classmethod
    def parse(cls, spec, what: str = "--layers") -> Layers:
        """``spec`` (a string, a number, or a list of items such as the store's callers hand in; a
        Layers as itself) read by the grammar of the module doc. An empty or unknown item, or a
        negative number, is one UserError naming ``what``, the spec and the forms accepted."""
        if isinstance(spec, Layers):
            return spec
        if isinstance(spec, (list, tuple)):
            spec = ",".join(str(item) for item in spec)
        elif not isinstance(spec, str) and not isinstance(spec, bool):
            try:
                spec = str(operator.index(spec))
            except TypeError:
                pass
        if not isinstance(spec, str):
            raise UserError(f"{what} {spec!r} is not a layer spec", fix=f"give {FORMS}")
        every = last = False
        numbers = set()
        for item in spec.split(","):
            word = item.strip().lower()
            if word in ("all", "last") or not word:
                every, last = every or word == "all", last or word == "last"
                continue
            try:
                number = int(word)
            except ValueError:
                number = -1
            if number < 0:
                raise UserError(f"{what} {spec!r} is not a layer spec ({item.strip()!r} is not all, last or a "
                                "layer number 0 or more)", fix=f"give {FORMS}")
            numbers.add(number)
        if not (every or last or numbers):
            raise UserError(f"{what} {spec!r} names no layer", fix=f"give {FORMS}")
        return cls(spec, every, last, tuple(sorted(numbers)))

    def __str__(self) -> str:
        return self.spec

    def resolve(self, n_outputs: int, what: str | None = None) -> tuple[int, ...]:
        """The layer numbers of a model with ``n_outputs`` outputs (0..n_outputs-1), sorted, each once;
        a number the model lacks is a UserError naming its layers."""
        if self.every:
            return tuple(range(n_outputs))
        wanted = set(self.numbers) | ({n_outputs - 1} if self.last else set())
        bad = [n for n in sorted(wanted) if n >= n_outputs]
        if bad:
            raise UserError(f"layer {bad[0]} is out of range: this model has layers 0..{n_outputs - 1} "
                            "(0 = the transformer's input)", path=what,
                            fix=f"pass all, last or numbers between 0 and {n_outputs - 1}")
        return tuple(sorted(wanted))

    def one(self, what: str = "--layer") -> int | str:
        """The one layer named, as a run records it: its number, or "last"; all or several layers
        is a UserError (ST and the Kaldi export read one layer)."""
        if not self.every and self.last != bool(self.numbers) and len(self.numbers) <= 1:
            return self.numbers[0] if self.numbers else "last"
        named = "every layer" if self.every else "several layers"
        raise UserError(f"{what} {self.spec!r} names {named}: this reads one layer",
                        fix="give last or one layer number (0 = the transformer's input)")

    def one_or_all(self, what: str = "--layer") -> int | str:
        """"all" (frozen ASR's learned weighted sum of every layer), else ``one``."""
        if self.every:
            return "all"
        if len(self.numbers) + self.last > 1:
            raise UserError(f"{what} {self.spec!r} names several layers: this reads one layer or all",
                            fix="give all (a learned weighted sum of every layer), last or one layer number")
        return self.one(what)


@dataclass(frozen=True)
class Request:
    """The rows a frozen-feature consumer reads (``corpus``: a comma list, None: any; ``splits``: the
    table's split labels) at ``layers``; with ``probe_seed``, the probes' balanced draw from those
    rows (at most ``max_utts`` per split; None: DEFAULT_MAX_UTTS). Coerced on creation: ``splits``
    to a tuple, ``layers`` through Layers.parse, ``max_utts`` to sorted (split, cap) pairs."""
    corpus: str | None
    splits: tuple[str, ...]
    layers: Layers
    probe_seed: int | None = None
    max_utts: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self):
        splits = (self.splits,) if isinstance(self.splits, str) else tuple(self.splits)
        object.__setattr__(self, "splits", splits)
        object.__setattr__(self, "layers", Layers.parse(self.layers))
        if self.max_utts is not None:
            object.__setattr__(self, "max_utts", tuple(sorted(dict(self.max_utts).items())))

    @classmethod
    def probes(cls, corpus: str | None, layers, seed: int, max_utts: dict | None = None) -> Request:
        """What the gender probes read: the draw with ``seed`` from every probe split of ``corpus``."""
        return cls(corpus, PROBE_SPLITS, layers, probe_seed=seed, max_utts=max_utts)

    @classmethod
    def of(cls, value) -> Request:
        """A Request as itself; a dict of its fields (a task type's feature request, a step read back
        from its record) as a Request."""
        if isinstance(value, Request):
            return value
        return cls(value.get("corpus"), value["splits"], value["layers"], value.get("probe_seed"),
                   value.get("max_utts"))

    def plain(self) -> dict:
        """The request as a step's key hashes it and job.json stores it: {corpus, splits, layers (the
        spec as given), probe_seed}, and max_utts only when set."""
        out = {"corpus": self.corpus, "splits": list(self.splits), "layers": self.layers.spec,
               "probe_seed": self.probe_seed}
        return {**out, "max_utts": dict(self.max_utts)} if self.max_utts is not None else out

    def rows(self, table) -> pd.DataFrame:
        """The one choice of feature rows: ``table``'s (a corpora.utterances.UtteranceTable) rows of the
        request's splits and corpora, in table order (none is a UserError); for a probe request,
        its train, valid and test draw (probe_splits), in that order."""
        import pandas as pd

        names = [c.strip() for c in (self.corpus or "").split(",") if c.strip()]
        chosen = table.select(split=list(self.splits), corpus=names or None)
        if self.probe_seed is None:
            return chosen.nonempty(f"corpus {self.corpus!r} in splits {list(self.splits)} for a frozen-feature task",
                                   "check the tasks' corpus and splits in the study config").rows
        drawn = probe_splits(chosen.rows, seed=self.probe_seed, max_utts=dict(self.max_utts or ()),
                             source=table.source)
        return pd.concat([drawn[s] for s in PROBE_SPLIT_LABELS], ignore_index=True)

    @staticmethod
    def parts(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """A probe request's ``rows()`` as its train, valid and test splits again (by their split
        labels, PROBE_SPLIT_LABELS): each as probe_splits drew it."""
        return {s: rows[rows["split"].isin(labels)].reset_index(drop=True) for s, labels in PROBE_SPLIT_LABELS.items()}


def probe_splits(table: pd.DataFrame, *, seed: int = 0, split_names: dict | None = None,
                 max_utts: dict | None = None, source="<table>") -> dict[str, pd.DataFrame]:
    """Rows for train / valid / test, each with as many F as M utterances, speakers disjoint.

    The splits are the table's own ``split`` labels (``split_names`` maps ours to theirs,
    default PROBE_SPLIT_LABELS: train -> train, valid -> valid or dev, test -> test); rows of
    unknown gender (U) are left out. Each split is balanced by down-sampling the larger gender to
    the smaller one's count (utterance counts: the probe classifies utterances), capped at
    ``max_utts[split]`` rows in all; the draw is seeded and independent of row order.
    Raises UserError when a split is missing, holds one gender only, or shares speakers.
    """
    import numpy as np

    from corpora.table import speaker_genders

    names = dict(PROBE_SPLIT_LABELS)
    names.update({k: (v,) if isinstance(v, str) else tuple(v) for k, v in (split_names or {}).items()})
    caps = {**DEFAULT_MAX_UTTS, **(max_utts or {})}
    missing = [c for c in ("id", "speaker", "gender", "split") if c not in table.columns]
    if missing:
        raise UserError(f"the table has no {', '.join(missing)} column", path=source, line=1,
                        fix="probes need an utterance table (corpora.table) with id, speaker, gender, split")
    known = table[table["gender"].isin(CLASSES)]
    speaker_genders(known, source)  # a speaker with two genders is an error, not a label
    out, owner = {}, {}
    rng = np.random.default_rng(seed)
    for split in PROBE_SPLIT_LABELS:
        rows = known[known["split"].isin(names[split])]
        have = sorted(set(rows["gender"]))
        if have != list(CLASSES):
            labels = "/".join(names[split])
            found = f"only {have[0]} speakers" if have else "no F/M rows"
            raise UserError(f"the {split} split ({labels} rows) has {found}", path=source,
                            fix=f"a probe needs female and male speakers in every split: label some F and M "
                                f"speakers {names[split][0]!r} in the split column")
        for spk in rows["speaker"].unique():
            if spk in owner:
                raise UserError(f"speaker {spk!r} is in both the {owner[spk]} and the {split} split", path=source,
                                fix="probe splits must be speaker-disjoint: give each speaker one split label")
            owner[spk] = split
        per_gender = min(int((rows["gender"] == g).sum()) for g in CLASSES)
        per_gender = min(per_gender, max(caps[split] // 2, 1))
        parts = []
        for g in CLASSES:
            ids = np.sort(rows.loc[rows["gender"] == g, "id"].astype(str).to_numpy())
            parts.append(rng.permutation(ids)[:per_gender])
        chosen = set(np.concatenate(parts))
        out[split] = rows[rows["id"].astype(str).isin(chosen)].sort_values("id").reset_index(drop=True)
    return out
