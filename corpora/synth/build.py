"""Build the synthetic gendered corpus: sentences, speakers, audio, utterance table, MuST-SHE TSVs.

    table = synthesize("data/synth", size="mini", seed=0)   # -> data/synth/utterances.tsv

Layout of ``out_dir``::

    audio/<speaker>/<id>.wav     16 kHz mono 16-bit
    utterances.tsv               the utterance table (corpora.table)
    mustshe_<split>.tsv          the English gender set in MuST-SHE's format
    synth_config.json            size, seed, counts, engine versions
    checksums.sha256             sha256 of every file above (``sha256sum -c`` reads it)
    .gendergap-outputs.json      the record of the files above (corpora.base.owned_outputs)

``out_dir`` may be new, empty, or a folder this command wrote (its record, or an earlier version's
``synth_config.json``); any other non-empty folder is refused, and so is a file of the user's where
the corpus writes one (a ``utterances.tsv`` of their own): the command replaces only files it
wrote. Other files in the folder are left as they are.

Two corpora share the table: ``synth-fr`` (French speech, ``tgt_text_en``; splits
pretrain / train / valid / test, speakers disjoint) and ``synth-gender`` (English first-person
and third-person sentences, ``tgt_text_fr`` the correct reference; train / valid / test).
The same size and seed give bit-identical files; a re-run whose checksums still match is
skipped. Every file is written atomically and ``checksums.sha256`` is written last, so a
killed run is simply redone.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from multiprocessing import forkserver
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from corpora.base.atomic import atomic_open, write_json
from corpora.base.boundary import read_state_json
from corpora.base.errors import UserError
from corpora.base.leftovers import remove_stale_dirs
from corpora.base.owned_outputs import claim, foreign, remove_own_temps, write_record
from corpora.base.provenance import engine_versions, file_sha256
from corpora.base.textfile import read_lines
from corpora.synth import gender_set, sentences
from corpora.synth.espeak import overlay_data_dir
from corpora.synth.voices import Speaker, make_speakers
from corpora.synth.worker import SAMPLE_RATE, speak_speaker

GENERATOR_VERSION = 4  # bump when a change alters the generated files


@dataclass(frozen=True)
class Size:
    """How much to generate. ``fr``: role -> (female speakers, male speakers, utterances each).
    ``gender``: split -> (female speakers, male speakers, frames); every frame is spoken once
    by a female and once by a male speaker of the split."""

    fr: dict
    gender: dict
    train_sentences: int   # distinct French sentences the train speakers share


SIZES = {
    # test-only: a few utterances per role, seconds to build
    "tiny": Size(fr={"pretrain": (1, 1, 3), "train": (1, 1, 5), "valid": (1, 1, 2), "test": (1, 1, 12)},
                 gender={"train": (1, 1, 4), "valid": (1, 1, 2), "test": (1, 1, 4)}, train_sentences=8),
    "mini": Size(fr={"pretrain": (8, 8, 180), "train": (3, 3, 340), "valid": (2, 2, 50), "test": (12, 12, 17)},
                 gender={"train": (3, 3, 300), "valid": (1, 1, 50), "test": (2, 2, 150)}, train_sentences=700),
    "small": Size(fr={"pretrain": (6, 6, 500), "train": (4, 4, 600), "valid": (2, 2, 100), "test": (6, 6, 84)},
                  gender={"train": (4, 4, 800), "valid": (1, 1, 100), "test": (2, 2, 300)}, train_sentences=2000),
}
WORKERS = 2
COMMAND = "gendergap corpus synth"
FIX = "pass --out a new or empty folder, or one `gendergap corpus synth` wrote"
TOP_FILES = re.compile(r"utterances\.tsv|mustshe_[a-z]+\.tsv|synth_config\.json|checksums\.sha256")  # but audio/


@dataclass
class Utterance:
    id: str
    speaker: Speaker
    corpus: str
    split: str
    text: str
    extra: dict


def _french_utterances(size: Size, seed: int) -> list[Utterance]:
    """French utterances for every role. The valid and test speakers of a role read one list
    of ``per speaker x speakers per gender`` sentences, half of them also read in training and
    half no training speaker reads (``seen_text`` says which), shuffled together: the k-th
    female and the k-th male speaker read the same window of it, so female and male scores
    compare like with like and every voice hears seen and novel sentences alike."""
    lists = {role: size.fr[role][2] * max(size.fr[role][:2]) for role in ("valid", "test")}
    novel_valid, novel_test = (lists[r] - lists[r] // 2 for r in ("valid", "test"))
    drawn = sentences.sample_sentences(size.train_sentences + novel_valid + novel_test, seed)
    pool, novel = drawn[:size.train_sentences], drawn[size.train_sentences:]
    rng = random.Random(f"synth-assign-{seed}")
    order = pool[:]
    rng.shuffle(order)
    shared = {"valid": rng.sample(pool, lists["valid"] // 2) + novel[:novel_valid],
              "test": rng.sample(pool, lists["test"] // 2) + novel[novel_valid:]}
    for role in shared:
        rng.shuffle(shared[role])
    out = []
    for role, (n_f, n_m, per_speaker) in size.fr.items():
        for s_idx, spk in enumerate(make_speakers("fr", role, n_f, n_m, seed)):
            if role in shared:
                k = s_idx if spk.gender == "F" else s_idx - n_f   # the speaker's place within its gender
                chosen = shared[role][k * per_speaker:(k + 1) * per_speaker]
            else:
                # Consecutive windows over one shuffled order: every sentence gets about the
                # same number of voices and no speaker reads a sentence twice.
                start = s_idx * per_speaker + (0 if role == "train" else len(order) // 2)
                chosen = [order[(start + j) % len(order)] for j in range(min(per_speaker, len(order)))]
            for j, (plan, fr, en) in enumerate(chosen):
                out.append(Utterance(
                    id=f"{spk.id}-{j + 1:04d}", speaker=spk, corpus="synth-fr", split=role, text=fr,
                    extra={"tgt_text_en": en, "template": plan.template}))
    trained = {u.text for u in out if u.split == "train"}
    for u in out:
        u.extra["seen_text"] = "yes" if u.text in trained else "no"  # read by a train speaker?
    return out


def _gender_utterances(size: Size, seed: int) -> tuple[list[Utterance], dict[str, list[dict]]]:
    """English gender-set utterances and their MuST-SHE rows per split (frames disjoint across splits)."""
    total = sum(n for _, _, n in size.gender.values())
    frames = gender_set.sample_frames(total, seed)
    rng = random.Random(f"synth-gender-assign-{seed}")
    rng.shuffle(frames)  # mixes categories 1 and 2 across splits
    out, mustshe = [], {}
    start = 0
    for split, (n_f, n_m, n_frames) in size.gender.items():
        speakers = make_speakers("en", split, n_f, n_m, seed)
        females = [s for s in speakers if s.gender == "F"]
        males = [s for s in speakers if s.gender == "M"]
        chunk = frames[start:start + n_frames]
        start += n_frames
        per_speaker: dict[str, list] = {s.id: [] for s in speakers}
        for k, (frame, en) in enumerate(chunk):
            per_speaker[females[k % n_f].id].append((frame, en))
            per_speaker[males[k % n_m].id].append((frame, en))
        rows = []
        for spk in speakers:
            for j, (frame, en) in enumerate(per_speaker[spk.id]):
                utt_id = f"{spk.id}-{j + 1:04d}"
                row = gender_set.mustshe_row(utt_id, spk.id, spk.gender, frame, en)
                rows.append(row)
                out.append(Utterance(
                    id=utt_id, speaker=spk, corpus="synth-gender", split=split, text=en,
                    extra={"tgt_text_fr": row["REF"], "wrong_ref_fr": row["WRONG-REF"],
                           "gender_terms": row["GENDERTERMS"], "category": row["CATEGORY"],
                           "template": frame.template}))
        mustshe[split] = rows
    return out, mustshe


def _checksums_match(out_dir: Path, config: dict) -> bool:
    """True when a previous run with this config finished and no file changed since."""
    sums, cfg = out_dir / "checksums.sha256", out_dir / "synth_config.json"
    if not sums.is_file() or not cfg.is_file():
        return False
    previous = (read_state_json(cfg, "synth_config.json") or {}).get("config")
    if previous != config:
        return False
    try:
        lines = read_lines(sums, "checksums.sha256")
    except UserError:   # unreadable: synthesised again, as for any changed file
        return False
    for line in lines:
        digest, _, rel = line.partition("  ")
        path = out_dir / rel
        if not path.is_file() or file_sha256(path) != digest:
            return False
    return True


OVERLAY_PREFIX = "gendergap-espeak-"   # + the process id: a killed run's overlay is known by it


def _run_speakers(out_dir: Path, jobs: list, workers: int) -> dict[str, dict]:
    """Speak every speaker's list in its own fresh process; returns utt id -> audio facts.
    ``jobs``: (out_dir, speaker, seed, [(utt id, text)]) each."""
    facts: dict[str, dict] = {}
    # A fresh process per speaker (maxtasksperchild=1), never a fork of this process, which may
    # hold torch threads. forkserver forks each worker from a clean server that has imported
    # the worker module once, so workers do not each pay the imports; spawn where it is missing.
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["corpora.synth.worker"])
    else:
        ctx = multiprocessing.get_context("spawn")
    jobs = sorted(jobs, key=lambda j: -len(j[3]))  # longest first: the two workers end together
    # espeak-ng's data with the project's own variants added, for this run only (symlinks). In the
    # temp dir, not out_dir: espeak-ng keeps its data path in a fixed-size buffer.
    _remove_stale_overlays()
    overlay = Path(tempfile.mkdtemp(prefix=f"{OVERLAY_PREFIX}{os.getpid()}-"))
    try:
        data_dir = overlay_data_dir(overlay / "espeak-ng-data")
        with ctx.Pool(processes=min(workers, len(jobs)), maxtasksperchild=1) as pool:
            for _spk, rows in tqdm(pool.imap_unordered(speak_speaker, [(*j, str(data_dir)) for j in jobs]),
                                   total=len(jobs), desc="synth speakers", unit="spk"):
                for r in rows:
                    facts[r["id"]] = r
    finally:
        shutil.rmtree(overlay, ignore_errors=True)
    _stop_forkserver()
    return facts


def _remove_stale_overlays() -> None:
    """Remove the overlays of runs that were killed (their finally never ran): each is named after
    its process id. The temp dir is shared, so only a day-old real folder of this user whose process
    is gone here goes (corpora.base.leftovers: a live run on another host keeps its own)."""
    remove_stale_dirs(tempfile.gettempdir(), OVERLAY_PREFIX)


def _stop_forkserver() -> None:
    """Stop the forkserver and wait for it. It reaped the workers, so their CPU time is its own;
    left running, it outlives this process unwaited, and the synthesis's CPU time counts for no
    one (not in a job's cpu_s, not in `/usr/bin/time`). The next forkserver pool starts a new one."""
    server = getattr(forkserver, "_forkserver", None)
    stop = getattr(server, "_stop", None)   # CPython's own (its tests stop the server with it)
    if stop is not None:
        stop()


def synthesize(out_dir, size: str = "mini", seed: int = 0, workers: int = WORKERS) -> Path:
    """Generate the corpus under ``out_dir``; returns the path of ``utterances.tsv``.

    ``size``: tiny (tests), mini (default, < 1 min on 2 cores), small. A re-run with the same
    size and seed whose checksums still match does nothing. Speakers are synthesised in
    worker processes (forkserver/spawn), so a script calling this needs the usual
    ``if __name__ == "__main__":`` guard.
    """
    from corpora.table import new_table, write_table

    if size not in SIZES:
        raise UserError(f"unknown synthetic corpus size {size!r}", fix=f"use one of {', '.join(SIZES)}")
    out_dir = Path(out_dir)
    table_path = out_dir / "utterances.tsv"
    config = {"generator": GENERATOR_VERSION, "size": size, "seed": int(seed), "sizes": asdict(SIZES[size])}
    config = json.loads(json.dumps(config))  # tuples -> lists, as synth_config.json reads back
    before = claim(out_dir, COMMAND, fix=FIX, legacy=_earlier_corpus)   # a user's folder: refused, untouched
    if _checksums_match(out_dir, config):
        print(f"synthetic corpus in {out_dir} is up to date (size={size}, seed={seed}, checksums match): skipped")
        return table_path

    started = time.time()
    spec = SIZES[size]
    utterances = _french_utterances(spec, seed)
    gender_utts, mustshe = _gender_utterances(spec, seed)
    utterances += gender_utts
    planned = _planned_files(utterances, mustshe)
    clash = foreign(out_dir, planned, before)
    if clash is not None:
        raise UserError(f"the corpus writes {clash}, and the folder holds a {clash} this command did not write",
                        path=out_dir / clash, fix="move or rename that file, or pass --out another folder")
    # recorded before the first file is written: a killed run's files are known as the command's own
    write_record(out_dir, COMMAND, before | planned)
    # A run in progress must never look finished: the checksums go first and come back last.
    (out_dir / "checksums.sha256").unlink(missing_ok=True)
    # Temp files a killed run left beside the command's own files (.<name>.<random>.tmp), not others'.
    remove_own_temps(out_dir, before | planned)
    by_speaker: dict[str, list[Utterance]] = {}
    for u in utterances:
        by_speaker.setdefault(u.speaker.id, []).append(u)
    jobs = [(str(out_dir), us[0].speaker, seed, [(u.id, u.text) for u in us]) for us in by_speaker.values()]
    facts = _run_speakers(out_dir, jobs, workers)

    table = new_table(_table_rows(utterances, facts))
    write_table(table, table_path)
    written = [table_path] + _write_mustshe(out_dir, mustshe)
    _write_config(out_dir, config, table, _speaker_facts(by_speaker, facts))
    written.append(out_dir / "synth_config.json")

    lines = [f"{facts[u.id]['sha256']}  audio/{u.speaker.id}/{u.id}.wav" for u in utterances]
    lines += [f"{file_sha256(p)}  {p.name}" for p in written]
    with atomic_open(out_dir / "checksums.sha256") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"synthetic corpus: {len(table)} utterances, {table['duration'].sum() / 3600:.2f} h, "
          f"{table['speaker'].nunique()} speakers, {time.time() - started:.0f} s -> {table_path}")
    return table_path


