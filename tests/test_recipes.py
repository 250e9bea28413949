"""The recipes for corpora researchers already have (configs/commonvoice-covost2.yaml,
configs/fleurs-voxpopuli.yaml, docs/recipes.md), followed as a new user would: stand-in folders in the
released layouts (a Common Voice French release with 48 kHz mp3 clips and blank genders, CoVoST 2's
fr-en TSV built on it, FLEURS's headerless TSVs, VoxPopuli's per-year ogg clips), tiny random models
in the places `hf download` fills, the commands of docs/recipes.md in order from one working folder,
and the recipe's dry run with its own GPU resources and SLURM executor. What a user edits is the
selection's hours (the stand-ins hold minutes, not 100 h) and nothing else."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import soundfile as sf
import yaml

from cli_helpers import run_lines
from fixtures_corpora import CV_HEADER, write_audio
from st_helpers import tiny_wav2vec

REPO = Path(__file__).resolve().parent.parent
LARGE = ["F-1K-Large", "M-1K-Large", "LB-1K-Large", "LB-3K-Large", "LB-7K-Large"]
SENTENCES = ["le chat dort sur le tapis", "il fait beau ce matin", "nous partons demain", "elle lit un livre",
             "le train arrive en retard", "ils chantent dans la rue"]
TRANSLATIONS = ["the cat sleeps on the rug", "the weather is nice this morning", "we leave tomorrow",
                "she reads a book", "the train is late", "they sing in the street"]


def _cv_release(root: Path) -> list[tuple]:
    """cv-corpus-17.0-2024-03-15/fr as released: train/dev/test/validated TSVs, mp3 clips at 48 kHz, the new
    gender spelling, speakers whose gender is blank (a third of them), and the old release CoVoST 2 was built
    on (cv-corpus-4-2019-12-10/fr, the same clips and the old spellings). Returns (split, client, clip, gender,
    take) rows."""
    new, old = root / "cv-corpus-17.0-2024-03-15" / "fr", root / "cv-corpus-4-2019-12-10" / "fr"
    speakers = {"train": (6, 6, 3), "dev": (2, 2, 1), "test": (3, 3, 2)}   # F, M, blank
    rows = [(split, f"{split}{g}{s:02d}" + "0" * 40, f"common_voice_fr_{1000 * (i + 1) + 100 * j + 10 * s + k}.mp3",
             g, k) for i, (split, counts) in enumerate(speakers.items()) for j, (g, n) in enumerate(zip("FMU", counts))
            for s in range(n) for k in range(3)]
    spelling = {"F": ("female_feminine", "female"), "M": ("male_masculine", "male"), "U": ("", "")}
    tsv: dict[tuple, list[str]] = {}
    for n, (split, client, clip, g, k) in enumerate(rows):
        for d in (new, old):
            write_audio(d / "clips" / clip, 0.9 + 0.1 * k, sr=48000, fmt="MP3",
                        freq={"F": 210, "M": 120, "U": 160}[g] + 3 * n)
        for d, label in zip((new, old), spelling[g]):
            line = f"{client}\t{clip}\t{SENTENCES[n % len(SENTENCES)]}\t2\t0\tthirties\t{label}\t\t\tfr\t"
            tsv.setdefault((d, split), []).append(line)
            tsv.setdefault((d, "validated"), []).append(line)
    for (d, name), body in tsv.items():
        (d / f"{name}.tsv").write_text("\n".join([CV_HEADER, *body]) + "\n", encoding="utf-8")
    return rows


def _covost(root: Path, rows: list[tuple]) -> None:
    """covost_tsv/covost_v2.fr_en.tsv (path, sentence, translation, client_id, split): CV 4's splits,
    a third of train as train_covost."""
    d = root / "covost_tsv"
    d.mkdir()
    out = ["path\tsentence\ttranslation\tclient_id\tsplit"]
    for i, (split, client, clip, _, k) in enumerate(rows):
        j = i % len(SENTENCES)
        covost_split = "train_covost" if split == "train" and k == 2 else split
        out.append(f"{clip}\t{SENTENCES[j]}\t{TRANSLATIONS[j]}\t{client}\t{covost_split}")
    (d / "covost_v2.fr_en.tsv").write_text("\n".join(out) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def cv_covost(tmp_path_factory):
    """The working folder of docs/recipes.md's Common Voice + CoVoST 2 section, its downloads in place."""
    work = tmp_path_factory.mktemp("cv-covost2")
    _covost(work, _cv_release(work))
    names = {"F-1K-Large": "wav2vec-FR-1K-Female-large", "M-1K-Large": "wav2vec-FR-1K-Male-large",
             "LB-1K-Large": "wav2vec2-FR-1K-large", "LB-3K-Large": "wav2vec2-FR-3K-large",
             "LB-7K-Large": "wav2vec2-FR-7K-large", "F-1K-base": "wav2vec-FR-1K-Female-base",
             "M-1K-base": "wav2vec-FR-1K-Male-base"}
    for folder in names.values():   # what `hf download LeBenchmark/<folder> --local-dir models/<folder>` leaves
        tiny_wav2vec(work / "models" / folder)
    return work


