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
 * Controller mode: --controller DIR runs a trained policy exported by
 * `python -m hpc_refer.export RUN_DIR --out DIR` inside the solver, with no hpc_refer, no
 * Python and no MPI message to anyone but the solver's own ranks: rank 0 calls the C routine
 * (DIR/hpc_refer_policy.c, compiled in) on the gathered field and broadcasts the action; it
 * prints each episode's return and their mean. --episodes E (default 1), --seed S (the first
 * episode's seed, default 12345; later episodes draw as after hpc_refer's RESET without a
 * seed, so the episodes are those of `python -m hpc_refer.evaluate RUN_DIR --seed S`) and
 * --horizon H (default 50: give the run's solver parameter horizon).
 *
 * Options: --cells N (default 32, >= ranks), --fault-every K (test aid: in every K-th episode
 * rank 0 sends one invalid STATE at step 3, cycling through NaN reward, wrong size, unknown
 * status and NaN state, then waits for the RESET that hpc_refer sends after a solver fault),
 * --fault-kind reward|size|status|state|step (only that fault; step: the step index 4
 * instead of 3).
 *
 * Build: mpicc -O2 -I ../../coupling -I POLICY_DIR heat1d.c POLICY_DIR/hpc_refer_policy.c
 *        -o heat1d -lm   (or: make; POLICY_DIR holds the exported hpc_refer_policy.{h,c},
 *        by default the copy in hpc_refer/export/c)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpc_refer_client.h"
#include "hpc_refer_policy.h"

#define N_ACT 4
#define NU 0.2
#define DT 0.1
#define TWO_PI 6.283185307179586

/* A reproducible uniform number in [0, 1) from a 64-bit state (same on every rank). */
static double uniform(unsigned long long *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(*s >> 11) * (1.0 / 9007199254740992.0);
}

/* One ring of n cells split over the ranks of comm: this rank's block [first, first + m). */
typedef struct {
  MPI_Comm comm;
  int rank, size, n, m, first, left, right, episode;
  int *counts, *displs;
  double *u, *next, *q, *g, *field; /* field: the whole ring, on rank 0 */
} heat1d;

static void heat1d_setup(heat1d *h, MPI_Comm comm, int n) {
  int i, j;
  h->comm = comm;
  MPI_Comm_rank(comm, &h->rank);
  MPI_Comm_size(comm, &h->size);
  h->n = n;
  h->counts = malloc((size_t)h->size * sizeof(int));
  h->displs = malloc((size_t)h->size * sizeof(int));
  for (i = 0; i < h->size; ++i) {
    h->counts[i] = n / h->size + (i < n % h->size);
    h->displs[i] = i ? h->displs[i - 1] + h->counts[i - 1] : 0;
  }
  h->m = h->counts[h->rank];
  h->first = h->displs[h->rank];
  h->u = calloc((size_t)h->m + 2, sizeof(double));
  h->next = calloc((size_t)h->m, sizeof(double));
  h->q = malloc((size_t)h->m * sizeof(double));
  h->g = malloc((size_t)h->m * N_ACT * sizeof(double));
  h->field = h->rank == 0 ? malloc((size_t)n * sizeof(double)) : NULL;
  for (i = 0; i < h->m; ++i) {
    double x = TWO_PI * (h->first + i) / n;
    h->q[i] = 0.5 * sin(x) + 0.3 * cos(3 * x);
    for (j = 0; j < N_ACT; ++j) {
      double d = remainder(x - TWO_PI * (j + 0.5) / N_ACT, TWO_PI);
      h->g[i * N_ACT + j] = exp(-0.5 * (d / 0.4) * (d / 0.4));
    }
  }
  h->left = (h->rank + h->size - 1) % h->size;
  h->right = (h->rank + 1) % h->size;
  h->episode = 0;
}

/* A new episode's random field (seed -1: none given, as hpc_refer's RESET sends). */
static void heat1d_reset(heat1d *h, int seed) {
  unsigned long long s = 0x9E3779B97F4A7C15ULL ^ (unsigned long long)(seed + 7919 * h->episode);
  double modes[4];
  int i, j;
  for (j = 0; j < 4; ++j) modes[j] = 2.0 * uniform(&s) - 1.0;
  for (i = 0; i < h->m; ++i) {
    double x = TWO_PI * (h->first + i) / h->n;
    h->u[i + 1] = 0.0;
    for (j = 0; j < 4; ++j) h->u[i + 1] += 0.5 * modes[j] * sin((j + 1) * x + j);
  }
  ++h->episode;
}

/* One step with the action (on every rank): the reward -mean_i u_i^2. */
static double heat1d_step(heat1d *h, const double *action) {
  int i, j, m = h->m;
  double local = 0.0, total;
  MPI_Sendrecv(&h->u[m], 1, MPI_DOUBLE, h->right, 0, &h->u[0], 1, MPI_DOUBLE, h->left, 0,
               h->comm, MPI_STATUS_IGNORE);
  MPI_Sendrecv(&h->u[1], 1, MPI_DOUBLE, h->left, 1, &h->u[m + 1], 1, MPI_DOUBLE, h->right, 1,
               h->comm, MPI_STATUS_IGNORE);
  for (i = 0; i < m; ++i) {
    double heat = h->q[i];
    for (j = 0; j < N_ACT; ++j) heat += action[j] * h->g[i * N_ACT + j];
    h->next[i] = h->u[i + 1] + NU * (h->u[i] - 2 * h->u[i + 1] + h->u[i + 2]) + DT * heat;
  }
  for (i = 0; i < m; ++i) { h->u[i + 1] = h->next[i]; local += h->next[i] * h->next[i]; }
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, h->comm);
  return -total / h->n;
}

