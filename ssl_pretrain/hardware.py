"""Presets (fairseq hydra yaml files) and hardware profiles that keep the recipe's batch.

wav2vec 2.0 recipes are written for a fixed number of GPUs (large: 128 x 1.2M samples).
Fewer GPUs must accumulate gradients (`update_freq`) so that one update still sees the same
amount of audio; otherwise the learning rate and warm-up of the recipe no longer fit. That
arithmetic lives here, in one place, so `pretrain launch --dry-run` can print it.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from corpora.errors import UserError

log = logging.getLogger(__name__)

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


def preset_names() -> list[str]:
    """The built-in preset names (large, base, tiny)."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_path(preset: str) -> Path:
    """A built-in preset name, or a path to the user's own fairseq hydra yaml file."""
    p = Path(preset)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise UserError("preset file not found", path=p, fix="give a fairseq hydra yaml file or one of "
                            + ", ".join(preset_names()))
        return p.resolve()
    builtin = PRESETS_DIR / f"{preset}.yaml"
    if not builtin.is_file():
        raise UserError(f"unknown preset {preset!r}",
                        fix=f"use one of {', '.join(preset_names())} or a path to a .yaml file")
    return builtin


def load_preset(preset: str) -> dict:
    """The preset's config as a plain dict (fairseq's own hydra loader reads the same file)."""
    path = preset_path(preset)
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    if not isinstance(cfg, dict) or "model" not in cfg or "task" not in cfg:
        raise UserError("not a fairseq pretraining config (no `model:` / `task:` section)", path=path,
                        fix="start from ssl_pretrain/presets/base.yaml")
    return cfg


@dataclass(frozen=True)
class HardwareProfile:
    """What one GPU type can hold per step, and which half precision it runs fast."""
    name: str
    gpu: str
    memory_gib: int
    # samples (16 kHz) per GPU per forward pass, per preset size; the recipes' own values fit
    # a 32 GB V100 (the GPU they were written for), so 80 GB cards take twice as much.
    max_tokens: dict
    fp16: bool
    bf16: bool
    cpu: bool = False


PROFILES = {
    # V100: no bf16 units; fp16 with dynamic loss scaling, as in the recipes and the study.
    "v100-32g": HardwareProfile("v100-32g", "Tesla V100 32GB", 32,
                                {"large": 1_200_000, "base": 1_400_000, "tiny": 200_000}, True, False),
    # A100 40GB: same per-GPU batch as a V100-32GB (activations dominate), bf16 avoids the
    # loss-scale collapses the study reports (footnote 4: "training instability").
    "a100-40g": HardwareProfile("a100-40g", "A100 40GB", 40,
                                {"large": 1_200_000, "base": 1_400_000, "tiny": 200_000}, False, True),
    "a100-80g": HardwareProfile("a100-80g", "A100 80GB", 80,
                                {"large": 2_400_000, "base": 2_800_000, "tiny": 400_000}, False, True),
    # No GPU: one fairseq process on CPU threads (tests on the one-node SLURM cluster, a
    # workstation). fp32 only; the recipe's per-step batch, the rest through update_freq.
    "cpu": HardwareProfile("cpu", "CPU only", 0,
                           {"large": 1_200_000, "base": 1_400_000, "tiny": 200_000}, False, False, cpu=True),
}


