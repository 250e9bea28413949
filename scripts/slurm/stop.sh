#!/usr/bin/env bash
# Stops the one-node test cluster that start.sh started (by the pids in its pid files only).
set -uo pipefail
cd "$(dirname "$0")"
source ./common.sh
for d in slurmd slurmctld munged; do
  pidfile="$STATE/run/$d.pid"
  if pid_alive "$pidfile"; then
    pid=$(cat "$pidfile")
    kill "$pid"
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "[slurm] stopped $d ($pid)"
  fi
  rm -f "$pidfile"
done
