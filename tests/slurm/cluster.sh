#!/usr/bin/env bash
# A real one-machine Slurm cluster (munged, slurmctld, slurmd on localhost, all in a temporary
# directory, run as the current user) whose HealthCheckProgram is deploy/slurm/gpudoctor-healthcheck
# (or whose Prolog is deploy/slurm/gpudoctor-prolog) with gpudoctor pointed at a recorded tree.
# Prints the node's state and reason once the health check has run, the names of the variables
# slurmd gave it (env=) and the script's log lines (log=), then stops everything it started.
# Usage: tests/slurm/cluster.sh GPUDOCTOR_BIN|none GLOBAL_ARGS...   (e.g. --root fixtures/x)
# slurmd starts the script with its own small environment; the settings reach it as in
# production, through its settings file (GPUDOCTOR_DEFAULTS names it here): GPUDOCTOR_TIMEOUT,
# GPUDOCTOR_ON_ERROR, GPUDOCTOR_ARGS and GPUDOCTOR_RESUME from this script's environment,
# GPUDOCTOR_BIN (unless "none"), and CLUSTER_SETTINGS (raw lines added to the file). With
# GPUDOCTOR_MODE=prolog the script is the cluster's Prolog instead (no health check), a batch job
# is submitted, and the job's state is printed too (job=...). CLUSTER_NODE_UPDATE (e.g.
# 'state=drain reason="RMA-1234 ..."') is applied with scontrol once slurmd has registered; the
# state printed is then the one after a health check that started later; so with CLUSTER_BUSY=1,
# a batch job that sleeps on the node (CLUSTER_RETURN_TO_SERVICE sets ReturnToService, 2 by
# default: 0 keeps a node set DOWN down). CLUSTER_INSTALL_OPT=1
# runs the cluster in a private mount namespace whose /opt holds only gpudoctor/bin/gpudoctor
# (a link to GPUDOCTOR_BIN), the install location the script looks in last.
# GPUDOCTOR_TEST_SLOW_READ (the test-only slow read) reaches gpudoctor. CLUSTER_SRUN (a command
# line) is run as a job step of CLUSTER_SRUN_TASKS tasks once the node is up: its labelled output
# is printed as srun=... lines and its exit status as srun_rc=.
set -euo pipefail
if [ "$1" = none ]; then bin=none; else bin=$(realpath "$1"); fi; shift
if [ "${CLUSTER_INSTALL_OPT:-}" = 1 ] && [ -z "${CLUSTER_IN_NAMESPACE:-}" ]; then
  export CLUSTER_IN_NAMESPACE=1
  exec unshare -m --propagation private "$0" "$bin" "$@"
