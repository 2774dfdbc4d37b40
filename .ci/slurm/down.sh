#!/usr/bin/env bash
# Stop the single-node Slurm started by .ci/slurm/up.sh: cancel queued/running jobs, then stop
# slurmd, slurmctld and munged by their pidfiles (TERM, bounded wait, then KILL).
# Idempotent: daemons that are not running are skipped; always exits 0 unless a daemon survives KILL.
set -euo pipefail

say() { echo "slurm-down: $*"; }
[ "$(id -u)" -eq 0 ] || { echo "slurm-down: ERROR: must run as root" >&2; exit 1; }

stop_pid() {  # stop_pid NAME PIDFILE
    local name=$1 file=$2 pid
    if [ ! -s "$file" ] || ! kill -0 "$(cat "$file")" 2>/dev/null; then
        say "$name not running"; rm -f "$file"; return 0
    fi
    pid=$(cat "$file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        if ! kill -0 "$pid" 2>/dev/null; then say "$name (pid $pid) stopped"; rm -f "$file"; return 0; fi
        sleep 0.1
    done
    say "$name (pid $pid) ignored TERM for 10 s, sending KILL"
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then echo "slurm-down: ERROR: $name (pid $pid) still alive" >&2; return 1; fi
    rm -f "$file"
}

# Jobs first, so that no slurmstepd outlives its slurmd (only this CI cluster's jobs exist here).
if [ -s /run/slurmctld.pid ] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
        say "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
        # shellcheck disable=SC2086  # one job id per word
        scancel $jobs 2>/dev/null || true
        for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
fi

rc=0
stop_pid slurmd /run/slurmd.pid || rc=1
stop_pid slurmctld /run/slurmctld.pid || rc=1
stop_pid munged /run/munge/munged.pid || rc=1
exit "$rc"
