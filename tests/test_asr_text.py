"""Transcript normalisation and the character vocabulary."""
from __future__ import annotations

import pytest

from corpora.base.errors import UserError
from downstream_asr.decode import parse_overrides
from downstream_asr.text import (
    TextNorm,
    build_vocab,
    decode,
    encode,
    load_vocab,
    normalise_text,
    save_vocab,
    unknown_chars,
)


def test_normalisation_keeps_accents_and_apostrophes():
    assert normalise_text("« Où est l’École ? »  C'est peut-être là-bas.") == "où est l'école c'est peut-être là-bas"
    assert normalise_text("fin.Début") == "fin début"
    # a decomposed é (e + combining acute) becomes the precomposed one
    assert normalise_text("e\u0301te\u0301") == "\u00e9t\u00e9"
    assert normalise_text("Il a 3 ans!") == "il a 3 ans"
    assert normalise_text("peut-être l'été", TextNorm(keep_hyphen=False, keep_apostrophe=False)) == "peut être l été"
    assert normalise_text("Bonjour, Paris", TextNorm(lowercase=False, strip_punctuation=False)) == "Bonjour, Paris"
    assert TextNorm().name == "lc-nopunct-apos-hyph"
    with pytest.raises(UserError, match="unknown text normalisation"):
        TextNorm.from_dict({"lower": True})


def test_vocab_is_deterministic_with_blank_and_unk(tmp_path):
    texts = ["le chat", "où est l'école"]
    enc = build_vocab(texts)
    assert enc.ind2lab[0] == "<blank>" and enc.ind2lab[1] == "<unk>"
    assert [enc.ind2lab[i] for i in range(2, len(enc))] == sorted(set("".join(texts)))
    save_vocab(enc, tmp_path / "vocab.txt")
    again = load_vocab(tmp_path / "vocab.txt")
    assert again.lab2ind == enc.lab2ind == build_vocab(list(reversed(texts))).lab2ind
    # characters never seen in training map to <unk> and are counted, not a crash
    ids = encode("chat zèbre", enc)
    assert ids.count(1) == 4 and unknown_chars("chat zèbre", enc) == {"z": 1, "è": 1, "b": 1, "r": 1}
    assert decode(encode("le chat", enc), enc) == "le chat"


def test_overrides_parse_nested_yaml_values():
    assert parse_overrides(["lr_head=5e-4", "text_norm.keep_hyphen=false", "max_steps=3"]) == \
        {"lr_head": 5e-4, "text_norm": {"keep_hyphen": False}, "max_steps": 3}
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_overrides(["lr_head"])


def test_length_batches_cover_every_utterance_even_longer_than_a_batch(tmp_path):
    from asr_helpers import write_corpus
    from downstream_asr.data import audio_dataset, length_batch_sampler, read_csv
    paths = write_corpus(tmp_path, {"train": 8})
    df = read_csv(paths["train"], TextNorm(), training=True)
    ds = audio_dataset(df, build_vocab(df["text"]))
    for seconds in (0.5, 3.0):  # 0.5 s is shorter than the longest utterance
        sampler = length_batch_sampler(ds, seconds, shuffle=True, seed=1)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(8))
        assert all(sum(df["duration"].iloc[b].max() for _ in b) <= max(seconds, df["duration"].max()) * 1.01
                   for b in batches)


def test_wer_scoring_normalises_exactly_as_training_targets_do():
    # One normalisation for one purpose: WER's lc-nopunct is the function that makes the CTC
    # targets, so decomposed accents, U+02BC apostrophes and underscores score as they were taught.
    from analysis.normalize import normalise_words
    samples = ["« Où est l’École ? »  C'est peut-être là-bas.", "e\u0301te\u0301 aujourd\u02bchui",
               "snake_case fin.Début", "  Il a 3 ans!  "]
    assert normalise_words(samples, "lc-nopunct") == [normalise_text(s).split() for s in samples]
    assert normalise_words(["e\u0301te\u0301 aujourd\u02bchui"], "lc-nopunct") == [["\u00e9t\u00e9", "aujourd'hui"]]
