"""The feature store: one extraction per checkpoint and rows, read by every consumer; device and
precision options; a killed extraction resumes from its finished shards.

Everything here runs the real models on the CPU (bf16 autocast included); the CUDA paths are in
tests/test_gpu.py (marker `gpu`).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import soundfile as sf
import torch

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from corpora.table import read_table, write_table
from corpora.utterances import UtteranceTable
from gendergap.cli import main
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.feature_store import COUNTERS, FbankExtractor, FeatureStore, SSLExtractor

pytestmark = pytest.mark.usefixtures("one_thread")
SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny corpus (train f1/m1, valid f2/m2, test f3/m3) whose table also has English targets."""
    root = tmp_path_factory.mktemp("store")
    paths = write_corpus(root / "data")
    table = read_table(paths["table"])
    table["tgt_text_en"] = table["text"]
    write_table(table, paths["table"])
    return {"root": root, "model": tiny_wav2vec2(root / "w2v"), **paths}


def _rows(table_path):
    return UtteranceTable.load(table_path).audio_rows()


def test_frozen_asr_st_and_probes_read_one_extraction(corpus, tmp_path):
    store = ["--feature-store", str(tmp_path / "store")]
    model, table = str(corpus["model"]), str(corpus["table"])
    before = COUNTERS["utterances"]
    assert main(["ckpt", "features", model, "--table", table, "--layer", "all", *store]) == 0
    assert COUNTERS["utterances"] - before == 16  # every row once: the study's `features` job
    extracted = dict(COUNTERS)
    asr = tmp_path / "asr"
    assert main(["asr", "frozen", "--ckpt", model, "--layer", "all", "--train", str(corpus["train"]),
                 "--valid", str(corpus["valid"]), "--test", str(corpus["test"]), "--out", str(asr), *store,
                 "--no-progress", "--bootstrap", "0", "batch_seconds=3", "valid_batch_seconds=6", "max_steps=2",
                 "hidden_size=32", "proj_dim=32"]) == 0
    st = tmp_path / "st"
    assert main(["st", "train", "--ckpt", model, "--layer", "1", "--train", table, "--train-split", "train",
                 "--valid", table, "--valid-split", "valid", "--src", "fr", "--tgt", "en", "--out", str(st), *store,
                 "max-update=2", "data.vocab_size=50", "save-interval-updates=1", "average_last=1"]) == 0
    assert main(["probe", "run", "--ckpt", model, "--table", table, "--out", str(tmp_path / "probes"), "--probes",
                 "mean", "--no-random-init", *store]) == 0
    assert COUNTERS == extracted  # not one forward pass after the extraction
    entries = {p.parent for p in (tmp_path / "store").rglob("entry.json")}
    assert len(entries) == 1  # one entry, read by all three
    entry = entries.pop()
    assert json.loads((asr / "test.json").read_text())["features"]["entry"] == str(entry)
    st_rows = (st / "data" / "train.tsv").read_text().splitlines()[1:]
    assert st_rows and all(r.split("\t")[1].startswith(str(entry / "shard-")) for r in st_rows)
    probe = json.loads((tmp_path / "probes" / "probe_results.json").read_text())
    assert probe and json.loads((tmp_path / "probes" / "probes" / "w2v" / "results.json").read_text())[
        "config"]["features"] == str(entry)


