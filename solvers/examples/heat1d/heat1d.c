/* heat1d: a 1-D heat equation on a periodic ring, split over the MPI ranks of one environment,
 * coupled to hpc_refer through solvers/coupling/hpc_refer_client.h.
 *
 *   u_i <- u_i + NU (u_{i-1} - 2 u_i + u_{i+1}) + DT (q_i + sum_j a_j g_j(x_i))
 *
 * q: a steady heat source; g_j: N_ACT Gaussian heaters/coolers driven by the action a in
 * [-1, 1]^N_ACT. Each rank owns a block of cells and exchanges one halo value with each
 * neighbour per step; reward = -mean_i u_i^2 (minus the energy, an Allreduce); the state (the
 * whole field) is gathered on the environment's rank 0. Episodes are truncated after
 * `horizon` steps (the run's solver parameter horizon, default 50). One step metric,
 * mean_u (the mean temperature), goes with every state.
 *
 * Options: --cells N (default 32, >= ranks), --fault-every K (test aid: in every K-th episode
 * rank 0 sends one invalid STATE at step 3, cycling through NaN reward, wrong size, unknown
 * status and NaN state, then waits for the RESET that hpc_refer sends after a solver fault),
 * --fault-kind reward|size|status|state|step (only that fault; step: the step index 4
 * instead of 3).
 *
 * Build: mpicc -O2 -I ../../coupling heat1d.c -o heat1d -lm   (or: make)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpc_refer_client.h"

#define N_ACT 4
#define NU 0.2
#define DT 0.1
#define TWO_PI 6.283185307179586

/* A reproducible uniform number in [0, 1) from a 64-bit state (same on every rank). */
static double uniform(unsigned long long *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}

static const char *FAULT_KINDS[] = {"reward", "size", "status", "state", "step"};
#define N_FAULT_KINDS 5

