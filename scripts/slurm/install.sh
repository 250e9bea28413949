#!/usr/bin/env bash
# Installs Debian's SLURM (slurm-wlm: slurmctld, slurmd, client commands) and munge, for the
# one-node test cluster (scripts/slurm/start.sh). Idempotent: does nothing when the daemons and
# commands are already there. Never fails: when apt is missing or refuses, it records why in
# $GG_SLURM_DIR/unavailable and exits 0, so `make test` goes on and the SLURM tests skip
# with that reason (tests/slurm_helpers.py reads the file).
set -uo pipefail
STATE=${GG_SLURM_DIR:-/var/tmp/gendergap-slurm}
mkdir -p "$STATE" 2>/dev/null || true
REASON="$STATE/unavailable"

have_all() { command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged; } >/dev/null 2>&1
fail() { echo "[slurm] $1 (the SLURM tests will skip)" >&2; printf '%s\n' "$1" > "$REASON" 2>/dev/null; exit 0; }

if have_all; then rm -f "$REASON"; exit 0; fi
[ "$(id -u)" = 0 ] || fail "slurm-wlm not installed: installing it needs root (run: apt-get install slurm-wlm munge)"
command -v apt-get >/dev/null 2>&1 || fail "slurm-wlm not installed: no apt-get on this machine"

echo "[slurm] installing slurm-wlm and munge with apt-get (once; ~1 min)"
log="$STATE/apt.log"
export DEBIAN_FRONTEND=noninteractive
# An update only when the package is unknown (a fresh container has no package lists).
if ! apt-cache show slurm-wlm >/dev/null 2>&1; then
  apt-get update -qq >"$log" 2>&1 || fail "slurm-wlm not installed: apt-get update failed: $(tail -n 3 "$log" | tr '\n' ' ')"
fi
# --no-install-recommends: the recommends (mailutils, a MTA, ...) are not needed to run jobs.
if ! apt-get install -y -qq --no-install-recommends slurm-wlm munge >"$log" 2>&1; then
  fail "slurm-wlm not installed: apt-get failed: $(tail -n 3 "$log" | tr '\n' ' ')"
fi
have_all || fail "slurm-wlm not installed: apt-get finished but slurmctld/slurmd/sbatch/munged are missing"
rm -f "$REASON"
echo "[slurm] installed $(dpkg-query -W -f='${Version}' slurm-wlm 2>/dev/null)"
