"""The built-in synthetic corpus: real espeak-ng and pyrealb, on the test-only ``tiny`` size."""
from __future__ import annotations

import csv
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from corpora.base.errors import UserError
from corpora.synth import gender_set, lexicon, sentences, synthesize
from corpora.synth.voices import EVAL_ROLES, make_speakers
from corpora.synth.worker import median_f0
from corpora.table import read_table
from corpora.utterances import UtteranceTable

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return synthesize(tmp_path_factory.mktemp("synth_a") / "corpus", size="tiny", seed=0)


def _table(path: Path) -> pd.DataFrame:
    df = read_table(path)
    df["path"] = UtteranceTable.load(path).audio_rows()["audio"]
    return df


def test_table_validates_and_audio_matches_it(tiny):
    df = _table(tiny)
    assert set(df["corpus"]) == {"synth-fr", "synth-gender"}
    assert set(df.loc[df.corpus == "synth-fr", "split"]) == {"pretrain", "train", "valid", "test"}
    assert set(df.loc[df.corpus == "synth-gender", "split"]) == {"train", "valid", "test"}
    fr, en = df[df.corpus == "synth-fr"], df[df.corpus == "synth-gender"]
    assert (fr["lang"] == "fr").all() and (fr["tgt_text_en"] != "").all() and (fr["tgt_text_fr"] == "").all()
    assert (en["lang"] == "en").all() and (en["tgt_text_fr"] != "").all()
    for path, dur in zip(df["path"], df["duration"]):
        info = sf.info(path)
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.frames / 16000 == pytest.approx(dur, abs=1e-5)
        assert 0.3 < dur < 5.0
    for rel in df["audio"]:
        parts = Path(rel).parts
        assert parts[0] == "audio" and Path(rel).stem.startswith(parts[1])  # audio/<speaker>/<id>.wav


def test_speakers_disjoint_and_genders_balanced(tiny):
    df = read_table(tiny)
    splits_per_speaker = df.groupby("speaker")["split"].nunique()
    assert (splits_per_speaker == 1).all()
    corpora_per_speaker = df.groupby("speaker")["corpus"].nunique()
    assert (corpora_per_speaker == 1).all()
    for (corpus, split), part in df.groupby(["corpus", "split"]):
        counts = part.groupby("gender")["speaker"].nunique()
        assert counts.get("F", 0) == counts.get("M", 0) >= 1, (corpus, split, counts)
        assert (part["gender"] == "F").sum() == (part["gender"] == "M").sum()
    # Held-out test voices are espeak-ng variants no training or pretraining speaker uses.
    fr = df[df.corpus == "synth-fr"]
    seen = set(fr.loc[fr.split.isin(["pretrain", "train"]), "voice"])
    assert not seen & set(fr.loc[fr.split == "test", "voice"])
    # The test speakers of each gender read one list between them, the k-th female voice the same
    # window as the k-th male one: half sentences heard in training, half new ones.
    test, train_text = fr[fr.split == "test"], set(fr.loc[fr.split == "train", "text"])
    assert sorted(test.loc[test.gender == "F", "text"]) == sorted(test.loc[test.gender == "M", "text"])
    windows = test.groupby("speaker")["text"].apply(tuple)
    assert windows.nunique() == test["speaker"].nunique() // 2
    assert (test["seen_text"] == test["text"].isin(train_text).map({True: "yes", False: "no"})).all()
    assert set(test["seen_text"]) == {"yes", "no"}
    # The gender set's English sentences do not cross splits.
    en = df[df.corpus == "synth-gender"]
    by_split = [set(en.loc[en.split == s, "text"]) for s in ("train", "valid", "test")]
    assert not (by_split[0] & by_split[1] or by_split[0] & by_split[2] or by_split[1] & by_split[2])


def test_female_voices_are_far_higher_than_male(tiny):
    df = _table(tiny)
    per_speaker = {}
    for spk, part in df.groupby("speaker"):
        f0 = [median_f0(sf.read(p, dtype="int16")[0], 16000) for p in part["path"].iloc[:4]]
        per_speaker[spk] = (part["gender"].iloc[0], float(np.median(f0)))
    female = [f for g, f in per_speaker.values() if g == "F"]
    male = [f for g, f in per_speaker.values() if g == "M"]
    assert len(female) >= 6 and len(male) >= 6
    assert min(female) > 150 and max(male) < 135, per_speaker
    assert np.median(female) > 1.6 * np.median(male), per_speaker


