"""Hybrid ASR with Kaldi: export a data dir with SSL features; import decoding output back.

The reference study's hybrid systems (TDNN-F, LF-MMI) are trained in Kaldi itself; the
harness prepares their input and reads their output:

- ``kaldi_export``: a validated Kaldi data dir (wav.scp, segments, text, utt2spk, spk2utt,
  spk2gender, utt2dur; manifests/export_kaldi.py) plus ``feats.scp`` / ``data/feats.ark``
  written from a feature-store view
  (kaldiio, uncompressed float32, readable by kaldi-io too), ``utt2num_frames`` and
  ``frame_shift``. ``repeat=2`` repeats each 20 ms wav2vec 2.0 frame (10 ms frames, what Kaldi
  TDNN recipes and their frame subsampling expect).
- ``kaldi_import``: Kaldi's text output (``utt word ...``) or a CTM (``utt-or-recording channel
  start duration word [confidence]``) -> ``id<TAB>text`` hypotheses under the utterance
  table's ids (``utt2table_id``), ready for ``gendergap score asr``.
"""
from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path

import pandas as pd

from corpora.base.atomic import write_text
from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from corpora.feature_request import Layers
from corpora.utterances import UtteranceTable

log = logging.getLogger(__name__)


def kaldi_export(view, table: pd.DataFrame, audio_paths: list[str], out_dir: str | os.PathLike, *,
                 repeat: int = 1, text_column: str = "text") -> dict:
    """Write and validate a Kaldi data dir with ``feats.scp`` of the view's (one) layer; returns a summary."""
    from manifests.export_kaldi import export_kaldi_dir, kaldi_utt_ids, validate_kaldi_dir
    from ssl_pretrain.feature_store import write_kaldi
    if repeat not in (1, 2):
        raise UserError(f"repeat={repeat}: frames are repeated 1x (20 ms) or 2x (10 ms)",
                        fix="use --repeat-frames or not")
    if len(view.layers) != 1:
        raise UserError(f"Kaldi archives hold one matrix per utterance, not {len(view.layers)} layers",
                        fix="pick one --layer")
    out_dir = Path(out_dir).resolve()
    table = table.reset_index(drop=True).assign(audio=list(audio_paths))
    summary = export_kaldi_dir(table, out_dir, text_column=text_column)
    utt = kaldi_utt_ids(table).tolist()
    shapes = write_kaldi(view, out_dir / "data", view.layers[0], repeat, keys=dict(zip(table["id"].astype(str), utt)))
    write_text(out_dir / "feats.scp", (out_dir / "data" / "feats.scp").read_text(encoding="utf-8"))
    write_text(out_dir / "utt2num_frames", "".join(f"{u} {shapes[u][0]}\n" for u in sorted(shapes, key=str.encode)))
    shift = view.frame_shift_s / repeat
    write_text(out_dir / "frame_shift", f"{shift:g}\n")
    validate_kaldi_dir(out_dir, no_feats=False)
    return {**summary, "dim": view.dim, "frame_shift_ms": shift * 1000, "layer": view.layers[0],
            "repeat": repeat, "feats_scp": str(out_dir / "feats.scp")}


def export_table(model, *, layer: str, table: str | list[str], out: str, split: str | None = None,
                 repeat_frames: bool = False, batch_seconds: float = 60.0, feature_store: str) -> dict:
    """`asr kaldi-export`: the rows of ``table`` (of ``split``) as a Kaldi data dir in ``out``, with
    ``model``'s (ssl_pretrain.model_choice.ModelChoice) ``layer`` features from the feature store
    (extracted there once). Returns kaldi_export's summary."""
    rows = UtteranceTable.load(table).select(split=split).nonempty(f"split {split!r}", "check --split").audio_rows()
    audio = rows["audio"].tolist()
    one = Layers.parse(layer, "--layer").one("--layer")   # Kaldi archives hold one matrix per utterance
    view = model.features(feature_store, rows, one, batch_seconds=batch_seconds)
    return kaldi_export(view, rows, audio, out, repeat=2 if repeat_frames else 1)


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise UserError("no such file", path=path, fix="give the Kaldi decoding output")
    return read_lines(path, "Kaldi decoding output", fix="Kaldi text/CTM output with a UTF-8 words.txt")


