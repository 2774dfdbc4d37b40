#!/usr/bin/env bash
# Train hpc_refer on one workstation with mpirun: RANKS = LEARNERS + E*RANKS_PER_ENV (E >= 1 teams).
#
# Usage: jobscripts/local/train-mpirun.sh RANKS [extra hpc_refer.run flags ...]
#   LEARNERS=1 RANKS_PER_ENV=1 ENV=Hopper-v5 STEPS=200000 jobscripts/local/train-mpirun.sh 4
#   jobscripts/local/train-mpirun.sh 4 --config configs/ks.toml
#   jobscripts/local/train-mpirun.sh 1 --steps 1000     (1 rank: learner and actor in one process)
#
# Launch line (Open MPI, RANKS <= cores; [--flag "$VAR"] only when VAR is set, see below):
#   mpirun -n RANKS --map-by core --bind-to core python -m hpc_refer.run [--learners "$LEARNERS"] \
#       [--ranks-per-env "$RANKS_PER_ENV"] [--env "$ENV"] [--steps "$STEPS"] [--seed "$SEED"] \
#       [--run-dir "$RUN_DIR"] "$@"
# and, when RUN_DIR is set and holds a checkpoint (RUN_DIR/checkpoints/step-*), instead
#   mpirun ... python -m hpc_refer.run --restart "$RUN_DIR" [--steps "$STEPS"] [--learners "$LEARNERS"]
# With more ranks than cores the default becomes `--oversubscribe --bind-to none` (Open MPI then
# yields the CPU while waiting) and a warning is printed: fine for tests, slow for real training.
#
# Variables (environment). Values come from hpc_refer's defaults, then --config FILE, then the
# flags; a variable that is unset or empty adds no flag:
#   LEARNERS, RANKS_PER_ENV  -> --learners, --ranks-per-env (the world check takes 1 if unset)
#   ENV, STEPS, SEED         -> --env, --steps, --seed
#   RUN_DIR      run directory (unset: hpc_refer picks a fresh runs/<name>[-k]); if it holds a
#                checkpoint the run resumes from it (--restart; extra arguments are not passed)
#   PYTHON       interpreter with hpc_refer installed (default python on PATH)
#   MPIRUN       launcher (default mpirun on PATH; use the one of the environment's MPI)
#   MPIRUN_ARGS  replaces the placement options above (e.g. "--bind-to none")
# SIGTERM, SIGUSR1 or SIGINT sent to this script reach the ranks as SIGUSR1 (through mpirun):
# hpc_refer checkpoints, writes state.txt = preempted and exits 0; run the same command (same
# RUN_DIR) again to resume. Ctrl-C in a terminal also signals mpirun and the ranks themselves,
# which stop at once without a checkpoint: use `kill -USR1 <pid of this script>` instead.
# As root, Open MPI also needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (INSTALL.md).
set -euo pipefail

