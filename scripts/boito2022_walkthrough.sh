#!/usr/bin/env bash
# Reproducing Boito et al. 2022 from the corpora as released: docs/boito2022.md's walkthrough as a script.
# Every line is a `gendergap` command from docs/boito2022.md ("Reproducing Boito et al. 2022 on the real
# corpora"); nothing else touches the data. tests/test_boito2022_walkthrough.py runs it on
# miniature corpora in the released layouts (tests/paper_fixtures.py) with tiny budgets.
#
#   bash scripts/boito2022_walkthrough.sh data  DATA WORK     # index, merge, manifests, pretrain, register
#   bash scripts/boito2022_walkthrough.sh study CONFIG WORK   # check the study config, run it, report
#
# DATA holds the downloads: mtedx/ (fr-fr, fr-en, fr-es, fr-pt), mtedx_fr_speakers.tsv (the talks'
# genders), mls_french/, mls_french_opus/, cv-corpus-5.1-2020-06-22/fr, cv-corpus-17.0-2024-03-15/fr,
# lebenchmark/epac_like/data.json. Between the stages, copy configs/boito2022.yaml and point it at
# WORK/tables and WORK/ssl (docs/boito2022.md says how). Budgets (environment):
#   PRETRAIN   pretraining command (default: `pretrain run --preset tiny`; the paper's models:
#              `pretrain launch --preset large --hardware v100-32g --nodes 2 --gpus-per-node 8 ...`)
#   PRETRAIN_ARGS  its fairseq overrides (default: the miniature's 20 updates,
#              `optimization.max_update=20 checkpoint.save_interval_updates=10 lr_scheduler.warmup_updates=5`)
#   VALID_H    pretraining valid hours per manifest (default 0.004; e.g. 5 on the real pool)
#   GENDERGAP  the command (default: gendergap on PATH)
set -euo pipefail
GG=${GENDERGAP:-gendergap}
stage=${1:?stage: data or study}; src=${2:?DATA dir or CONFIG}; WORK=${3:?WORK dir}
mkdir -p "$WORK/tables"
T=$WORK/tables

if [ "$stage" = data ]; then
  D=$src
  # 1. mTEDx, one table per subset, named as the study config's tasks name them; the talks'
  #    genders from a speaker list (MuST-Speakers' mixed-panel label mapped to U)
  "$GG" corpus index --kind mtedx --root "$D/mtedx" --lang fr --tgt-lang fr --corpus mtedx-fr \
      --speaker-genders "$D/mtedx_fr_speakers.tsv" --gender-map 'Multi-Mix=U' --out "$T/mtedx_fr-fr.tsv"
  for p in en es pt; do
    "$GG" corpus index --kind mtedx --root "$D/mtedx" --lang fr --tgt-lang $p --corpus mtedx-fr-$p \
        --speaker-genders "$D/mtedx_fr_speakers.tsv" --gender-map 'Multi-Mix=U' --out "$T/mtedx_fr-$p.tsv"
  done
  "$GG" corpus stats "$T"/mtedx_fr-{fr,en,es,pt}.tsv --format markdown
  # 2. the pretraining pool: MLS (flac and opus releases), Common Voice (old and new TSV headers,
  #    48 kHz mp3), a LeBenchmark JSON; merged into one table (Table 1's layout from corpus stats)
  "$GG" corpus index --kind mls --root "$D/mls_french" --split train --out "$T/mls.tsv"
  "$GG" corpus index --kind mls --root "$D/mls_french_opus" --split train --out "$T/mls_opus.tsv"
  "$GG" corpus index --kind commonvoice --root "$D/cv-corpus-5.1-2020-06-22/fr" --split train --out "$T/cv5.tsv"
  "$GG" corpus index --kind commonvoice --root "$D/cv-corpus-17.0-2024-03-15/fr" --split train --out "$T/cv17.tsv"
  "$GG" corpus index --kind lebenchmark --root "$D/lebenchmark/epac_like/data.json" --out "$T/lebenchmark.tsv"
  "$GG" corpus merge "$T"/{mls,mls_opus,cv5,cv17,lebenchmark}.tsv --out "$T/pretrain_pool.tsv"
  "$GG" corpus stats "$T/pretrain_pool.tsv" --format markdown
  # 3. female-only and male-only pretraining manifests; fairseq reads 16 kHz, so the 48 kHz mp3s
  #    get 16 kHz copies in the prepared-audio cache (once; a re-run reuses them)
  for g in F M; do
    "$GG" manifest build --table "$T/pretrain_pool.tsv" --gender $g --valid-hours "${VALID_H:-0.004}" \
        --format fairseq --resample 16000 --audio-cache "$WORK/prepared-audio" --out "$WORK/manifests/$g" --overwrite
  done
  # 4. pretrain each, and register what each run wrote (its best checkpoint, else its last)
  read -r -a PRETRAIN <<< "${PRETRAIN:-pretrain run --preset tiny}"
  read -r -a PRETRAIN_ARGS <<< "${PRETRAIN_ARGS:-optimization.max_update=20 checkpoint.save_interval_updates=10 lr_scheduler.warmup_updates=5}"
  for g in F M; do
    "$GG" "${PRETRAIN[@]}" --manifest "$WORK/manifests/$g" --out "$WORK/ssl/$g" --seed 1 "${PRETRAIN_ARGS[@]}"
    "$GG" ckpt --registry "$WORK/checkpoints.json" add "$g-1K-Large" "$WORK/ssl/$g" --manifest "$WORK/manifests/$g" \
        --replace
  done
  "$GG" ckpt --registry "$WORK/checkpoints.json" list
elif [ "$stage" = study ]; then
  CONFIG=$src
  # 5. check the whole study against the data (nothing is submitted when a problem is found),
  #    then run it and write the report (Tables 1-5)
  "$GG" sweep --config "$CONFIG" --out "$WORK/study" --dry-run
  "$GG" sweep --config "$CONFIG" --out "$WORK/study"
  "$GG" sweep status --config "$CONFIG" --out "$WORK/study"
else
  echo "boito2022_walkthrough: unknown stage '$stage' (data or study)" >&2
  exit 2
fi
