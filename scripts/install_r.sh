#!/usr/bin/env bash
# Installs R with glmmTMB and lme4 from Debian's prebuilt packages (r-base-core, r-cran-glmmtmb,
# r-cran-lme4: no compiler, no CRAN download), for the study's per-utterance mixed model
# (analysis/mixed_model.py runs analysis/glmm.R with Rscript). Idempotent: does nothing when
# Rscript loads glmmTMB already. Never fails: when apt is missing or refuses, it says why and
# exits 0; the study then reports "R is not installed" in one line where the model would be, and
# the tests that fit a model skip with that reason. About 20 s with a package cache, a minute from
# the network.
set -uo pipefail
have() { command -v Rscript >/dev/null 2>&1 && Rscript --vanilla -e 'library(glmmTMB); library(jsonlite)' >/dev/null 2>&1; }
say() { echo "[R] $1" >&2; }

if have; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  say "R with glmmTMB is not installed, and installing it needs root (run: apt-get install r-base-core r-cran-glmmtmb r-cran-lme4); the mixed model will say so"
  exit 0
fi
command -v apt-get >/dev/null 2>&1 || { say "R with glmmTMB is not installed: no apt-get on this machine"; exit 0; }
say "installing R, glmmTMB and lme4 with apt-get (once; ~20 s to a minute)"
log=$(mktemp /tmp/gendergap-r-apt.XXXXXX.log)
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show r-cran-glmmtmb >/dev/null 2>&1; then
  apt-get update -qq >"$log" 2>&1 || { say "apt-get update failed: $(tail -n 3 "$log" | tr '\n' ' ')"; exit 0; }
fi
# --no-install-recommends: r-base-dev, compilers and the documentation are not needed to fit models
if ! apt-get install -y -qq --no-install-recommends r-base-core r-cran-glmmtmb r-cran-lme4 r-cran-jsonlite >"$log" 2>&1; then
  say "apt-get failed: $(tail -n 3 "$log" | tr '\n' ' ')"; exit 0
fi
have && say "installed R $(Rscript --version 2>&1 | grep -o '[0-9]\+\.[0-9]\+\.[0-9]\+' | head -1) with glmmTMB" \
  || say "apt-get finished but Rscript cannot load glmmTMB"
rm -f "$log"
