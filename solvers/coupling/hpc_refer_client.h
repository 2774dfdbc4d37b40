/* hpc_refer_client.h: couple an MPI solver (C or C++) to hpc_refer as an external environment.
 *
 * Header only (static inline), MPI C API only. Four calls, made by EVERY rank of the solver:
 *
 *   hpc_refer_client c;
 *   hpc_refer_init(&c, &argc, &argv, obs_dim, act_dim, low, high);  // MPI_Init if needed
 *   char value[64];                                  // the run's solver parameters, any rank:
 *   if (hpc_refer_param(&c, "horizon", value, sizeof value)) horizon = atoi(value);
 *   for (;;) {
 *     int seed, cmd = hpc_refer_recv_action(&c, action, &seed);     // action on all ranks
 *     if (cmd == HPC_REFER_STOP) break;
 *     if (cmd == HPC_REFER_RESET) { ...new episode...; status = HPC_REFER_CONTINUE; step = 0; }
 *     else                        { ...advance with action...; step += 1; }
 *     hpc_refer_send_state(&c, status, step, reward, state);         // read on group rank 0
 *   }
 *   hpc_refer_finalize(&c);                                          // MPI_Finalize if ours
 *
 * Per-step series (e.g. drag and lift): declare their names at init and send their values
 * with each state:
 *   const char *names[] = {"cd", "cl"};
 *   hpc_refer_init_metrics(&c, &argc, &argv, obs_dim, act_dim, low, high, 2, names);
 *   ...
 *   double values[2] = {cd, cl};
 *   hpc_refer_send_state_values(&c, status, step, reward, state, values);
 *
 * Several agents in one simulation (protocol 3): K agents that share obs_dim, act_dim, the
 * bounds (all per agent) and one policy. Declare K at init, take each agent's action, answer
 * with each agent's state, then close the answer with the step metrics' values:
 *   hpc_refer_init_agents(&c, &argc, &argv, obs_dim, act_dim, low, high, 0, NULL, K);
 *   int seed, cmd = hpc_refer_recv_action(&c, NULL, &seed);  // or actions[K * act_dim]
 *   for (k = 0; k < K; ++k) hpc_refer_recv_action_agent(&c, k, action_k);  // after a STEP
 *   ...advance...
 *   for (k = 0; k < K; ++k)                    // every agent not ended yet in this episode
 *     hpc_refer_send_state_agent(&c, k, status_k, step, reward_k, state_k);
 *   hpc_refer_send_step_end(&c, step, values);                // values: NULL when none
 * An agent that sent status 1 or 2 is done until the next RESET: its later actions are to be
 * ignored, its later states may be left out. The episode ends when every agent has ended.
 *
 * Use c.comm (the ranks of this environment, c.rank / c.size) for the solver's own MPI
 * traffic instead of MPI_COMM_WORLD. Launch (see solvers/README.md):
 *   MPMD:    mpirun -n 2 python -m hpc_refer.run --env external ... : -n 4 ./solver
 *            (the solver's ranks split into E equal groups, one per hpc_refer actor); under
 *            srun: srun --multi-prog FILE whose lines set HPC_REFER_APP=0 (hpc_refer) and
 *            HPC_REFER_APP=1 (the solver), since srun gives every line MPI_APPNUM 0
 *   spawn:   [mpirun -n 2] python -m hpc_refer.run --env "external:-n 4 ./solver" ...
 *            (each actor starts its own group with MPI_Comm_spawn)
 *   connect: mpirun -n 2 python -m hpc_refer.run --env "external:--connect DIR" ...  and,
 *            as a separate job per environment e (both jobs under one name server, e.g.
 *            mpirun --ompi-server file:URI with Open MPI 4):
 *            HPC_REFER_PORT=DIR/env-<e>.port mpirun -n 4 ./solver
 *            (hpc_refer_init waits until the actor has written the port file, up to
 *            HPC_REFER_PORT_WAIT seconds, default 600, then every rank of MPI_COMM_WORLD
 *            joins MPI_Comm_connect)
 *
 * Wire protocol, version 3 (between the actor and the group's rank 0; A = actor, S = solver;
 * d = obs_dim, a = act_dim, K = n_agents, m = number of step metrics; version 2, still
 * accepted, is K = 1 with a HELLO of int[4]):
 *   tag  dir     type[count]      content
 *   101  A -> S  int[2]           ASSIGN: environment index e, number of environments E
 *   102  S -> A  int[5]           HELLO: protocol version 3, obs_dim, act_dim, group ranks, K
 *   103  S -> A  double[2 a]      BOUNDS: action low[a] then high[a]
 *   108  S -> A  char[n]          METRICS: the step metric names, one per line (n = 0: none)
 *   109  A -> S  char[n]          PARAMS: "key=value" lines, UTF-8: the run's solver
 *                                 parameters and env_index, run_dir, seed
 *   106  A -> S  int[1]           RESET: seed (-1: none); S answers with STATE
 *   105  A -> S  double[K a]      ACTION (agent k's at [k a, (k+1) a)); S answers with STATE
 *   104  S -> A  double[3 + d + m] STATE (K = 1): status, step index, reward, state[d],
 *                                 values[m]
 *   110  S -> A  double[4 + d]    AGENT_STATE (K > 1): agent, status, step index, reward,
 *                                 state[d]; one per agent not done, then:
 *   111  S -> A  double[1 + m]    STEP_END (K > 1): step index, values[m]
 *   107  A -> S  int[0]           STOP
 * status: 0 continue, 1 terminal, 2 truncated; step index: 0 after RESET, k after the k-th
 * ACTION. Messages travel on MPI_COMM_WORLD (MPMD) or an intercommunicator (spawn, connect).
 * A STATE of the wrong size, an unknown status, a wrong step index or a non-finite value is a
 * solver fault: hpc_refer drops the episode's faulty step, logs it and sends RESET.
 */