def _planned_files(utterances: list[Utterance], mustshe: dict[str, list[dict]]) -> frozenset[str]:
    """Every file a run writes, relative to its folder (the layout above)."""
    return frozenset([f"audio/{u.speaker.id}/{u.id}.wav" for u in utterances]
                     + [f"mustshe_{split}.tsv" for split in mustshe]
                     + ["utterances.tsv", "synth_config.json", "checksums.sha256"])


def _earlier_corpus(folder: Path, entries: list[str]) -> frozenset[str] | None:
    """A corpus folder written by a version that kept no record: its synth_config.json is one this
    command writes. Its files are then the ones named as the command names them (TOP_FILES and
    audio/<speaker>/<id>.wav); anything else in it is left alone, as every run leaves it."""
    cfg = read_state_json(folder / "synth_config.json", "synth_config.json") if "synth_config.json" in entries else None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("config"), dict) or "generator" not in cfg["config"]:
        return None
    files = {n for n in entries if TOP_FILES.fullmatch(n) and (folder / n).is_file()}
    audio = folder / "audio"
    if audio.is_dir() and not audio.is_symlink():
        files |= {f"audio/{spk.name}/{wav.name}" for spk in audio.iterdir() if spk.is_dir() and not spk.is_symlink()
                  for wav in spk.iterdir() if wav.suffix == ".wav" and not wav.name.startswith(".")}
    return frozenset(files)


