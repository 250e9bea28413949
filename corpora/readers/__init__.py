"""Corpus readers: ``read_<kind>(root, ...) -> utterance table`` (a pandas DataFrame).

Each reader parses its corpus's metadata as distributed, reads durations and sample rates
from audio headers (in parallel, never decoding), normalises gender to F/M/U (raw label in
``gender_raw``) and validates the table. Bad input is a ``corpora.base.errors.UserError`` naming
the metadata file and line. ``check=AudioCheck(sample_rates=..., max_channels=...)`` says
what audio is accepted (16 kHz mono by default; any rate for Common Voice, whose releases are
48 kHz) and ``strict=True`` refuses what readers would otherwise skip, trim or set to U with a
counted warning (docs/bad-inputs.md lists the cases).

    from corpora.readers import READERS, AudioCheck
    df = READERS["mtedx"]("/data/mtedx", lang="fr", tgt_lang="en", speaker_genders="spk.tsv")
"""
from __future__ import annotations

from corpora.readers.common import AudioCheck, read_speaker_genders
from corpora.readers.commonvoice import read_commonvoice
from corpora.readers.covost2 import read_covost2
from corpora.readers.fleurs import read_fleurs
from corpora.readers.generic import read_generic
from corpora.readers.hf_folder import read_hf
from corpora.readers.kaldi import read_kaldi
from corpora.readers.lebenchmark import read_lebenchmark
from corpora.readers.lhotse_sets import read_lhotse
from corpora.readers.mls import read_mls
from corpora.readers.mtedx import read_mtedx
from corpora.readers.mustc import read_mustc
from corpora.readers.mustshe import read_mustshe
from corpora.readers.voxpopuli import read_voxpopuli
from corpora.readers.winost import read_winost

# KIND (the --kind of `gendergap corpus index`) -> reader.
READERS = {
    "mls": read_mls,
    "mtedx": read_mtedx,
    "commonvoice": read_commonvoice,
    "covost2": read_covost2,
    "fleurs": read_fleurs,
    "voxpopuli": read_voxpopuli,
    "mustc": read_mustc,
    "mustshe": read_mustshe,
    "winost": read_winost,
    "kaldi": read_kaldi,
    "lebenchmark": read_lebenchmark,
    "generic": read_generic,
    "lhotse": read_lhotse,
    "hf": read_hf,
}

__all__ = ["READERS", "AudioCheck", "read_speaker_genders"] + [f.__name__ for f in READERS.values()]