#ifndef HPC_REFER_CLIENT_H
#define HPC_REFER_CLIENT_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HPC_REFER_PROTOCOL 3

enum {
  HPC_REFER_TAG_ASSIGN = 101, HPC_REFER_TAG_HELLO = 102, HPC_REFER_TAG_BOUNDS = 103,
  HPC_REFER_TAG_STATE = 104, HPC_REFER_TAG_ACTION = 105, HPC_REFER_TAG_RESET = 106,
  HPC_REFER_TAG_STOP = 107, HPC_REFER_TAG_METRICS = 108, HPC_REFER_TAG_PARAMS = 109,
  HPC_REFER_TAG_AGENT_STATE = 110, HPC_REFER_TAG_STEP_END = 111
};
enum { HPC_REFER_CONTINUE = 0, HPC_REFER_TERMINAL = 1, HPC_REFER_TRUNCATED = 2 };
enum { HPC_REFER_RESET = 0, HPC_REFER_STEP = 1, HPC_REFER_STOP = 2 };

typedef struct {
  MPI_Comm comm;  /* this environment's ranks: use it for the solver's own communication */
  int rank, size; /* in comm */
  int env, envs;  /* environment index e and number E of environments */
  int obs_dim, act_dim; /* per agent */
  int n_agents;   /* agents of the simulation (1 unless hpc_refer_init_agents said more) */
  int n_metrics;  /* number of step metrics declared at init */
  char *params;   /* the PARAMS text ("key=value" lines, NUL-terminated), on every rank */
  MPI_Comm peer;  /* MPI_COMM_WORLD (MPMD) or an intercommunicator to the actor */
  int actor;      /* the actor's rank in peer */
  MPI_Comm app;   /* this program's ranks (MPI_COMM_WORLD unless MPMD) */
  int intercomm;  /* peer is an intercommunicator (spawn, connect): disconnected at the end */
  int owns_mpi;
  double *buf;    /* 4 + obs_dim + n_metrics doubles (rank 0) */
  double *actions; /* n_agents * act_dim: the last ACTION, on every rank */
  int open;       /* rank 0: agents' states sent since the last hpc_refer_send_step_end */
} hpc_refer_client;

/* Print "hpc_refer_client: <msg>" and abort the whole job (both apps). */
static inline void hpc_refer_fail(const char *msg) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "hpc_refer_client: error on world rank %d: %s\n", rank, msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The ASSIGN messages of the E actors (MPMD), received by the leader of the solver app:
 * returns the actors' world ranks (malloc'd, E entries) and sets c->envs. */