def _user_copy(work: Path, recipe: str, **selection_edits) -> Path:
    """The recipe as a user keeps it: unchanged but for the selection's hours (the stand-ins are minutes)."""
    cfg = yaml.safe_load((REPO / "configs" / recipe).read_text(encoding="utf-8"))
    for name, edits in selection_edits.items():
        cfg["selections"][name].update(edits)
    path = work / recipe
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def test_commonvoice_covost2_recipe_dry_runs_on_released_layouts_with_gpu_resources(cv_covost, capsys, monkeypatch):
    work = cv_covost
    monkeypatch.chdir(work)
    steps = [
        ["corpus", "index", "--kind", "commonvoice", "--root", "cv-corpus-17.0-2024-03-15/fr", "--corpus",
         "commonvoice-fr", "--out", "tables/cv_fr.tsv"],
        ["corpus", "filter", "tables/cv_fr.tsv", "--drop-unknown-gender", "valid,test", "--out",
         "tables/cv_fr.known.tsv"],
        ["corpus", "index", "--kind", "covost2", "--root", "covost_tsv", "--cv-root", "cv-corpus-4-2019-12-10/fr",
         "--tgt-lang", "en", "--corpus", "covost2-fr-en", "--out", "tables/covost2_fr_en.tsv"],
        ["corpus", "filter", "tables/covost2_fr_en.tsv", "--drop-unknown-gender", "valid,test",
         "--out", "tables/covost2_fr_en.known.tsv"]]
    said = []
    for argv in steps:
        rc, out, err = run_lines(capsys, *argv)
        assert rc == 0, (argv, err)
        said.append(out)
    # the release's dev is the tasks' valid; blank genders dropped from valid and test only
    assert "valid: 1 speaker(s), 3 row(s) of unknown gender dropped" in said[1], said[1]
    assert "test: 2 speaker(s), 6 row(s) of unknown gender dropped" in said[1], said[1]
    cfg = _user_copy(work, "commonvoice-covost2.yaml", **{"asr-balanced": {"hours_per_gender": None,
                                                                           "valid_hours": 0.001}})
    rc, out, err = run_lines(capsys, "sweep", "--config", cfg, "--out", "runs/cv-covost2", "--dry-run")
    assert rc == 0, "\n".join(err[-5:]) + out[-3000:]
    assert "inputs checked: no problem found" in out
    # GPU jobs as the recipe asks, as SLURM arrays of its tasks
    for task, n, res in (("features", 5, "64 GB 1440"), ("features", 2, "32 GB 720"), ("asr-frozen", 5, "64 GB 1440"),
                         ("asr-frozen-base", 2, "32 GB 720"), ("asr-e2e", 2, "64 GB 2880"), ("st", 5, "64 GB 2880"),
                         ("probes", 5, "64 GB 600")):
        assert re.search(rf"^  gg-{re.escape(task)} +{n} job\(s\) +--array=0-{n - 1}%8 +8 cpu 1 gpu {res} min$", out,
                         re.M), (task, out)
    # one extraction per checkpoint serves its frozen-feature tasks and probes (all at fp16)
    assert len(re.findall(r"^  pending  features:", out, re.M)) == 7
    # the cost plan: GPU-hours per stage and the feature store per folder, one layer per frozen task
    assert re.search(r"^  total +36 +[\d.]+ [KMGT]?B +[\d.]+ (s|min|h) +[\d.]+ (s|min|h)$", out, re.M), out
    store = out[out.index("feature store "):]
    assert re.search(r"features:F-1K-Large:fp16 +\d+ layer\(s\), [\d.]+ [KMG]?B per layer", store), store
    assert re.search(r"features:F-1K-base:fp16 +1 layer\(s\), [\d.]+ [KMG]?B per layer", store), store
    # LeBenchmark's 3K and 7K sets hold speech of unknown gender: the share and its range said
    assert "LB-7K-Large: 35.9 % F of its speech of known gender; 62.6 % of its speech is of unknown gender" in out
    assert not (work / "runs" / "cv-covost2" / "sweep" / "jobs").exists()