int main(int argc, char **argv) {
  int n = 32, fault_every = 0, fault_kind = -1 /* cycle through the first four */, i, j;
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--cells")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--fault-every")) fault_every = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--fault-kind")) {
      for (fault_kind = 0; fault_kind < N_FAULT_KINDS; ++fault_kind)
        if (!strcmp(argv[i + 1], FAULT_KINDS[fault_kind])) break;
      if (fault_kind == N_FAULT_KINDS) {
        fprintf(stderr, "heat1d: --fault-kind %s: allowed are reward, size, status, state, "
                "step\n", argv[i + 1]);
        return 2;
      }
    }
  }
  double low[N_ACT], high[N_ACT], action[N_ACT] = {0};
  for (j = 0; j < N_ACT; ++j) { low[j] = -1.0; high[j] = 1.0; }
  hpc_refer_client c;
  const char *metrics[] = {"mean_u"};
  char value[32];
  int horizon = 50;
  hpc_refer_init_metrics(&c, &argc, &argv, n, N_ACT, low, high, 1, metrics);
  if (hpc_refer_param(&c, "horizon", value, sizeof value)) horizon = atoi(value);

  /* This rank's block of cells [first, first + m), and counts for the gather. */
  int m = n / c.size + (c.rank < n % c.size), first = 0;
  int *counts = malloc((size_t)c.size * sizeof(int)), *displs = malloc((size_t)c.size * sizeof(int));
  for (i = 0; i < c.size; ++i) {
    counts[i] = n / c.size + (i < n % c.size);
    displs[i] = i ? displs[i - 1] + counts[i - 1] : 0;
  }
  first = displs[c.rank];
  double *u = calloc((size_t)m + 2, sizeof(double)), *next = calloc((size_t)m, sizeof(double));
  double *q = malloc((size_t)m * sizeof(double)), *g = malloc((size_t)m * N_ACT * sizeof(double));
  double *field = c.rank == 0 ? malloc((size_t)n * sizeof(double)) : NULL;
  for (i = 0; i < m; ++i) {
    double x = TWO_PI * (first + i) / n;
    q[i] = 0.5 * sin(x) + 0.3 * cos(3 * x);
    for (j = 0; j < N_ACT; ++j) {
      double d = remainder(x - TWO_PI * (j + 0.5) / N_ACT, TWO_PI);
      g[i * N_ACT + j] = exp(-0.5 * (d / 0.4) * (d / 0.4));
    }
  }
  int left = (c.rank + c.size - 1) % c.size, right = (c.rank + 1) % c.size;
  int step = 0, episode = 0, seed;
  double mean_u = 0.0;

  for (;;) {
    int cmd = hpc_refer_recv_action(&c, action, &seed);
    if (cmd == HPC_REFER_STOP) break;
    double reward = 0.0;
    int status = HPC_REFER_CONTINUE;
    if (cmd == HPC_REFER_RESET) {
      unsigned long long s = 0x9E3779B97F4A7C15ULL ^ (unsigned long long)(seed + 7919 * episode);
      double modes[4];
      for (j = 0; j < 4; ++j) modes[j] = 2.0 * uniform(&s) - 1.0;
      for (i = 0; i < m; ++i) {
        double x = TWO_PI * (first + i) / n;
        u[i + 1] = 0.0;
        for (j = 0; j < 4; ++j) u[i + 1] += 0.5 * modes[j] * sin((j + 1) * x + j);
      }
      step = 0;
      ++episode;
    } else {
      MPI_Sendrecv(&u[m], 1, MPI_DOUBLE, right, 0, &u[0], 1, MPI_DOUBLE, left, 0, c.comm,
                   MPI_STATUS_IGNORE);
      MPI_Sendrecv(&u[1], 1, MPI_DOUBLE, left, 1, &u[m + 1], 1, MPI_DOUBLE, right, 1, c.comm,
                   MPI_STATUS_IGNORE);
      double local = 0.0, total;
      for (i = 0; i < m; ++i) {
        double heat = q[i];
        for (j = 0; j < N_ACT; ++j) heat += action[j] * g[i * N_ACT + j];
        next[i] = u[i + 1] + NU * (u[i] - 2 * u[i + 1] + u[i + 2]) + DT * heat;
      }
      for (i = 0; i < m; ++i) { u[i + 1] = next[i]; local += next[i] * next[i]; }
      MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, c.comm);
      reward = -total / n;
      ++step;
      if (step >= horizon) status = HPC_REFER_TRUNCATED;
    }
    MPI_Gatherv(&u[1], m, MPI_DOUBLE, field, counts, displs, MPI_DOUBLE, 0, c.comm);
    if (c.rank == 0) {
      mean_u = 0.0;
      for (i = 0; i < n; ++i) mean_u += field[i];
      mean_u /= n;
    }
    if (fault_every > 0 && episode % fault_every == 0 && step == 3) {
      if (c.rank == 0) { /* test aid: one invalid STATE, then wait for RESET */
        int kind = fault_kind >= 0 ? fault_kind : (episode / fault_every) % 4;
        int size = 3 + n + 1 + (kind == 1);
        double *bad = calloc((size_t)size, sizeof(double));
        bad[0] = kind == 2 ? 7.0 : status;
        bad[1] = kind == 4 ? step + 1 : step;
        bad[2] = kind == 0 ? NAN : reward;
        memcpy(bad + 3, field, (size_t)n * sizeof(double));
        bad[3 + n] = mean_u;
        if (kind == 3) bad[3 + n / 2] = NAN;
        MPI_Send(bad, size, MPI_DOUBLE, c.actor, HPC_REFER_TAG_STATE, c.peer);
        free(bad);
      }
      continue;
    }
    hpc_refer_send_state_values(&c, status, step, reward, field, &mean_u);
  }
  free(u); free(next); free(q); free(g); free(field); free(counts); free(displs);
  hpc_refer_finalize(&c);
  return 0;
}
