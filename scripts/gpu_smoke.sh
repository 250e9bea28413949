#!/usr/bin/env bash
# A user's first GPU node: does the whole GPU path run here, and how fast? One GPU, a few minutes.
#   1. the built-in synthetic corpus (real wavs) and its fairseq / SpeechBrain manifests;
#   2. wav2vec 2.0 `base` pretraining at fp16 (the recipe's precision), ~100 updates;
#   3. feature extraction from that checkpoint on cuda at fp16, and the throughput
#      benchmark (benchmarks/bench_features.py --throughput);
#   4. a few frozen-feature CTC ASR steps on cuda.
# Prints the device name, updates/s and audio-seconds/s. Without CUDA it stops at once, one line.
#
#   bash scripts/gpu_smoke.sh [WORK_DIR]      # default: ./runs/gpu_smoke (use a shared or local disk)
#   UPDATES=200 bash scripts/gpu_smoke.sh     # longer pretraining
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$HERE/.venv/bin/python}"
GG=("$PY" -m gendergap.cli)
WORK="${1:-$HERE/runs/gpu_smoke}"
UPDATES="${UPDATES:-100}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

[ -x "$PY" ] || { echo "gpu_smoke: no python at $PY (run scripts/install.sh, or set PYTHON=...)" >&2; exit 2; }
# fail fast, one line, before anything is written
DEVICE_NAME="$("$PY" -c 'import torch, sys
if not torch.cuda.is_available():
    sys.exit("gpu_smoke: CUDA is not available here (torch %s, CUDA build %s): run this on a GPU node" % (torch.__version__, torch.version.cuda))
print(torch.cuda.get_device_name(0))')" || exit 2
echo "gpu_smoke: device cuda:0 = $DEVICE_NAME; work dir $WORK"

now() { date +%s.%N; }
secs() { "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
mkdir -p "$WORK"

# 1. corpus and manifests ------------------------------------------------------------------------
TABLE="$WORK/synth/utterances.tsv"
[ -f "$TABLE" ] || "${GG[@]}" corpus synth --out "$WORK/synth" --size mini
"${GG[@]}" manifest build --table "$TABLE" --gender balanced --train-split pretrain --format fairseq \
    --out "$WORK/m_pretrain" --overwrite
"${GG[@]}" manifest build --table "$TABLE" --gender balanced --train-split train --format speechbrain \
    --out "$WORK/m_asr" --overwrite
AUDIO_S="$("$PY" -c 'import sys
lines = open(sys.argv[1]).read().split("\n")[1:]
print(sum(int(l.split("\t")[1]) for l in lines if l.strip()) / 16000)' "$WORK/m_pretrain/train.tsv")"

# 2. base pretraining at fp16 ----------------------------------------------------------------------
# the recipe's per-GPU batch (max_tokens 1.4M) on one GPU, update_freq 1: a speed check, not the
# recipe's effective batch (that is `gendergap pretrain plan --preset base --hardware ...`).
# min_sample_size 8000: synthetic sentences are shorter than the recipe's 2 s minimum.
rm -rf "$WORK/ssl_base"
T0="$(now)"
"${GG[@]}" pretrain run --preset base --manifest "$WORK/m_pretrain" --out "$WORK/ssl_base" --no-watchdog \
    common.cpu=false common.fp16=true distributed_training.distributed_world_size=1 "optimization.update_freq=[1]" \
    "optimization.max_update=$UPDATES" common.log_interval=10 task.min_sample_size=8000 \
    "checkpoint.save_interval_updates=$UPDATES" dataset.num_workers=2 lr_scheduler.warmup_updates=10
T1="$(now)"
CKPT="$WORK/ssl_base/checkpoints/checkpoint_last.pt"
[ -f "$CKPT" ] || { echo "gpu_smoke: pretraining wrote no $CKPT; see $WORK/ssl_base/train.log" >&2; exit 1; }
"$PY" - "$WORK/ssl_base/train.log" "$UPDATES" "$(secs "$T0" "$T1")" <<'EOF'
import json, sys
log, updates, wall = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l[l.index("{"):]) for l in open(log, errors="replace") if "[train_inner]" in l and "{" in l]
ups = [float(r["ups"]) for r in rows[1:] if "ups" in r] or [float(r["ups"]) for r in rows if "ups" in r]
wpb = [float(r["wpb"]) for r in rows if "wpb" in r]
if ups:
    sps = sum(ups) / len(ups) * (sum(wpb) / len(wpb) if wpb else 0) * 320 / 16000   # wpb: 20 ms frames
    print(f"gpu_smoke: pretrain base fp16: {updates} updates in {wall:.0f} s (with start-up); "
          f"fairseq {sum(ups) / len(ups):.2f} updates/s, ~{sps:.0f} audio-s/s trained")
else:
    print(f"gpu_smoke: pretrain base fp16: {updates} updates in {wall:.0f} s (no train_inner lines to read ups from)")
EOF

# 3. features: the checkpoint on cuda at fp16, then the throughput benchmark --------------------------
T0="$(now)"
"${GG[@]}" ckpt features "$CKPT" --trust-checkpoint --table "$TABLE" --layer all \
    --device cuda --precision fp16 --feature-store "$WORK/features"
T1="$(now)"
TABLE_S="$("$PY" -c 'import sys, pandas as pd; print(pd.read_csv(sys.argv[1], sep="\t")["duration"].sum())' "$TABLE")"
"$PY" -c "import sys; a, w = float(sys.argv[1]), float(sys.argv[2]); print(f'gpu_smoke: features base fp16: {a:.0f} s of audio in {w:.1f} s = {a / w:.0f} audio-s/s (with model load)')" \
    "$TABLE_S" "$(secs "$T0" "$T1")"
"$PY" "$HERE/benchmarks/bench_features.py" --throughput --skip-store --device cuda

# 4. a few frozen-feature ASR steps on cuda --------------------------------------------------------
T0="$(now)"
"${GG[@]}" asr frozen --ckpt "$CKPT" --trust-checkpoint --layer last --device cuda --no-progress \
    --feature-store "$WORK/features" --train "$WORK/m_asr/train.csv" --valid "$WORK/m_asr/valid.csv" \
    --out "$WORK/asr_frozen" max_steps=50
T1="$(now)"
echo "gpu_smoke: asr frozen: 50 steps in $(secs "$T0" "$T1") s (with feature reads and validation)"
echo "gpu_smoke: OK on $DEVICE_NAME (pretraining audio: ${AUDIO_S} s; outputs in $WORK)"