def test_the_recipe_page_gives_the_commands_the_test_ran():
    """docs/recipes.md is the manual the test follows: each command line above, in the page."""
    page = (REPO / "docs" / "recipes.md").read_text(encoding="utf-8")
    for line in ("gendergap corpus filter tables/cv_fr.tsv --drop-unknown-gender valid,test "
                 "--out tables/cv_fr.known.tsv",
                 "--kind covost2 --root covost_tsv --cv-root cv-corpus-4-2019-12-10/fr",
                 "hf download LeBenchmark/wav2vec-FR-1K-Female-large --local-dir models/wav2vec-FR-1K-Female-large",
                 "gendergap sweep --config configs/commonvoice-covost2.yaml --out runs/cv-covost2 --dry-run"):
        assert line in page, line
    assert "huggingface-cli" not in page


def _fleurs(root: Path) -> None:
    """fleurs/data/fr_fr: headerless test.tsv (id, file, raw, normalised, chars, samples, gender), audio/test/."""
    d = root / "fleurs" / "data" / "fr_fr"
    lines = []
    for i in range(12):
        g = ("FEMALE", "MALE")[i % 2]
        name = f"{10_000_000_000 + 7919 * i}.wav"
        seconds = 0.8 + 0.05 * i
        write_audio(d / "audio" / "test" / name, seconds, freq=200 if g == "FEMALE" else 115)
        text = SENTENCES[i % len(SENTENCES)]
        chars = " ".join(text.replace(" ", "|"))
        lines.append(f"{1500 + i // 2}\t{name}\t{text.capitalize()}.\t{text}\t{chars}\t{int(seconds * 16000)}\t{g}")
    (d / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _voxpopuli(root: Path) -> None:
    """voxpopuli/transcribed_data/fr: asr_test.tsv and <year>/<id>.ogg (colons in the ids)."""
    d = root / "voxpopuli" / "transcribed_data" / "fr"
    lines = ["id\traw_text\tnormalized_text\tspeaker_id\tsplit\tgender\tis_gold_transcript\taccent"]
    for i in range(12):
        spk, g = 100 + i // 2, ("female", "male", "")[(i // 2) % 3]
        uid = f"2019011{i % 3}-0900-PLENARY-{i}-fr_2019011{i % 3}-09:1{i % 6}:0{i % 10}_{i}"
        write_audio(d / uid[:4] / f"{uid}.ogg", 0.9, fmt="OGG", freq=205 if g == "female" else 118)
        text = SENTENCES[i % len(SENTENCES)]
        lines.append(f"{uid}\t{text.capitalize()}.\t{text}\t{spk}\ttest\t{g}\tTrue\tNone")
    (d / "asr_test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _tiny_ctc(folder: Path) -> Path:
    """A random Wav2Vec2ForCTC with its processor (a character vocabulary), as a CTC model on the Hub ships."""
    import json

    from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC, Wav2Vec2Processor
    encoder = tiny_wav2vec(folder.parent / f"{folder.name}-encoder")
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{c: i + 3 for i, c in enumerate("abcdefghijklmnopqrstuvwxyzéèàù'")}}
    (folder.parent / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    Wav2Vec2ForCTC.from_pretrained(str(encoder), vocab_size=len(vocab), pad_token_id=0).save_pretrained(folder)
    tok = Wav2Vec2CTCTokenizer(str(folder.parent / "vocab.json"), unk_token="<unk>", pad_token="<pad>",
                               word_delimiter_token="|")
    Wav2Vec2Processor(feature_extractor=Wav2Vec2FeatureExtractor(), tokenizer=tok).save_pretrained(folder)
    return folder


def test_fleurs_voxpopuli_recipe_dry_runs_released_models_per_corpus(tmp_path, capsys, monkeypatch):
    from test_transcribe import build_tiny_whisper

    monkeypatch.chdir(tmp_path)
    _fleurs(tmp_path)
    _voxpopuli(tmp_path)
    build_tiny_whisper(tmp_path / "models" / "whisper-large-v3")
    _tiny_ctc(tmp_path / "models" / "wav2vec2-large-xlsr-53-french")
    for argv in (["corpus", "index", "--kind", "fleurs", "--root", "fleurs/data/fr_fr", "--corpus", "fleurs-fr",
                  "--split", "test", "--out", "tables/fleurs_fr.tsv"],
                 ["corpus", "index", "--kind", "voxpopuli", "--root", "voxpopuli/transcribed_data/fr", "--corpus",
                  "voxpopuli-fr", "--split", "test", "--out", "tables/voxpopuli_fr.tsv"],
                 ["corpus", "filter", "tables/voxpopuli_fr.tsv", "--drop-unknown-gender", "test",
                  "--out", "tables/voxpopuli_fr.known.tsv"]):
        rc, out, err = run_lines(capsys, *argv)
        assert rc == 0, (argv, err)
    assert sf.info(next((tmp_path / "voxpopuli" / "transcribed_data" / "fr" / "2019").glob("*.ogg"))
                   ).samplerate == 16000
    cfg = _user_copy(tmp_path, "fleurs-voxpopuli.yaml")
    rc, out, err = run_lines(capsys, "sweep", "--config", cfg, "--out", "runs/fv", "--dry-run")
    assert rc == 0, "\n".join(err[-5:]) + out[-3000:]
    assert "inputs checked: no problem found" in out
    for model in ("whisper-large-v3", "xlsr-53-french"):
        for corpus in ("fleurs-fr", "voxpopuli-fr"):
            assert re.search(rf"^  pending  released:{model}:{corpus} +8 cpu 1 gpu 32 GB 240 min", out, re.M), (
                model, corpus)


def test_only_tasks_that_run_their_own_models_may_leave_checkpoints_out(tmp_path):
    """A study of released models alone needs no checkpoints; one task on the study's checkpoints does."""
    from corpora.base.errors import UserError
    from gendergap.config import load_config

    released = yaml.safe_load((REPO / "configs" / "fleurs-voxpopuli.yaml").read_text(encoding="utf-8"))
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(released), encoding="utf-8")
    assert load_config(ok).checkpoints == {}
    released["tasks"]["asr-frozen"] = {"corpus": "fleurs-fr"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(released), encoding="utf-8")
    with pytest.raises(UserError, match="the config lists no checkpoints"):
        load_config(bad)