die() { echo "train-mpirun.sh: ERROR: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: $0 RANKS [hpc_refer.run flags ...]"
RANKS=$1
shift
RUN_DIR=${RUN_DIR:-}
PYTHON=${PYTHON:-python}
MPIRUN=${MPIRUN:-mpirun}

case "${ENV:-}" in
    /*|.*|~*) die "ENV='$ENV' looks like a shell start-up file, not a gymnasium id: set ENV=<id>" ;;
esac
[[ $RANKS =~ ^[0-9]+$ ]] || die "RANKS='$RANKS' is not a non-negative integer"
for v in LEARNERS RANKS_PER_ENV STEPS SEED; do
    [ -z "${!v:-}" ] || [[ ${!v} =~ ^[0-9]+$ ]] || die "$v='${!v}' is not a non-negative integer"
done

# World = L + E*K with E >= 1 teams; a world of 1 rank runs learner and actor in one process.
# Unset LEARNERS/RANKS_PER_ENV count as 1 here; hpc_refer checks the layout it finally uses.
L=${LEARNERS:-1}
K=${RANKS_PER_ENV:-1}
if [ "$RANKS" -lt 1 ] || [ "$L" -lt 1 ] || [ "$K" -lt 1 ]; then
    die "RANKS, LEARNERS and RANKS_PER_ENV must be >= 1"
fi
actors=$((RANKS - L))
if [ "$RANKS" -ne 1 ] && { [ "$actors" -le 0 ] || [ $((actors % K)) -ne 0 ]; }; then
    die "RANKS=$RANKS does not fit LEARNERS=$L, RANKS_PER_ENV=$K: need" \
        "RANKS = LEARNERS + E*RANKS_PER_ENV with E >= 1 teams, i.e. one of" \
        "$((L + K)), $((L + 2 * K)), $((L + 3 * K)), ..." \
        "(RANKS - LEARNERS = $actors must be a positive multiple of $K)"
fi

command -v "$MPIRUN" >/dev/null 2>&1 || die "'$MPIRUN' not found: activate the environment or set MPIRUN"

# One thread per rank: torch/MKL/OpenBLAS threads would fight the neighbouring ranks' cores.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc obeys OMP_NUM_THREADS
if [ -z "${MPIRUN_ARGS+set}" ]; then
    if "$MPIRUN" --version 2>&1 | grep -qiE 'open mpi|open rte|prte'; then
        if [ "$RANKS" -le "$cores" ]; then
            MPIRUN_ARGS="--map-by core --bind-to core"
        else
            MPIRUN_ARGS="--oversubscribe --bind-to none"
            echo "train-mpirun.sh: warning: $RANKS ranks on $cores cores (oversubscribed: slow)" >&2
        fi
    else  # MPICH / Intel MPI (hydra)
        MPIRUN_ARGS="-bind-to core"
        if [ "$RANKS" -gt "$cores" ]; then
            MPIRUN_ARGS="-bind-to none"
            export MPIR_CVAR_ENABLE_HEAVY_YIELD=1  # MPICH busy-polls otherwise when oversubscribed
            echo "train-mpirun.sh: warning: $RANKS ranks on $cores cores (oversubscribed: slow)" >&2
        fi
    fi
fi

# Flags only for the variables that are set; a checkpoint in RUN_DIR means: resume it.
checkpoint=""
if [ -n "$RUN_DIR" ]; then
    for d in "$RUN_DIR"/checkpoints/step-*/; do
        if [ -d "$d" ]; then checkpoint=$d; fi
    done
fi
if [ -n "$checkpoint" ]; then
    cmd=("$PYTHON" -m hpc_refer.run --restart "$RUN_DIR")
    [ -z "${STEPS:-}" ] || cmd+=(--steps "$STEPS")
    [ -z "${LEARNERS:-}" ] || cmd+=(--learners "$LEARNERS")
    echo "train-mpirun.sh: $RUN_DIR holds a checkpoint: resuming it (config from its config.toml)"
    [ $# -eq 0 ] || echo "train-mpirun.sh: extra arguments not passed on a restart: $*"
else
    cmd=("$PYTHON" -m hpc_refer.run)
    [ -z "${LEARNERS:-}" ] || cmd+=(--learners "$LEARNERS")
    [ -z "${RANKS_PER_ENV:-}" ] || cmd+=(--ranks-per-env "$RANKS_PER_ENV")
    [ -z "${ENV:-}" ] || cmd+=(--env "$ENV")
    [ -z "${STEPS:-}" ] || cmd+=(--steps "$STEPS")
    [ -z "${SEED:-}" ] || cmd+=(--seed "$SEED")
    [ -z "$RUN_DIR" ] || cmd+=(--run-dir "$RUN_DIR")
    cmd+=("$@")
fi
# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of options, split on purpose
launch=("$MPIRUN" -n "$RANKS" $MPIRUN_ARGS)
echo "train-mpirun.sh: ${launch[*]} ${cmd[*]}"

# mpirun runs in the background so that the traps run at once (bash runs a trap only after the
# foreground command ends); the signals reach the ranks as SIGUSR1, since a SIGTERM or SIGINT to
# mpirun would kill the ranks before they checkpoint.
# shellcheck disable=SC2317  # called by the traps below
forward() {
    signalled=1
    echo "train-mpirun.sh: SIG$1 received: sending SIGUSR1 to the ranks (checkpoint, then stop)" >&2
    kill -USR1 "$launcher" 2>/dev/null || true
}
"${launch[@]}" "${cmd[@]}" &
launcher=$!
trap 'forward USR1' USR1
trap 'forward TERM' TERM
trap 'forward INT' INT
while :; do
    signalled=0
    rc=0
    wait "$launcher" || rc=$?
    [ "$signalled" -eq 1 ] || break  # else a trap ended the wait early: mpirun still runs
done
trap - USR1 TERM INT
state=""  # the line of state.txt, e.g. "preempted: signal 10"
[ -z "$RUN_DIR" ] || state=$(cat "$RUN_DIR/state.txt" 2>/dev/null || true)
if [ "${state%%:*}" = preempted ]; then
    echo "train-mpirun.sh: stopped with a checkpoint (state.txt = preempted): run the same" \
         "command again to resume"
elif [ "$state" = running ]; then  # every rank gone and none recorded why: never a success
    echo "train-mpirun.sh: ERROR: the run ended without a stop record (state.txt still says" \
         "running): a rank or a host was lost or killed (mpirun's output above may name it);" \
         "run the same command again to resume from the last checkpoint" >&2
    [ "$rc" -ne 0 ] || rc=3
fi
exit "$rc"