def test_evaluation_voices_of_one_variant_are_distinct_voices(tmp_path):
    """The mini corpus's valid and test voices (12 test voices per gender from 4 variants each): two
    voices of one variant differ by at least 10 Hz of median F0, measured on their own audio, and the
    test voices stay in their gender's range (female above 140 Hz, male below 135 Hz)."""
    from corpora.synth.build import SIZES, _run_speakers
    texts = ["Bonjour, je suis très content de vous voir aujourd'hui.", "Le chat noir dort sur le tapis rouge.",
             "Nous partirons demain matin à la première heure."]
    speakers = [s for role in EVAL_ROLES for s in make_speakers("fr", role, *SIZES["mini"].fr[role][:2], seed=0)]
    assert sum(s.role == "test" and s.gender == "F" for s in speakers) >= 12
    facts = _run_speakers(tmp_path, [(str(tmp_path), s, 0, [(f"{s.id}-{j}", t) for j, t in enumerate(texts)])
                                     for s in speakers], workers=2)
    f0 = {s.id: float(np.median([facts[f"{s.id}-{j}"]["f0"] for j in range(len(texts))])) for s in speakers}
    for a in speakers:
        for b in speakers:
            if a.id < b.id and a.role == b.role and a.variant == b.variant:
                assert abs(f0[a.id] - f0[b.id]) >= 10, (a.id, b.id, f0)
    assert all(f0[s.id] > 140 if s.gender == "F" else f0[s.id] < 135 for s in speakers), f0


def test_project_variants_speak_as_distinct_reproducible_voices_of_their_gender(tmp_path, monkeypatch):
    """The mini pretraining pool's female voices: 8 distinct variants, 4 of them the project's own
    (corpora/synth/espeak_variants); the test role's other 4 (two female, two male), each variant in
    one role only. They load from the overlay data folder, speak bit-identically in two runs of fresh
    processes and at their gender's F0; the package's own data folder gains nothing."""
    import espeakng_loader

    from corpora.synth.build import OVERLAY_PREFIX, SIZES, _run_speakers
    from corpora.synth.espeak import PROJECT_VARIANTS_DIR
    own = sorted(p.name for p in PROJECT_VARIANTS_DIR.iterdir())
    pool = make_speakers("fr", "pretrain", *SIZES["mini"].fr["pretrain"][:2], seed=0)
    female = [s for s in pool if s.gender == "F"]
    assert len({s.variant for s in female}) == len(female) == len({s.variant for s in pool if s.gender == "M"})
    in_pool = sorted(s.variant for s in female if s.variant in own)
    tested = make_speakers("fr", "test", 4, 4, seed=0)   # one speaker per test variant
    in_test = sorted(s.variant for s in tested if s.variant in own)
    assert len(in_pool) == len(in_test) == 4 and sorted(in_pool + in_test) == own
    texts = ["Le petit chat dort sur la chaise de la cuisine.", "Elle a vendu sa maison au bord de la mer."]
    ours = [s for s in female + tested if s.variant in own]
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # where the overlay data folder goes
    # a killed run's overlay (its process is gone) is removed by the next run; a live one's is kept
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, live = (tmp_path / "tmp" / f"{OVERLAY_PREFIX}{pid}-x" for pid in (gone.pid, os.getpid()))
    stale.mkdir(), live.mkdir()
    for p in (stale, live):   # both a day old (corpora.base.leftovers): only their processes differ
        os.utime(p, (1, 1))
    runs = [_run_speakers(tmp_path / f"run{k}", [(str(tmp_path / f"run{k}"), s, 0,
                                                   [(f"{s.id}-{j}", t) for j, t in enumerate(texts)]) for s in ours],
                          workers=2) for k in (0, 1)]
    assert {u: f["sha256"] for u, f in runs[0].items()} == {u: f["sha256"] for u, f in runs[1].items()}
    assert len({f["sha256"] for f in runs[0].values()}) == len(ours) * len(texts)   # distinct voices
    gender = {s.id: s.gender for s in ours}
    assert all(f["f0"] > 170 if gender[u.rsplit("-", 1)[0]] == "F" else f["f0"] < 135
               for u, f in runs[0].items()), runs[0]
    assert not set(own) & {p.name for p in (Path(espeakng_loader.get_data_path()) / "voices" / "!v").iterdir()}
    # the overlay is removed after each run; the stale one too, the live process's is not
    assert [p.name for p in (tmp_path / "tmp").glob(f"{OVERLAY_PREFIX}*")] == [live.name]

