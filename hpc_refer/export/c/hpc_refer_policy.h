/* hpc_refer_policy.h: a trained hpc_refer policy inside a C, C++ or Fortran solver.
 *
 * Written by `python -m hpc_refer.export RUN_DIR --out DIR` beside policy.json (the header)
 * and policy.bin (the weights, little-endian float32). C99, no dependency beyond libm:
 *
 *     cc -O2 -c hpc_refer_policy.c && cc solver.o hpc_refer_policy.o -lm
 *
 * One policy object per simulation (it keeps the stacked states and actions of
 * `env.history` and a recurrent policy's carry between calls):
 *
 *     hpc_refer_policy *policy;
 *     char message[512];
 *     if (hpc_refer_policy_load("DIR", &policy, message, sizeof message) != HPC_REFER_OK)
 *         { fprintf(stderr, "%s\n", message); exit(1); }
 *     hpc_refer_policy_reset(policy);              // at an episode's start
 *     hpc_refer_policy_act(policy, state, n_state, action, n_action);   // each step
 *     hpc_refer_policy_free(policy);
 *
 * `state` holds one raw state (state_dim values, the solver's own units, as sent to
 * hpc_refer during training) per agent, agent after agent: n_state = K state_dim for K agents
 * of one simulation (K fixed from an episode's first call to the next reset); `action` gets
 * K act_dim values in the solver's units. Every function that can fail returns one of the
 * codes below, leaves the policy as it was and keeps a one-line message
 * (hpc_refer_policy_message). The arithmetic is float32, as hpc_refer's numpy policy; the
 * map into the action box is float64.
 */
#ifndef HPC_REFER_POLICY_H
#define HPC_REFER_POLICY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    HPC_REFER_OK = 0,
    HPC_REFER_ERR_FILE = 1,      /* a file cannot be opened or read */
    HPC_REFER_ERR_VERSION = 2,   /* another format, or a format version this file does not read */
    HPC_REFER_ERR_HEADER = 3,    /* policy.json is not a valid header */
    HPC_REFER_ERR_WEIGHTS = 4,   /* policy.bin does not hold the header's weights */
    HPC_REFER_ERR_SHAPE = 5,     /* a state or action of the wrong length, or another agent count */
    HPC_REFER_ERR_NONFINITE = 6, /* a state holds NaN or inf (in float32) */
    HPC_REFER_ERR_MEMORY = 7     /* out of memory */
};

#define HPC_REFER_FORMAT_VERSION 1

typedef struct hpc_refer_policy hpc_refer_policy;

/* Read DIR/policy.json and its weight file (path: the directory or the .json file). On
 * failure *policy is NULL and message (message_len bytes, may be NULL) says why. */
int hpc_refer_policy_load(const char *path, hpc_refer_policy **policy, char *message,
                          size_t message_len);

/* The action(s) for this step's raw state(s): see the top of this file. */
int hpc_refer_policy_act(hpc_refer_policy *policy, const double *state, size_t n_state,
                         double *action, size_t n_action);

/* The next state is an episode's first (the history is filled with it, the carry is 0). */
void hpc_refer_policy_reset(hpc_refer_policy *policy);

void hpc_refer_policy_free(hpc_refer_policy *policy);

/* The message of the last failed call ("" after a successful one). */
const char *hpc_refer_policy_message(const hpc_refer_policy *policy);

int hpc_refer_policy_state_dim(const hpc_refer_policy *policy);
int hpc_refer_policy_act_dim(const hpc_refer_policy *policy);

#ifdef __cplusplus
}
#endif

#endif
