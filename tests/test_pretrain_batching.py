"""Effective batch as fairseq really batches it: pretraining (`pretrain plan`) and ST (`--gpus`).

fairseq gives each rank batches capped by dataset.max_tokens (samples, after cropping to
task.max_sample_size) AND dataset.batch_size (crops); one update sums world x update_freq of
them. The large recipe caps a GPU at 4 crops, which binds for every utterance under 18.75 s:
a profile that doubles max_tokens and halves world x update_freq halves the crops per update.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from corpora.base.errors import UserError
from gendergap.cli import main
from ssl_pretrain.hardware import load_preset, measure_batches, plan_batch

SR = 16000


def realistic_manifest(tmp_path, n: int = 2000, seed: int = 0):
    """A wav2vec manifest of n utterances of 2-25 s (a TED-like skew toward 5-15 s). The audio
    files do not exist: fairseq's dataset reads lengths from the manifest, batching needs no audio."""
    rng = np.random.default_rng(seed)
    seconds = np.clip(rng.gamma(4.0, 2.5, n), 2.0, 25.0)
    lengths = (seconds * SR).astype(int)
    d = tmp_path / "m"
    d.mkdir()
    (d / "train.tsv").write_text("/nowhere\n" + "".join(f"u{i:05d}.flac\t{x}\n" for i, x in enumerate(lengths)))
    return d, lengths


def fairseq_batches(manifest_dir, max_tokens: int, batch_size: int | None):
    """The batches fairseq's audio_pretraining task builds for `large` (its own dataset and sampler)."""
    from fairseq.data.audio.raw_audio_dataset import FileAudioDataset
    task = load_preset("large")["task"]
    ds = FileAudioDataset(str(manifest_dir / "train.tsv"), sample_rate=SR, max_sample_size=task["max_sample_size"],
                          min_sample_size=task["min_sample_size"], shuffle=True, pad=False)
    batches = ds.batch_by_size(ds.ordered_indices(), max_tokens=max_tokens, max_sentences=batch_size,
                               required_batch_size_multiple=8)   # fairseq's default; large.yaml sets none
    # the collater crops a batch to its shortest utterance (pad=False)
    return [(len(b), len(b) * min(ds.size(i) for i in b)) for b in batches if len(b)]


def per_update(batches, world: int, update_freq: int) -> tuple[float, float]:
    crops = np.mean([c for c, _ in batches]) * world * update_freq
    samples = np.mean([s for _, s in batches]) * world * update_freq
    return crops, samples


def test_plan_matches_fairseq_batching_on_a100_80g_and_v100(tmp_path, capsys):
    manifest, lengths = realistic_manifest(tmp_path)
    assert (lengths < 18.75 * SR).mean() > 0.8        # the crop cap binds for most utterances
    recipe = load_preset("large")["dataset"]
    assert (recipe["batch_size"], recipe["max_tokens"]) == (4, 1_200_000)   # the recipe's caps, both
    reference = fairseq_batches(manifest, 1_200_000, 4)
    recipe_crops, recipe_samples = per_update(reference, 128, 1)          # 128 GPUs, update_freq 1

    shown = {}
    for hardware, nodes in (("a100-80g", 1), ("v100-32g", 2)):
        plan = plan_batch("large", hardware, nodes, 8)
        assert plan.world_size * plan.update_freq == 128 and (plan.max_tokens, plan.batch_size) == (1_200_000, 4)
        crops, samples = per_update(fairseq_batches(manifest, plan.max_tokens, plan.batch_size),
                                    plan.world_size, plan.update_freq)
        assert crops == pytest.approx(recipe_crops) and samples == pytest.approx(recipe_samples)
        measured = measure_batches(plan, "large", manifest)
        assert measured["crops_per_update"] == pytest.approx(crops)
        assert measured["samples_per_update"] == pytest.approx(samples)
        # `pretrain plan --manifest` prints the same numbers
        assert main(["pretrain", "plan", "--preset", "large", "--hardware", hardware, "--nodes", str(nodes),
                     "--gpus-per-node", "8", "--manifest", str(manifest)]) == 0
        text = capsys.readouterr().out
        m = re.search(r"([\d.]+) crops/update, ([\d,]+) samples/update", text)
        shown[hardware] = (float(m.group(1)), int(m.group(2).replace(",", "")))
        assert shown[hardware][0] == pytest.approx(crops, abs=0.05)
        assert shown[hardware][1] == pytest.approx(samples, abs=1)
        assert "(1x)" in text and "512 crops/update" in text
    assert shown["a100-80g"] == shown["v100-32g"]
    assert 480 < recipe_crops <= 512          # nearly every batch holds its 4 crops

    # the old a100-80g layout (2.4M samples per GPU, 8 GPUs x update_freq 8 = 64) sees half the crops
    old_crops, old_samples = per_update(fairseq_batches(manifest, 2_400_000, 4), 8, 8)
    assert old_crops / recipe_crops == pytest.approx(0.5, abs=0.02)
    assert old_samples / recipe_samples < 0.55


def test_measure_refuses_a_manifest_without_usable_utterances(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "train.tsv").write_text("/nowhere\na.flac\t1000\n")      # 0.06 s: under min_sample_size
    with pytest.raises(UserError, match="min_sample_size"):
        measure_batches(plan_batch("large", "v100-32g", 2, 8), "large", d)


# --- ST: update-freq from the GPU count ---------------------------------------------------------
def test_st_update_freq_keeps_the_recipe_batch_on_g_gpus():
    from downstream_st.presets import load_preset as st_preset
    from downstream_st.presets import on_device, on_gpus, recipe_update_freq
    xs = on_device(st_preset("xs"), "cuda:2", "fp16")
    assert recipe_update_freq(xs) == 8 and xs["train"]["max-tokens"] == 40000   # fairseq's mTEDx recipe, 1 GPU
    for gpus in (1, 2, 4, 8):
        cfg = on_gpus(xs, gpus)
        t = cfg["train"]
        assert int(t["update-freq"]) * gpus * t["max-tokens"] == 8 * 40000      # the same frames per update
        assert t.get("distributed-world-size", 1) == gpus
        assert cfg["gpu"] == ",".join(str(2 + i) for i in range(gpus))          # cuda:2 .. cuda:(2+G-1)
    with pytest.raises(UserError, match="cannot share that evenly") as e:
        on_gpus(xs, 3)
    assert "use 1, 2, 4, 8 GPUs" in str(e.value)
    with pytest.raises(UserError, match="needs a CUDA device"):
        on_gpus(on_device(st_preset("xs"), "cpu", "fp32"), 2)
    assert on_gpus(on_device(st_preset("tiny"), "cpu", "fp32"), 1)["train"].get("update-freq", 1) == 1


def test_st_train_refuses_gpus_that_break_the_batch(tmp_path, capsys):
    rc = main(["st", "train", "--train", str(tmp_path / "t.tsv"), "--valid", str(tmp_path / "v.tsv"),
               "--src", "fr", "--tgt", "en", "--out", str(tmp_path / "st"), "--preset", "xs",
               "--device", "cpu", "--gpus", "2"])
    assert rc == 2 and "needs a CUDA device" in capsys.readouterr().err