def _table_rows(utterances: list[Utterance], facts: dict[str, dict]) -> list[dict]:
    """The utterance table's rows: each utterance with its speaker and its audio's facts."""
    rows = []
    for u in utterances:
        f, spk = facts[u.id], u.speaker
        rows.append({
            "id": u.id, "audio": f"audio/{spk.id}/{u.id}.wav", "offset": 0.0,
            "duration": round(f["num_samples"] / SAMPLE_RATE, 6), "sample_rate": SAMPLE_RATE,
            "speaker": spk.id, "gender": spk.gender, "corpus": u.corpus, "lang": spk.lang,
            "split": u.split, "text": u.text, "gender_raw": spk.gender,
            "tgt_text_en": u.extra.get("tgt_text_en", ""), "tgt_text_fr": u.extra.get("tgt_text_fr", ""),
            "wrong_ref_fr": u.extra.get("wrong_ref_fr", ""), "gender_terms": u.extra.get("gender_terms", ""),
            "category": u.extra.get("category", ""), "template": u.extra.get("template", ""),
            "seen_text": u.extra.get("seen_text", ""), "voice": spk.voice,
            "pitch": f["pitch"], "rate": f["rate"], "pitch_range": f["range"],
        })
    return rows


def _write_mustshe(out_dir: Path, mustshe: dict[str, list[dict]]) -> list[Path]:
    """``mustshe_<split>.tsv`` per split, in MuST-SHE's columns; returns the paths written."""
    written = []
    for split, mrows in mustshe.items():
        path = out_dir / f"mustshe_{split}.tsv"
        with atomic_open(path) as fh:
            fh.write("\t".join(gender_set.MUSTSHE_COLUMNS) + "\n")
            for r in mrows:
                fh.write("\t".join(str(r[c]) for c in gender_set.MUSTSHE_COLUMNS) + "\n")
        written.append(path)
    return written