/* The whole field on rank 0, and its mean there (the step metric mean_u). */
static double heat1d_gather(heat1d *h) {
  double mean_u = 0.0;
  int i;
  MPI_Gatherv(&h->u[1], h->m, MPI_DOUBLE, h->field, h->counts, h->displs, MPI_DOUBLE, 0,
              h->comm);
  if (h->rank == 0) {
    for (i = 0; i < h->n; ++i) mean_u += h->field[i];
    mean_u /= h->n;
  }
  return mean_u;
}

static void heat1d_free(heat1d *h) {
  free(h->u); free(h->next); free(h->q); free(h->g); free(h->field); free(h->counts);
  free(h->displs);
}

/* --controller DIR: the exported policy on rank 0, episodes of `horizon` steps (see the top). */
static int run_controller(const char *dir, int n, int episodes, int seed, int horizon) {
  heat1d h;
  hpc_refer_policy *policy = NULL;
  char message[512];
  double action[N_ACT], total = 0.0;
  int code = HPC_REFER_OK, e, step;
  MPI_Init(NULL, NULL);
  heat1d_setup(&h, MPI_COMM_WORLD, n);
  if (h.rank == 0) {
    code = hpc_refer_policy_load(dir, &policy, message, sizeof message);
    if (code == HPC_REFER_OK && (hpc_refer_policy_state_dim(policy) != n ||
                                 hpc_refer_policy_act_dim(policy) != N_ACT)) {
      snprintf(message, sizeof message, "the policy takes %d values and gives %d; this "
               "solver has %d cells and %d actions", hpc_refer_policy_state_dim(policy),
               hpc_refer_policy_act_dim(policy), n, N_ACT);
      code = HPC_REFER_ERR_SHAPE;
    }
    if (code != HPC_REFER_OK) fprintf(stderr, "heat1d: %s: error %d: %s\n", dir, code, message);
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (e = 0; e < episodes && code == HPC_REFER_OK; ++e) {
    double ret = 0.0;
    heat1d_reset(&h, e == 0 ? seed : -1);
    if (h.rank == 0) hpc_refer_policy_reset(policy);
    for (step = 0; step < horizon && code == HPC_REFER_OK; ++step) {
      heat1d_gather(&h);
      if (h.rank == 0) {
        code = hpc_refer_policy_act(policy, h.field, (size_t)n, action, N_ACT);
        if (code != HPC_REFER_OK)
          fprintf(stderr, "heat1d: step %d: error %d: %s\n", step, code,
                  hpc_refer_policy_message(policy));
      }
      MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
      MPI_Bcast(action, N_ACT, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (code == HPC_REFER_OK) ret += heat1d_step(&h, action);
    }
    if (h.rank == 0 && code == HPC_REFER_OK)
      printf("controller episode %d: return %.17g\n", e, ret);
    total += ret;
  }
  if (h.rank == 0 && code == HPC_REFER_OK)
    printf("controller: mean return %.17g over %d episodes\n", total / episodes, episodes);
  hpc_refer_policy_free(policy);
  heat1d_free(&h);
  MPI_Finalize();
  return code;
}

static const char *FAULT_KINDS[] = {"reward", "size", "status", "state", "step"};
#define N_FAULT_KINDS 5

int main(int argc, char **argv) {
  int n = 32, fault_every = 0, fault_kind = -1 /* cycle through the first four */, i, j;
  int episodes = 1, first_seed = 12345, horizon = 50;
  const char *controller = NULL;
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--cells")) n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--fault-every")) fault_every = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--controller")) controller = argv[i + 1];
    else if (!strcmp(argv[i], "--episodes")) episodes = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) first_seed = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--horizon")) horizon = atoi(argv[i + 1]);
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
  if (controller != NULL) return run_controller(controller, n, episodes, first_seed, horizon);
  double low[N_ACT], high[N_ACT], action[N_ACT] = {0};
  for (j = 0; j < N_ACT; ++j) { low[j] = -1.0; high[j] = 1.0; }
  hpc_refer_client c;
  const char *metrics[] = {"mean_u"};
  char value[32];
  hpc_refer_init_metrics(&c, &argc, &argv, n, N_ACT, low, high, 1, metrics);
  if (hpc_refer_param(&c, "horizon", value, sizeof value)) horizon = atoi(value);
  heat1d h;
  heat1d_setup(&h, c.comm, n);
  int step = 0, seed;
  double mean_u = 0.0;

  for (;;) {
    int cmd = hpc_refer_recv_action(&c, action, &seed);
    if (cmd == HPC_REFER_STOP) break;
    double reward = 0.0;
    int status = HPC_REFER_CONTINUE;
    if (cmd == HPC_REFER_RESET) {
      heat1d_reset(&h, seed);
      step = 0;
    } else {
      reward = heat1d_step(&h, action);
      ++step;
      if (step >= horizon) status = HPC_REFER_TRUNCATED;
    }
    mean_u = heat1d_gather(&h);
    if (fault_every > 0 && h.episode % fault_every == 0 && step == 3) {
      if (c.rank == 0) { /* test aid: one invalid STATE, then wait for RESET */
        int kind = fault_kind >= 0 ? fault_kind : (h.episode / fault_every) % 4;
        int size = 3 + n + 1 + (kind == 1);
        double *bad = calloc((size_t)size, sizeof(double));
        bad[0] = kind == 2 ? 7.0 : status;
        bad[1] = kind == 4 ? step + 1 : step;
        bad[2] = kind == 0 ? NAN : reward;
        memcpy(bad + 3, h.field, (size_t)n * sizeof(double));
        bad[3 + n] = mean_u;
        if (kind == 3) bad[3 + n / 2] = NAN;
        MPI_Send(bad, size, MPI_DOUBLE, c.actor, HPC_REFER_TAG_STATE, c.peer);
        free(bad);
      }
      continue;
    }
    hpc_refer_send_state_values(&c, status, step, reward, h.field, &mean_u);
  }
  heat1d_free(&h);
  hpc_refer_finalize(&c);
  return 0;
}
