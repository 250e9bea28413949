"""Tiny wav2vec 2.0 pretraining on CPU: kill after the first checkpoint, resume, register,
convert to transformers (hidden states equal fairseq's), export features."""
from __future__ import annotations

import os
import re
import signal
import time

import kaldiio
import numpy as np
import pytest
import torch

from gendergap.cli import main
from ssl_helpers import utterance_frame, write_manifest, write_wavs
from ssl_pretrain import watchdog as wd
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.convert import load_fairseq_checkpoint, num_updates
from ssl_pretrain.feature_store import FeatureStore, SSLExtractor, export_view
from ssl_pretrain.run import build_command, repair_cut_short_last, start_fairseq

MAX_UPDATE = 60
# checkpoints every 5 updates; no per-epoch validation / saves (2 updates per epoch here)
TINY = ["optimization.max_update=%d" % MAX_UPDATE, "checkpoint.save_interval_updates=5",
        "common.log_interval=1", "dataset.validate_interval=1000", "checkpoint.save_interval=1000"]


def fairseq_hidden_states(ckpt_path, wave: np.ndarray) -> list[torch.Tensor]:
    """fairseq's own forward pass: the input of layer 1, then every layer's output ([T, D])."""
    from fairseq.models.wav2vec.wav2vec2 import Wav2Vec2Config, Wav2Vec2Model
    ckpt = load_fairseq_checkpoint(ckpt_path)
    fields = Wav2Vec2Config.__dataclass_fields__
    model = Wav2Vec2Model(Wav2Vec2Config(**{k: v for k, v in ckpt["cfg"]["model"].items() if k in fields}))
    model.load_state_dict(ckpt["model"])
    model.eval()
    caught = []
    hook = model.encoder.layers[0].register_forward_pre_hook(lambda m, a: caught.append(a[0]))
    with torch.no_grad():
        out = model.extract_features(torch.from_numpy(wave)[None], padding_mask=None, mask=False)
    hook.remove()
    return [caught[0][:, 0]] + [lr[0][:, 0] for lr in out["layer_results"]]


@pytest.mark.slow
def test_pretrain_kill_resume_register_convert_features(tmp_path, capsys, monkeypatch):
    # one torch thread: on a busy 2-core machine more threads make fairseq ~10x slower
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _pretrain_kill_resume_register_convert_features(tmp_path, capsys)
    finally:
        torch.set_num_threads(threads)


