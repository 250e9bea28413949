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

from corpora.base.errors import UserError

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
    from corpora.base.strict_yaml import read_yaml
    path = preset_path(preset)
    cfg, _ = read_yaml(path, "give a fairseq hydra yaml file", what="pretraining preset")
    if not isinstance(cfg, dict) or "model" not in cfg or "task" not in cfg:
        raise UserError("not a fairseq pretraining config (no `model:` / `task:` section)", path=path,
                        fix="start from ssl_pretrain/presets/base.yaml")
    return cfg


@dataclass(frozen=True)
class HardwareProfile:
    """What one GPU type can hold per forward pass, which half precision it runs, and how many
    CPU cores a node has per GPU (data loading)."""
    name: str
    gpu: str
    memory_gib: int
    # the most samples (16 kHz) one forward pass fits, per preset size. The recipes' own per-GPU
    # batch (1.2M / 1.4M) fits a 32 GB V100, the GPU they were written for, so every profile here
    # runs the recipe's per-GPU batch as it is: a bigger card does NOT get a bigger max_tokens,
    # because the recipe also caps each GPU at dataset.batch_size crops (large: 4), and raising
    # one without the other shrinks the effective batch whenever the crop cap binds.
    max_tokens: dict
    fp16: bool                 # fp16 by default (the recipes, the study)
    bf16_capable: bool         # --bf16 allowed (opt-in; see BF16_CAVEAT)
    cpus_per_task: int         # CPU cores per task (per GPU) on such nodes: fairseq's num_workers=6 + 1
    cpu: bool = False


RECIPE_MAX_TOKENS = {"large": 1_200_000, "base": 1_400_000, "tiny": 200_000}

PROFILES = {
    # V100: no bf16 units; fp16 with dynamic loss scaling, as in the recipes and the study.
    "v100-32g": HardwareProfile("v100-32g", "Tesla V100 32GB", 32, RECIPE_MAX_TOKENS, True, False, 10),
    # A100: fp16 as in the recipes; bf16 only on request (--bf16), see BF16_CAVEAT.
    "a100-40g": HardwareProfile("a100-40g", "A100 40GB", 40, RECIPE_MAX_TOKENS, True, True, 8),
    "a100-80g": HardwareProfile("a100-80g", "A100 80GB", 80,
                                {"large": 2_400_000, "base": 2_800_000, "tiny": 400_000}, True, True, 8),
    # No GPU: fairseq on CPU threads, fp32, one task per rank (gloo); tests on the one-node
    # SLURM cluster, a workstation. One core per task: a shared CPU is oversubscribed otherwise.
    "cpu": HardwareProfile("cpu", "CPU only", 0, RECIPE_MAX_TOKENS, False, False, 1, cpu=True),
}

BF16_CAVEAT = ("fairseq 0.12's bf16 is not autocast mixed precision: the model, the criterion and every "
               "batch are cast to bfloat16 (trainer.py), so weights and activations are bf16 except where "
               "fairseq's modules upcast (Fp32GroupNorm/Fp32LayerNorm in the CNN, softmax); the optimizer "
               "keeps fp32 master weights (FP16Optimizer; --memory-efficient-bf16 drops them); no loss "
               "scaling; checkpoints are saved in fp32. fairseq's `--bf16 implies --tpu` (options.py) is "
               "applied only by the argparse CLI (fairseq-train), not by fairseq-hydra-train, so this runs "
               "on CUDA (checked: common.tpu stays false). The recipes and the study trained in fp16.")


