#!/usr/bin/env bash
# The project's GPU checks in one go, for a GPU machine that has CUDA torch but not the project's
# other dependencies and no network access (last run with Python 3.12, torch 2.11.0+cu130,
# transformers 5.17). Runs, each under its own time limit, logging to $OUT:
#   0. env.log     the GPU, the Python packages that matter, an import check of every engine;
#   c. canary.log  the precision canary (`gendergap bench --check-precision`) on the machine's CPU in
#                  bf16 and on the GPU in bf16 and fp16, with the CPU's model name and bf16/AMX flags,
#                  then the CPU bf16 tests (every family, the shipped F-tiny's features vs fp32, the
#                  canary's fallback and refusal);
#   1. pytest.log  `pytest -m gpu` (tests/test_gpu.py) plus the two CPU tests whose expectations
#                  change where CUDA is present (--device auto picks the GPU);
#   2. bench.log   benchmarks/bench_features.py --throughput --skip-store --device cuda
#                  (audio-s/s and MFU of the base and large presets in fp32/fp16/bf16);
#   3. smoke.log   scripts/gpu_smoke.sh (base pretraining at fp16 with fairseq, extraction,
#                  frozen-ASR steps), with whatever time is left; pretrain.log = fairseq's log tail.
#
# First, on a machine with pip and network access, put the wheels of
# requirements/gpu-device-wheels.txt into .whl/ (cp312 manylinux; see that file) and bring the
# checkout with its .whl/ to the GPU machine; there:
#   OUT=/some/dir BUDGET_S=570 bash scripts/device_gpu_check.sh
# BUDGET_S bounds the whole script (default 570 s); OUT defaults to runs/device_gpu_check.
# Only some steps: STEPS="canary pytest" (default "canary pytest bench smoke"). A failing test's fairseq
# logs (generate.log, train.log) are copied to $OUT/fairseq-logs.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/runs/device_gpu_check}"
BUDGET_S="${BUDGET_S:-570}"            # seconds for the whole script (BUDGET_S=... to change it)
STEPS="${STEPS:-canary pytest bench smoke}"
want() { [[ " $STEPS " == *" $1 "* ]]; }
START=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
cap() { local l; l=$(left); echo $(( l < $1 ? (l > 1 ? l : 1) : $1 )); }   # timeout 0 would mean none
mkdir -p "$OUT"
PY="$(command -v python3)"

# wheels into a private site folder: --no-deps, exactly the versions in .whl/ (one of each)
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "device_gpu_check: the wheels in .whl/ did not install" >&2; exit 1; }
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg

{
  nvidia-smi -L; "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -iE "^(torch|torchaudio|transformers|numpy|sacrebleu|typing.extensions|pandas|scipy|sentencepiece|safetensors|pytest) "
  "$PY" -c 'import torch, fairseq, fairseq_cli.train, speechbrain, soundfile, hydra, pydantic, jiwer, submitit, kaldiio, espeakng_loader, pyrealb, transformers, gendergap.cli
print("imports ok; torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0),
      "| fairseq", fairseq.__version__, "| speechbrain", speechbrain.__version__, "| transformers", transformers.__version__,
      "| libsndfile", soundfile.__libsndfile_version__)'
} 2>&1 | tee "$OUT/env.log"

if want canary; then
  echo "== canary ($(left) s left)"
  {
    grep -m1 "model name" /proc/cpuinfo
    echo "bf16/AMX flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx|avx512_bf16|avx512f$)' | tr '\n' ' ')"
    for dp in "cpu bf16" "cuda bf16" "cuda fp16"; do
      set -- $dp
      timeout "$(cap 60)" "$PY" -m gendergap.cli bench --check-precision --device "$1" --precision "$2"
      echo "exit $?"
    done
    timeout "$(cap 150)" "$PY" -m pytest -p no:cacheprovider -q --basetemp=/tmp/canary_pytest \
        tests/test_precision_canary.py tests/test_feature_store.py::test_bf16_autocast_extraction_matches_fp32 \
        "tests/test_ssl_families.py::test_bf16_autocast_on_cpu_follows_fp32_and_keeps_batch_invariance"
  } 2>&1 | tee "$OUT/canary.log"
fi

if want pytest; then
  echo "== pytest ($(left) s left)"
  T0=$(date +%s)
  timeout "$(cap 300)" "$PY" -m pytest -p no:cacheprovider -v --durations=0 --basetemp=/tmp/gpu_pytest \
      tests/test_gpu.py tests/test_precision_canary.py \
      tests/test_feature_store.py::test_device_and_precision_options \
      tests/test_st_data.py::test_fairseq_runs_where_the_device_says \
      tests/test_config.py::test_steps_take_their_device_and_precision_from_the_task 2>&1 | tee "$OUT/pytest.log"
  echo "pytest wall: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/pytest.log"
  if grep -q "^FAILED" "$OUT/pytest.log"; then
    find /tmp/gpu_pytest -name generate.log -o -name train.log | while read -r f; do
      echo "==== $f"; tail -n 40 "$f"; done > "$OUT/fairseq-logs.txt"
  fi
fi

if want bench; then
  echo "== bench ($(left) s left)"
  timeout "$(cap 150)" "$PY" benchmarks/bench_features.py --throughput --skip-store \
      --device cuda 2>&1 | tee "$OUT/bench.log"
fi

if ! want smoke; then
  :
elif [ "$(left)" -gt 60 ]; then
  echo "== gpu_smoke ($(left) s left)"
  T0=$(date +%s)
  timeout $(( $(left) - 10 )) env PYTHON="$PY" bash scripts/gpu_smoke.sh /tmp/gpu_smoke 2>&1 | tee "$OUT/smoke.log"
  echo "gpu_smoke wall: $(( $(date +%s) - T0 )) s (exit ${PIPESTATUS[0]})" | tee -a "$OUT/smoke.log"
  tail -n 60 /tmp/gpu_smoke/ssl_base/train.log > "$OUT/pretrain.log" 2>/dev/null
else
  echo "gpu_smoke: not run, too little time left" | tee "$OUT/smoke.log"
fi
echo "device_gpu_check: done in $(( $(date +%s) - START )) s"