def _pretrain_kill_resume_register_convert_features(tmp_path, capsys):
    root = tmp_path / "audio"
    rows = write_wavs(root)
    manifest = write_manifest(root, rows, tmp_path / "manifest")
    out = tmp_path / "run"

    # 1. start fairseq, kill it (SIGKILL: no clean-up) right after its first checkpoint
    proc = start_fairseq(build_command("tiny", manifest, out, seed=3, overrides=TINY), out / "train.log")
    last = out / "checkpoints" / "checkpoint_last.pt"
    deadline = time.time() + 120
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "fairseq finished before it could be killed: raise MAX_UPDATE"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = max(r.num_updates for r in wd.parse_lines((out / "train.log").read_text().splitlines())
                    if r.kind == "train_inner")
    assert 0 < killed_at < MAX_UPDATE
    # fairseq copies each save to checkpoint_last.pt non-atomically: a kill in that window (CI
    # hit it) leaves a prefix of the save; leave one always, so the resume must repair it
    newest = max(last.parent.glob("checkpoint_*_*.pt"), key=lambda p: p.stat().st_mtime_ns)
    cut = newest.stat().st_size // 2
    saved_at = int(newest.stem.split("_")[-1])
    last.write_bytes(newest.read_bytes()[:cut])

    # 2. resume through the CLI: checkpoint_last.pt restored from the save it was cut from, then
    # fairseq loads it and finishes the schedule
    assert main(["pretrain", "run", "--preset", "tiny", "--manifest", str(manifest), "--out", str(out),
                 "--seed", "3", "--threads", "1", *TINY]) == 0
    assert (last.parent / "checkpoint_last.pt.partial").stat().st_size == cut
    log_text = (out / "train.log").read_text()
    assert re.search(rf"Loaded checkpoint {re.escape(str(last))} \(epoch \d+ @ {saved_at} updates\)", log_text)
    assert "Loaded checkpoint" in log_text and f"done: {MAX_UPDATE} updates" in capsys.readouterr().out
    assert num_updates(load_fairseq_checkpoint(last)) == MAX_UPDATE
    losses = [r.values["loss"] for r in wd.parse_lines(log_text.splitlines()) if r.kind == "train_inner"]
    assert all(np.isfinite(losses))

    # 3. registry: add + Table 3
    reg = tmp_path / "checkpoints.json"
    assert main(["ckpt", "--registry", str(reg), "add", "tiny-F", str(last), "--hours", "0.004",
                 "--male-pct", "0", "--female-pct", "100", "--unknown-pct", "0"]) == 0
    capsys.readouterr()
    assert main(["ckpt", "--registry", str(reg), "list"]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("tiny-F"))
    assert row.split()[1] == "wav2vec2"   # the family, then the parameter count (e.g. 537K)
    assert row.split()[3:8] == [str(MAX_UPDATE), "0.004", "0", "100", "0"]

    # 4. convert; every layer equals fairseq's forward pass on the same audio
    hf_dir = tmp_path / "tiny-F-hf"
    assert main(["ckpt", "--registry", str(reg), "convert", "tiny-F", "--out", str(hf_dir)]) == 0
    assert (hf_dir / "config.json").is_file() and (hf_dir / "model.safetensors").is_file()
    hf = CheckpointRef.resolve(hf_dir).load()
    assert hf.num_layers == 2 and hf.dim == 128
    import soundfile as sf
    waves = [sf.read(root / r, dtype="float32")[0] for r, _ in rows[:3]]
    states, mask = hf.hidden_states(waves)  # one padded batch of three lengths
    for b, wave in enumerate(waves):
        ref = fairseq_hidden_states(last, wave)
        n = int(mask[b].sum())
        assert len(ref) == states.shape[0] == 3
        for layer, r in enumerate(ref):
            assert r.shape[0] >= n
            diff = (states[layer, b, :n] - r[:n]).abs().max().item()
            assert diff <= 1e-4, (b, layer, diff)

    # 5. register the HF folder too; both open as the same extractor
    assert main(["ckpt", "--registry", str(reg), "add", "tiny-F-hf", str(hf_dir)]) == 0
    via_name = CheckpointRef.resolve("tiny-F-hf", reg).load()
    assert torch.allclose(via_name.hidden_states(waves[:1])[0], states[:, :1, : int(mask[0].sum())], atol=1e-5)

    # 6. feature store (fp16 shards) and its exports: npy for s2t, Kaldi ark/scp with 20 ms -> 10 ms repetition
    df, paths = utterance_frame(root, rows)
    view = FeatureStore(tmp_path / "store").view(SSLExtractor(CheckpointRef.resolve(hf_dir)), df.assign(audio=paths),
                                                 1, progress=False)
    index = export_view(view, tmp_path / "npy")
    first = np.load(tmp_path / "npy" / f"{df.id[0]}.npy")
    assert first.shape == (int(mask[0].sum()), 128)
    ref1 = states[1, 0, : first.shape[0]].numpy()
    np.testing.assert_allclose(first, ref1, atol=2e-3 * np.abs(ref1).max())  # fp16 storage: ~3 significant digits
    assert len(index.read_text().splitlines()) == len(df) + 1
    export_view(view, tmp_path / "kaldi", fmt="kaldi", repeat=2)
    ark = kaldiio.load_scp(str(tmp_path / "kaldi" / "feats.scp"))
    assert sorted(ark) == sorted(df.id)
    np.testing.assert_allclose(ark[df.id[0]], np.repeat(first, 2, axis=0), atol=1e-6)


def test_a_checkpoint_last_cut_short_by_a_kill_is_restored_from_its_save(tmp_path):
    save = tmp_path / "checkpoints"
    save.mkdir()
    torch.save({"w": torch.arange(5000.0)}, save / "checkpoint_1_5.pt")
    full = (save / "checkpoint_1_5.pt").read_bytes()
    (save / "checkpoint_last.pt").write_bytes(full[:3000])
    assert repair_cut_short_last(save) == "checkpoint_1_5.pt"
    assert (save / "checkpoint_last.pt").read_bytes() == full
    assert (save / "checkpoint_last.pt.partial").read_bytes() == full[:3000]
    assert repair_cut_short_last(save) is None          # complete now: nothing to do
    # not a prefix of any save: left alone for the safe loader to refuse in one line
    (save / "checkpoint_last.pt").write_bytes(b"junk" * 100)
    assert repair_cut_short_last(save) is None
    assert (save / "checkpoint_last.pt").read_bytes() == b"junk" * 100