@dataclass(frozen=True)
class BatchPlan:
    """How a preset's effective batch is laid out on the GPUs (or CPU ranks) at hand.

    fairseq builds each rank's batch with dataset.max_tokens (samples, after cropping to
    task.max_sample_size) AND dataset.batch_size (crops); an update sums world x update_freq
    such batches. Keeping the recipe's max_tokens and batch_size per rank and
    world x update_freq equal to the recipe's keeps every update's batch the recipe's,
    whichever cap binds on the data at hand.
    """
    preset: str
    hardware: str
    nodes: int
    gpus_per_node: int         # 0 on the cpu profile
    tasks_per_node: int        # SLURM tasks per node = ranks per node (one per GPU; CPU ranks)
    world_size: int
    max_tokens: int
    batch_size: int | None     # the recipe's crop cap per rank (None: only max_tokens)
    update_freq: int
    fp16: bool
    bf16: bool
    cpus_per_task: int
    recipe_world_size: int
    recipe_max_tokens: int
    recipe_batch_size: int | None
    recipe_update_freq: int
    cpu: bool = False

    @property
    def batches_per_update(self) -> int:
        return self.world_size * self.update_freq

    @property
    def recipe_batches_per_update(self) -> int:
        return self.recipe_world_size * self.recipe_update_freq

    @property
    def tokens_per_update(self) -> int:
        """The most audio samples one update can see (every rank batch full to max_tokens)."""
        return self.batches_per_update * self.max_tokens

    @property
    def recipe_tokens_per_update(self) -> int:
        return self.recipe_batches_per_update * self.recipe_max_tokens

    @property
    def crops_per_update(self) -> int | None:
        """The most crops one update can see (None: no batch_size cap)."""
        return None if self.batch_size is None else self.batches_per_update * self.batch_size

    @property
    def recipe_crops_per_update(self) -> int | None:
        return None if self.recipe_batch_size is None else self.recipe_batches_per_update * self.recipe_batch_size

    def overrides(self) -> list[str]:
        """fairseq hydra overrides that realise this plan."""
        out = [f"distributed_training.distributed_world_size={self.world_size}",
               f"dataset.max_tokens={self.max_tokens}"]
        if self.batch_size is not None:
            out.append(f"dataset.batch_size={self.batch_size}")
        out += [f"optimization.update_freq=[{self.update_freq}]",
                f"common.fp16={str(self.fp16).lower()}",
                f"common.bf16={str(self.bf16).lower()}",
                f"common.cpu={str(self.cpu).lower()}"]
        if self.cpu and self.world_size > 1:
            out.append("distributed_training.distributed_backend=gloo")  # NCCL needs GPUs
        return out

    def describe(self) -> str:
        ratio = self.tokens_per_update / self.recipe_tokens_per_update
        where = (f"{self.nodes} node(s) x {self.tasks_per_node} CPU rank(s)" if self.cpu
                 else f"{self.nodes} node(s) x {self.gpus_per_node} {self.hardware}")
        crops = ("" if self.crops_per_update is None else
                 f", at most {self.crops_per_update:,} crops/update vs the recipe's "
                 f"{self.recipe_crops_per_update:,} ({self.crops_per_update / self.recipe_crops_per_update:.3g}x)")
        cap = "" if self.batch_size is None else f", batch_size {self.batch_size}"
        return (f"preset {self.preset} on {where}: "
                f"world_size {self.world_size}, max_tokens {self.max_tokens}{cap}, update_freq {self.update_freq}, "
                f"{'bf16' if self.bf16 else 'fp16' if self.fp16 else 'fp32'}; "
                f"at most {self.tokens_per_update:,} samples/update vs the recipe's "
                f"{self.recipe_tokens_per_update:,} ({ratio:.3g}x){crops}")

    def as_dict(self) -> dict:
        return asdict(self)


def _size_key(preset: str, cfg: dict) -> str:
    name = Path(preset).stem
    if name in ("large", "base", "tiny"):
        return name
    dim = int(cfg.get("model", {}).get("encoder_embed_dim", 768))
    return "large" if dim >= 1024 else "base" if dim >= 512 else "tiny"


def _recipe_batch(cfg: dict) -> tuple[int, int, int | None, int]:
    """(world size, max_tokens, batch_size or None, update_freq) the recipe was written for."""
    world = int(cfg.get("distributed_training", {}).get("distributed_world_size", 1))
    tokens = int(cfg.get("dataset", {}).get("max_tokens"))
    bsz = cfg.get("dataset", {}).get("batch_size")
    freq = cfg.get("optimization", {}).get("update_freq", [1])
    freq = int(freq[0] if isinstance(freq, (list, tuple)) else freq)
    return world, tokens, (int(bsz) if bsz is not None else None), freq