static inline int *hpc_refer_assign_(hpc_refer_client *c) {
  int got = 0, msg[2], *actors = NULL, i;
  char text[200];
  MPI_Status st;
  do {
    MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, HPC_REFER_TAG_ASSIGN, MPI_COMM_WORLD, &st);
    if (got == 0 && msg[1] > 0) {
      c->envs = msg[1];
      actors = (int *)malloc((size_t)c->envs * sizeof(int));
      for (i = 0; i < c->envs; ++i) actors[i] = -1;
    }
    if (actors == NULL || msg[1] != c->envs || msg[0] < 0 || msg[0] >= c->envs ||
        actors[msg[0]] >= 0) {
      snprintf(text, sizeof text, "bad ASSIGN (env %d of %d) from world rank %d", msg[0],
               msg[1], st.MPI_SOURCE);
      hpc_refer_fail(text);
    }
    actors[msg[0]] = st.MPI_SOURCE;
  } while (++got < c->envs);
  return actors;
}

/* Every rank of MPI_COMM_WORLD: MPI_Comm_connect to the port named in the file that the actor
 * writes (rank 0, the root, polls for the file up to HPC_REFER_PORT_WAIT seconds, default
 * 600; the port argument of the other ranks is ignored). */
static inline MPI_Comm hpc_refer_connect_(const char *path) {
  char port[MPI_MAX_PORT_NAME + 1] = {0}, text[300];
  const char *seconds = getenv("HPC_REFER_PORT_WAIT");
  double limit = seconds && *seconds ? atof(seconds) : 600.0, start = MPI_Wtime();
  int rank;
  MPI_Comm inter;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    FILE *f;
    struct timespec pause = {0, 20000000}; /* 20 ms */
    while ((f = fopen(path, "r")) == NULL) {
      if (MPI_Wtime() - start > limit) {
        snprintf(text, sizeof text, "HPC_REFER_PORT=%s: no port file after %g s (start "
                 "hpc_refer with --env \"external:--connect DIR\" and DIR/env-<e>.port)",
                 path, limit);
        hpc_refer_fail(text);
      }
      nanosleep(&pause, NULL);
    }
    if (fgets(port, sizeof port, f) == NULL) port[0] = '\0';
    fclose(f);
    port[strcspn(port, "\n")] = '\0';
  }
  MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
  return inter;
}

/* Join hpc_refer: split the ranks into environments, declare the sizes, the action bounds and
 * the names of n_metrics per-step series (identifiers; n_metrics = 0, names NULL: none) and
 * the number of agents n_agents >= 1 (sizes and bounds per agent), and receive the run's
 * solver parameters (collective over every rank of the solver; in MPMD also the Allgather +
 * Split that hpc_refer makes). */
