# Shared by start.sh / stop.sh: where the one-node test cluster keeps everything.
# One directory holds the config, munge key and socket, state, spool, logs and pid files, so
# the cluster never touches /etc/slurm or /etc/munge (a developer's machine may have a real
# SLURM set up there). Client commands find it through SLURM_CONF.
STATE=${GG_SLURM_DIR:-/var/tmp/gendergap-slurm}
export SLURM_CONF="$STATE/slurm.conf"
REASON="$STATE/unavailable"          # why the cluster is not up; the test fixture prints it
MUNGE_SOCKET="$STATE/munge/munge.socket"
# Ports off SLURM's defaults (6817/6818) so a real slurmd on the same machine does not clash.
CTLD_PORT=${GG_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${GG_SLURM_SLURMD_PORT:-16818}

cluster_up() {   # the controller answers and the node takes jobs (idle, mixed or allocated)
  [ -f "$SLURM_CONF" ] || return 1
  timeout 5 scontrol ping 2>/dev/null | grep -q "is UP" || return 1
  timeout 5 sinfo -h -n localhost -o %T 2>/dev/null | grep -Eqx "(idle|mixed|allocated|completing)"   # "idle*" = not responding
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
