#!/usr/bin/env bash
# A real one-machine Slurm cluster (munged, slurmctld, slurmd on localhost, all in a temporary
# directory, run as the current user) whose HealthCheckProgram is deploy/slurm/gpudoctor-healthcheck
# with gpudoctor pointed at a recorded tree. Prints the node's state and reason once the health
# check has run, then stops everything it started.
# Usage: tests/slurm/cluster.sh GPUDOCTOR_BIN GLOBAL_ARGS...   (e.g. --root fixtures/x)
# GPUDOCTOR_MODE, GPUDOCTOR_TIMEOUT, GPUDOCTOR_ON_ERROR and GPUDOCTOR_ARGS in the environment
# reach the script. With GPUDOCTOR_MODE=prolog the script is the cluster's Prolog instead (no
# health check), a batch job is submitted, and the job's state is printed too (job=...).
set -euo pipefail
bin=$(realpath "$1"); shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/gpudoctor-slurm.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
user=$(id -un)
mkdir -p "$work"/{munge,state,spool,log,reports}
chmod 700 "$work/munge"
# munged wants a key of at least 32 bytes, readable only by its owner.
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
sock="$work/munge/munge.socket"
munged --foreground --force --key-file="$work/munge/munge.key" --socket="$sock" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/log/munged.log" \
  --seed-file="$work/munge/seed" >"$work/log/munged.out" 2>&1 &
pids+=($!)

# The health check: the example script, configured through its environment file equivalent.
settings=""
for v in GPUDOCTOR_MODE GPUDOCTOR_TIMEOUT GPUDOCTOR_ON_ERROR GPUDOCTOR_ARGS; do
  eval "val=\${$v:-}"
  [ -n "$val" ] && settings="$settings
export $v='$val'"
done
cat >"$work/healthcheck" <<HC
#!/bin/sh
$settings
export SLURM_CONF="$work/slurm.conf"
export GPUDOCTOR="$bin"
export GPUDOCTOR_GLOBAL_ARGS="$*"
export GPUDOCTOR_REPORT_DIR="$work/reports"
cd "$repo"
"$repo/deploy/slurm/gpudoctor-healthcheck"
rc=\$?
echo ran >"$work/reports/ran"
exit \$rc
HC
chmod +x "$work/healthcheck"
if [ "${GPUDOCTOR_MODE:-}" = prolog ]; then
  hook="Prolog=$work/healthcheck"
else
  hook="HealthCheckProgram=$work/healthcheck
HealthCheckInterval=5
HealthCheckNodeState=ANY"
fi
ctld_port=$(free_port)
slurmd_port=$(free_port)
cat >"$work/slurm.conf" <<CONF
ClusterName=gpudoctor-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
$hook
NodeName=$node NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$work/slurm.conf"
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
slurmctld -D -i -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.2; done
slurmd -D -N "$node" -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
if [ "${GPUDOCTOR_MODE:-}" = prolog ]; then
  for _ in $(seq 100); do sinfo -h -n "$node" -N -o '%T' 2>/dev/null | grep -q idle && break; sleep 0.2; done
  job=$(sbatch --parsable -o /dev/null -e /dev/null --wrap 'echo started >'"$work/reports/job-started")
fi
# Wait for the health check (or Prolog) to have run, then for the state to settle.
ok=0
for _ in $(seq 150); do
  if [ -e "$work/reports/ran" ]; then ok=1; break; fi
  sleep 0.2
done
if [ $ok = 0 ]; then
  echo "health check never ran" >&2
  tail -n 20 "$work/log/slurmd.log" "$work/log/slurmctld.log" "$work/log/munged.log" >&2 || true
  exit 3
fi
sleep 2
state=$(sinfo -h -n "$node" -N -o '%T')
reason=$(scontrol show node "$node" | sed -n 's/^ *Reason=\(.*\) \[.*/\1/p')
echo "state=$state"
echo "reason=$reason"
echo "report=$( [ -s "$work/reports/check.json" ] && echo kept || echo missing)"
if [ -n "${job:-}" ]; then
  # A failed Prolog requeues the job held (JobState=PENDING, Priority=0); one that passes lets
  # it run.
  for _ in $(seq 50); do
    info=$(scontrol show job "$job" 2>/dev/null)
    js=$(printf '%s\n' "$info" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $js in COMPLETED | PENDING) break ;; esac
    sleep 0.2
  done
  prio=$(printf '%s\n' "$info" | sed -n 's/.*Priority=\([0-9]*\).*/\1/p')
  held=no; [ "$prio" = 0 ] && held=yes
  echo "job=$js held=$held started=$( [ -e "$work/reports/job-started" ] && echo yes || echo no)"
fi