static inline int hpc_refer_init_agents(hpc_refer_client *c, int *argc, char ***argv,
                                        int obs_dim, int act_dim, const double *low,
                                        const double *high, int n_metrics,
                                        const char *const *names, int n_agents) {
  int flag, wrank, wsize, found, *attr, mine, several = 0, i, length = 0;
  const char *port_file = getenv("HPC_REFER_PORT");
  MPI_Comm parent;
  memset(c, 0, sizeof *c);
  MPI_Initialized(&flag);
  c->owns_mpi = !flag;
  if (!flag) MPI_Init(argc, argv);
  if (n_agents < 1) hpc_refer_fail("hpc_refer_init_agents: n_agents must be >= 1");
  c->obs_dim = obs_dim;
  c->act_dim = act_dim;
  c->n_agents = n_agents;
  c->n_metrics = n_metrics;
  c->actions = (double *)calloc((size_t)n_agents * (size_t)act_dim, sizeof(double));
  c->app = MPI_COMM_WORLD;
  MPI_Comm_get_parent(&parent);
  if (port_file != NULL && *port_file) {
    c->intercomm = 1;
    c->peer = hpc_refer_connect_(port_file);
  } else if (parent != MPI_COMM_NULL) {
    c->intercomm = 1;
    c->peer = parent;
  }
  if (c->intercomm) { /* the actor is rank 0 of the remote group; ASSIGN goes to our rank 0 */
    int head[2] = {0, 1}; /* env, envs */
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    if (wrank == 0)
      MPI_Recv(head, 2, MPI_INT, 0, HPC_REFER_TAG_ASSIGN, c->peer, MPI_STATUS_IGNORE);
    MPI_Bcast(head, 2, MPI_INT, 0, MPI_COMM_WORLD);
    c->env = head[0];
    c->envs = head[1];
    c->actor = 0;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
  } else {
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &attr, &found);
    mine = found ? *attr : 0;
    if (getenv("HPC_REFER_APP") != NULL) mine = atoi(getenv("HPC_REFER_APP")); /* srun --multi-prog */
    int *apps = (int *)malloc((size_t)wsize * sizeof(int));
    MPI_Allgather(&mine, 1, MPI_INT, apps, 1, MPI_INT, MPI_COMM_WORLD);
    for (i = 0; i < wsize; ++i) several |= apps[i] != apps[0];
    free(apps);
    if (!several)
      hpc_refer_fail("not started by hpc_refer: launch it beside hpc_refer in one mpirun "
                     "(mpirun -n N python -m hpc_refer.run --env external ... : -n M ./solver), "
                     "let hpc_refer spawn it (--env \"external:-n M ./solver\") or set "
                     "HPC_REFER_PORT=DIR/env-<e>.port (--env \"external:--connect DIR\")");
    MPI_Comm_split(MPI_COMM_WORLD, mine, wrank, &c->app);
    int arank, asize;
    MPI_Comm_rank(c->app, &arank);
    MPI_Comm_size(c->app, &asize);
    c->peer = MPI_COMM_WORLD;
    int *actors = arank == 0 ? hpc_refer_assign_(c) : NULL;
    MPI_Bcast(&c->envs, 1, MPI_INT, 0, c->app);
    if (asize % c->envs != 0) {
      char text[200];
      snprintf(text, sizeof text, "%d solver ranks cannot be split into %d environments of "
               "equal size: launch a multiple of %d solver ranks", asize, c->envs, c->envs);
      if (arank == 0) hpc_refer_fail(text);
    }
    if (arank != 0) actors = (int *)malloc((size_t)c->envs * sizeof(int));
    MPI_Bcast(actors, c->envs, MPI_INT, 0, c->app);
    c->env = arank / (asize / c->envs);
    c->actor = actors[c->env];
    free(actors);
    MPI_Comm_split(c->app, c->env, arank, &c->comm);
  }
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->size);
  if (c->rank == 0) {
    int hello[5] = {HPC_REFER_PROTOCOL, obs_dim, act_dim, c->size, n_agents};
    double *bounds = (double *)malloc(2 * (size_t)act_dim * sizeof(double));
    memcpy(bounds, low, (size_t)act_dim * sizeof(double));
    memcpy(bounds + act_dim, high, (size_t)act_dim * sizeof(double));
    size_t n = 0;
    char *text;
    MPI_Status st;
    for (i = 0; i < n_metrics; ++i) n += strlen(names[i]) + 1;
    text = (char *)malloc(n + 1);
    text[0] = '\0';
    for (i = 0; i < n_metrics; ++i) {
      if (i) strcat(text, "\n");
      strcat(text, names[i]);
    }
    MPI_Send(hello, 5, MPI_INT, c->actor, HPC_REFER_TAG_HELLO, c->peer);
    MPI_Send(bounds, 2 * act_dim, MPI_DOUBLE, c->actor, HPC_REFER_TAG_BOUNDS, c->peer);
    MPI_Send(text, (int)strlen(text), MPI_CHAR, c->actor, HPC_REFER_TAG_METRICS, c->peer);
    free(text);
    free(bounds);
    c->buf = (double *)malloc((4 + (size_t)obs_dim + (size_t)n_metrics) * sizeof(double));
    MPI_Probe(c->actor, HPC_REFER_TAG_PARAMS, c->peer, &st);
    MPI_Get_count(&st, MPI_CHAR, &length);
  }
  MPI_Bcast(&length, 1, MPI_INT, 0, c->comm);
  c->params = (char *)malloc((size_t)length + 1);
  if (c->rank == 0)
    MPI_Recv(c->params, length, MPI_CHAR, c->actor, HPC_REFER_TAG_PARAMS, c->peer,
             MPI_STATUS_IGNORE);
  MPI_Bcast(c->params, length, MPI_CHAR, 0, c->comm);
  c->params[length] = '\0';
  return MPI_SUCCESS;
}

/* hpc_refer_init_agents of one agent. */
static inline int hpc_refer_init_metrics(hpc_refer_client *c, int *argc, char ***argv,
                                         int obs_dim, int act_dim, const double *low,
                                         const double *high, int n_metrics,
                                         const char *const *names) {
  return hpc_refer_init_agents(c, argc, argv, obs_dim, act_dim, low, high, n_metrics, names,
                               1);
}

/* hpc_refer_init_metrics without step metrics. */
static inline int hpc_refer_init(hpc_refer_client *c, int *argc, char ***argv, int obs_dim,
                                 int act_dim, const double *low, const double *high) {
  return hpc_refer_init_metrics(c, argc, argv, obs_dim, act_dim, low, high, 0, NULL);
}

