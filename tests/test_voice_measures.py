"""The voice's own measures (corpora.voice_measures): Praat's F0 against known truth (tones of a
known pitch, and every voice of the built-in corpus against the generator's own estimate), speech
length and rate, the content-keyed cache, and `gendergap corpus measure`."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from cli_helpers import run_lines
from corpora.table import new_table, write_table
from corpora.voice_measures import CACHE_NAME, measure_samples, measure_table, read_measures, speaker_medians

SR = 16_000


def voiced(f0: float, seconds: float, lead: float = 0.3, seed: int = 0) -> np.ndarray:
    """A harmonic complex at ``f0`` Hz (a 3 % vibrato), ``lead`` s of faint noise on both sides."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.03 * np.sin(2 * np.pi * 4 * t))) / SR
    tone = sum(np.sin(k * phase) / k for k in range(1, 8)) * 0.2
    pad = rng.normal(0, 1e-4, int(lead * SR))
    return np.concatenate([pad, tone, pad]).astype(np.float32)


def test_praat_f0_and_speech_length_of_tones_of_known_pitch():
    for f0 in (95.0, 130.0, 210.0, 300.0):
        m = measure_samples(voiced(f0, 1.0), SR)
        assert m["f0_median_hz"] == pytest.approx(f0, rel=0.01), (f0, m)
        assert m["voiced_frac"] > 0.5
        assert 0.5 < m["f0_range_st"] < 1.5          # the vibrato: +-3 % is about 1 semitone p10-p90
        assert m["speech_s"] == pytest.approx(1.0, abs=0.05)
        assert m["duration_s"] == pytest.approx(1.6, abs=1e-3)
        assert m["snr_db"] > 40


def test_every_voice_of_the_built_in_corpus_agrees_with_the_generator(tmp_path):
    """Every voice of the mini corpus (French pretraining, train, valid and test voices, the English
    gender set's) speaks three sentences; Praat's median F0 over them is within 8 % of the
    generator's own estimate on the same audio (corpora.synth.worker.median_f0, the number
    synth_config.json records per speaker)."""
    from corpora.synth.build import SIZES, _run_speakers
    from corpora.synth.voices import ROLES, make_speakers
    size = SIZES["mini"]
    speakers = [s for role in ROLES for s in make_speakers("fr", role, *size.fr[role][:2], seed=0)]
    speakers += [s for split, (f, m, _) in size.gender.items() for s in make_speakers("en", split, f, m, seed=0)]
    texts = {"fr": ["Bonjour, je suis très content de vous voir aujourd'hui.", "Le chat noir dort sur le tapis rouge.",
                    "Nous partirons demain matin à la première heure."],
             "en": ["The doctor finished her shift late at night.", "My brother bought a new red bicycle.",
                    "We will leave early tomorrow morning."]}
    jobs = [(str(tmp_path), s, 0, [(f"{s.id}-{j}", t) for j, t in enumerate(texts[s.lang])]) for s in speakers]
    facts = _run_speakers(tmp_path, jobs, workers=2)
    off = {}
    for s in speakers:
        ours = [measure_samples(sf.read(tmp_path / "audio" / s.id / f"{s.id}-{j}.wav", dtype="float32")[0])
                ["f0_median_hz"] for j in range(3)]
        theirs = [facts[f"{s.id}-{j}"]["f0"] for j in range(3)]
        off[s.id] = float(np.median(ours) / np.median(theirs) - 1)
    assert len(off) == len(speakers) >= 60
    worst = max(off, key=lambda k: abs(off[k]))
    assert abs(off[worst]) <= 0.08, (worst, off[worst])


@pytest.fixture()
def tone_table(tmp_path):
    rows = []
    for spk, gender, f0 in (("w1", "F", 220.0), ("m1", "M", 110.0)):
        for i in range(3):
            path = tmp_path / "audio" / f"{spk}-{i}.wav"
            path.parent.mkdir(exist_ok=True)
            sf.write(path, voiced(f0 * (1 + 0.02 * i), 0.8 + 0.2 * i, seed=i), SR)
            rows.append({"id": f"{spk}-{i}", "audio": f"audio/{spk}-{i}.wav", "offset": 0.0, "duration": None,
                         "sample_rate": SR, "speaker": spk, "gender": gender, "corpus": "tones", "lang": "fr",
                         "split": "test" if i else "train", "text": "un deux trois quatre" if i else "un"})
    table = tmp_path / "tones.tsv"
    df = new_table(rows)
    df["duration"] = [sf.info(tmp_path / a).duration for a in df["audio"]]
    write_table(df, table)
    return table


def test_measures_are_cached_by_content_and_an_edited_file_is_measured_again(tone_table, tmp_path, monkeypatch):
    import corpora.voice_measures as vm
    from corpora.table import read_table
    table = read_table(tone_table)
    first = measure_table(table, tone_table, tmp_path / "cache", progress=False)
    assert (tmp_path / "cache" / CACHE_NAME).is_file()
    assert first.loc[first["id"] == "w1-1", "rate_wps"].item() == pytest.approx(4 / 1.0, rel=0.06)
    assert first.loc[first["id"] == "w1-0", "words"].item() == 1
    calls = []
    real = vm.measure_samples
    monkeypatch.setattr(vm, "measure_samples", lambda x, sr: calls.append(len(x)) or real(x, sr))
    again = measure_table(table, tone_table, tmp_path / "cache", progress=False)
    assert calls == [] and again.equals(first)
    # the same audio under another id is the same segment: served from the cache
    renamed = table.assign(id=table["id"] + "-copy")
    assert measure_table(renamed, tone_table, tmp_path / "cache", progress=False)["f0_median_hz"].tolist() == \
        first["f0_median_hz"].tolist() and calls == []
    sf.write(tmp_path / "audio" / "m1-2.wav", voiced(150.0, 1.2, seed=2), SR)    # edited: other audio
    edited = measure_table(table, tone_table, tmp_path / "cache", progress=False)
    assert len(calls) == 1
    assert edited.loc[edited["id"] == "m1-2", "f0_median_hz"].item() == pytest.approx(150, rel=0.01)


def test_corpus_measure_command_writes_utterance_and_speaker_tables(tone_table, tmp_path, capsys):
    out, spk = tmp_path / "m.tsv", tmp_path / "s.tsv"
    rc, stdout, err = run_lines(capsys, "corpus", "measure", tone_table, "--split", "test", "--out", out,
                                "--speakers", spk, "--cache", tmp_path / "cache")
    assert rc == 0 and err == [] and "4 utterances, 2 speakers" in stdout
    m = read_measures(out)
    assert sorted(m["id"]) == ["m1-1", "m1-2", "w1-1", "w1-2"]
    s = pd.read_csv(spk, sep="\t")
    assert s.set_index("speaker")["f0_median_hz"].to_dict() == pytest.approx({"m1": 110 * 1.03, "w1": 220 * 1.03},
                                                                               rel=0.01)
    assert speaker_medians(m)["utterances"].tolist() == [2, 2]
    rc, _, err = run_lines(capsys, "corpus", "measure", tone_table, "--split", "tst", "--out", out)
    assert rc == 2 and len(err) == 1 and "no rows of split 'tst'" in err[0] and "pass --split" in err[0]
