#!/usr/bin/env bash
# Creates .venv and installs gendergap with its engines on a CPU machine.
# Idempotent: a stamp file records the hash of the install inputs; when they have not
# changed, this script does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY=${PYTHON:-python3}
CONSTRAINTS=requirements/constraints-cpu.txt
STAMP=$VENV/.gendergap-installed
# gendergap/__init__.py holds the version the installed metadata carries (setup.cfg reads it)
inputs_hash=$(cat setup.cfg pyproject.toml gendergap/__init__.py "$CONSTRAINTS" scripts/install.sh scripts/install_r.sh | sha256sum | cut -d' ' -f1)

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$inputs_hash" ]; then
  exit 0
fi

echo "[install] installing gendergap into $VENV (the first time ~5 min: fairseq builds from source)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$CONSTRAINTS")

# 1. Build tools and the CPU torch first: fairseq-fixed compiles against the installed torch.
"${PIP[@]}" "torch==2.13.0" numpy cython setuptools wheel
# 2. fairseq (C++/Cython build against that torch, hence no build isolation).
if ! "$VENV/bin/python" -c "import fairseq" 2>/dev/null; then
  "${PIP[@]}" --no-build-isolation fairseq-fixed
fi
# 3. gendergap itself and the rest of its dependencies.
"${PIP[@]}" -e ".[test]"
# 4. torchaudio's wheels link CUDA libraries that a CPU torch lacks; the pure-Python parts we
#    use (resample, fbank, wav2vec2 model code) work once the native libs are out of the way.
"$VENV/bin/python" - <<'PY'
import glob, importlib.util, os
spec = importlib.util.find_spec("torchaudio")
if spec is not None:
    import torch
    if not torch.cuda.is_available() and torch.version.cuda is None:
        for so in glob.glob(os.path.join(os.path.dirname(spec.origin), "lib", "*.so")):
            os.remove(so)
PY
"$VENV/bin/python" -c "import fairseq, speechbrain, transformers, torchaudio, kaldiio, sacrebleu, jiwer, eflomal, spacy, parselmouth; spacy.load('fr_core_news_sm')"
# 5. R with glmmTMB for the mixed model (Debian packages, as root; says why and goes on otherwise).
bash scripts/install_r.sh
echo "$inputs_hash" > "$STAMP"
echo "[install] done"