/* The run's solver parameter key (any rank, after init): returns 1 and copies its value
 * (NUL-terminated, cut to len - 1 characters) into value, or returns 0 when there is no such
 * parameter. hpc_refer always sends env_index, run_dir and seed. */
static inline int hpc_refer_param(const hpc_refer_client *c, const char *key, char *value,
                                  int len) {
  size_t k = strlen(key);
  const char *line = c->params;
  while (*line) {
    const char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    if (n > k && line[k] == '=' && strncmp(line, key, k) == 0) {
      size_t v = n - k - 1;
      if (len > 0) {
        if (v > (size_t)len - 1) v = (size_t)len - 1;
        memcpy(value, line + k + 1, v);
        value[v] = '\0';
      }
      return 1;
    }
    line += n + (end != NULL);
  }
  return 0;
}

/* Wait for the actor's next command (collective over c->comm). Returns HPC_REFER_RESET
 * (*seed set, -1: none), HPC_REFER_STEP (action[act_dim] set on every rank; with n_agents > 1
 * action[n_agents * act_dim], agent k's at action + k * act_dim; action may be NULL, see
 * hpc_refer_recv_action_agent) or HPC_REFER_STOP. */
static inline int hpc_refer_recv_action(hpc_refer_client *c, double *action, int *seed) {
  int head[2] = {HPC_REFER_STOP, -1}, count = c->n_agents * c->act_dim;
  if (c->rank == 0) {
    MPI_Status st;
    if (c->open)
      hpc_refer_fail("hpc_refer_send_state_agent gave agents' states but no "
                     "hpc_refer_send_step_end closed the answer before hpc_refer_recv_action");
    MPI_Probe(c->actor, MPI_ANY_TAG, c->peer, &st);
    if (st.MPI_TAG == HPC_REFER_TAG_ACTION) {
      MPI_Recv(c->actions, count, MPI_DOUBLE, c->actor, st.MPI_TAG, c->peer,
               MPI_STATUS_IGNORE);
      head[0] = HPC_REFER_STEP;
    } else if (st.MPI_TAG == HPC_REFER_TAG_RESET) {
      MPI_Recv(&head[1], 1, MPI_INT, c->actor, st.MPI_TAG, c->peer, MPI_STATUS_IGNORE);
      head[0] = HPC_REFER_RESET;
    } else if (st.MPI_TAG == HPC_REFER_TAG_STOP) {
      MPI_Recv(NULL, 0, MPI_INT, c->actor, st.MPI_TAG, c->peer, MPI_STATUS_IGNORE);
    } else {
      hpc_refer_fail("unexpected message tag from the actor");
    }
  }
  MPI_Bcast(head, 2, MPI_INT, 0, c->comm);
  if (head[0] == HPC_REFER_STEP) {
    MPI_Bcast(c->actions, count, MPI_DOUBLE, 0, c->comm);
    if (action) memcpy(action, c->actions, (size_t)count * sizeof(double));
  }
  if (seed) *seed = head[1];
  return head[0];
}

/* Agent agent's action (act_dim values) of the last HPC_REFER_STEP (any rank, no
 * communication; 0 <= agent < n_agents). */
static inline int hpc_refer_recv_action_agent(const hpc_refer_client *c, int agent,
                                              double *action) {
  if (agent < 0 || agent >= c->n_agents)
    hpc_refer_fail("hpc_refer_recv_action_agent: agent outside 0..n_agents-1");
  memcpy(action, c->actions + (size_t)agent * (size_t)c->act_dim,
         (size_t)c->act_dim * sizeof(double));
  return MPI_SUCCESS;
}

/* Answer a RESET or an ACTION: called on every rank, state[obs_dim] and values[n_metrics]
 * (the step metrics' values) are read on rank 0 only. */
static inline int hpc_refer_send_state_values(hpc_refer_client *c, int status, int step,
                                              double reward, const double *state,
                                              const double *values) {
  if (c->rank != 0) return MPI_SUCCESS;
  if (c->n_agents > 1)
    hpc_refer_fail("n_agents > 1 was declared: answer with hpc_refer_send_state_agent per "
                   "agent and hpc_refer_send_step_end");
  if (c->n_metrics > 0 && values == NULL)
    hpc_refer_fail("step metrics were declared: send their values with "
                   "hpc_refer_send_state_values");
  c->buf[0] = status;
  c->buf[1] = step;
  c->buf[2] = reward;
  memcpy(c->buf + 3, state, (size_t)c->obs_dim * sizeof(double));
  if (c->n_metrics > 0)
    memcpy(c->buf + 3 + c->obs_dim, values, (size_t)c->n_metrics * sizeof(double));
  return MPI_Send(c->buf, 3 + c->obs_dim + c->n_metrics, MPI_DOUBLE, c->actor,
                  HPC_REFER_TAG_STATE, c->peer);
}

