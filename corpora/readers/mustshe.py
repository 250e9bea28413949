"""MuST-SHE (gender-translation benchmark, en->fr/it/es), as distributed (v1.2)::

    MuST-SHE_v1.2/tsv/MONOLINGUAL.fr_v1.2.tsv   one TSV per target language (.it, .es too)
    MuST-SHE_v1.2/wav/<ID>.wav                  one audio segment per row (searched recursively)

``root`` may be the release folder, its ``tsv/`` folder or one TSV; the wavs are found in
``wav/`` beside ``tsv/`` (or beside the TSV itself, for a flat copy) without extra flags;
``--audio-dir`` overrides. With several TSVs (one per language), ``--tgt-lang`` picks one.

TSV columns: ID, LANG (``en-fr``), TALK, SRC (English transcript), REF (correct translation),
WRONG-REF (same with the gender-marked words swapped), SPEAKER, GENDER (``She``/``He``: the
speaker's), CATEGORY (``1F``, ``1M``, ``2F``, ``2M``), TEXT-CATEGORY, GENDERTERMS
(``correct wrong;correct wrong``). REF goes in ``tgt_text_<lang>``; WRONG-REF, CATEGORY,
TEXT-CATEGORY, GENDERTERMS and TALK are kept as extra columns (``wrong_ref_<lang>``,
``category``, ``text_category``, ``gender_terms``, ``talk``) for the MuST-SHE scorer.
A row with no SPEAKER uses its TALK as speaker (one speaker per talk).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from corpora.readers.common import AudioCheck, find_audio_by_stem, finish_table

REQUIRED = ("ID", "LANG", "TALK", "SRC", "REF", "WRONG-REF", "SPEAKER", "GENDER", "CATEGORY")


def _find_tsv(root: Path, tgt_lang: str | None) -> Path:
    if root.is_file():
        return root
    where = root / "tsv" if (root / "tsv").is_dir() else root
    tsvs = sorted(p for p in where.glob("*.tsv") if not p.name.startswith("._") and
                  (not tgt_lang or f".{tgt_lang}" in p.name or f"-{tgt_lang}" in p.name))
    if len(tsvs) != 1:
        raise UserError(f"found {len(tsvs)} MuST-SHE TSV file(s) here" + (f" for {tgt_lang}" if tgt_lang else ""),
                        path=where, fix="pass --tgt-lang to pick one (fr, it, es), or the TSV itself as --root")
    return tsvs[0]


def _find_wav_dir(tsv: Path) -> Path:
    """``wav/`` beside the TSV (flat copy) or beside its ``tsv/`` folder (the release layout)."""
    for d in (tsv.parent / "wav", tsv.parent.parent / "wav"):
        if d.is_dir():
            return d
    raise UserError("audio directory not found", path=tsv.parent.parent / "wav",
                    fix="MuST-SHE keeps its wavs in wav/ beside tsv/; pass --audio-dir DIR if they are elsewhere")


def read_mustshe(root, *, tgt_lang: str | None = None, audio_dir=None,
                 check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of a MuST-SHE TSV (``root``: the release folder, its tsv/ folder or the TSV)."""
    root = Path(root)
    tsv = _find_tsv(root, tgt_lang)
    header, recs = read_delimited(tsv, "\t")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=tsv, line=1,
                        fix="expected the MuST-SHE TSV header: " + ", ".join(REQUIRED) + ", TEXT-CATEGORY, GENDERTERMS")
    wav_dir = Path(audio_dir) if audio_dir else _find_wav_dir(tsv)
    if not wav_dir.is_dir():
        raise UserError("audio directory not found", path=wav_dir,
                        fix="pass --audio-dir DIR (the MuST-SHE wav/ folder)")
    audio_of = find_audio_by_stem(wav_dir)
    rows = []
    for line, rec in recs:
        pair = rec["LANG"].strip()
        src, _, tgt = pair.partition("-")
        if not tgt:
            raise UserError(f"LANG {pair!r} is not a language pair", path=tsv, line=line, fix="LANG looks like en-fr")
        if tgt_lang and tgt != tgt_lang:
            continue
        uid = rec["ID"].strip()
        rows.append({
            "id": uid, "audio": str(audio_of.get(uid, wav_dir / f"{uid}.wav")), "offset": 0.0, "duration": None,
            "speaker": rec["SPEAKER"].strip() or rec["TALK"].strip(), "gender_raw": rec["GENDER"],
            "corpus": "mustshe", "lang": src, "split": "test", "text": rec["SRC"],
            f"tgt_text_{tgt}": rec["REF"], f"wrong_ref_{tgt}": rec["WRONG-REF"],
            "category": rec["CATEGORY"].strip(), "text_category": rec.get("TEXT-CATEGORY", "").strip(),
            "gender_terms": rec.get("GENDERTERMS", "").strip(), "talk": rec["TALK"].strip(),
            "style": "TED talk", "_src": tsv, "_line": line})
    return finish_table(rows, source=tsv, check=check)