def plan_batch(preset: str, hardware: str, nodes: int, gpus_per_node: int | None,
               tasks_per_node: int | None = None, bf16: bool = False) -> BatchPlan:
    """Per-rank batch and `update_freq` so one update sees the recipe's batch.

    Each rank runs the recipe's per-GPU batch (max_tokens and batch_size) when the profile
    holds it, and update_freq = recipe_world x recipe_update_freq / world, e.g. large on
    2 x 8 V100 or on 2 x 8 A100-80GB: 128 / 16 = 8; on 1 x 8 A100-80GB: 16. A GPU that
    holds less than the recipe's batch gets max_tokens and batch_size divided by k and
    update_freq multiplied by k. ``gpus_per_node`` None means 8 on a GPU profile (one task
    per GPU); the ``cpu`` profile runs ``tasks_per_node`` CPU ranks (default 1) on one node.
    ``bf16`` asks for bf16 instead of fp16 (A100 profiles; see BF16_CAVEAT).
    """
    if hardware not in PROFILES:
        raise UserError(f"unknown hardware profile {hardware!r}", fix=f"use one of {', '.join(PROFILES)}")
    profile = PROFILES[hardware]
    if profile.cpu:
        if gpus_per_node not in (None, 0, 1):   # 1: the old spelling of "one CPU task"
            raise UserError(f"the cpu profile has no GPUs (got --gpus-per-node {gpus_per_node})",
                            fix="give the number of CPU ranks with --tasks-per-node")
        if nodes != 1:
            # the tests' cluster and workstations are one node; more CPU nodes would only be slow
            raise UserError(f"the cpu profile runs on one node (got {nodes} node(s))",
                            fix="drop --nodes, or pick a GPU profile")
        gpus_per_node, tasks_per_node = 0, tasks_per_node or 1
        if tasks_per_node < 1:
            raise UserError(f"need at least 1 CPU rank (got --tasks-per-node {tasks_per_node})",
                            fix="pass --tasks-per-node N with N >= 1")
    else:
        gpus_per_node = 8 if gpus_per_node is None else gpus_per_node
        if tasks_per_node not in (None, gpus_per_node):
            raise UserError(f"on GPUs fairseq runs one task per GPU (got --tasks-per-node {tasks_per_node} "
                            f"with {gpus_per_node} GPUs per node)", fix="drop --tasks-per-node")
        tasks_per_node = gpus_per_node
        if nodes < 1 or gpus_per_node < 1:
            raise UserError(f"need at least 1 node and 1 GPU per node (got {nodes} x {gpus_per_node})",
                            fix="pass --nodes N --gpus-per-node G with N, G >= 1")
    if bf16 and not profile.bf16_capable:
        raise UserError(f"{hardware} has no fast bf16", fix="drop --bf16 (fp16 is the recipes' precision)")
    cfg = load_preset(preset)
    recipe_world, recipe_tokens, recipe_bsz, recipe_freq = _recipe_batch(cfg)
    capacity = profile.max_tokens[_size_key(preset, cfg)]
    split = -(-recipe_tokens // capacity)          # k: per-rank batch split k ways when it does not fit
    max_tokens = recipe_tokens // split
    batch_size = None if recipe_bsz is None else max(1, recipe_bsz // split)
    if recipe_bsz is not None and recipe_bsz % split:
        log.warning("batch_size %d does not split %d ways; using %d", recipe_bsz, split, batch_size)
    world = nodes * tasks_per_node
    exact = recipe_world * recipe_freq * split / world
    update_freq = max(1, round(exact))
    if abs(update_freq - exact) > 1e-9:
        log.warning("update_freq %.3f is not a whole number; using %d (effective batch %.3gx the recipe's)",
                    exact, update_freq, update_freq / exact)
    return BatchPlan(Path(preset).stem, hardware, nodes, gpus_per_node, tasks_per_node, world, max_tokens,
                     batch_size, update_freq, profile.fp16 and not bf16, bf16, profile.cpus_per_task,
                     recipe_world, recipe_tokens, recipe_bsz, recipe_freq, cpu=profile.cpu)


def _manifest_tsv(manifest) -> Path:
    p = Path(manifest)
    tsv = p / "train.tsv" if p.is_dir() else p
    if not tsv.is_file():
        raise UserError("no fairseq wav2vec manifest here", path=tsv,
                        fix="give a manifest dir with train.tsv (gendergap manifest build --format fairseq) or a .tsv")
    return tsv


def measure_batches(plan: BatchPlan, preset: str, manifest) -> dict:
    """Crops and audio per update as fairseq batches ``manifest``'s lengths under ``plan``.

    Uses fairseq's own FileAudioDataset (lengths from the manifest, crop to
    task.max_sample_size, drop below min_sample_size) and its batch_by_size with the plan's
    max_tokens / batch_size and the preset's required_batch_size_multiple; no audio is read.
    The collater crops every utterance of a batch to the batch's shortest, so a batch holds
    n x min(length) samples. One update sums world x update_freq consecutive batches, so
    per update = mean per batch x world x update_freq.
    """
    from fairseq.data.audio.raw_audio_dataset import FileAudioDataset
    from fairseq.data.data_utils import numpy_seed
    from fairseq.dataclass.configs import DatasetConfig

    cfg = load_preset(preset)
    task = cfg["task"]
    ds = FileAudioDataset(str(_manifest_tsv(manifest)), sample_rate=int(task.get("sample_rate", 16000)),
                          max_sample_size=int(task["max_sample_size"]), min_sample_size=int(task["min_sample_size"]),
                          shuffle=True, pad=False)   # the task's default: indices ordered by size
    multiple = int(cfg.get("dataset", {}).get("required_batch_size_multiple",
                                              DatasetConfig.required_batch_size_multiple))
    if len(ds) == 0:
        raise UserError("no utterance survives the preset's min_sample_size", path=_manifest_tsv(manifest),
                        fix=f"utterances must be at least {task['min_sample_size']} samples")
    with numpy_seed(1):   # as fairseq's get_batch_iterator: the order only breaks ties between equal sizes
        order = ds.ordered_indices()
    batches = ds.batch_by_size(order, max_tokens=plan.max_tokens, max_sentences=plan.batch_size,
                               required_batch_size_multiple=multiple)
    sizes = [[ds.size(i) for i in b] for b in batches if len(b)]
    if not sizes:   # fairseq drops a last batch that is not a multiple of required_batch_size_multiple
        raise UserError(f"too few utterances ({len(ds)}) for one full batch", path=_manifest_tsv(manifest),
                        fix="measure on the real training manifest")
    crops = sum(len(s) for s in sizes) / len(sizes)
    samples = sum(len(s) * min(s) for s in sizes) / len(sizes)
    per_update = plan.batches_per_update
    return {"batches": len(sizes), "crops_per_batch": crops, "samples_per_batch": samples,
            "crops_per_update": crops * per_update, "samples_per_update": samples * per_update,
            "audio_s_per_update": samples * per_update / int(task.get("sample_rate", 16000))}
