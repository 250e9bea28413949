"""Multilingual TEDx (mTEDx, openslr.org/100), one language pair as distributed::

    mtedx/fr-en/data/train/txt/train.yaml    - {duration: 3.1, offset: 12.9, speaker_id: abc, wav: abc.wav}
    mtedx/fr-en/data/train/txt/train.fr      one source line per yaml segment
    mtedx/fr-en/data/train/txt/train.en      one translation line per yaml segment
    mtedx/fr-en/data/train/wav/abc.flac      one long recording per talk
    mtedx/fr-fr/...                          ASR pair: only <split>.fr

Segments (offset/duration in seconds) point into the talk's recording. Quirk: the yaml's
``wav`` field says ``<talk>.wav`` while the files are ``<talk>.flac``. Gender comes from a
user-given speaker->gender file (key: speaker_id or talk id) and, where a release carries
one, a ``gender``/``speaker_gender`` field in the yaml; the file wins when both are given.
The file may be FBK's MuST-Speakers list (keyed by bare talk number); how many talks it
matched is logged, with a warning when some or none did (``--strict``: an unmatched talk is
an error). A segment that starts inside its recording but ends past it is trimmed at the end
of the file, as lhotse's ``trim_supervisions_to_recordings`` does, and counted in one summary
line (``--strict`` refuses it). Text files are split on ``\n`` only (U+2028 and kin stay
inside their line). MuST-C (``mustc.py``) shares this layout.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import yaml

from corpora.base.errors import UserError
from corpora.base.textfile import read_lines, read_utf8, split_lines
from corpora.readers.common import AudioCheck, finish_table, lookup_gender, read_speaker_genders, ted_number

log = logging.getLogger(__name__)

_YAML_GENDER_KEYS = ("gender", "speaker_gender", "spk_gender")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader: train.yaml has ~100k entries


def load_segments_yaml(path: Path) -> tuple[list[dict], list[int | None]]:
    """The segments and the line each starts on (None when the yaml is not one entry per
    `- ` line, as distributed, and lines cannot be told cheaply)."""
    text = read_utf8(path)
    try:
        segs = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise UserError(f"invalid yaml ({getattr(e, 'problem', None) or e})", path=path,
                        line=mark.line + 1 if mark else None, fix="one `- {duration: .., offset: .., "
                        "speaker_id: .., wav: ..}` entry per line") from None
    if not isinstance(segs, list):
        raise UserError("expected a yaml list of segments", path=path, line=1,
                        fix="one `- {duration: .., offset: .., speaker_id: .., wav: ..}` entry per line")
    for i, s in enumerate(segs, start=1):
        if not isinstance(s, dict) or not {"duration", "offset", "wav"} <= set(s):
            raise UserError(f"segment #{i} has no duration/offset/wav", path=path,
                            fix="every entry needs duration, offset, speaker_id and wav")
    starts = [i for i, line in enumerate(split_lines(text), start=1) if line.startswith("-")]
    return segs, (starts if len(starts) == len(segs) else [None] * len(segs))


def read_ted_pair(pair_dir: Path, *, corpus: str, src: str, tgt: str, splits: list[str] | None,
                  speaker_genders, check: AudioCheck, style: str = "TED talk") -> pd.DataFrame:
    """The shared reader of the MuST-C / mTEDx ``data/<split>/{txt,wav}`` layout."""
    data = pair_dir / "data"
    if not data.is_dir():
        raise UserError("no data/ directory here", path=pair_dir,
                        fix=f"--root must hold {pair_dir.name}/data/<split>/txt/<split>.yaml (or be the pair dir)")
    splits = list(splits) if splits else sorted(p.name for p in data.iterdir()
                                                if (p / "txt" / f"{p.name}.yaml").is_file())
    genders = read_speaker_genders(speaker_genders) if speaker_genders else None
    rows: list[dict] = []
    talks_seen: dict[str, tuple[Path, int | None]] = {}   # talk -> where its first segment is
    talks_listed: set[str] = set()                         # talks whose gender the list gave
    for split in splits:
        yml = data / split / "txt" / f"{split}.yaml"
        if not yml.is_file():
            raise UserError(f"split {split!r} not found", path=yml,
                            fix="check --split against the directories under data/")
        segs, seg_lines = load_segments_yaml(yml)
        texts = _read_split_texts(yml, split, len(segs), langs=[src, tgt])
        yaml_has_gender = _add_split_rows(
            rows, segs, seg_lines, texts, yml=yml, split=split, corpus=corpus, src=src, tgt=tgt, style=style,
            genders=genders, speaker_genders=speaker_genders, talks_seen=talks_seen, talks_listed=talks_listed)
        if genders is None and not yaml_has_gender:
            log.warning("%s: no gender information (no --speaker-genders file, no gender field): all rows "
                        "get U", yml)
    note = _report_list_matches(speaker_genders, genders, talks_seen, talks_listed, rows, check) if genders else None
    df = finish_table(rows, source=pair_dir, check=check, trim_past_end=True)
    if note:  # said once the table stands, so a refused index prints its one error line only
        log.log(*note)
    return df


def _read_split_texts(yml: Path, split: str, n_segments: int, *, langs: list[str]) -> dict[str, list[str]]:
    """{lang: lines} of the split's text files, each line-aligned with the yaml's segments."""
    texts = {}
    for lang in dict.fromkeys(langs):
        tf = yml.parent / f"{split}.{lang}"
        if not tf.is_file():
            raise UserError("text file missing", path=tf,
                            fix=f"the {split}.{lang} file is distributed next to {yml.name}")
        lines = read_lines(tf)
        if len(lines) != n_segments:
            raise UserError(f"{len(lines)} lines but {yml.name} has {n_segments} segments", path=tf,
                            line=min(len(lines), n_segments) + 1,
                            fix="the text files are line-aligned with the yaml: restore the original files")
        texts[lang] = lines
    return texts


def _talk_audio(wav_dir: Path, wav: str) -> Path:
    """The recording a yaml ``wav`` names: the yaml says ``<talk>.wav``, the files are ``.flac``."""
    p = wav_dir / wav
    if not p.exists():
        for ext in (".flac", ".wav"):
            if p.with_suffix(ext).exists():
                return p.with_suffix(ext)
    return p


def _add_split_rows(rows: list[dict], segs: list[dict], seg_lines: list[int | None], texts: dict[str, list[str]],
                    *, yml: Path, split: str, corpus: str, src: str, tgt: str, style: str, genders, speaker_genders,
                    talks_seen: dict, talks_listed: set[str]) -> bool:
    """Append one row per segment of a split; note each talk's first segment and whether the
    list gave its gender. Returns whether the yaml carried a gender field anywhere."""
    wav_dir = yml.parent.parent / "wav"
    audio_of: dict[str, Path] = {}
    per_talk: dict[str, int] = {}
    yaml_has_gender = False
    for i, seg in enumerate(segs):
        wav = str(seg["wav"])
        if wav not in audio_of:
            audio_of[wav] = _talk_audio(wav_dir, wav)
        talk = Path(wav).stem
        k = per_talk.get(talk, 0)
        per_talk[talk] = k + 1
        speaker = str(seg.get("speaker_id") or talk)
        talks_seen.setdefault(talk, (yml, seg_lines[i]))
        # MuST-Speakers is keyed by the bare talk number: try it after the full ids.
        raw = lookup_gender(genders, speaker, talk, ted_number(talk) or "", ted_number(speaker) or "")
        gsrc = speaker_genders
        if raw is not None:
            talks_listed.add(talk)
        else:
            found = next((seg[key] for key in _YAML_GENDER_KEYS if key in seg), None)
            yaml_has_gender |= found is not None
            raw, gsrc = ("" if found is None else str(found)), yml
        row = dict(id=f"{talk}_{k}", audio=str(audio_of[wav]), offset=float(seg["offset"]),
                   duration=float(seg["duration"]), speaker=speaker, gender_raw=raw, corpus=corpus,
                   lang=src, split=split, text=texts[src][i], style=style, talk=talk,
                   _src=yml, _line=seg_lines[i], _gender_src=gsrc)
        if tgt != src:
            row[f"tgt_text_{tgt}"] = texts[tgt][i]
        rows.append(row)
    return yaml_has_gender


def _report_list_matches(list_path, genders, talks_seen, talks_listed, rows, check) -> tuple[int, str]:
    """(log level, line) saying how many talks the speaker list covered; a list keyed differently
    from the corpus (e.g. names instead of ids) would otherwise turn every speaker into U
    without a word. With --strict a talk with no gender anywhere is a UserError."""
    missing = [t for t in talks_seen if t not in talks_listed]
    with_yaml_gender = {r["talk"] for r in rows if r["talk"] in missing and r["gender_raw"]}
    unlabelled = [t for t in missing if t not in with_yaml_gender]
    n, matched = len(talks_seen), len(talks_seen) - len(missing)
    msg = (f"speaker list {list_path}: {matched} of {n} talk(s) matched ({len(genders)} line(s) in the list)")
    if unlabelled:
        talk = unlabelled[0]
        if check.strict:
            src, line = talks_seen[talk]
            raise UserError(f"talk {talk!r} is not in the speaker list {list_path}", path=src, line=line,
                            fix="add it to the list (keys: speaker id, talk id or bare TED talk number), "
                                "or leave --strict out to index it as U")
        msg += f"; {len(unlabelled)} talk(s) with no gender anywhere get U (e.g. {talk})"
    if matched == 0:
        return logging.WARNING, (msg + " -- NONE matched: check the list's keys (speaker_id, talk id such as "
                                 "ted_767, or the bare number 767)")
    return (logging.WARNING if matched < n / 2 or unlabelled else logging.INFO), msg


def find_pair_dir(root: Path, src: str | None, tgt: str | None, default_src: str | None) -> tuple[Path, str, str]:
    """``root`` may be the pair directory itself (``fr-en/``) or the corpus root holding it."""
    if (root / "data").is_dir() and "-" in root.name:
        s, t = root.name.split("-", 1)
        if (src and src != s) or (tgt and tgt != t):
            raise UserError(f"--root is the {root.name} pair but --lang/--tgt-lang ask for {src}-{tgt}",
                            path=root, fix="point --root at the corpus root or the matching pair directory")
        return root, s, t
    src = src or default_src
    if not src:
        raise UserError("which language pair?", path=root,
                        fix="pass --lang (and --tgt-lang), e.g. --lang fr --tgt-lang en")
    tgt = tgt or src
    pair = root / f"{src}-{tgt}"
    if not pair.is_dir():
        have = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise UserError(f"language pair {src}-{tgt} not found (have: {', '.join(have) or 'nothing'})", path=pair,
                        fix="check --root, --lang and --tgt-lang")
    return pair, src, tgt


def read_mtedx(root, *, lang: str | None = None, tgt_lang: str | None = None, splits: list[str] | None = None,
               speaker_genders=None, check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of one mTEDx pair (``fr-fr`` for ASR, ``fr-en`` etc. for ST: the
    translation goes in ``tgt_text_<tgt>``). ``speaker_genders``: speaker/talk -> gender file."""
    pair, src, tgt = find_pair_dir(Path(root), lang, tgt_lang, None)
    return read_ted_pair(pair, corpus="mtedx", src=src, tgt=tgt, splits=splits,
                         speaker_genders=speaker_genders, check=check)