def test_bit_identical_across_runs_and_rerun_is_skipped(tiny, tmp_path, capsys):
    other = synthesize(tmp_path / "corpus", size="tiny", seed=0)
    sums_a = (tiny.parent / "checksums.sha256").read_text()
    sums_b = (other.parent / "checksums.sha256").read_text()
    assert sums_a == sums_b
    n_wav = sum(1 for _ in (other.parent / "audio").rglob("*.wav"))
    assert len(sums_a.splitlines()) == n_wav + 5  # + table, 3 MuST-SHE TSVs, config
    for line in sums_b.splitlines():  # the checksums describe the files on disk
        digest, rel = line.split("  ", 1)
        assert hashlib.sha256((other.parent / rel).read_bytes()).hexdigest() == digest
    stamp = other.stat().st_mtime_ns
    capsys.readouterr()
    assert synthesize(tmp_path / "corpus", size="tiny", seed=0) == other
    assert "skipped" in capsys.readouterr().out
    assert other.stat().st_mtime_ns == stamp
    # Another seed gives other sentences and other audio.
    third = synthesize(tmp_path / "seed1", size="tiny", seed=1)
    assert (third.parent / "checksums.sha256").read_text() != sums_a


def _score(tsv: Path, hyps: list[str], tmp_path: Path) -> float:
    hyp = tmp_path / f"hyp_{tsv.stem}.txt"
    hyp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    try:
        from analysis.mustshe import score_mustshe
    except ImportError:  # the scorer is another module's; fall back to the official counting
        return _inline_accuracy(tsv, hyps)
    return score_mustshe(tsv, hyp, tokenize=True)["overall"]["accuracy"]


