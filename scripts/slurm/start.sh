#!/usr/bin/env bash
# Starts a one-node SLURM cluster on localhost for the tests: munged, slurmctld, slurmd (as
# root, no systemd needed), one partition `local` with this machine's CPUs and memory.
# A no-op when the cluster already answers. Never fails: when SLURM cannot start it writes the
# reason to $GG_SLURM_DIR/unavailable and exits 0, so the rest of the suite runs and the
# SLURM tests skip with that reason. GENDERGAP_SLURM=off skips starting (the tests then skip).
set -uo pipefail
cd "$(dirname "$0")"
source ./common.sh
mkdir -p "$STATE" 2>/dev/null || { echo "[slurm] cannot create $STATE (the SLURM tests will skip)" >&2; exit 0; }

fail() {
  printf '%s\n' "$1" > "$REASON"
  echo "[slurm] not started: $(head -c 300 "$REASON") (the SLURM tests will skip)" >&2
  exit 0
}
tail_of() { [ -f "$1" ] && tail -n 5 "$1" | tr '\n' ' ' | cut -c1-600; }

if [ "${GENDERGAP_SLURM:-on}" = off ]; then
  cluster_up && exit 0
  fail "SLURM start disabled by GENDERGAP_SLURM=off"
fi
# install.sh ran first and left its reason when apt could not install SLURM: keep it
[ -f "$REASON" ] && grep -q "^slurm-wlm not installed" "$REASON" && ! command -v slurmctld >/dev/null && exit 0
for cmd in munged slurmctld slurmd sbatch sinfo scontrol; do
  command -v "$cmd" >/dev/null 2>&1 || fail "slurm-wlm not installed: $cmd not found (run scripts/slurm/install.sh as root)"
done
[ "$(id -u)" = 0 ] || fail "slurmctld did not start: the test cluster runs its daemons as root (got uid $(id -u))"
# a cluster started with another CPU count (an older start.sh counted with nproc, which answers
# OMP_NUM_THREADS) cannot run the tests' two-rank jobs: start it again with this machine's
want_cpus=$(getconf _NPROCESSORS_ONLN)
conf_cpus=$(sed -n 's/^NodeName=localhost CPUs=\([0-9]*\).*/\1/p' "$SLURM_CONF" 2>/dev/null)
if cluster_up && [ -n "$conf_cpus" ] && [ "$conf_cpus" != "$want_cpus" ]; then
  echo "[slurm] the running cluster has $conf_cpus CPU(s), this machine $want_cpus: restarting it"
  bash ./stop.sh >/dev/null 2>&1 || true
fi
cluster_up && { rm -f "$REASON"; exit 0; }
# Two test runs starting at once (make test twice, helpers in parallel) would each launch
# daemons fighting over one port: the second waits here, then finds the cluster up.
exec 9>"$STATE/start.lock"
flock -w 120 9 || fail "slurmctld did not start: another start.sh held $STATE/start.lock for 120 s"
cluster_up && { rm -f "$REASON"; exit 0; }

mkdir -p "$STATE"/{munge,ctld,spool,log,run}
chmod 755 "$STATE/munge"   # clients reach the socket in it; the key itself is 0400

# --- munge: its own key and socket (both slurmctld and slurmd authenticate through it) ---
key="$STATE/munge/munge.key"
if [ ! -s "$key" ]; then
  dd if=/dev/urandom of="$key" bs=1024 count=1 status=none || fail "munged did not start: cannot write $key"
fi
chmod 400 "$key"
if ! pid_alive "$STATE/run/munged.pid"; then
  # --force: munged refuses a key or log under a group/world-writable dir (a GG_SLURM_DIR in a
  # shared place); this key only ever guards the local test cluster
  munged --force --key-file="$key" --socket="$MUNGE_SOCKET" --pid-file="$STATE/run/munged.pid" \
    --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed" \
    2>>"$STATE/log/munged.log" || fail "munged did not start: $(tail_of "$STATE/log/munged.log")"
fi

# --- slurm.conf: this machine as the only node ---
cpus=$(getconf _NPROCESSORS_ONLN)   # not nproc: it answers OMP_NUM_THREADS (the test runner sets 1 per worker)
mem=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n1)
[ -n "$mem" ] || mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))
cat > "$SLURM_CONF.tmp" <<CONF
# Written by scripts/slurm/start.sh: a one-node test cluster (rewritten on every start).
ClusterName=gendergap-test
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# no cgroups in a container: track job processes through /proc, no CPU binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
# no slurmdbd (no sacct): finished jobs stay visible to squeue/scontrol for MinJobAge seconds
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
ReturnToService=2
# a container may report a topology that differs from nproc: trust this file, not the probe
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=localhost CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
mv "$SLURM_CONF.tmp" "$SLURM_CONF"

if ! pid_alive "$STATE/run/slurmctld.pid"; then
  slurmctld 2>>"$STATE/log/slurmctld.log" || fail "slurmctld did not start: $(tail_of "$STATE/log/slurmctld.log")"
else
  scontrol reconfigure >/dev/null 2>&1 || true
fi
if ! pid_alive "$STATE/run/slurmd.pid"; then
  slurmd -N localhost 2>>"$STATE/log/slurmd.log" || fail "slurmd did not start: $(tail_of "$STATE/log/slurmd.log")"
fi

# Both daemons fork into the background at once; a fatal start-up error (port taken, bad
# config) shows up as a daemon gone from its pid file, so stop waiting as soon as that happens.
started=$SECONDS
state=
while [ $((SECONDS - started)) -lt 60 ]; do
  if cluster_up; then
    rm -f "$REASON"
    echo "[slurm] one-node cluster up: partition local, $cpus CPUs, ${mem} MB (SLURM_CONF=$SLURM_CONF)"
    exit 0
  fi
  if [ $((SECONDS - started)) -ge 3 ]; then
    pid_alive "$STATE/run/slurmctld.pid" || fail "slurmctld did not start: $(tail_of "$STATE/log/slurmctld.log")"
    pid_alive "$STATE/run/slurmd.pid" || fail "slurmd did not start: $(tail_of "$STATE/log/slurmd.log")"
  fi
  # a node left down/drained by an earlier run comes back once asked
  state=$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null)
  case "$state" in down*|drain*) scontrol update nodename=localhost state=resume >/dev/null 2>&1 ;; esac
  sleep 1
done
if ! timeout 5 scontrol ping 2>/dev/null | grep -q "is UP"; then
  fail "slurmctld did not start within 60 s: $(tail_of "$STATE/log/slurmctld.log")"
fi
fail "slurmd did not register the node within 60 s (state: ${state:-none}): $(tail_of "$STATE/log/slurmd.log")"