def _speaker_facts(by_speaker: dict[str, list[Utterance]], facts: dict[str, dict]) -> list[dict]:
    """Who each synthetic speaker is: role, gender, espeak-ng variant, pitch and rate settings, and
    the median F0 measured on its first utterances (how the voices of one variant differ)."""
    out = []
    for spk_id, us in by_speaker.items():
        spk = us[0].speaker
        f0 = [facts[u.id]["f0"] for u in us if facts[u.id].get("f0") is not None]
        out.append({"speaker": spk_id, "lang": spk.lang, "role": spk.role, "gender": spk.gender, "voice": spk.voice,
                    "pitch": spk.pitch, "pitch_range": spk.range, "rate": spk.rate,
                    "median_f0_hz": round(float(np.nanmedian(f0)), 1) if f0 else None})
    return out


def _write_config(out_dir: Path, config: dict, table, speakers: list[dict]) -> None:
    """``synth_config.json``: the config, the engine versions, the counts per corpus/split/gender and
    every speaker's voice (_speaker_facts)."""
    counts = table.groupby(["corpus", "split", "gender"]).agg(n=("id", "size"), seconds=("duration", "sum"))
    write_json(out_dir / "synth_config.json", {
        "config": config, "engines": {k: v for k, v in engine_versions().items()
                                      if k in ("espeakng-loader", "pyrealb", "numpy", "scipy", "soundfile")},
        "counts": [{"corpus": c, "split": s, "gender": g, "utterances": int(r.n),
                    "hours": round(float(r.seconds) / 3600, 4)}
                   for (c, s, g), r in counts.iterrows()],
        "speakers": speakers})
