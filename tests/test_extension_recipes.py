"""docs/architecture.md's recipes, each done once from outside the package, as a newcomer would:
a corpus reader added to READERS is a `corpus index --kind`; an SSL family (a renamed wav2vec 2.0,
registered with transformers and added to FAMILIES) goes through `ckpt add`, `ckpt list` and the
feature store and gives the features of the model it renames. The downstream task's recipe is
tests/toy_task.py (tests/test_steps.py) and the metric's is in tests/test_score_cli.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from asr_helpers import one_thread, write_corpus  # noqa: F401 (fixture)
from family_helpers import tiny_family_model
from gendergap.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def read_toy(root, *, check, split=None):
    """A toy layout: ROOT/utts.txt, one `id|speaker|gender|wav|transcript` per line."""
    from corpora.readers.common import finish_table

    rows = []
    for n, line in enumerate((root / "utts.txt").read_text(encoding="utf-8").splitlines(), start=1):
        uid, speaker, gender, wav, text = line.split("|")
        rows.append({"id": uid, "speaker": speaker, "gender_raw": gender, "audio": str(root / wav), "text": text,
                     "split": split or "train", "corpus": "toy", "lang": "fr", "_src": str(root / "utts.txt"),
                     "_line": n})
    return finish_table(rows, source=root / "utts.txt", check=check)


def test_a_reader_added_to_readers_is_a_corpus_index_kind(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from corpora.readers import READERS
    from corpora.table import read_table

    root = tmp_path / "toy"
    (root / "wav").mkdir(parents=True)
    lines = []
    for i, (spk, gender, seconds) in enumerate([("a", "female", 0.5), ("b", "M", 0.75), ("a", "f", 1.0)]):
        sf.write(root / "wav" / f"u{i}.wav", np.zeros(int(16000 * seconds), np.float32), 16000)
        lines.append(f"u{i}|{spk}|{gender}|wav/u{i}.wav|bonjour {i}")
    (root / "utts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setitem(READERS, "toy", lambda root, check, split=None: read_toy(Path(root), check=check, split=split))
    out = tmp_path / "toy.tsv"
    assert main(["corpus", "index", "--kind", "toy", "--root", str(root), "--split", "dev", "--out", str(out)]) == 0
    table = read_table(out)
    assert table["id"].tolist() == ["u0", "u1", "u2"] and table["gender"].tolist() == ["F", "M", "F"]
    assert table["duration"].tolist() == [0.5, 0.75, 1.0] and set(table["split"]) == {"dev"}
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["corpus", "index", "--help"])
    assert "toy" in capsys.readouterr().out   # offered by --kind like the built-in layouts


@pytest.fixture()
def toy_family(monkeypatch):
    """A renamed wav2vec 2.0: its own config and model classes registered with transformers, and a
    Family in ssl_pretrain.families.FAMILIES (the two places the recipe names)."""
    import transformers as T

    from ssl_pretrain import families

    class ToyConfig(T.Wav2Vec2Config):
        model_type = "toy-w2v"

    class ToyModel(T.Wav2Vec2Model):
        config_class = ToyConfig

    T.AutoConfig.register("toy-w2v", ToyConfig, exist_ok=True)
    T.AutoModel.register(ToyConfig, ToyModel, exist_ok=True)
    monkeypatch.setitem(families.FAMILIES, "toy-w2v", families.Family("toy-w2v", "toy wav2vec 2.0", "waveform"))
    return ToyConfig


def test_an_ssl_family_added_to_families_runs_like_the_model_it_renames(toy_family, tmp_path, capsys):
    from transformers import AutoModel

    original = tiny_family_model(tmp_path / "w2v", "wav2vec2", seed=1)
    toy = tmp_path / "toy"
    config = json.loads((original / "config.json").read_text())
    model = AutoModel.from_config(toy_family(**{k: v for k, v in config.items() if k != "model_type"}))
    model.load_state_dict(AutoModel.from_pretrained(original).state_dict())
    model.save_pretrained(toy)
    (toy / "preprocessor_config.json").write_text((original / "preprocessor_config.json").read_text())
    assert json.loads((toy / "config.json").read_text())["model_type"] == "toy-w2v"

    reg = tmp_path / "ckpts.json"
    for name, folder in (("T", toy), ("W", original)):
        assert main(["ckpt", "add", name, str(folder), "--hours", "1", "--registry", str(reg)]) == 0
    entry = json.loads(reg.read_text())["checkpoints"][0]
    assert entry["family"] == "toy-w2v" and entry["front_end"] == "conv, GroupNorm" and entry["layers"] == 2
    capsys.readouterr()
    assert main(["ckpt", "list", "--registry", str(reg)]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:2] == ["T", "toy-w2v"]

    corpus = write_corpus(tmp_path / "data", {"test": 4})
    views = {}
    for name in ("T", "W"):
        assert main(["ckpt", "features", name, "--registry", str(reg), "--table", str(corpus["table"]),
                     "--layer", "all", "--feature-store", str(tmp_path / "store"), "--device", "cpu"]) == 0
        from corpora.utterances import UtteranceTable
        from ssl_pretrain.model_choice import ModelChoice
        rows = UtteranceTable.load(corpus["table"]).audio_rows()
        views[name] = ModelChoice.resolve(name, reg).features(tmp_path / "store", rows, "all", progress=False)
    t, w = views["T"], views["W"]
    assert t.dir != w.dir and t.layers == w.layers == [0, 1, 2]   # two entries: two checkpoints by content
    for uid in t.ids:
        assert np.array_equal(t.get(uid), w.get(uid))   # the same weights, the same forward
