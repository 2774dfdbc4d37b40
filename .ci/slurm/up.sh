#!/usr/bin/env bash
# Start a single-node Slurm cluster (munge + slurmctld + slurmd) on this machine, for CI.
#
# Usage: .ci/slurm/up.sh            (as root, Debian/Ubuntu; no systemd needed)
#
# * installs slurm-wlm, munge, libpmix-dev (for srun --mpi=pmix) and shellcheck with apt-get,
#   only if missing;
# * writes /etc/slurm/slurm.conf for this host: one node, partition "debug", CPUs=$SLURM_CI_CPUS
#   (default 8) with SlurmdParameters=config_overrides, so jobs with more tasks than real cores
#   run (oversubscribed) instead of pending forever;
# * starts munged, slurmctld and slurmd by hand (they daemonize and write pidfiles);
# * waits (bounded by $SLURM_CI_WAIT seconds, default 60) until sinfo shows the node idle.
# Idempotent: running daemons are kept, a slurm.conf written by this script is rewritten only when it
# changed (and then slurmctld/slurmd are restarted). A slurm.conf not written by this script is never
# overwritten. Stop everything with .ci/slurm/down.sh. Recipe: ../shared/notes/machine-setup.md, sec. 6.
set -euo pipefail

CPUS=${SLURM_CI_CPUS:-8}
WAIT=${SLURM_CI_WAIT:-60}
CONF=/etc/slurm/slurm.conf
MARK="# written by hpc_refer .ci/slurm/up.sh"
LOGDIR=/var/log/slurm
MUNGE_PID=/run/munge/munged.pid
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid

die() { echo "slurm-up: ERROR: $*" >&2; exit 1; }
say() { echo "slurm-up: $*"; }

[ "$(id -u)" -eq 0 ] || die "must run as root (installs packages and starts system daemons)"

alive() {  # alive PIDFILE: true if the pidfile names a running process
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# --- packages ----------------------------------------------------------------------------
missing=()
restart=0  # set when slurmctld/slurmd must (re)start to see new packages or a new slurm.conf
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || missing+=(slurm-wlm)
[ -x /usr/sbin/munged ] || missing+=(munge)
# srun --mpi=pmix dlopens the unversioned libpmix.so, which only libpmix-dev provides.
[ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || ls /usr/lib/*/pmix2/lib/libpmix.so >/dev/null 2>&1 \
    || missing+=(libpmix-dev)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if [ "${#missing[@]}" -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install ${missing[*]} by hand"
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
    restart=1  # e.g. a slurmd started before libpmix-dev could not load mpi/pmix
fi

# --- munge -------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --force
    else
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge
chown munge:munge /run/munge
if alive "$MUNGE_PID"; then
    say "munged already running (pid $(cat "$MUNGE_PID"))"
else
    rm -f "$MUNGE_PID" /run/munge/munge.socket.2*
    runuser -u munge -- /usr/sbin/munged || die "munged did not start"
fi
for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n | unmunge >/dev/null || die "munge does not work (munge -n | unmunge failed)"

# --- slurm.conf --------------------------------------------------------------------------
host=$(hostname -s)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGDIR"
new=$(cat <<CONFEOF
$MARK
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits cred_expire seconds (default 120) before it may start again.
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# sbatch --wait polls every 2 s only while that is below MinJobAge/2 (else 2, 8, 32 s: a 15 s job
# returns after 42 s). 4 s keeps the 2 s poll and still outlives one poll after the job ends.
MinJobAge=4
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONFEOF
)
if [ -e "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script; refusing to overwrite it"
fi
if [ ! -e "$CONF" ] || [ "$(cat "$CONF")" != "$new" ]; then
    say "writing $CONF (node $host, CPUs=$CPUS)"
    printf '%s\n' "$new" > "$CONF"
    restart=1
fi

# --- slurmctld and slurmd ----------------------------------------------------------------
stop_pid() {  # stop_pid PIDFILE: TERM, wait up to 10 s, then KILL
    alive "$1" || return 0
    local pid; pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}
if [ "$restart" -eq 1 ]; then  # node CPUs change needs a slurmctld restart (reconfigure refuses)
    say "restarting slurmctld and slurmd (if running) to load the new packages/configuration"
    stop_pid "$SLURMD_PID"
    stop_pid "$CTLD_PID"
fi
if alive "$CTLD_PID"; then say "slurmctld already running (pid $(cat "$CTLD_PID"))"
else /usr/sbin/slurmctld || die "slurmctld did not start; see $LOGDIR/slurmctld.log"; fi
if alive "$SLURMD_PID"; then say "slurmd already running (pid $(cat "$SLURMD_PID"))"
else /usr/sbin/slurmd || die "slurmd did not start; see $LOGDIR/slurmd.log"; fi

# --- wait for the node -------------------------------------------------------------------
state=""
for i in $(seq $((WAIT * 2))); do
    state=$(sinfo -h -N -n "$host" -o %t 2>/dev/null | head -n1 || true)
    case "$state" in
        idle|mix|alloc) say "node $host is $state after ~$((i / 2)) s; sinfo:"; sinfo; exit 0 ;;
        down*|drain*|drng*|fail*)  # e.g. left down by an earlier unclean stop
            scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
echo "slurm-up: ERROR: node $host not idle after $WAIT s (last state: '${state:-none}')" >&2
tail -n 20 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true
exit 1
