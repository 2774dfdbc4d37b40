/* agents: several agents in one simulation, coupled to hpc_refer through
 * solvers/coupling/hpc_refer_client.h (protocol 3); the C twin of solver.py (same dynamics,
 * same numbers; no episode metric: the C client declares none).
 *
 * K agents (--agents K, default 3) share one policy. Agent k has the state (x_k, x_mean,
 * t / horizon) and moves by x_k <- x_k + DT (a_k + COUPLING (x_mean - x_k)), reward -x_k^2;
 * its episode is truncated after horizon - k steps (solver parameter horizon, default 20) or
 * ends (terminal) when |x_k| > 2. After RESET with seed s: x_k = 0.5 (k + 1) / K + 0.01 (s mod
 * 10). Step metric x_mean. An agent that has ended is left out of later answers (--send-done:
 * it sends its last state again, which hpc_refer ignores).
 *
 * Build: mpicc -O2 -I ../../coupling agents.c -o agents   (or: make agents)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpc_refer_client.h"

#define OBS_DIM 3
#define DT 0.1
#define COUPLING 0.5

int main(int argc, char **argv) {
  int n = 3, send_done = 0, i, k;
  for (i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--agents") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--send-done")) send_done = 1;
  }
  double low[1] = {-1.0}, high[1] = {1.0};
  const char *metrics[] = {"x_mean"};
  hpc_refer_client c;
  hpc_refer_init_agents(&c, &argc, &argv, OBS_DIM, 1, low, high, 1, metrics, n);
  char value[64];
  int horizon = hpc_refer_param(&c, "horizon", value, sizeof value) ? atoi(value) : 20;
  double *x = (double *)calloc((size_t)n, sizeof(double));
  double *reward = (double *)calloc((size_t)n, sizeof(double));
  int *status = (int *)calloc((size_t)n, sizeof(int));
  int *sends = (int *)calloc((size_t)n, sizeof(int));
  int t = 0;
  for (;;) {
    int seed, cmd = hpc_refer_recv_action(&c, NULL, &seed);
    double mean = 0.0, state[OBS_DIM], action;
    if (cmd == HPC_REFER_STOP) break;
    if (cmd == HPC_REFER_RESET) {
      t = 0;
      for (k = 0; k < n; ++k) {
        x[k] = 0.5 * (k + 1) / n + 0.01 * ((seed > 0 ? seed : 0) % 10);
        status[k] = HPC_REFER_CONTINUE;
        reward[k] = 0.0;
        sends[k] = 1;
      }
    } else {
      t += 1;
      for (k = 0; k < n; ++k) mean += x[k];
      mean /= n;
      for (k = 0; k < n; ++k) {
        sends[k] = status[k] == HPC_REFER_CONTINUE;
        if (!sends[k]) continue; /* done: its action is the policy mean, ignored */
        hpc_refer_recv_action_agent(&c, k, &action);
        x[k] = x[k] + DT * (action + COUPLING * (mean - x[k]));
        reward[k] = -(x[k] * x[k]);
        if (fabs(x[k]) > 2.0) status[k] = HPC_REFER_TERMINAL;
        else if (t >= horizon - k) status[k] = HPC_REFER_TRUNCATED;
      }
    }
    mean = 0.0;
    for (k = 0; k < n; ++k) mean += x[k];
    mean /= n;
    for (k = 0; k < n; ++k) {
      if (!sends[k] && !send_done) continue;
      state[0] = x[k];
      state[1] = mean;
      state[2] = (double)t / horizon;
      hpc_refer_send_state_agent(&c, k, status[k], t, reward[k], state);
    }
    hpc_refer_send_step_end(&c, t, &mean);
  }
  free(x);
  free(reward);
  free(status);
  free(sends);
  hpc_refer_finalize(&c);
  return 0;
}
