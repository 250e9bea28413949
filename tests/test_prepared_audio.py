"""Audio prepared for the engines (issue 28, item 2): Common Voice's 48 kHz mp3 (a few 32 kHz
clips mixed in) goes into fairseq pretraining and Kaldi with one flag, `--resample 16000`.

A Common Voice locale dir in its released layout is written here (mp3 clips at 48 and 32 kHz,
each a sine at a known frequency), indexed with `corpus index`, and built with `manifest build`:
without the flag the build is refused in one line with the rates and their counts; with it the
manifest lists 16 kHz mono FLAC copies from the prepared-audio cache with their true lengths,
the corpus is untouched, the signal keeps its frequency, a re-run rewrites nothing, and a run
killed (SIGKILL) mid-way resumes with only the missing files.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from cli_helpers import run_lines as run
from corpora.prepared_audio import AudioCache, Source, Target
from corpora.table import read_table
from gendergap import cli
from manifests.export_fairseq import read_wav2vec_manifest
from manifests.export_kaldi import validate_kaldi_dir
from ssl_pretrain.manifest_check import check_manifest_dir

REPO = Path(__file__).resolve().parent.parent
CV_HEADER = "client_id\tpath\tsentence\tup_votes\tdown_votes\tage\tgender\taccents\tvariant\tlocale\tsegment"
# Common Voice ships mp3: these tests write real mp3 clips, which needs libsndfile >= 1.1. The pinned
# soundfile wheel bundles one (so they run in make test); a system libsndfile may be older.
MP3_MISSING = ("the system libsndfile is older than 1.1 and cannot write or decode mp3 (a library capability, "
               "not gendergap's; the pinned soundfile wheel has it)")
needs_mp3 = pytest.mark.skipif("MP3" not in sf.available_formats(), reason=MP3_MISSING)


def sine(seconds: float, rate: int, freq: float, channels: int = 1) -> np.ndarray:
    t = np.arange(int(round(seconds * rate))) / rate
    x = (0.3 * np.sin(2 * np.pi * freq * t)).astype("float32")
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def peak_hz(x: np.ndarray, rate: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[int(np.argmax(spec))])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# clips: (client, gender, seconds, rate, frequency); two 32 kHz clips among the 48 kHz ones,
# and one stereo clip (Common Voice has a few)
CLIPS = {"train": [(f"f{i}", "female_feminine", 1.0 + 0.1 * i, 48000, 300 + 50 * i, 1) for i in range(4)]
         + [(f"m{i}", "male_masculine", 1.2 + 0.1 * i, 48000, 500 + 50 * i, 1) for i in range(3)]
         + [("m3", "male_masculine", 1.1, 32000, 700, 1), ("f4", "female_feminine", 0.9, 32000, 750, 1),
            ("m4", "male", 1.3, 48000, 800, 2)],
         "dev": [("f9", "female", 1.0, 48000, 440, 1), ("m9", "male", 1.0, 48000, 660, 1)]}


@pytest.fixture(scope="module")
def cv(tmp_path_factory):
    """(locale dir, table path, {clip path: frequency}) of a Common Voice release with mp3 clips."""
    if "MP3" not in sf.available_formats():
        # a library capability, not ours: only a soundfile linked to a system libsndfile < 1.1 lacks mp3;
        # make test installs the pinned soundfile 0.14.0 wheel (libsndfile 1.2.2), so it runs there
        pytest.skip(MP3_MISSING)
    root = tmp_path_factory.mktemp("cv")
    d = root / "cv-corpus-17.0-2024-03-15" / "fr"
    (d / "clips").mkdir(parents=True)
    freqs, k = {}, 0
    for split, clips in CLIPS.items():
        lines = [CV_HEADER]
        for client, gender, seconds, rate, freq, channels in clips:
            k += 1
            name = f"common_voice_fr_{k}.mp3"
            sf.write(d / "clips" / name, sine(seconds, rate, freq, channels), rate, format="MP3")
            freqs[str(d / "clips" / name)] = freq
            lines.append(f"{client}\t{name}\tUne phrase.\t2\t0\ttwenties\t{gender}\t\t\tfr\t")
        (d / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "test.tsv").write_text(CV_HEADER + "\n", encoding="utf-8")
    table = root / "cv.tsv"
    assert cli.main(["-q", "corpus", "index", "--kind", "commonvoice", "--root", str(d), "--out", str(table),
                     "--max-channels", "2"]) == 0
    return d, table, freqs


def build(table, out, *extra):
    return ["manifest", "build", "--table", table, "--gender", "any", "--format", "fairseq", "--out", out, *extra]


@needs_mp3
def test_other_rates_are_refused_at_build_time_in_one_line(cv, tmp_path, capsys):
    _, table, _ = cv
    rc, _, err = run(capsys, *build(table, tmp_path / "m"))
    assert rc == 2 and len(err) == 1, err
    # 12 clips: 10 at 48 kHz, 2 at 32 kHz; one of them stereo. The model's rate is 16000, not the majority's.
    assert "reads mono audio at one sample rate, 16000 Hz" in err[0]
    assert "10 files are 48000 Hz, 2 are 32000 Hz" in err[0] and "1 has several channels" in err[0]
    assert "--resample 16000" in err[0] and "sox" not in err[0]
    assert not (tmp_path / "m").exists()
    # the Kaldi export alike (its recipes read 16 kHz)
    rc, _, err = run(capsys, *build(table, tmp_path / "k")[:-4], "--format", "kaldi", "--out", tmp_path / "k")
    assert rc == 2 and len(err) == 1 and "10 files are 48000 Hz, 2 are 32000 Hz" in err[0], err
    assert "Kaldi recipes read 16000 Hz" in err[0] and "--resample 16000" in err[0]
    # --resample is for the formats whose engines open the files themselves
    rc, _, err = run(capsys, *build(table, tmp_path / "s")[:-4], "--format", "speechbrain", "--out", tmp_path / "s",
                     "--resample", 16000)
    assert rc == 2 and "--resample is for --format fairseq or kaldi" in err[0]


@needs_mp3
def test_resample_builds_a_16k_manifest_from_the_cache_and_rebuilds_as_a_no_op(cv, tmp_path, capsys):
    d, table, freqs = cv
    before = {p: sha(Path(p)) for p in freqs}
    stat_before = {p: os.stat(p).st_mtime_ns for p in freqs}
    cache = tmp_path / "cache"
    rc, out, err = run(capsys, *build(table, tmp_path / "m", "--resample", 16000, "--audio-cache", cache, "--jobs", 2))
    assert rc == 0, err
    assert "12 file(s) read from 16000 Hz copies" in out
    rows = read_table(table)
    durations = dict(zip(rows["audio"].map(lambda a: str((d / "clips" / Path(a).name))), rows["duration"]))
    listed = {}
    for split in ("train", "valid"):
        root, items = read_wav2vec_manifest(tmp_path / "m" / f"{split}.tsv")
        for rel, n in items:
            p = Path(root) / rel
            info = sf.info(p)
            assert (info.samplerate, info.channels, info.format, info.subtype) == (16000, 1, "FLAC", "PCM_16")
            assert info.frames == n and p.is_relative_to(cache)
            listed[p] = n
    assert len(listed) == 12
    # each copy holds its clip: its length (the table's duration x 16 kHz, within a sample) and its sine
    index = {r.split("\t")[1]: r.split("\t") for r in (cache / "index.tsv").read_text().splitlines()[1:]}
    assert len(index) == 12
    for p, n in listed.items():
        src = index[str(p.relative_to(cache))][4]
        assert abs(n - durations[src] * 16000) <= 1, (src, n, durations[src])
        x, sr = sf.read(p, dtype="float32")
        assert abs(peak_hz(x, sr) - freqs[src]) <= 2.0, src    # FFT bins are < 1.1 Hz apart here
        assert np.abs(x).max() > 0.2                             # the 0.3 amplitude survives
    # the corpus is untouched
    assert {p: sha(Path(p)) for p in freqs} == before and {p: os.stat(p).st_mtime_ns for p in freqs} == stat_before
    assert check_manifest_dir(tmp_path / "m", check_audio="all")["train"]["files"] == 10
    # fairseq's own reader of audio_pretraining opens the copies: lengths as listed, 16 kHz
    from fairseq.data.audio.raw_audio_dataset import FileAudioDataset
    ds = FileAudioDataset(str(tmp_path / "m" / "train.tsv"), sample_rate=16000, pad=False)
    listed_train = [n for _, n in read_wav2vec_manifest(tmp_path / "m" / "train.tsv")[1]]
    assert [len(ds[i]["source"]) for i in range(len(ds))] == listed_train
    # a second manifest from the same table shares the copies: nothing is rewritten
    mtimes = {p: os.stat(p).st_mtime_ns for p in listed}
    index_mtime = os.stat(cache / "index.tsv").st_mtime_ns
    time.sleep(0.01)
    rc, out, err = run(capsys, *build(table, tmp_path / "m2", "--resample", 16000, "--audio-cache", cache))
    assert rc == 0, err
    assert {p: os.stat(p).st_mtime_ns for p in listed} == mtimes
    assert os.stat(cache / "index.tsv").st_mtime_ns == index_mtime     # nothing new to index
    assert (tmp_path / "m2" / "train.tsv").read_text() == (tmp_path / "m" / "train.tsv").read_text()
    report = json.loads((tmp_path / "m2" / "selection_report.json").read_text())
    assert report["export"]["prepared"] == 12 and report["export"]["sample_rate"] == 16000


@needs_mp3
def test_manifest_check_names_the_models_rate_not_the_majoritys(cv, tmp_path):
    """A hand-made manifest of the mp3s themselves: pretraining refuses it naming 16000 Hz and
    the rates with their counts (the majority is 48000 Hz)."""
    d, _, freqs = cv
    clips = sorted(p for p in freqs if sf.info(p).channels == 1)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "train.tsv").write_text(
        f"{d / 'clips'}\n" + "".join(f"{Path(p).name}\t{sf.info(p).frames}\n" for p in clips))
    with pytest.raises(Exception) as e:
        check_manifest_dir(tmp_path / "m", check_audio="all")
    msg = str(e.value)
    assert "fairseq's audio_pretraining reads 16000 Hz audio; 9 files are 48000 Hz, 2 are 32000 Hz" in msg, msg
    assert "--resample 16000" in e.value.fix and "sox" not in e.value.fix and "\n" not in msg


@needs_mp3
def test_kaldi_export_points_at_16k_wavs(cv, tmp_path, capsys):
    _, table, freqs = cv
    out, cache = tmp_path / "k", tmp_path / "cache"
    rc, _, err = run(capsys, *build(table, out)[:-4], "--format", "kaldi", "--out", out, "--resample", 16000,
                     "--audio-cache", cache)
    assert rc == 0, err
    for split in ("train", "valid"):
        validate_kaldi_dir(out / split)
        entries = [ln.split(" ", 1)[1] for ln in (out / split / "wav.scp").read_text().splitlines()]
        assert entries and all(e.endswith(".wav") and "sox" not in e and Path(e).is_relative_to(cache) for e in entries)
        for e in entries:
            info = sf.info(e)
            assert (info.samplerate, info.channels, info.format, info.subtype) == (16000, 1, "WAV", "PCM_16")
        # segments keep the clips' times, now read at 16 kHz: the end is the file's length
        for ln in (out / split / "segments").read_text().splitlines():
            _, rec, start, end = ln.split()
            wav = dict(x.split(" ", 1) for x in (out / split / "wav.scp").read_text().splitlines())[rec]
            assert float(start) == 0.0 and abs(float(end) - sf.info(wav).duration) < 1e-3


def test_segments_and_gzipped_wavs_are_prepared(tmp_path):
    """A segment of a long 48 kHz recording is cut then resampled; a WinoST-style ``.wav.gz`` is
    read through gzip; the sources stay as they were."""
    talk = tmp_path / "talk.flac"
    sf.write(talk, sine(4.0, 48000, 1000.0), 48000, subtype="PCM_24")
    gz = tmp_path / "0001.wav.gz"
    buf = tmp_path / "0001.wav"
    sf.write(buf, sine(1.5, 48000, 880.0, channels=2), 48000)
    gz.write_bytes(gzip.compress(buf.read_bytes()))
    buf.unlink()
    before = sha(talk), sha(gz)
    cache = AudioCache(tmp_path / "cache", Target(16000, "wav"))
    seg, whole = Source(str(talk), start=48000, frames=96000), Source(str(gz))
    done = cache.prepare([seg, whole], jobs=2)
    assert done[seg].frames == 32000 and sf.info(done[seg].path).frames == 32000
    x, _ = sf.read(done[seg].path, dtype="float32")
    ref = sine(4.0, 16000, 1000.0)[16000:48000]
    inner = slice(200, -200)   # the resampler's edges at the cut
    assert np.abs(x[inner] - ref[inner]).max() < 2e-3   # 16-bit copy of the same sine, same phase
    assert done[whole].frames == 24000 and abs(peak_hz(sf.read(done[whole].path)[0], 16000) - 880) <= 2
    assert (sha(talk), sha(gz)) == before
    # a source rewritten in place (new size/mtime) is prepared again, under a new key
    sf.write(talk, sine(4.0, 48000, 500.0), 48000, subtype="PCM_24")
    redone = cache.prepare([seg])[seg]
    assert redone.path != done[seg].path and abs(peak_hz(sf.read(redone.path)[0], 16000) - 500) <= 2


KILLED_RUN = """
import json, sys
sys.path.insert(0, {repo!r})
from corpora.prepared_audio import AudioCache, Source, Target
AudioCache({cache!r}, Target(16000, "flac")).prepare([Source(p) for p in json.loads({paths!r})], jobs=1)
"""


def test_a_killed_run_resumes_with_only_the_missing_files(tmp_path):
    """The preparation runs in a subprocess, one file at a time in path order; the 7th source is a
    FIFO nobody writes, so the run blocks there with 6 files done, and is killed with SIGKILL
    (no clean-up, no index written). A stale temp file of an earlier kill lies beside them. The
    re-run keeps the 6 (mtimes unchanged), writes the 6 others, and indexes all 12."""
    src = tmp_path / "src"
    src.mkdir()
    paths = []
    for i in range(12):
        p = src / f"clip{i:02d}.wav"
        if i == 6:
            os.mkfifo(p)
        else:
            sf.write(p, sine(0.5 + 0.05 * i, 48000, 200.0 + 40 * i), 48000)
        paths.append(str(p))
    cache_dir = tmp_path / "cache"
    code = KILLED_RUN.format(repo=str(REPO), cache=str(cache_dir), paths=json.dumps(paths))
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(list(cache_dir.rglob("*.flac"))) < 6 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)   # blocked on the FIFO: nothing more comes
    assert proc.poll() is None, proc.stderr.read().decode()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = sorted(cache_dir.rglob("*.flac"))
    assert len(written) == 6 and not (cache_dir / "index.tsv").exists()
    for p in written:   # whole files only
        assert sf.info(p).samplerate == 16000 and len(sf.read(p)[0]) == sf.info(p).frames > 0
    stale = written[0].parent / f".{written[0].name}.partial.tmp"
    stale.write_bytes(b"RIFF half a file")
    mtimes = {p: os.stat(p).st_mtime_ns for p in written}

    os.unlink(paths[6])   # the FIFO becomes an ordinary clip
    sf.write(paths[6], sine(0.8, 48000, 440.0), 48000)
    cache = AudioCache(cache_dir, Target(16000, "flac"))
    done = cache.prepare([Source(p) for p in paths], jobs=2)
    assert len(done) == 12 and {p: os.stat(p).st_mtime_ns for p in written} == mtimes
    assert len(list(cache_dir.rglob("*.flac"))) == 12
    lines = (cache_dir / "index.tsv").read_text().splitlines()
    assert len(lines) == 13 and lines[0].startswith("key\tfile\tframes")
    for s, p in done.items():
        assert sf.info(p.path).frames == p.frames == round(sf.info(s.path).frames / 3)
    # and once more: a no-op
    mtimes = {p.path: os.stat(p.path).st_mtime_ns for p in done.values()}
    assert cache.prepare([Source(p) for p in paths]) == done
    assert {p.path: os.stat(p.path).st_mtime_ns for p in done.values()} == mtimes


def test_export_prepares_only_what_fairseq_cannot_read(tmp_path):
    """With --resample, a 16 kHz mono wav stays where it lies (no copy); a segment of a 48 kHz
    talk becomes its own 16 kHz file with the segment's length; the manifest passes the pretraining check."""
    import pandas as pd

    from manifests.export_fairseq import export_wav2vec
    ok, talk = tmp_path / "c" / "ok16k.wav", tmp_path / "c" / "talk48k.flac"
    ok.parent.mkdir()
    sf.write(ok, sine(1.0, 16000, 300.0), 16000, subtype="PCM_16")
    sf.write(talk, sine(5.0, 48000, 600.0), 48000)
    rows = pd.DataFrame({"id": ["ok", "seg"], "audio": [str(ok), str(talk)], "offset": [0.0, 1.25],
                         "duration": [1.0, 2.5]})
    info = export_wav2vec({"train": rows}, tmp_path / "m", resample=16000, audio_cache=tmp_path / "cache")
    assert info["prepared"] == 1 and info["cut"] == 0
    root, items = read_wav2vec_manifest(tmp_path / "m" / "train.tsv")
    paths = {Path(root) / rel: n for rel, n in items}
    assert paths[ok] == 16000
    (seg, n), = [(p, n) for p, n in paths.items() if p != ok]
    assert seg.is_relative_to(tmp_path / "cache") and n == 40000 == sf.info(seg).frames
    assert abs(peak_hz(sf.read(seg)[0], 16000) - 600) <= 2
    assert check_manifest_dir(tmp_path / "m", check_audio="all")["train"]["files"] == 2