fi
if [ -n "${CLUSTER_IN_NAMESPACE:-}" ]; then
  mount -t tmpfs gpudoctor-test-opt /opt
  mkdir -p /opt/gpudoctor/bin
  ln -s "$bin" /opt/gpudoctor/bin/gpudoctor
  bin=none
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/gpudoctor-slurm.XXXXXX)
pids=()
cleanup() {
  # A job still running keeps slurmd from stopping: cancel it and let it end first.
  if [ -n "${busy:-}" ]; then
    scancel "$busy" 2>/dev/null || true
    for _ in $(seq 75); do
      [ -z "$(squeue -h -j "$busy" -o %T 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
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

# The health check: the shipped script, started by slurmd with slurmd's environment, configured
# through its settings file (scontrol needs this cluster's SLURM_CONF, which a production node
# has at its default place).
defaults="$work/gpudoctor-healthcheck.defaults"
{
  echo "# written by tests/slurm/cluster.sh"
  for v in GPUDOCTOR_TIMEOUT GPUDOCTOR_ON_ERROR GPUDOCTOR_ARGS GPUDOCTOR_RESUME; do
    eval "val=\${$v:-}"
    [ -n "$val" ] && echo "$v=\"$val\""
  done
  if [ "$bin" != none ]; then echo "GPUDOCTOR_BIN=$bin"; fi
  echo "GPUDOCTOR_GLOBAL_ARGS=\"$*\""
  echo "GPUDOCTOR_REPORT_DIR=$work/reports"
  if [ -n "${CLUSTER_SETTINGS:-}" ]; then printf '%s\n' "$CLUSTER_SETTINGS"; fi
} >"$defaults"
script=gpudoctor-healthcheck
[ "${GPUDOCTOR_MODE:-}" = prolog ] && script=gpudoctor-prolog
slow=
[ -n "${GPUDOCTOR_TEST_SLOW_READ:-}" ] && slow="export GPUDOCTOR_TEST_SLOW_READ='$GPUDOCTOR_TEST_SLOW_READ'"
cat >"$work/healthcheck" <<HC
#!/bin/sh
env >"$work/reports/slurmd.env"
export GPUDOCTOR_DEFAULTS="$defaults"
export SLURM_CONF="$work/slurm.conf"
$slow
cd "$repo"
"$repo/deploy/slurm/$script" 2>"$work/reports/log.\$\$"
rc=\$?
mv "$work/reports/log.\$\$" "$work/reports/log"
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
ReturnToService=${CLUSTER_RETURN_TO_SERVICE:-2}
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
wait_ran() {
  for _ in $(seq 150); do
    [ -e "$work/reports/ran" ] && return 0
    sleep 0.2
  done
  echo "health check never ran" >&2
  tail -n 20 "$work/log/slurmd.log" "$work/log/slurmctld.log" "$work/log/munged.log" >&2 || true
  exit 3
}
wait_ran
if [ "${CLUSTER_BUSY:-}" = 1 ]; then
  busy=$(sbatch --parsable -o /dev/null -e /dev/null --wrap 'sleep 40')
  for _ in $(seq 100); do
    squeue -h -j "$busy" -o %T 2>/dev/null | grep -q RUNNING && break
    sleep 0.2
  done
fi
if [ -n "${CLUSTER_NODE_UPDATE:-}" ] || [ -n "${busy:-}" ]; then
  [ -n "${CLUSTER_NODE_UPDATE:-}" ] && eval "scontrol update nodename=$node $CLUSTER_NODE_UPDATE"
  # The first run to end may have started before the update; the one after it did not.
  rm -f "$work/reports/ran"
  wait_ran
  rm -f "$work/reports/ran" "$work/reports/check.json"
  wait_ran
fi
if [ -n "${CLUSTER_SRUN:-}" ]; then
  # A job step of CLUSTER_SRUN_TASKS tasks (2) on the node, as a user's srun starts it: every
  # line a task wrote prefixed with its rank (srun=N: ...), then the step's exit status.
  rc=0
  timeout 120 srun -N1 -n "${CLUSTER_SRUN_TASKS:-2}" -O --output "$work/reports/srun.%t" \
    $CLUSTER_SRUN 2>"$work/reports/srun.err" || rc=$?
  for f in "$work"/reports/srun.[0-9]*; do
    [ -e "$f" ] && sed "s/^/srun=${f##*.}: /" "$f"
  done
  sed 's/^/srun_err=/' "$work/reports/srun.err"
  echo "srun_rc=$rc"
fi
sleep 2
state=$(sinfo -h -n "$node" -N -o '%T')
reason=$(scontrol show node "$node" | sed -n 's/^ *Reason=\(.*\) \[.*/\1/p')
echo "state=$state"
echo "reason=$reason"
echo "node_state=$(scontrol show node "$node" | sed -n 's/^ *State=\([^ ]*\).*/\1/p')"
echo "report=$( [ -s "$work/reports/check.json" ] && echo kept || echo missing)"
echo "level=$(sed -n 's/.*"level": *\([0-9]*\).*/\1/p' "$work/reports/check.json" 2>/dev/null | head -n 1)"
echo "env=$(sed 's/=.*//' "$work/reports/slurmd.env" | sort | tr '\n' ' ')"
sed 's/^/log=/' "$work/reports/log"
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
