"""Check the synthetic corpus's voice variants: reproducible, of their gender, and distinct.

    .venv/bin/python scripts/check_voice_variants.py            # the project's own gg-f* variants
    .venv/bin/python scripts/check_voice_variants.py gg-f1 f4   # any variants, by name

Each variant speaks four French sentences twice, each time in fresh processes (as the corpus
builder does), at the voice's own pitch. Printed per variant: whether both runs are bit-identical,
the median F0, P(female) from a classifier trained on espeak-ng's own reproducible variants (the
variant itself left out of training), and its nearest other variant. The classifier is a logistic
regression on each voice's mean MFCCs (c0 and the quietest 30 % of frames left out); the distance
is Euclidean on the same standardised features. The figures in corpora/synth/voices.py's comment on
the gg-f* variants come from this script.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

# espeak-ng's variants that synthesise reproducibly (corpora/synth/voices.py), by gender
STOCK = {"F": "steph steph2 steph3 grandma linda anika f1 belinda Andrea aunty f4 Annie".split(),
         "M": "m1 m2 m3 m4 m5 m6 m7 m8 Lee boris iven robert Andy john Denis Hugo".split()}
TEXTS = ["Le petit chat dort sur la chaise de la cuisine.", "Elle a vendu sa maison au bord de la mer.",
         "Nous partirons demain matin avant le lever du soleil.", "Mon frère travaille dans une grande usine."]


def speak_all(variants: list[str], folder: Path) -> dict[str, dict]:
    """Every variant's four sentences, one fresh process per variant: {variant: {sha256s, f0, audio}}."""
    import soundfile as sf

    from corpora.synth.build import _run_speakers
    from corpora.synth.voices import Speaker
    speakers = [Speaker(id=v, lang="fr", gender="?", role="check", variant=v, pitch=50, range=50, rate=170)
                for v in variants]
    facts = _run_speakers(folder, [(str(folder), s, 0, [(f"{s.id}-{j}", t) for j, t in enumerate(TEXTS)])
                                   for s in speakers], workers=2)
    out = {}
    for v in variants:
        ids = [f"{v}-{j}" for j in range(len(TEXTS))]
        audio = np.concatenate([sf.read(folder / "audio" / v / f"{i}.wav", dtype="float32")[0] for i in ids])
        out[v] = {"sha256": [facts[i]["sha256"] for i in ids], "f0": float(np.median([facts[i]["f0"] for i in ids])),
                  "audio": audio}
    return out


def mean_mfcc(audio: np.ndarray) -> np.ndarray:
    import torch
    import torchaudio

    x = torch.from_numpy(audio)[None]
    mfcc = torchaudio.compliance.kaldi.mfcc(x, sample_frequency=16000, num_ceps=20)[:, 1:]
    energy = torchaudio.compliance.kaldi.fbank(x, sample_frequency=16000, num_mel_bins=40).mean(1)
    return mfcc[energy > energy.quantile(0.3)].mean(0).numpy()


def main(checked: list[str]) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    names = list(dict.fromkeys(STOCK["F"] + STOCK["M"] + checked))
    with tempfile.TemporaryDirectory() as tmp:
        runs = [speak_all(names if k == 0 else checked, Path(tmp) / f"run{k}") for k in (0, 1)]
    feats = {v: mean_mfcc(runs[0][v]["audio"]) for v in names}
    gender = {v: g for g, vs in STOCK.items() for v in vs}
    scaled = StandardScaler().fit_transform(np.stack([feats[v] for v in names]))
    z = dict(zip(names, scaled))
    print(f"{'variant':10} {'bit-identical':>13} {'median F0':>10} {'P(female)':>10}  nearest other variant")
    for v in checked:
        train = [u for u in gender if u != v]
        scaler = StandardScaler().fit(np.stack([feats[u] for u in train]))
        clf = LogisticRegression(C=0.1, max_iter=2000).fit(scaler.transform(np.stack([feats[u] for u in train])),
                                                           [gender[u] == "F" for u in train])
        p_female = clf.predict_proba(scaler.transform(feats[v][None]))[0, 1]
        near = min((u for u in names if u != v), key=lambda u: np.linalg.norm(z[v] - z[u]))
        same = runs[0][v]["sha256"] == runs[1][v]["sha256"]
        print(f"{v:10} {'yes' if same else 'NO':>13} {runs[0][v]['f0']:>7.0f} Hz {p_female:>10.2f}  "
              f"{near} {np.linalg.norm(z[v] - z[near]):.2f}")
    pairs = [("steph", "steph2"), ("steph2", "steph3"), ("linda", "belinda")]   # near-copies among the stock ones
    print("for comparison, stock near-copies: "
          + ", ".join(f"{a}-{b} {np.linalg.norm(z[a] - z[b]):.2f}" for a, b in pairs))


if __name__ == "__main__":
    from corpora.synth.espeak import PROJECT_VARIANTS_DIR
    main(sys.argv[1:] or sorted(p.name for p in PROJECT_VARIANTS_DIR.iterdir()))
