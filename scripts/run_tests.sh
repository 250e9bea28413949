#!/usr/bin/env bash
# Runs the test suite in .venv and prints skipped tests loudly (a skip is never silent).
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Test files run on parallel workers (pytest-xdist), one per core up to four; a file stays on
# one worker (--dist loadfile), so its trained fixtures are built once; tests using the one-node
# SLURM cluster take turns (tests/conftest.py). Each worker's torch gets its share of the cores.
# GENDERGAP_TEST_WORKERS=0 runs everything in this process.
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)   # not nproc: it answers OMP_NUM_THREADS
workers=${GENDERGAP_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
xdist=()
if [ "$workers" -gt 1 ]; then
  xdist=(-n "$workers" --dist loadfile)
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / workers > 0 ? cores / workers : 1 ))}
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} MPLBACKEND=Agg
# The SLURM tests (tests/test_slurm.py) submit real jobs to a one-node cluster on localhost:
# install Debian's slurm-wlm + munge if missing and start the daemons (a no-op when they run).
# Neither step can fail the suite: when SLURM cannot come up they record why and those tests
# skip with that reason (listed below). GENDERGAP_SLURM=off installs and starts nothing (a
# cluster already running is still used).
[ "${GENDERGAP_SLURM:-on}" = off ] || bash scripts/slurm/install.sh
bash scripts/slurm/start.sh
# The linter first (pyproject.toml's [tool.ruff]: pyflakes, import order, 120-character lines): a
# finding fails make test before the suite's minutes are spent
.venv/bin/ruff check --quiet . || { echo "ruff check found the problems above (fix them; ruff check --fix repairs import order)"; exit 1; }
log=$(mktemp)
# -m "not long": the simulation studies (pytest -m long) run outside make test's budget; a -m in
# TEST_ARGS comes later and wins
.venv/bin/python -m pytest "${xdist[@]}" -m "not long" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if grep -q "^SKIPPED" "$log"; then
  echo
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  echo "!! Some tests were SKIPPED -- read why:"
  grep "^SKIPPED" "$log" | sed 's/^/!!   /'
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
fi
rm -f "$log"
exit "$rc"
