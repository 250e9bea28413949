"""Tiny inputs for the downstream ASR tests: a random-init wav2vec 2.0 folder, wav files,
an utterance table and SpeechBrain CSVs (all under pytest's tmp_path)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

SENTENCES = ["le chat dort", "la maison est belle", "il fait beau", "où est l'école", "je suis là",
             "un deux trois", "elle chante", "nous partons"]


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for the module: tiny convolutions on a shared 2-core machine lose
    more to OpenMP threads spin-waiting on each other than they gain (~10x measured under load)."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_wav2vec2(folder: Path, seed: int = 0, dropout: float = 0.1, mask_time_prob: float = 0.0) -> Path:
    """A random-init transformers Wav2Vec2Model (2 layers x 32) saved with save_pretrained;
    ``mask_time_prob`` > 0 gives it a mask embedding (``masked_spec_embed``), as pretrained ones have."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2Model
    torch.manual_seed(seed)
    cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16, 16, 16), conv_kernel=(10, 3, 3, 3), conv_stride=(5, 4, 4, 4),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, feat_extract_norm="group",
                         do_stable_layer_norm=False, hidden_dropout=dropout, attention_dropout=dropout,
                         activation_dropout=dropout, feat_proj_dropout=dropout, layerdrop=0.0,
                         mask_time_prob=mask_time_prob, vocab_size=8)
    Wav2Vec2Model(cfg).save_pretrained(folder)
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                             return_attention_mask=False).save_pretrained(folder)
    return folder


def write_corpus(root: Path, n_per_split: dict | None = None, seed: int = 0) -> dict:
    """Wavs + an utterance table (table.tsv) + SpeechBrain CSVs per split; returns their paths.

    Speakers: train f1,m1; valid f2,m2; test f3,m3. Each utterance is a short tone sequence
    (one tone per character), 0.4-1.0 s at 16 kHz.
    """
    from corpora.table import new_table, write_table
    from manifests.export_speechbrain import export_speechbrain
    n_per_split = n_per_split or {"train": 8, "valid": 4, "test": 4}
    rng = np.random.default_rng(seed)
    (root / "wav").mkdir(parents=True, exist_ok=True)
    rows = []
    for split, n in n_per_split.items():
        k = {"train": 1, "valid": 2, "test": 3}.get(split, 9)
        for i in range(n):
            gender = "F" if i % 2 == 0 else "M"
            speaker = f"{gender.lower()}{k}"
            text = SENTENCES[(i + k) % len(SENTENCES)]
            f0 = 220.0 if gender == "F" else 110.0
            tone = []
            for ch in text[: int(rng.integers(6, 16))]:
                dur = int(16000 * 0.05)
                t = np.arange(dur) / 16000
                tone.append(0.3 * np.sin(2 * np.pi * (f0 + 20 * (ord(ch) % 17)) * t))
            x = np.concatenate(tone) + 0.01 * rng.standard_normal(len(tone) * 800)
            path = root / "wav" / f"{split}_{i:02d}.wav"
            sf.write(path, x.astype(np.float32), 16000, subtype="PCM_16")
            rows.append({"id": f"{speaker}-{split}{i:02d}", "audio": str(path), "offset": 0.0,
                         "duration": len(x) / 16000, "sample_rate": 16000, "speaker": speaker, "gender": gender,
                         "corpus": "tiny", "lang": "fr", "split": split, "text": text.capitalize() + "."})
    table = new_table(rows)
    write_table(table, root / "table.tsv")
    export_speechbrain({s: table[table["split"] == s] for s in n_per_split}, root / "sb")
    return {"table": root / "table.tsv", **{s: root / "sb" / f"{s}.csv" for s in n_per_split}}


def edit_csv(src: Path, dst: Path, fn) -> Path:
    df = pd.read_csv(src, dtype=str, keep_default_na=False)
    fn(df).to_csv(dst, index=False)
    return dst
