/* The timing loop of bench/export_speed.py: one state per call of hpc_refer_policy_act.
 *
 *     export_speed POLICY_DIR CALLS REPEATS
 *
 * Prints one line per repeat: the microseconds per call of that repeat (CLOCK_MONOTONIC).
 * Each call's state differs (a drifting sine), as a solver's would. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hpc_refer_policy.h"

int main(int argc, char **argv) {
    hpc_refer_policy *policy;
    char message[512];
    long calls, repeats, r, i, j, d, a;
    double *state, *action, sink = 0.0;
    struct timespec t0, t1;
    if (argc != 4) return 64;
    if (hpc_refer_policy_load(argv[1], &policy, message, sizeof message) != HPC_REFER_OK) {
        fprintf(stderr, "%s\n", message);
        return 1;
    }
    calls = atol(argv[2]);
    repeats = atol(argv[3]);
    d = hpc_refer_policy_state_dim(policy);
    a = hpc_refer_policy_act_dim(policy);
    state = malloc((size_t)d * sizeof *state);
    action = malloc((size_t)a * sizeof *action);
    for (r = 0; r < repeats; r++) {
        hpc_refer_policy_reset(policy);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (i = 0; i < calls; i++) {
            for (j = 0; j < d; j++) state[j] = sin(0.01 * (double)(i + j));
            if (hpc_refer_policy_act(policy, state, (size_t)d, action, (size_t)a) != 0) return 2;
            sink += action[0];
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("%.4f\n", ((double)(t1.tv_sec - t0.tv_sec) * 1e6 +
                          (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / (double)calls);
    }
    fprintf(stderr, "checksum %g\n", sink);
    hpc_refer_policy_free(policy);
    free(state);
    free(action);
    return 0;
}