@dataclass(frozen=True)
class BatchPlan:
    """How a preset's effective batch is laid out on the GPUs at hand."""
    preset: str
    hardware: str
    nodes: int
    gpus_per_node: int
    world_size: int
    max_tokens: int
    update_freq: int
    fp16: bool
    bf16: bool
    recipe_world_size: int
    recipe_max_tokens: int
    recipe_update_freq: int
    cpu: bool = False          # no GPUs: gpus_per_node is 0 and the job runs one task

    @property
    def recipe_tokens_per_update(self) -> int:
        return self.recipe_world_size * self.recipe_max_tokens * self.recipe_update_freq

    @property
    def tokens_per_update(self) -> int:
        return self.world_size * self.max_tokens * self.update_freq

    def overrides(self) -> list[str]:
        """fairseq hydra overrides that realise this plan."""
        return [f"distributed_training.distributed_world_size={self.world_size}",
                f"dataset.max_tokens={self.max_tokens}",
                f"optimization.update_freq=[{self.update_freq}]",
                f"common.fp16={str(self.fp16).lower()}",
                f"common.bf16={str(self.bf16).lower()}",
                f"common.cpu={str(self.cpu).lower()}"]

    def describe(self) -> str:
        ratio = self.tokens_per_update / self.recipe_tokens_per_update
        where = ("one CPU process" if self.cpu
                 else f"{self.nodes} node(s) x {self.gpus_per_node} {self.hardware}")
        return (f"preset {self.preset} on {where}: "
                f"world_size {self.world_size}, max_tokens {self.max_tokens}, update_freq {self.update_freq}, "
                f"{'bf16' if self.bf16 else 'fp16' if self.fp16 else 'fp32'}; "
                f"{self.tokens_per_update:,} samples/update vs the recipe's "
                f"{self.recipe_tokens_per_update:,} ({ratio:.3g}x)")

    def as_dict(self) -> dict:
        return asdict(self)


def _size_key(preset: str, cfg: dict) -> str:
    name = Path(preset).stem
    if name in ("large", "base", "tiny"):
        return name
    dim = int(cfg.get("model", {}).get("encoder_embed_dim", 768))
    return "large" if dim >= 1024 else "base" if dim >= 512 else "tiny"


def plan_batch(preset: str, hardware: str, nodes: int, gpus_per_node: int | None) -> BatchPlan:
    """Per-GPU batch and `update_freq` so one update sees the recipe's amount of audio.

    update_freq = recipe_world x recipe_max_tokens x recipe_update_freq / (world x max_tokens),
    e.g. large on 2 x 8 V100: 128 x 1.2M / (16 x 1.2M) = 8. ``gpus_per_node`` None means 8 on
    a GPU profile; the ``cpu`` profile is one process on one node (world size 1, no GPUs).
    """
    if hardware not in PROFILES:
        raise UserError(f"unknown hardware profile {hardware!r}", fix=f"use one of {', '.join(PROFILES)}")
    profile = PROFILES[hardware]
    if profile.cpu:
        # fairseq's CPU training is one process: several CPU tasks would only fight over cores
        if nodes != 1 or gpus_per_node not in (None, 0, 1):
            raise UserError(f"the cpu profile runs one process on one node (got {nodes} node(s) x "
                            f"{gpus_per_node} task(s))", fix="drop --nodes/--gpus-per-node, or pick a GPU profile")
        gpus_per_node = 0
    elif gpus_per_node is None:
        gpus_per_node = 8
    if nodes < 1 or (gpus_per_node < 1 and not profile.cpu):
        raise UserError(f"need at least 1 node and 1 GPU per node (got {nodes} x {gpus_per_node})",
                        fix="pass --nodes N --gpus-per-node G with N, G >= 1")
    cfg = load_preset(preset)
    recipe_world = int(cfg.get("distributed_training", {}).get("distributed_world_size", 1))
    recipe_tokens = int(cfg.get("dataset", {}).get("max_tokens"))
    recipe_freq = cfg.get("optimization", {}).get("update_freq", [1])
    recipe_freq = int(recipe_freq[0] if isinstance(recipe_freq, (list, tuple)) else recipe_freq)
    max_tokens = profile.max_tokens[_size_key(preset, cfg)]
    world = 1 if profile.cpu else nodes * gpus_per_node
    exact = recipe_world * recipe_tokens * recipe_freq / (world * max_tokens)
    update_freq = max(1, round(exact))
    if abs(update_freq - exact) > 1e-9:
        log.warning("update_freq %.3f is not a whole number; using %d (effective batch %.3gx the recipe's)",
                    exact, update_freq, update_freq / exact)
    return BatchPlan(Path(preset).stem, hardware, nodes, gpus_per_node, world, max_tokens, update_freq,
                     profile.fp16, profile.bf16, recipe_world, recipe_tokens, recipe_freq, cpu=profile.cpu)
