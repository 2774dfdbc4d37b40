#!/usr/bin/env bash
# Train hpc_refer on one workstation with mpirun: RANKS = LEARNERS + E*RANKS_PER_ENV (E >= 1 teams).
#
# Usage: jobscripts/local/train-mpirun.sh RANKS [extra hpc_refer.run flags ...]
#   LEARNERS=1 RANKS_PER_ENV=1 ENV=Hopper-v5 STEPS=200000 jobscripts/local/train-mpirun.sh 4
#   jobscripts/local/train-mpirun.sh 1 --steps 1000     (1 rank: learner and actor in one process)
#
# Launch line (Open MPI, RANKS <= cores):
#   mpirun -n RANKS --map-by core --bind-to core python -m hpc_refer.run --learners "$LEARNERS" \
#       --ranks-per-env "$RANKS_PER_ENV" --env "$ENV" --steps "$STEPS" --seed "$SEED" \
#       [--run-dir "$RUN_DIR"] "$@"
# With more ranks than cores the default becomes `--oversubscribe --bind-to none` (Open MPI then
# yields the CPU while waiting) and a warning is printed: fine for tests, slow for real training.
#
# Variables (environment):
#   LEARNERS, RANKS_PER_ENV (default 1, 1), ENV (HalfCheetah-v5), STEPS (1000000), SEED (0)
#   RUN_DIR      run directory (default: empty, hpc_refer picks a fresh runs/<name>[-k])
#   PYTHON       interpreter with hpc_refer installed (default python on PATH)
#   MPIRUN       launcher (default mpirun on PATH; use the one of the environment's MPI)
#   MPIRUN_ARGS  replaces the placement options above (e.g. "--bind-to none")
# As root, Open MPI also needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (INSTALL.md).
set -euo pipefail

die() { echo "train-mpirun.sh: ERROR: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: $0 RANKS [hpc_refer.run flags ...]"
RANKS=$1
shift
LEARNERS=${LEARNERS:-1}
RANKS_PER_ENV=${RANKS_PER_ENV:-1}
ENV=${ENV:-HalfCheetah-v5}
STEPS=${STEPS:-1000000}
SEED=${SEED:-0}
RUN_DIR=${RUN_DIR:-}
PYTHON=${PYTHON:-python}
MPIRUN=${MPIRUN:-mpirun}

case "$ENV" in
    /*|.*|~*) die "ENV='$ENV' looks like a shell start-up file, not a gymnasium id: set ENV=<id>" ;;
esac
for v in RANKS LEARNERS RANKS_PER_ENV STEPS SEED; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v='${!v}' is not a non-negative integer"
done
if [ "$RANKS" -lt 1 ] || [ "$LEARNERS" -lt 1 ] || [ "$RANKS_PER_ENV" -lt 1 ]; then
    die "RANKS, LEARNERS and RANKS_PER_ENV must be >= 1"
fi

# World = L + E*K with E >= 1 teams; a world of 1 rank runs learner and actor in one process.
actors=$((RANKS - LEARNERS))
if [ "$RANKS" -ne 1 ] && { [ "$actors" -le 0 ] || [ $((actors % RANKS_PER_ENV)) -ne 0 ]; }; then
    die "RANKS=$RANKS does not fit LEARNERS=$LEARNERS, RANKS_PER_ENV=$RANKS_PER_ENV: need" \
        "RANKS = LEARNERS + E*RANKS_PER_ENV with E >= 1 teams, i.e. one of" \
        "$((LEARNERS + RANKS_PER_ENV)), $((LEARNERS + 2 * RANKS_PER_ENV)), $((LEARNERS + 3 * RANKS_PER_ENV)), ..." \
        "(RANKS - LEARNERS = $actors must be a positive multiple of $RANKS_PER_ENV)"
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

cmd=("$PYTHON" -m hpc_refer.run --learners "$LEARNERS" --ranks-per-env "$RANKS_PER_ENV"
     --env "$ENV" --steps "$STEPS" --seed "$SEED")
[ -z "$RUN_DIR" ] || cmd+=(--run-dir "$RUN_DIR")
# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of options, split on purpose
launch=("$MPIRUN" -n "$RANKS" $MPIRUN_ARGS)
echo "train-mpirun.sh: ${launch[*]} ${cmd[*]} $*"
exec "${launch[@]}" "${cmd[@]}" "$@"