def test_a_killed_extraction_resumes_from_its_finished_shards(corpus, tmp_path):
    """SIGKILL in the middle of the last shard: the re-run extracts that shard only and ends with
    the same features as an uninterrupted extraction."""
    table = read_table(corpus["table"])
    # the last row (the longest, so the last shard) reads a FIFO: the extraction blocks there,
    # deterministically, with every earlier shard finished and the last one half-written. A FIFO
    # named by a table is refused when the table is read (UtteranceTable.audio_rows), so the file
    # is a regular one then, and becomes the FIFO once the first shard is written
    fifo = tmp_path / "blocking.wav"
    shutil.copyfile(UtteranceTable.load(corpus["table"]).rows["audio"].iloc[0], fifo)
    table.loc[len(table) - 1, ["audio", "duration"]] = [str(fifo), 2.0]
    path = tmp_path / "t.tsv"
    write_table(table, path)
    cmd = [sys.executable, "-m", "gendergap.cli", "ckpt", "features", str(corpus["model"]), "--table", str(path),
           "--layer", "all", "--shard-mb", "0.004", "--feature-store", str(tmp_path / "store")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while not list((tmp_path / "store").rglob("shard-*.tsv")) and time.time() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.05)
        os.unlink(fifo)
        os.mkfifo(fifo)
        while len(list((tmp_path / "store").rglob("shard-*.tsv"))) < 15 and time.time() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        time.sleep(0.5)  # now blocked opening the FIFO
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    entry = next((tmp_path / "store").rglob("entry.json")).parent
    assert not json.loads((entry / "entry.json").read_text())["complete"]
    assert json.loads((entry / "entry.json").read_text())["shards"] == 16
    assert list(entry.glob(".shard-*.tmp"))  # the half-written shard, never published
    done = {p: p.stat().st_mtime_ns for p in entry.glob("shard-*.zip")}
    assert len(done) == 15
    os.unlink(fifo)   # the same bytes again: the store keys a segment by its file's content
    shutil.copyfile(UtteranceTable.load(corpus["table"]).rows["audio"].iloc[0], fifo)
    before = COUNTERS["utterances"]
    rows = _rows(path)
    view = FeatureStore(tmp_path / "store").view(SSLExtractor(CheckpointRef.resolve(corpus["model"])), rows, "all",
                                                 shard_bytes=4000, progress=False)
    assert COUNTERS["utterances"] - before == 1  # only the unfinished shard
    assert {p: p.stat().st_mtime_ns for p in done} == done
    assert json.loads((entry / "entry.json").read_text())["complete"]
    clean = FeatureStore(tmp_path / "clean").view(SSLExtractor(CheckpointRef.resolve(corpus["model"])), rows,
                                                  "all", shard_bytes=4000, progress=False)
    for uid in rows["id"]:
        np.testing.assert_array_equal(view.get(uid), clean.get(uid))


def test_bf16_autocast_extraction_matches_fp32(tmp_path):
    """bf16 keeps 8 bits of mantissa: on the shipped F-tiny checkpoint every layer stays within
    3 % relative (Frobenius) error of fp32, and no frame is off by more than 15 % of the layer's range."""
    from ssl_helpers import shipped_fp32_and_bf16_views
    df, fp32, bf16 = shipped_fp32_and_bf16_views(tmp_path, n=6)
    assert fp32.dir != bf16.dir  # the precision is part of the entry's key
    assert json.loads((bf16.dir / "entry.json").read_text())["runtime"]["precision"] == "bf16"
    for layer in fp32.layers:
        a = np.concatenate(fp32.layer(df["id"], layer))
        b = np.concatenate(bf16.layer(df["id"], layer))
        rel = np.linalg.norm(b - a) / np.linalg.norm(a)
        assert 0 < rel < 0.03, (layer, rel)  # > 0: bf16 really ran
        assert np.abs(b - a).max() < 0.15 * (a.max() - a.min()), layer


def test_fp16_storage_and_fairseq_pointers(corpus, tmp_path):
    from fairseq.data.audio.audio_utils import get_features_or_waveform
    rows = _rows(corpus["table"])
    ref = CheckpointRef.resolve(corpus["model"])
    view = FeatureStore(tmp_path / "store").view(SSLExtractor(ref), rows, [0, 2], progress=False)
    ssl = ref.load()
    from ssl_pretrain.features import read_segment
    wave = read_segment(rows["audio"][3], 0.0, rows["duration"][3], 16000)
    states, mask = ssl.hidden_states([wave])
    uid = rows["id"][3]
    assert view.get(uid).dtype == np.float16 and view.get(uid).shape == (2, int(mask[0].sum()), 32)
    np.testing.assert_allclose(view.array(uid, 2), states[2, 0].numpy(), atol=2e-3 * states[2].abs().max().item())
    np.testing.assert_array_equal(get_features_or_waveform(view.pointer(uid, 2)), view.array(uid, 2))
    with pytest.raises(Exception, match="layer 1 is not in this view"):
        view.array(uid, 1)
    # a narrower request is served by the wider entry; a wider one is a new extraction
    before = COUNTERS["utterances"]
    FeatureStore(tmp_path / "store").view(SSLExtractor(ref), rows.iloc[:5], 2, progress=False)
    assert COUNTERS["utterances"] == before
    FeatureStore(tmp_path / "store").view(SSLExtractor(ref), rows.iloc[:5], "all", progress=False)
    assert COUNTERS["utterances"] == before + 5