/* hpc_refer_send_state_values without step metrics (none declared). */
static inline int hpc_refer_send_state(hpc_refer_client *c, int status, int step,
                                       double reward, const double *state) {
  return hpc_refer_send_state_values(c, status, step, reward, state, NULL);
}

/* Agent agent's part of the answer to a RESET or an ACTION (every rank, read on rank 0;
 * 0 <= agent < n_agents): its status, reward and state[obs_dim], with the step index. Each
 * agent not done in this episode sends one per answer (an agent that ended earlier may be left
 * out); hpc_refer_send_step_end closes the answer. With one agent (agent 0) the state is sent
 * as protocol 2's STATE by hpc_refer_send_step_end. */
static inline int hpc_refer_send_state_agent(hpc_refer_client *c, int agent, int status,
                                             int step, double reward, const double *state) {
  if (c->rank != 0) return MPI_SUCCESS;
  if (agent < 0 || agent >= c->n_agents)
    hpc_refer_fail("hpc_refer_send_state_agent: agent outside 0..n_agents-1");
  c->open += 1;
  if (c->n_agents == 1) { /* kept for hpc_refer_send_step_end */
    if (c->open > 1)
      hpc_refer_fail("hpc_refer_send_state_agent: agent 0's state given twice in one answer");
    c->buf[0] = status;
    c->buf[1] = step;
    c->buf[2] = reward;
    memcpy(c->buf + 3, state, (size_t)c->obs_dim * sizeof(double));
    return MPI_SUCCESS;
  }
  c->buf[0] = agent;
  c->buf[1] = status;
  c->buf[2] = step;
  c->buf[3] = reward;
  memcpy(c->buf + 4, state, (size_t)c->obs_dim * sizeof(double));
  return MPI_Send(c->buf, 4 + c->obs_dim, MPI_DOUBLE, c->actor, HPC_REFER_TAG_AGENT_STATE,
                  c->peer);
}

/* Close the answer begun by hpc_refer_send_state_agent (every rank, read on rank 0): the step
 * index and the step metrics' values[n_metrics] (NULL when none were declared). */
static inline int hpc_refer_send_step_end(hpc_refer_client *c, int step,
                                          const double *values) {
  int n;
  if (c->rank != 0) return MPI_SUCCESS;
  if (c->n_metrics > 0 && values == NULL)
    hpc_refer_fail("step metrics were declared: pass their values to hpc_refer_send_step_end");
  if (c->n_agents == 1) {
    if (c->open != 1)
      hpc_refer_fail("hpc_refer_send_step_end: no hpc_refer_send_state_agent before it");
    c->open = 0; /* the step index is that of hpc_refer_send_state_agent */
    if (c->n_metrics > 0)
      memcpy(c->buf + 3 + c->obs_dim, values, (size_t)c->n_metrics * sizeof(double));
    return MPI_Send(c->buf, 3 + c->obs_dim + c->n_metrics, MPI_DOUBLE, c->actor,
                    HPC_REFER_TAG_STATE, c->peer);
  }
  c->open = 0;
  c->buf[0] = step;
  for (n = 0; n < c->n_metrics; ++n) c->buf[1 + n] = values[n];
  return MPI_Send(c->buf, 1 + c->n_metrics, MPI_DOUBLE, c->actor, HPC_REFER_TAG_STEP_END,
                  c->peer);
}

/* After HPC_REFER_STOP: free the communicators (disconnect from a spawning or accepting
 * actor) and MPI_Finalize when hpc_refer_init called MPI_Init. */
static inline int hpc_refer_finalize(hpc_refer_client *c) {
  free(c->buf);
  c->buf = NULL;
  free(c->actions);
  c->actions = NULL;
  free(c->params);
  c->params = NULL;
  MPI_Comm_free(&c->comm);
  if (c->intercomm) MPI_Comm_disconnect(&c->peer);
  if (c->app != MPI_COMM_WORLD) MPI_Comm_free(&c->app);
  if (c->owns_mpi) MPI_Finalize();
  return MPI_SUCCESS;
}

#endif /* HPC_REFER_CLIENT_H */
