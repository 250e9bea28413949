"""The synthetic speakers: espeak-ng voice variants with their own pitch and rate.

Only variants that are bit-reproducible are used. espeak-ng variants that add breath noise
(``f2``, ``f3``, ``f5``, ``Alicia``, ``whisperf``, ``victor``, ``sandro``, ...) gave different
samples on some runs even with ``espeak_ng_SetRandSeed`` (measured: 3 of 9 fresh processes),
so they are left out. Median F0 per speaker in the ``mini`` corpus (corpus generator 4, French):
female 149-265 Hz, male 83-131 Hz; the pretraining pools 185-256 and 83-108 Hz.

Each role (pretraining pool, train, valid, test) draws from its own variants, so held-out
test voices are variants that no training or pretraining speaker uses (generalisation to
unseen voices); a role that needs more speakers than it has variants reuses a variant with
a different pitch and rate.

The evaluation roles (valid, test) need more distinct voices than espeak-ng has reproducible
variants (the built-in study tests on 12 voices per gender, from 4 variants each). A reused
variant there is a new voice by its pitch: the k-th reuse moves the speaker's espeak-ng pitch
by ``EVAL_PITCH_STEP`` x (1, -1, 2, -2, ...) from the variant's first speaker and keeps its pitch
range (a wider range alone raised one voice's median F0 by ~20 Hz and undid the step): measured
~12-15 Hz of median F0 a step for male variants, ~20-30 Hz for female ones, outside the +-4
per-utterance jitter (``Speaker.prosody``), so no two evaluation voices of one variant lie within
a few Hz of each other (tests/test_synth.py measures it). ``synth_config.json`` records
every speaker's variant, pitch, rate and measured median F0. The pretraining and train roles keep
the rule the shipped checkpoints were pretrained with (a reuse moves the pitch by 8 x lap, with
the same +-6 draw), so their audio is unchanged.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from corpora.synth.espeak import Prosody

# role -> gender -> variants. Near-identical variants (belinda/linda, steph/steph2/steph3: the
# same formant frequencies) stay out of the test role, so no test voice is a near-copy of a
# training or pretraining voice, and the test voices' F0 stays close to the training voices'
# range for each gender (each voice's median F0 is in the corpus's synth_config.json), so a gender
# gap on test is not just one gender's test voices lying further from training.
VARIANTS = {
    "pretrain": {"F": ("steph", "gg-f1", "grandma", "gg-f2", "linda", "gg-f3", "anika", "gg-f4"),
                 "M": ("m2", "m4", "m6", "m8", "Lee", "boris", "iven", "robert")},
    "train": {"F": ("f1", "belinda", "Andrea"), "M": ("m1", "m3", "m7", "Andy", "john")},
    "valid": {"F": ("aunty",), "M": ("m5",)},
    "test": {"F": ("f4", "Annie", "gg-f5", "gg-f6"), "M": ("Denis", "Hugo", "gg-m1", "gg-m2")},
}
# The test role's gg-* variants (2026-11-29, corpus generator 4): twelve test voices a gender from two
# stock variants would put six voices on each, and espeak-ng's pitch steps are too uneven at the
# ends of a variant's range for six to stay 10 Hz apart (measured: two Denis voices 5 Hz apart, and
# male voices up to 142 Hz). Two more variants a gender (formants moved 8-14 %, each gender's own
# pitch) give three voices a variant, the rule the valid and test roles already had. Checked with
# scripts/check_voice_variants.py: bit-identical in fresh processes; median F0 gg-f5 204, gg-f6 218,
# gg-m1 98, gg-m2 108 Hz; P(female) 0.87 / 0.90 / 0.21 / 0.12; nearest stock variant at distance
# 3.1 / 4.4 / 2.7 / 2.2 (Annie, linda, m2, m3), none a near-copy of a training or pretraining voice.
# The gg-f* variants: espeak-ng's reproducible female variants are all used above (except
# anikaRobot, a robotic anika, and steph2/steph3, which share steph's formant frequencies), so the
# female pretraining pool adds four variants written for this project (corpora/synth/espeak_variants:
# female pitch, formant frequencies F1-F3 raised 8-34 %, no breath noise). With them both pretraining
# pools hold 8 voices from 8 distinct variants; before, the female pool's 8 came from 4 formant
# settings (5 from the steph family) and an F-only vs M-only difference was also one of voice variety
# (docs/demo.md, "What else the conditions differ in"). scripts/check_voice_variants.py checks them
# (2026-11-28): each synthesises bit-identically in fresh processes, median F0 196-222 Hz on French
# sentences, a classifier trained on mean MFCCs of espeak-ng's own 12 female and 16 male variants
# calls each female (0.68-0.94), and each lies further from every other variant in that MFCC space
# (standardised distance >= 2.7) than linda from belinda (2.0) or steph from steph2 (0.9).
ROLES = ("pretrain", "train", "valid", "test")
EVAL_ROLES = ("valid", "test")
EVAL_PITCH_STEP = 16   # espeak-ng pitch units between two voices of one variant in an evaluation role


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker: a voice variant plus its own prosody (utterances jitter around it)."""

    id: str
    lang: str           # espeak-ng language of the voice: fr or en
    gender: str         # F / M
    role: str           # pretrain / train / valid / test
    variant: str        # espeak-ng variant name, e.g. "f4"
    pitch: int          # espeakPITCH 0-100
    range: int          # espeakRANGE 0-100
    rate: int           # words per minute

    @property
    def voice(self) -> str:
        return f"{self.lang}+{self.variant}"

    def prosody(self, rng: random.Random) -> Prosody:
        """Per-utterance prosody: small pitch and rate jitter around the speaker's own."""
        return Prosody(rate=self.rate + rng.randint(-8, 8), pitch=self.pitch + rng.randint(-4, 4),
                       range=self.range + rng.randint(-5, 5))


def make_speakers(lang: str, role: str, n_female: int, n_male: int, seed: int) -> list[Speaker]:
    """``n_female`` + ``n_male`` speakers for one role; ids like ``fr-train-F1``."""
    rng = random.Random(f"synth-voices-{lang}-{role}-{seed}")
    speakers = []
    for gender, n in (("F", n_female), ("M", n_male)):
        variants = VARIANTS[role][gender]
        first: dict[str, tuple[int, int]] = {}   # variant -> its first speaker's (pitch, range)
        for i in range(n):
            variant = variants[i % len(variants)]
            lap = i // len(variants)  # a reused variant moves its pitch further away
            base = 50 + (8 * lap if lap % 2 else -8 * lap)
            pitch, pitch_range = base + rng.randint(-6, 6), 50 + rng.randint(-10, 10)
            if role in EVAL_ROLES and lap:  # a distinct voice: whole pitch steps from the variant's first speaker
                pitch = first[variant][0] + EVAL_PITCH_STEP * ((lap + 1) // 2) * (1 if lap % 2 else -1)
                pitch_range = first[variant][1]
            first.setdefault(variant, (pitch, pitch_range))
            speakers.append(Speaker(
                id=f"{lang}-{role}-{gender}{i + 1}", lang=lang, gender=gender, role=role,
                variant=variant, pitch=pitch, range=pitch_range, rate=rng.randint(150, 185)))
    return speakers
