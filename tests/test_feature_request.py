"""Which rows at which layers (corpora.feature_request): the one layer grammar, and the one choice
of feature rows that the features step, its cost and the probes share."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from corpora.base.errors import UserError
from corpora.feature_request import PROBE_SPLITS, Layers, Request, probe_splits
from corpora.utterances import UtteranceTable


@pytest.mark.parametrize("spec, five", [
    ("all", (0, 1, 2, 3, 4)), ("ALL", (0, 1, 2, 3, 4)), ("last", (4,)), (" Last ", (4,)), ("3", (3,)), (3, (3,)),
    ("2,0", (0, 2)), ("0, 2, 2", (0, 2)), ("last,1", (1, 4)), ("0,all", (0, 1, 2, 3, 4)), ("1,", (1,)),
    ([0, 2], (0, 2)), (("last", 1), (1, 4))])
def test_every_form_a_site_accepted_means_what_it_meant(spec, five):
    """The union of the former grammars (feature_cover's comma list with all/last items, the store's
    lists of numbers, the probes' case-insensitive lists, ints from the config)."""
    layers = Layers.parse(spec)
    assert layers.resolve(5) == five and Layers.parse(layers) is layers and str(layers) == (
        spec if isinstance(spec, str) else ",".join(map(str, spec)) if isinstance(spec, (list, tuple)) else str(spec))


@pytest.mark.parametrize("spec", ["", ",", "x", "-1", "1.5", "best", None, True, 2.0])
def test_a_bad_spec_is_one_error_naming_it_and_the_forms(spec):
    with pytest.raises(UserError) as e:
        Layers.parse(spec, "--layers")
    assert f"--layers {spec!r}" in e.value.message and "all, last, a layer number" in e.value.fix


def test_out_of_range_and_one_layer_consumers():
    with pytest.raises(UserError, match="layer 7 is out of range: this model has layers 0..2"):
        Layers.parse("0,7").resolve(3)
    assert [Layers.parse(s).one() for s in ("last", "1", " 2 ")] == ["last", 1, 2]
    assert [Layers.parse(s).one_or_all() for s in ("all", "last", "1")] == ["all", "last", 1]
    for spec, take in (("all", Layers.one), ("0,2", Layers.one), ("last,1", Layers.one), ("0,2", Layers.one_or_all)):
        with pytest.raises(UserError, match="names (every|several) layer"):
            take(Layers.parse(spec), "--layer")


def _table(tmp_path: Path) -> UtteranceTable:
    rows = []
    for corpus in ("a", "b"):
        for split, n in (("train", 8), ("dev", 4), ("test", 6), ("extra", 3)):
            for g in "FMU":
                for i in range(n):
                    rows.append({"id": f"{corpus}-{split}-{g}{i}", "speaker": f"{corpus}-{split}-{g}{i % 2}",
                                 "gender": g, "split": split, "corpus": corpus, "audio": "x.wav"})
    return UtteranceTable(pd.DataFrame(rows), (tmp_path / "t.tsv",))


def test_a_probe_request_is_the_probe_draw_and_splits_back_into_it(tmp_path):
    """The features step extracts Request.rows; the probes train and test on Request.parts of the same
    rows: exactly the draw probe_splits makes of the corpus's rows with the seed (dev read as valid)."""
    table = _table(tmp_path)
    request = Request.probes("a", "all", seed=3, max_utts={"train": 6})
    rows = request.rows(table)
    drawn = probe_splits(table.rows[table.rows["corpus"] == "a"], seed=3, max_utts={"train": 6})
    assert rows.equals(pd.concat(drawn.values(), ignore_index=True)) and len(drawn["train"]) == 6
    assert all(request.parts(rows)[s].equals(drawn[s]) for s in ("train", "valid", "test"))
    assert set(rows["split"]) == {"train", "dev", "test"}
    both = Request.probes("a,b", "all", seed=3).rows(table)
    assert set(both["corpus"]) == {"a", "b"}


def test_a_split_request_is_the_rows_of_its_splits_in_table_order(tmp_path):
    table = _table(tmp_path)
    rows = Request("b", ["test", "dev"], "1").rows(table)
    assert rows["id"].tolist() == table.rows[(table.rows["corpus"] == "b") & table.rows["split"].isin(["test", "dev"])][
        "id"].tolist()
    with pytest.raises(UserError, match="no rows with corpus 'c' in splits \\['test'\\]"):
        Request("c", ["test"], "1").rows(table)


def test_a_request_hashes_as_the_dict_it_replaced():
    """A step's key hashes each request as {corpus, splits, layers (the spec as written), probe_seed}:
    the dicts the features step held before, so a finished study's steps keep their keys."""
    from gendergap.steps.models import FeaturesStep

    old = [{"corpus": "synth-fr", "splits": ["test", "train", "valid"], "layers": "all", "probe_seed": None},
           {"corpus": None, "splits": list(PROBE_SPLITS), "layers": "1", "probe_seed": 0}]
    new = [Request("synth-fr", ["test", "train", "valid"], "all"), Request.probes(None, "1", 0)]
    assert [r.plain() for r in new] == old and [Request.of(d) for d in old] == new

    def step(requests):
        return FeaturesStep(name="features:F", table="t.tsv", ckpt="F", registry="r.json", store="s",
                            requests=requests, device="cpu", precision="fp32")
    assert step(old).make_key([]) == step(new).make_key([]) and step(old).fields()["requests"] == old