def _data_dir_maps(data_dir: Path | None):
    """(kaldi utt -> table id, utterances in order, recording -> [(start, end, utt)])."""
    if data_dir is None:
        return None, [], {}
    data_dir = Path(data_dir)
    m = data_dir / "utt2table_id"
    if not m.is_file():
        u2s = data_dir / "utt2spk"
        if not u2s.is_file():
            raise UserError("not a Kaldi data dir (no utt2spk)", path=data_dir, fix="give the dir kaldi-export wrote")
        ids = {ln.split()[0]: ln.split()[0] for ln in read_lines(u2s, "utt2spk") if ln.strip()}
    else:
        ids = dict(ln.split(maxsplit=1) for ln in read_lines(m, "utt2table_id") if ln.strip())
    segs = defaultdict(list)
    if (data_dir / "segments").is_file():
        for ln in read_lines(data_dir / "segments", "segments"):
            f = ln.split()
            if len(f) == 4:
                segs[f[1]].append((float(f[2]), float(f[3]), f[0]))
    return ids, list(ids), segs


def kaldi_import(*, text: str | None = None, ctm: str | None = None, out: str | os.PathLike,
                 data_dir: str | os.PathLike | None = None) -> int:
    """Read Kaldi output into a hypothesis TSV; returns the number of lines written.

    With ``data_dir``: Kaldi utterance ids map back to table ids, a recording-level CTM is
    split into utterances by ``segments`` (each word goes to the segment holding its
    midpoint), and utterances with no output get an empty hypothesis (a warning says how
    many) -- scoring then counts their words as deletions instead of failing.
    """
    if (text is None) == (ctm is None):
        raise UserError("give exactly one of --text and --ctm",
                        fix="e.g. --text exp/.../scoring_kaldi/penalty_0.0/10.txt")
    ids, order, segs = _data_dir_maps(Path(data_dir) if data_dir else None)
    if text is not None:
        hyps = _text_hyps(Path(text), ids, data_dir=data_dir)
    else:
        hyps = _ctm_hyps(Path(ctm), ids, segs, data_dir=data_dir)
    if ids is not None:
        missing = [u for u in order if u not in hyps]
        if missing:
            log.warning("%d utterance(s) of %s have no output (e.g. %s): written as empty hypotheses",
                        len(missing), data_dir, missing[0])
        keys = order
    else:
        keys = list(hyps)
    lines = []
    for u in keys:
        tid = ids[u] if ids is not None else u
        lines.append(f"{tid}\t{hyps.get(u, '')}\n")
    write_text(out, "".join(lines))
    return len(lines)


def _text_hyps(path: Path, ids, *, data_dir) -> dict[str, str]:
    """{Kaldi utterance id: hypothesis} from a Kaldi ``text`` output (``utt word ...`` per line)."""
    hyps: dict[str, str] = {}
    for n, ln in enumerate(_read_lines(path), start=1):
        if not ln.strip():
            continue
        f = ln.split(maxsplit=1)
        utt = f[0]
        if ids is not None and utt not in ids:
            raise UserError(f"utterance {utt!r} is not in the data dir", path=path, line=n,
                            fix=f"decode the same data dir ({data_dir})")
        if utt in hyps:
            raise UserError(f"utterance {utt!r} appears twice", path=path, line=n, fix="one line per utterance")
        hyps[utt] = " ".join(f[1].split()) if len(f) > 1 else ""
    return hyps


def _ctm_hyps(path: Path, ids, segs, *, data_dir) -> dict[str, str]:
    """{Kaldi utterance id: hypothesis} from a CTM, words in time order; a recording-level CTM's
    words go to the segment holding their midpoint (a word in no segment is dropped, said)."""
    words = defaultdict(list)
    for n, ln in enumerate(_read_lines(path), start=1):
        if not ln.strip() or ln.startswith(";;"):
            continue
        f = ln.split()
        try:
            key, start, dur, word = f[0], float(f[2]), float(f[3]), f[4]
        except (IndexError, ValueError):
            raise UserError("not a CTM line (need: utt channel start duration word [confidence])",
                            path=path, line=n, fix="give the CTM Kaldi's get_ctm writes") from None
        if word == "<eps>":
            continue
        if ids is None or key in ids:
            utt = key
        elif key in segs:
            mid = start + dur / 2  # recording-level CTM: times are in the recording
            inside = [u for a, b, u in segs[key] if a <= mid < b]
            if not inside:
                log.warning("%s:%d: word %r at %.2f s lies in no segment of %s; dropped", path, n, word, mid, key)
                continue
            utt = inside[0]
        else:
            raise UserError(f"{key!r} is neither an utterance nor a recording of the data dir", path=path, line=n,
                            fix=f"decode the same data dir ({data_dir})")
        words[utt].append((start, n, word))
    return {u: " ".join(w for _, _, w in sorted(ws)) for u, ws in words.items()}
