"""The smallest wav2vec 2.0 pretraining run fairseq builds and steps on CPU in seconds.

Shared by the engine smoke test and the manifest test. Settings from notes/DEPENDENCIES.md:
required_batch_size_multiple=1 on tiny data; mask_channel stays off for a 32-d model.
"""
import os
import subprocess
import sys
from pathlib import Path

TINY_W2V = ("""
common: {log_format: json, log_interval: 1, seed: 1, cpu: true}
checkpoint: {save_dir: %(out)s, save_interval_updates: %(updates)d, keep_interval_updates: 1, """
            """no_epoch_checkpoints: true}
task: {_name: audio_pretraining, data: %(data)s, max_sample_size: 16000, min_sample_size: 4000, normalize: false}
dataset: {num_workers: 0, max_tokens: 64000, required_batch_size_multiple: 1, skip_invalid_size_inputs_valid_test: true,
          validate_interval_updates: %(updates)d}
distributed_training: {distributed_world_size: 1}
criterion: {_name: wav2vec, infonce: true, log_keys: [prob_perplexity, code_perplexity, temp], loss_weights: [0.1, 10]}
optimization: {max_update: %(updates)d, lr: [0.001]}
optimizer: {_name: adam, adam_betas: '(0.9,0.98)', adam_eps: 1e-06, weight_decay: 0.01}
lr_scheduler: {_name: polynomial_decay, warmup_updates: 1}
model:
  _name: wav2vec2
  quantize_targets: true
  extractor_mode: default
  conv_feature_layers: '[(32,10,5),(32,3,2),(32,3,2),(32,3,2),(32,3,2),(32,2,2),(32,2,2)]'
  encoder_layers: 1
  encoder_embed_dim: 32
  encoder_ffn_embed_dim: 64
  encoder_attention_heads: 2
  final_dim: 16
  latent_vars: 8
  latent_groups: 2
  num_negatives: 4
  conv_pos: 16
  conv_pos_groups: 4
  mask_prob: 0.5
  mask_length: 3
  feature_grad_mult: 0.1
""")


def train_tiny(manifest_dir: Path, work: Path, updates: int = 3) -> tuple[subprocess.CompletedProcess, str]:
    """fairseq-hydra-train on ``manifest_dir`` (train.tsv, valid.tsv); checkpoints in work/ckpt.

    Returns the finished process and its whole log (stdout + stderr)."""
    cfg = work / "cfg"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "tiny.yaml").write_text(TINY_W2V % {"out": work / "ckpt", "data": manifest_dir, "updates": updates})
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)   # fairseq reads checkpoints weights-only here too
    proc = subprocess.run([str(Path(sys.executable).parent / "fairseq-hydra-train"), "--config-dir", str(cfg),
                           "--config-name", "tiny", f"hydra.run.dir={work / 'hydra'}"],
                          capture_output=True, text=True, env=env, timeout=300)
    return proc, proc.stdout + proc.stderr