def test_fbank_extractor_is_kaldi_fbank_stacked_to_20ms(corpus, tmp_path):
    from torchaudio.compliance import kaldi
    rows = _rows(corpus["table"])
    view = FeatureStore(tmp_path / "store").view(FbankExtractor(), rows, "all", progress=False)
    uid = rows["id"][0]
    x = view.get(uid)[0]
    wave, _ = sf.read(rows["audio"][0], dtype="float32")
    ref = kaldi.fbank(torch.from_numpy(wave)[None] * 32768, num_mel_bins=80, dither=0.0, energy_floor=0.0).numpy()
    assert view.dim == 160 and view.frame_shift_s == pytest.approx(0.02)
    assert x.shape == (-(-ref.shape[0] // 2), 160)
    np.testing.assert_allclose(x[:, :80], ref[0::2], atol=2e-2)   # fp16 storage of log energies (~1e1)
    np.testing.assert_allclose(x[:-1, 80:], ref[1::2][: x.shape[0] - 1], atol=2e-2)


def test_device_and_precision_options(corpus, tmp_path, capsys):
    base = ["ckpt", "features", str(corpus["model"]), "--table", str(corpus["table"]), "--feature-store",
            str(tmp_path / "store")]
    if not torch.cuda.is_available():  # the refusal is what a CPU-only machine must say
        assert main([*base, "--device", "cuda"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "no CUDA device here" in err[0] and "--device cpu" in err[0]
        assert not (tmp_path / "store").exists()
        assert main([*base, "--device", "cuda:1"]) == 2
        capsys.readouterr()
    assert main([*base, "--device", "cpu", "--precision", "fp16"]) == 2
    assert "fp16 needs a CUDA device" in capsys.readouterr().err
    assert main([*base, "--device", "tpu"]) == 2
    assert "unknown --device" in capsys.readouterr().err
    assert main(base) == 0  # --device auto
    meta = json.loads(next((tmp_path / "store").rglob("entry.json")).read_text())
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert meta["runtime"]["device"] == expected and meta["runtime"]["torch"] == torch.__version__
    assert meta["runtime"]["device_name"]


def test_checkpoint_reference_rules(corpus, tmp_path):
    from corpora.base.errors import UserError
    from ssl_pretrain.checkpoints import register_checkpoint
    from ssl_pretrain.registry import Registry
    shipped = CheckpointRef.resolve(SHIPPED / "tiny-male.safetensors")
    assert shipped.kind == "packed" and shipped.name == "tiny-male"
    reg = Registry(tmp_path / "r.json")
    register_checkpoint(reg, "M-tiny", SHIPPED / "tiny-male.safetensors", hours=0.28)
    by_name = CheckpointRef.resolve("M-tiny", tmp_path / "r.json")
    assert by_name.name == "M-tiny" and by_name.content_hash == shipped.content_hash
    run = tmp_path / "runs" / "F" / "checkpoints"
    run.mkdir(parents=True)
    torch.save(shipped.fairseq_state(), run / "checkpoint_best.pt")
    in_run = CheckpointRef.resolve(run / "checkpoint_best.pt")
    assert in_run.name == "F" and in_run.kind == "fairseq"  # a run folder names it
    hf = CheckpointRef.resolve(corpus["model"])
    assert hf.kind == "hf" and hf.name == "w2v"
    twin = shipped.twin(0)
    assert twin.name == "tiny-male+random-init" and twin.content_hash != shipped.content_hash
    a, b = twin.load(), shipped.twin(0).load()
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert not torch.equal(a.model.state_dict()["encoder.layers.0.attention.k_proj.weight"],
                           shipped.load().model.state_dict()["encoder.layers.0.attention.k_proj.weight"])
    with pytest.raises(UserError, match="checkpoint path not found"):
        CheckpointRef.resolve(tmp_path / "missing.pt")
    with pytest.raises(UserError, match="no checkpoint named"):
        CheckpointRef.resolve("nobody", tmp_path / "r.json")


def test_two_processes_asking_for_the_same_features_extract_once(corpus, tmp_path):
    """The entry's lock: the second process waits, then reads what the first one extracted."""
    cmd = [sys.executable, "-m", "gendergap.cli", "ckpt", "features", str(corpus["model"]), "--table",
           str(corpus["table"]), "--layer", "all", "--feature-store", str(tmp_path / "store")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    logs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    assert sum("features: extracting" in log for log in logs) == 1, logs
    assert len(list((tmp_path / "store").rglob("entry.json"))) == 1


def test_a_segment_shared_by_two_corpora_is_extracted_once(corpus, tmp_path):
    """Two corpora whose audio are two copies of the same files (each mTEDx pair ships its own wav/
    folder of the talks), under other ids: the study's covering extraction stores each segment once
    and serves both corpora from it, at any layer it holds; a copy whose bytes differ is its own segment."""
    from corpora import stats
    from corpora.segment_content import CACHE
    from ssl_pretrain.feature_cover import cover, extract_covering

    rows_a = _rows(corpus["table"]).reset_index(drop=True)
    copy = tmp_path / "pair-copy"
    shutil.copytree(Path(rows_a["audio"].iloc[0]).parent, copy)
    rows_b = rows_a.assign(id="b/" + rows_a["id"], corpus="b",
                           audio=[str(copy / Path(a).name) for a in rows_a["audio"]])
    assert not set(rows_a["audio"]) & set(rows_b["audio"])
    extractor = SSLExtractor(CheckpointRef.resolve(corpus["model"]))
    n = len(rows_a)

    before = COUNTERS["utterances"]
    views = extract_covering(str(tmp_path / "store"), extractor, [(rows_b, "1"), (rows_a, "all")])
    assert COUNTERS["utterances"] - before == n          # not 2n: B's segments are A's
    assert [len(v) for v in views] == [n] and views[0].n_segments == n
    # B at layer 1 is served by the entry A's request made, with A's very numbers
    store = FeatureStore(tmp_path / "store")
    view_b = store.view(extractor, rows_b, [1], progress=False)
    assert COUNTERS["utterances"] - before == n and view_b.dir == views[0].dir
    for a, b in zip(rows_a["id"], rows_b["id"]):
        np.testing.assert_array_equal(view_b.array(b, 1), views[0].array(a, 1))
    # header, one line per file, and the line that checks them
    assert len((tmp_path / "store" / CACHE).read_text().splitlines()) == 2 + 2 * rows_a["audio"].nunique()

    # both at the same layers, in one entry: still n extractions, the view says so
    before = COUNTERS["utterances"]
    both = store.view(extractor, pd.concat([rows_a, rows_b], ignore_index=True), "all", progress=False)
    assert COUNTERS["utterances"] - before == 0 and len(both) == 2 * n and both.n_segments == n
    fresh = FeatureStore(tmp_path / "fresh").view(extractor, pd.concat([rows_a, rows_b], ignore_index=True), "all",
                                                  progress=False)
    assert COUNTERS["utterances"] - before == n and fresh.n_segments == n

    # one file of the copy re-recorded (other bytes, same name and size): that file's rows are new segments
    changed = Path(rows_b["audio"].iloc[0])
    data, rate = sf.read(changed, dtype="int16")
    sf.write(changed, (data[::-1]).copy(), rate, subtype="PCM_16")
    assert changed.stat().st_size == Path(rows_a["audio"].iloc[0]).stat().st_size
    on_changed = int((rows_b["audio"] == str(changed)).sum())
    before = COUNTERS["utterances"]
    store.view(extractor, rows_b, [1], progress=False)
    # no entry holds all of B's segments now: a new one, extracted whole (entries are the unit)
    assert COUNTERS["utterances"] - before == n
    assert store.view(extractor, rows_b, [1], progress=False).n_segments == n
    assert 0 < on_changed < n

    # the dry run's estimate counts the shared segments once too (from headers: name and size)
    both_rows = pd.concat([rows_a, rows_b], ignore_index=True)
    segments = dict(zip(both_rows["id"], stats.segment_keys(both_rows)))
    entries = cover([(rows_a, {0, 1, 2}), (rows_b, {1})], lambda r: r["id"].map(segments).tolist())
    assert len(entries) == 1 and len(entries[0][0]) == n


def test_extraction_order_follows_length_and_source_not_content(tmp_path):
    """Which segments share a length bucket decides their features' float rounding, and trained heads
    amplify it: the plan orders by length, then file path and first sample -- never by the content
    hash in the key, so keying by content left every earlier study's batches as they were."""
    from ssl_pretrain.store_files import plan_shards

    class Ext:   # what plan_shards reads of an extractor
        sample_rate, dim, frame_shift_s = 16000, 4, 0.02

    audio = {"f" * 64 + "|0|16000": "/a/1.wav", "0" * 64 + "|0|16000": "/a/2.wav",
             "9" * 64 + "|0|8000": "/b/0.wav", "1" * 64 + "|16000|16000": "/a/1.wav"}
    plan = plan_shards(list(audio), audio, Ext(), 1, 2, 1 << 30)
    assert plan["audio"].tolist() == ["/b/0.wav", "/a/1.wav", "/a/1.wav", "/a/2.wav"]
    assert plan["offset"].tolist() == [0.0, 0.0, 1.0, 0.0]
