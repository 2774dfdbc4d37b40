/* The C side of tests/test_export.py: run an exported policy over the steps of a file.
 *
 *     driver POLICY_DIR STEPS_FILE ACTIONS_FILE
 *
 * STEPS_FILE: int32 steps, agents, state_dim, act_dim; then per step an int32 (1: an
 * episode's first state) and agents * state_dim float64. ACTIONS_FILE: per step agents *
 * act_dim float64. A failed call prints "error CODE: MESSAGE" and exits with CODE.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hpc_refer_policy.h"

int main(int argc, char **argv) {
    hpc_refer_policy *policy;
    char message[512];
    int32_t dims[4], start;
    int code;
    FILE *in, *out;
    double *state, *action;
    long t;
    if (argc != 4) return 64;
    code = hpc_refer_policy_load(argv[1], &policy, message, sizeof message);
    if (code != HPC_REFER_OK) {
        printf("error %d: %s\n", code, message);
        return code;
    }
    in = fopen(argv[2], "rb");
    out = fopen(argv[3], "wb");
    if (in == NULL || out == NULL || fread(dims, sizeof dims[0], 4, in) != 4) return 65;
    state = malloc(sizeof *state * (size_t)dims[1] * (size_t)dims[2]);
    action = malloc(sizeof *action * (size_t)dims[1] * (size_t)dims[3]);
    for (t = 0; t < dims[0]; t++) {
        if (fread(&start, sizeof start, 1, in) != 1 ||
            fread(state, sizeof *state, (size_t)dims[1] * (size_t)dims[2], in) !=
                (size_t)dims[1] * (size_t)dims[2])
            return 65;
        if (start) hpc_refer_policy_reset(policy);
        code = hpc_refer_policy_act(policy, state, (size_t)dims[1] * (size_t)dims[2], action,
                                    (size_t)dims[1] * (size_t)dims[3]);
        if (code != HPC_REFER_OK) {
            printf("error %d: %s\n", code, hpc_refer_policy_message(policy));
            return code;
        }
        fwrite(action, sizeof *action, (size_t)dims[1] * (size_t)dims[3], out);
    }
    fclose(in);
    fclose(out);
    free(state);
    free(action);
    hpc_refer_policy_free(policy);
    return 0;
}
