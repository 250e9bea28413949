"""Did pretraining learn? Contrastive accuracy of a checkpoint next to its random-init twin.

fairseq's own task, model and criterion score the wav2vec 2.0 objective on a manifest split:
the accuracy of picking the true quantised latent among ``num_negatives`` distractors (chance
= 1 / (negatives + 1)) and the code perplexity (how many of the codebook entries are used; a
collapse shows up as a small number). The twin has the same config and fresh random weights,
so the gap between the two is what pretraining added. Masks and negatives are drawn from
seeded generators, so a re-run gives the same numbers.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from corpora.base.errors import UserError
from ssl_pretrain.manifest_check import check_manifest_dir
from ssl_pretrain.watchdog import parse_lines


@torch.no_grad()
def contrastive_accuracy(ref, manifest_dir: str | os.PathLike, split: str = "valid", seed: int = 0,
                         max_tokens: int = 400_000, device: str = "cpu") -> dict:
    """{accuracy, chance, code_perplexity, loss, n_masked, random_init} of ``ref`` (a
    ssl_pretrain.checkpoints.CheckpointRef; its random-init twin builds fairseq's model with
    fresh weights under ``torch.manual_seed(ref.random_init_seed)``) on ``manifest_dir/<split>.tsv``.
    The forward passes run on ``device`` in fp32: fairseq's wav2vec 2.0 forward fails under
    autocast (its masking writes the fp32 mask embedding into a half-precision tensor)."""
    from fairseq import tasks

    state = ref.fairseq_state()  # refuses fine-tuned or non-wav2vec2 checkpoints
    random_init = ref.is_twin
    manifest_dir = Path(manifest_dir)
    if not (manifest_dir / f"{split}.tsv").is_file():
        raise UserError(f"no {split}.tsv in the manifest dir", path=manifest_dir,
                        fix="build one with `gendergap manifest build --format fairseq`")
    check_manifest_dir(manifest_dir, check_audio="sample")
    from omegaconf import OmegaConf
    cfg = OmegaConf.create(state["cfg"])  # fairseq stores a plain dict; its builders want attributes
    cfg.task.data = str(manifest_dir)
    torch.manual_seed(seed)
    np.random.seed(seed)  # fairseq draws masks with numpy and negatives with torch
    task = tasks.setup_task(cfg.task)
    if random_init:
        torch.manual_seed(ref.random_init_seed)
    model = task.build_model(cfg.model)
    if not random_init:
        model.load_state_dict({k: v.float() for k, v in state["model"].items()})
    model.to(device).eval()
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset(split)
    batches = task.get_batch_iterator(dataset=task.dataset(split), max_tokens=max_tokens,
                                      required_batch_size_multiple=1, seed=seed,
                                      ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    batches = list(batches)  # crops are drawn here, before the masks, in one fixed order
    torch.manual_seed(seed)
    np.random.seed(seed)  # same masks and negatives for a checkpoint and its twin
    correct = count = 0
    loss = ppl_weighted = 0.0
    for sample in batches:
        sample["net_input"]["mask_indices"] = _seeded_masks(model, cfg.model, sample, seed)
        sample = _to(sample, device)
        _, _, out = criterion(model, sample)
        correct += int(out["correct"])
        count += int(out["count"])
        loss += float(out["loss"])
        ppl_weighted += float(out.get("code_perplexity", 0.0)) * int(out["count"])
    if count == 0:
        raise UserError(f"no masked frames scored on {split}", path=manifest_dir,
                        fix="the split is empty or all its files are shorter than the model's minimum")
    negatives = int(cfg.model.get("num_negatives", 100)) + int(cfg.model.get("cross_sample_negatives", 0))
    return {"accuracy": correct / count, "chance": 1.0 / (negatives + 1), "code_perplexity": ppl_weighted / count,
            "loss": loss / count, "n_masked": count, "random_init": random_init, "seed": seed,
            "codebook_size": int(cfg.model.get("latent_vars", 320)) * int(cfg.model.get("latent_groups", 2))}


def _to(sample, device: str):
    """A fairseq sample with its tensors on ``device``."""
    if isinstance(sample, dict):
        return {k: _to(v, device) for k, v in sample.items()}
    return sample.to(device) if torch.is_tensor(sample) else sample


def _seeded_masks(model, mcfg, sample, seed: int) -> torch.Tensor:
    """The model's time masks, drawn as fairseq draws them but seeded per utterance id.

    Without a seed fairseq's compute_mask_indices uses a fresh unseeded generator, so two
    evaluations of one checkpoint would mask different frames. Its seeding treats 0 as "no
    seed", hence the +1.
    """
    from fairseq.data.data_utils import compute_mask_indices

    source = sample["net_input"]["source"]
    padding = sample["net_input"].get("padding_mask")
    lengths = (~padding).sum(-1) if padding is not None else torch.full((source.shape[0],), source.shape[1])
    frames = model._get_feat_extract_output_lengths(lengths).long()
    n_frames = int(model._get_feat_extract_output_lengths(torch.tensor(source.shape[1])))
    frame_padding = torch.arange(n_frames)[None, :] >= frames[:, None]
    mask = compute_mask_indices(
        (source.shape[0], n_frames), frame_padding, mcfg.mask_prob, mcfg.mask_length, mcfg.mask_selection,
        mcfg.mask_other, min_masks=2, no_overlap=mcfg.no_mask_overlap, min_space=mcfg.mask_min_space,
        require_same_masks=mcfg.get("require_same_masks", True), mask_dropout=mcfg.get("mask_dropout", 0.0),
        seed=seed + 1, epoch=1, indices=sample["id"])
    return torch.from_numpy(mask)


def chamfer_similarity(x: np.ndarray, y: np.ndarray) -> float:
    """Symmetric mean of each frame's best cosine match in the other utterance ([T, D] arrays).

    An order-free stand-in for DTW: two renditions of one sentence share their phones, so
    most frames of each find a close partner in the other.
    """
    xn = x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-8)
    yn = y / (np.linalg.norm(y, axis=1, keepdims=True) + 1e-8)
    s = xn @ yn.T
    return 0.5 * float(s.max(axis=1).mean() + s.max(axis=0).mean())


def cross_speaker_retrieval(states: list[np.ndarray], speakers: list[str], texts: list[str]) -> float:
    """Content check: for each utterance, is the most similar utterance of *another* speaker the
    same sentence? Mean accuracy over ordered speaker pairs, on sentences both speakers read.

    ``states`` are one layer's frames per utterance ([T, D]); each is standardised per
    utterance so that a voice's constant offsets (pitch, loudness) do not decide the match.
    Gender probes cannot tell a learned model from random weights (pitch is in the raw signal);
    this can: random encoders keep the voice but not the phones.
    """
    normed = [(s - s.mean(0)) / (s.std(0) + 1e-5) for s in states]
    by_speaker: dict[str, dict[str, int]] = {}
    for i, (spk, text) in enumerate(zip(speakers, texts)):
        by_speaker.setdefault(spk, {}).setdefault(text, i)
    accs = []
    for a, utts_a in by_speaker.items():
        for b, utts_b in by_speaker.items():
            shared = sorted(set(utts_a) & set(utts_b))
            if a == b or len(shared) < 2:
                continue
            sim = np.array([[chamfer_similarity(normed[utts_a[t]], normed[utts_b[u]]) for u in shared] for t in shared])
            accs.append(float((sim.argmax(axis=1) == np.arange(len(shared))).mean()))
    if not accs:
        raise UserError("no two speakers read a common sentence",
                        fix="give a table where several speakers read the same texts (e.g. the synth test split)")
    return float(np.mean(accs))


def retrieval_by_layer(view, table) -> list[float]:
    """cross_speaker_retrieval for every layer of a feature-store view of ``table``'s rows."""
    speakers, texts, ids = table["speaker"].tolist(), table["text"].tolist(), table["id"].astype(str).tolist()
    return [cross_speaker_retrieval(view.layer(ids, layer), speakers, texts) for layer in view.layers]


def last_valid_accuracy(log_path: str | os.PathLike) -> tuple[int | None, float | None]:
    """(updates, contrastive accuracy) of the last validation in a fairseq training log."""
    lines = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()
    valid = [r for r in parse_lines(lines) if r.kind == "valid" and "accuracy" in r.values]
    return (valid[-1].num_updates, float(valid[-1].values["accuracy"])) if valid else (None, None)