def _inline_accuracy(tsv: Path, hyps: list[str]) -> float:
    rows = list(csv.DictReader(tsv.open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
    correct = wrong = 0
    for row, hyp in zip(rows, hyps):
        tokens = hyp.lower().replace(".", " ").replace(",", " ").replace("?", " ").split()
        for pair in row["GENDERTERMS"].lower().split(";"):
            c, w = pair.split()
            if c in tokens:
                tokens.remove(c)
                correct += 1
            if w in tokens:
                tokens.remove(w)
                wrong += 1
    return 100.0 * correct / max(correct + wrong, 1)


def test_mustshe_references_score_100_and_wrong_ones_0(tiny, tmp_path):
    out = tiny.parent
    for split in ("train", "valid", "test"):
        tsv = out / f"mustshe_{split}.tsv"
        rows = list(csv.DictReader(tsv.open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
        assert list(rows[0]) == gender_set.MUSTSHE_COLUMNS
        assert _score(tsv, [r["REF"] for r in rows], tmp_path) == 100.0
        assert _score(tsv, [r["WRONG-REF"] for r in rows], tmp_path) == 0.0
    df = read_table(out / "utterances.tsv")
    en = df[df.corpus == "synth-gender"]
    assert set(en["category"]) <= {"1F", "1M", "2F", "2M"}
    # Category 1: the same English sentence from a woman and a man needs two references.
    cat1 = en[en.category.str.startswith("1")]
    by_text = cat1.groupby("text")
    assert (by_text["gender"].nunique() == 2).all()
    assert (by_text["tgt_text_fr"].nunique() == 2).all()
    assert ((cat1.category.str[1]) == cat1.gender).all()


def test_gender_references_swap_exactly_the_marked_words():
    frames = gender_set.sample_frames(80, seed=3)
    cats = Counter(f.category for f, _ in frames)
    assert cats[1] == 40 and cats[2] == 40
    assert {f.template for f, _ in frames} == {"adj", "noun", "participle"}
    for frame, en in frames:
        for gender in ("F", "M"):
            refs = gender_set.gendered_reference(frame, gender)
            ref, wrong = refs.ref.split(), refs.wrong.split()
            assert len(ref) == len(wrong) and refs.terms
            changed = [(a, b) for a, b in zip(ref, wrong) if a != b]
            assert len(changed) == len(refs.terms)
            for (c, w), (a, b) in zip(refs.terms, changed):
                assert a.lower().strip(".,?") == c and b.lower().strip(".,?") == w
    # The classic example, category 1 and category 2.
    tired = gender_set.Frame(1, "adj", ("fatigué", "tired", False, "present"))
    assert gender_set.realise(tired, "en", "F") == "I am tired."
    assert gender_set.gendered_reference(tired, "F").ref == "Je suis fatiguée."
    assert gender_set.gendered_reference(tired, "M").genderterms == "fatigué fatiguée"
    sister = gender_set.Frame(2, "adj", ("fatigué", "tired", False, "present"), ("kin", 0), "F")
    refs = gender_set.gendered_reference(sister, "F")
    assert (refs.ref, refs.wrong) == ("Ma soeur est fatiguée.", "Ma soeur est fatigué.")


def test_sentences_vary_enough_to_learn_not_memorise():
    triples = sentences.sample_sentences(700, seed=0)
    fr = [t[1] for t in triples]
    assert len(set(fr)) == 700 and len({t[2] for t in triples}) > 650
    assert triples == sentences.sample_sentences(700, seed=0)  # deterministic
    words = Counter(w.lower().strip(".,?") for s in fr for w in s.replace("'", "' ").split())
    assert 250 < len(words) < 900
    assert {t[0].template for t in triples} == {"trans", "intrans", "be_adj", "trans_place"}
    assert sum(t[0].negative for t in triples) > 30 and sum(t[0].question for t in triples) > 10
    assert all(len(s.split()) <= sentences.MAX_WORDS for s in fr)
    # Agreement is pyrealb's: a feminine subject makes a feminine adjective.
    plan = sentences.Plan("be_adj", sentences.NounPhrase(noun=lexicon.Noun("tante", "aunt", "person"), det="poss1"),
                          adj=lexicon.Adj("content", "happy", ("person",)))
    assert sentences.realise_pair(plan) == ("Ma tante est contente.", "My aunt is happy.")


def test_unknown_size_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown synthetic corpus size"):
        synthesize(tmp_path, size="huge")


@pytest.mark.slow
def test_killed_run_leaves_no_half_file_and_reruns(tmp_path, tiny):
    out = tmp_path / "corpus"
    code = f"from corpora.synth import synthesize; synthesize({str(out)!r}, size='tiny', seed=0)"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any((out / "audio").rglob("*.wav")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and its worker processes
    proc.wait()
    time.sleep(0.2)
    assert not (out / "checksums.sha256").exists()
    for wav in (out / "audio").rglob("*.wav"):
        data, sr = sf.read(wav, dtype="int16")
        assert sr == 16000 and len(data) == sf.info(wav).frames > 0
    table = synthesize(out, size="tiny", seed=0)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert (out / "checksums.sha256").read_text() == (tiny.parent / "checksums.sha256").read_text()
    assert table.is_file()


def test_lexicon_realises_in_both_languages():
    import pyrealb as rb

    for lang, words in (("fr", [("N", n.fr) for n in lexicon.NOUNS] + [("A", a.fr) for a in lexicon.ADJECTIVES]
                         + [("V", v.fr) for v in lexicon.VERBS] + [("N", p.fr_noun) for p in lexicon.PLACES]),
                        ("en", [("N", n.en) for n in lexicon.NOUNS] + [("A", a.en) for a in lexicon.ADJECTIVES]
                         + [("V", v.en) for v in lexicon.VERBS])):
        sentences.use_lang(lang)
        unknown = [w for kind, w in words if "[[" in getattr(rb, kind)(w).realize()]
        assert not unknown, (lang, unknown)


def test_the_synthesis_cpu_time_is_reaped_into_the_caller(tmp_path):
    """The workers speak in processes forked by multiprocessing's forkserver, which reaps them;
    the forkserver is stopped and waited for at the end, so their CPU time reaches the caller's
    children's time (a study job's cpu_s, `/usr/bin/time`) instead of vanishing with an orphan."""
    code = ("import resource, sys\n"
            "from multiprocessing import forkserver\n"
            "from corpora.synth import synthesize\n"
            "synthesize(sys.argv[1], size='tiny', seed=0)\n"
            "kids = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(kids.ru_utime + kids.ru_stime, forkserver._forkserver._forkserver_pid)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "corpus")], check=True,
                         capture_output=True, text=True, cwd=REPO).stdout.split()
    children_cpu, server_pid = float(out[-2]), out[-1]
    assert server_pid == "None"
    assert children_cpu >= 1.0, children_cpu   # the speaking itself: ~0.02 s when the server was left running


@pytest.mark.parametrize("module", ["corpora.synth", "corpora.synth.worker"])
def test_the_package_and_the_worker_import_no_sentence_generator(module):
    """corpora.synth reads SIZES/synthesize from build.py on first use: importing the package, or the
    module a synthesis worker process imports, pulls in neither build.py nor pyrealb (nor pandas)."""
    code = (f"import {module}, sys\n"
            "print(' '.join(m for m in ('pyrealb', 'corpora.synth.build', 'pandas') if m in sys.modules) or 'none')\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "none", f"import {module} pulled in: {out.stdout.strip()}"
    if module != "corpora.synth":
        return
    code = ("from corpora.synth import SIZES, synthesize\nimport sys\n"
            "print('pyrealb' in sys.modules, callable(synthesize))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO)
    assert out.stdout.split() == ["True", "True"]   # the names still resolve, build.py then imported
