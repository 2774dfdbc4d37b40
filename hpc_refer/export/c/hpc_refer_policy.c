/* hpc_refer_policy.c: the interpreter of an exported hpc_refer policy (see the header file).
 *
 * policy.json lists the ops of the policy's mean (hpc_refer/algorithms/kit/ops.py):
 * normalize, gru, lstm, linear, softsign, relu, tanh, renorm, take, each reading its arrays
 * from policy.bin; then the action map c + h squash(m). A small JSON reader (the subset the
 * exporter writes: objects, arrays, numbers, strings, true, false, null) reads the header.
 */
#include "hpc_refer_policy.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ------------------------------------------------------------------------ */

static void say(char *message, size_t len, const char *fmt, ...) {
    va_list args;
    if (message == NULL || len == 0) return;
    va_start(args, fmt);
    vsnprintf(message, len, fmt, args);
    va_end(args);
}

/* ---- a small JSON reader ------------------------------------------------------------- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jnode {
    int type;
    double num;        /* J_NUM, J_BOOL (0 or 1) */
    char *str;         /* J_STR */
    int n;             /* items of J_ARR and J_OBJ */
    char **keys;       /* J_OBJ */
    struct jnode *items;
} jnode;

typedef struct {
    const char *at;
    const char *error;
    int depth;
} jparser;

static void jfree(jnode *node) {
    int i;
    if (node == NULL) return;
    for (i = 0; i < node->n; i++) {
        jfree(&node->items[i]);
        if (node->keys) free(node->keys[i]);
    }
    free(node->items);
    free(node->keys);
    free(node->str);
}

static void jspace(jparser *p) {
    while (*p->at == ' ' || *p->at == '\n' || *p->at == '\r' || *p->at == '\t') p->at++;
}

static int jparse(jparser *p, jnode *node);

static char *jstring(jparser *p) {
    const char *start = ++p->at;
    size_t n = 0;
    char *out, *w;
    while (*p->at != '"') {
        if (*p->at == '\0') { p->error = "a string without its closing quote"; return NULL; }
        if (*p->at == '\\' && p->at[1] != '\0') p->at++;
        p->at++;
        n++;
    }
    out = malloc(n + 1);
    if (out == NULL) { p->error = "out of memory"; return NULL; }
    for (w = out; start < p->at; start++) {
        if (*start == '\\') {
            start++;
            *w++ = *start == 'n' ? '\n' : *start == 't' ? '\t' : *start;
        } else {
            *w++ = *start;
        }
    }
    *w = '\0';
    p->at++;
    return out;
}

static int jappend(jparser *p, jnode *node, char *key) {
    jnode *items = realloc(node->items, (size_t)(node->n + 1) * sizeof *items);
    if (items == NULL) { p->error = "out of memory"; free(key); return 0; }
    node->items = items;
    if (node->type == J_OBJ) {
        char **keys = realloc(node->keys, (size_t)(node->n + 1) * sizeof *keys);
        if (keys == NULL) { p->error = "out of memory"; free(key); return 0; }
        node->keys = keys;
        keys[node->n] = key;
    }
    memset(&items[node->n], 0, sizeof *items);
    node->n++;
    return jparse(p, &items[node->n - 1]);
}

static int jparse(jparser *p, jnode *node) {
    char close;
    memset(node, 0, sizeof *node);
    jspace(p);
    if (++p->depth > 32) { p->error = "nested too deeply"; return 0; }
    switch (*p->at) {
    case '{': case '[':
        node->type = *p->at == '{' ? J_OBJ : J_ARR;
        close = *p->at == '{' ? '}' : ']';
        p->at++;
        jspace(p);
        if (*p->at == close) { p->at++; break; }
        for (;;) {
            char *key = NULL;
            jspace(p);
            if (node->type == J_OBJ) {
                if (*p->at != '"') { p->error = "an object key is not a string"; return 0; }
                if ((key = jstring(p)) == NULL) return 0;
                jspace(p);
                if (*p->at != ':') { free(key); p->error = "no ':' after a key"; return 0; }
                p->at++;
            }
            if (!jappend(p, node, key)) return 0;
            jspace(p);
            if (*p->at == ',') { p->at++; continue; }
            if (*p->at == close) { p->at++; break; }
            p->error = "no ',' or closing bracket";
            return 0;
        }
        break;
    case '"':
        node->type = J_STR;
        if ((node->str = jstring(p)) == NULL) return 0;
        break;
    case 't': case 'f': case 'n':
        if (strncmp(p->at, "true", 4) == 0) { node->type = J_BOOL; node->num = 1; p->at += 4; }
        else if (strncmp(p->at, "false", 5) == 0) { node->type = J_BOOL; p->at += 5; }
        else if (strncmp(p->at, "null", 4) == 0) { node->type = J_NULL; p->at += 4; }
        else { p->error = "an unknown word"; return 0; }
        break;
    default: {
        char *end;
        errno = 0;
        node->type = J_NUM;
        node->num = strtod(p->at, &end);
        if (end == p->at || errno == ERANGE) { p->error = "not a value"; return 0; }
        p->at = end;
    }
    }
    p->depth--;
    return 1;
}

static const jnode *jget(const jnode *obj, const char *key) {
    int i;
    if (obj == NULL || obj->type != J_OBJ) return NULL;
    for (i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

/* An integer field in [lo, hi]: 1, or 0 with a message naming it. */
static int jint(const jnode *obj, const char *key, long lo, long hi, long *out, char *message,
                size_t len) {
    const jnode *v = jget(obj, key);
    if (v == NULL || v->type != J_NUM || v->num != floor(v->num) || v->num < (double)lo ||
        v->num > (double)hi) {
        say(message, len, "policy.json: field \"%s\" is missing or not an integer in [%ld, %ld]",
            key, lo, hi);
        return 0;
    }
    *out = (long)v->num;
    return 1;
}

/* ---- the policy ---------------------------------------------------------------------- */

enum { OP_NORMALIZE, OP_GRU, OP_LSTM, OP_LINEAR, OP_SOFTSIGN, OP_RELU, OP_TANH, OP_RENORM,
       OP_TAKE, OP_KINDS };
static const char *const OP_NAMES[OP_KINDS] = {"normalize", "gru", "lstm", "linear", "softsign",
                                               "relu", "tanh", "renorm", "take"};

typedef struct {
    int kind;
    long in, out, width, start;
    float eps;
    const float *w; /* the op's arrays, in the order of mean_ops.py */
} op_t;

struct hpc_refer_policy {
    long state_dim, act_dim, obs_dim, k, hist_actions, carry_dim, n_ops, max_width, max_gates;
    op_t *ops;
    float *weights;
    int squash;
    int *bounded;
    double *center, *half;
    /* per episode: the agents, their stacked states and actions, their carries */
    long agents;
    int started;
    float *obs, *act, *carry;
    double *last; /* the actions returned at the last step */
    float *x, *y, *gx, *gh; /* one row's scratch */
    char message[512];
};

/* The floats an op of this kind holds, and its output width, from its input and attributes. */
static int op_shape(const op_t *op, long *size, long *out) {
    long n = op->in, g;
    switch (op->kind) {
    case OP_NORMALIZE: *size = 2 * n; *out = n; return 1;
    case OP_RENORM: *size = 4 * n; *out = n; return 1;
    case OP_GRU: case OP_LSTM:
        g = (op->kind == OP_LSTM ? 4 : 3) * op->width;
        *size = n * g + g + op->width * g + g;
        *out = n + op->width;
        return op->width > 0;
    case OP_LINEAR: *size = n * op->out + op->out; *out = op->out; return op->out > 0;
    case OP_TAKE: *size = 0; *out = op->out; return op->start + op->out <= n;
    default: *size = 0; *out = n; return 1;
    }
}

static int read_ops(hpc_refer_policy *p, const jnode *ops, long floats, char *message,
                    size_t len) {
    long i, width = p->obs_dim, size, out, offset, n_size, k;
    if (ops == NULL || ops->type != J_ARR || ops->n < 1) {
        say(message, len, "policy.json: \"ops\" is missing or empty");
        return HPC_REFER_ERR_HEADER;
    }
    p->n_ops = ops->n;
    p->ops = calloc((size_t)ops->n, sizeof *p->ops);
    if (p->ops == NULL) return HPC_REFER_ERR_MEMORY;
    p->max_width = width;
    for (i = 0; i < ops->n; i++) {
        const jnode *o = &ops->items[i], *name = jget(o, "op"), *eps;
        op_t *op = &p->ops[i];
        for (k = 0; k < OP_KINDS; k++)
            if (name != NULL && name->type == J_STR && strcmp(name->str, OP_NAMES[k]) == 0) break;
        if (k == OP_KINDS) {
            say(message, len, "policy.json: op %ld is not one of normalize, gru, lstm, linear, "
                "softsign, relu, tanh, renorm, take", i);
            return HPC_REFER_ERR_HEADER;
        }
        op->kind = (int)k;
        if (!jint(o, "in", 1, 1L << 24, &op->in, message, len) ||
            !jint(o, "out", 1, 1L << 24, &op->out, message, len) ||
            !jint(o, "offset", 0, floats, &offset, message, len) ||
            !jint(o, "size", 0, floats, &n_size, message, len))
            return HPC_REFER_ERR_HEADER;
        if ((k == OP_GRU || k == OP_LSTM) && !jint(o, "width", 1, 1L << 16, &op->width, message, len))
            return HPC_REFER_ERR_HEADER;
        if (k == OP_TAKE && !jint(o, "start", 0, 1L << 24, &op->start, message, len))
            return HPC_REFER_ERR_HEADER;
        if (k == OP_RENORM) {
            eps = jget(o, "eps");
            if (eps == NULL || eps->type != J_NUM || !(eps->num > 0)) {
                say(message, len, "policy.json: op %ld (renorm) has no positive \"eps\"", i);
                return HPC_REFER_ERR_HEADER;
            }
            op->eps = (float)eps->num;
        }
        if (op->in != width || !op_shape(op, &size, &out) || out != op->out || size != n_size ||
            offset + size > floats) {
            say(message, len, "policy.json: op %ld (%s) does not match the weights: in %ld "
                "(the previous op gives %ld), out %ld, %ld floats at %ld of %ld",
                i, OP_NAMES[k], op->in, width, op->out, n_size, offset, floats);
            return HPC_REFER_ERR_HEADER;
        }
        op->w = p->weights + offset;
        width = out;
        if (width > p->max_width) p->max_width = width;
        if ((k == OP_GRU || k == OP_LSTM) && 4 * op->width > p->max_gates)
            p->max_gates = 4 * op->width;
    }
    if (width != p->act_dim) {
        say(message, len, "policy.json: the ops end with %ld values, the action has %ld",
            width, p->act_dim);
        return HPC_REFER_ERR_HEADER;
    }
    return HPC_REFER_OK;
}

static int read_action_map(hpc_refer_policy *p, const jnode *map, char *message, size_t len) {
    const jnode *squash = jget(map, "squash"), *lists[3];
    static const char *const names[3] = {"bounded", "center", "half"};
    long i, j;
    if (squash == NULL || squash->type != J_BOOL) {
        say(message, len, "policy.json: \"action_map\" has no boolean \"squash\"");
        return HPC_REFER_ERR_HEADER;
    }
    p->squash = squash->num != 0;
    for (i = 0; i < 3; i++) {
        lists[i] = jget(map, names[i]);
        if (lists[i] == NULL || lists[i]->type != J_ARR || lists[i]->n != p->act_dim) {
            say(message, len, "policy.json: \"action_map.%s\" is not a list of %ld values",
                names[i], p->act_dim);
            return HPC_REFER_ERR_HEADER;
        }
        for (j = 0; j < p->act_dim; j++)
            if (lists[i]->items[j].type != (i == 0 ? J_BOOL : J_NUM)) {
                say(message, len, "policy.json: \"action_map.%s\"[%ld] is not a %s", names[i], j,
                    i == 0 ? "boolean" : "number");
                return HPC_REFER_ERR_HEADER;
            }
    }
    p->bounded = malloc((size_t)p->act_dim * sizeof *p->bounded);
    p->center = malloc((size_t)p->act_dim * sizeof *p->center);
    p->half = malloc((size_t)p->act_dim * sizeof *p->half);
    if (!p->bounded || !p->center || !p->half) return HPC_REFER_ERR_MEMORY;
    for (j = 0; j < p->act_dim; j++) {
        p->bounded[j] = lists[0]->items[j].num != 0;
        p->center[j] = lists[1]->items[j].num;
        p->half[j] = lists[2]->items[j].num;
    }
    return HPC_REFER_OK;
}

static char *read_file(const char *path, long *size, char *message, size_t len) {
    FILE *f = fopen(path, "rb");
    char *data;
    long n;
    if (f == NULL) {
        say(message, len, "%s: cannot be opened (%s)", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        (data = malloc((size_t)n + 1)) == NULL) {
        fclose(f);
        say(message, len, "%s: cannot be read", path);
        return NULL;
    }
    if (fread(data, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(data);
        say(message, len, "%s: cannot be read", path);
        return NULL;
    }
    fclose(f);
    data[n] = '\0';
    *size = n;
    return data;
}

/* The weights as floats from the little-endian file, whatever this machine's byte order. */
static float *read_weights(const char *path, long floats, char *message, size_t len, int *code) {
    long size, i;
    unsigned char *raw = (unsigned char *)read_file(path, &size, message, len);
    float *w;
    *code = HPC_REFER_ERR_FILE;
    if (raw == NULL) return NULL;
    if (size != 4 * floats) {
        say(message, len, "%s: %ld bytes, the header's %ld float32 weights are %ld bytes "
            "(a truncated or another weight file)", path, size, floats, 4 * floats);
        free(raw);
        *code = HPC_REFER_ERR_WEIGHTS;
        return NULL;
    }
    w = malloc((size_t)(floats > 0 ? floats : 1) * sizeof *w);
    if (w == NULL) { free(raw); *code = HPC_REFER_ERR_MEMORY; return NULL; }
    for (i = 0; i < floats; i++) {
        unsigned long bits = (unsigned long)raw[4 * i] | (unsigned long)raw[4 * i + 1] << 8 |
                             (unsigned long)raw[4 * i + 2] << 16 |
                             (unsigned long)raw[4 * i + 3] << 24;
        unsigned int b32 = (unsigned int)bits;
        memcpy(&w[i], &b32, sizeof w[i]);
        if (!isfinite(w[i])) {
            say(message, len, "%s: weight %ld is not finite", path, i);
            free(raw);
            free(w);
            *code = HPC_REFER_ERR_WEIGHTS;
            return NULL;
        }
    }
    free(raw);
    *code = HPC_REFER_OK;
    return w;
}

static int load_header(hpc_refer_policy *p, const jnode *h, const char *dir, char *message,
                       size_t len) {
    const jnode *format = jget(h, "format"), *version = jget(h, "format_version");
    const jnode *history = jget(h, "history"), *weights = jget(h, "weights"), *file, *actions;
    long floats;
    int code;
    char path[8192];
    if (format == NULL || format->type != J_STR || strcmp(format->str, "hpc_refer-policy") != 0 ||
        version == NULL || version->type != J_NUM || version->num != HPC_REFER_FORMAT_VERSION) {
        say(message, len, "policy.json: format %s version %g; this routine reads "
            "hpc_refer-policy version %d (export the policy again with this hpc_refer, or use "
            "the hpc_refer_policy.c written beside it)",
            format && format->type == J_STR ? format->str : "(none)",
            version && version->type == J_NUM ? version->num : -1.0, HPC_REFER_FORMAT_VERSION);
        return HPC_REFER_ERR_VERSION;
    }
    actions = jget(history, "actions");
    if (!jint(h, "state_dim", 1, 1L << 24, &p->state_dim, message, len) ||
        !jint(h, "act_dim", 1, 1L << 16, &p->act_dim, message, len) ||
        !jint(h, "obs_dim", 1, 1L << 24, &p->obs_dim, message, len) ||
        !jint(h, "carry_dim", 0, 1L << 16, &p->carry_dim, message, len) ||
        !jint(history, "k", 1, 1L << 12, &p->k, message, len) ||
        !jint(weights, "floats", 0, 1L << 30, &floats, message, len))
        return HPC_REFER_ERR_HEADER;
    if (actions == NULL || actions->type != J_BOOL) {
        say(message, len, "policy.json: \"history.actions\" is missing or not a boolean");
        return HPC_REFER_ERR_HEADER;
    }
    p->hist_actions = actions->num != 0;
    if (p->obs_dim != p->k * (p->state_dim + (p->hist_actions ? p->act_dim : 0))) {
        say(message, len, "policy.json: obs_dim %ld is not history.k %ld times state_dim %ld%s",
            p->obs_dim, p->k, p->state_dim, p->hist_actions ? " + act_dim" : "");
        return HPC_REFER_ERR_HEADER;
    }
    file = jget(weights, "file");
    if (file == NULL || file->type != J_STR || strchr(file->str, '/') != NULL) {
        say(message, len, "policy.json: \"weights.file\" is not a file name");
        return HPC_REFER_ERR_HEADER;
    }
    snprintf(path, sizeof path, "%s%s", dir, file->str);
    if ((p->weights = read_weights(path, floats, message, len, &code)) == NULL) return code;
    if ((code = read_ops(p, jget(h, "ops"), floats, message, len)) != HPC_REFER_OK) return code;
    return read_action_map(p, jget(h, "action_map"), message, len);
}

int hpc_refer_policy_load(const char *path, hpc_refer_policy **policy, char *message,
                          size_t message_len) {
    char dir[4096], json[4200];
    size_t n = strlen(path);
    long size;
    char *text;
    jparser parser;
    jnode header;
    hpc_refer_policy *p;
    int code;
    *policy = NULL;
    say(message, message_len, "%s", "");
    if (n > 4000) {
        say(message, message_len, "a path of %lu characters: at most 4000", (unsigned long)n);
        return HPC_REFER_ERR_FILE;
    }
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) {
        const char *slash = strrchr(path, '/');
        snprintf(json, sizeof json, "%s", path);
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + 1) : 0, path);
    } else {
        snprintf(dir, sizeof dir, "%s%s", path, n > 0 && path[n - 1] != '/' ? "/" : "");
        snprintf(json, sizeof json, "%spolicy.json", dir);
    }
    if ((text = read_file(json, &size, message, message_len)) == NULL) return HPC_REFER_ERR_FILE;
    parser.at = text;
    parser.error = NULL;
    parser.depth = 0;
    if (!jparse(&parser, &header)) {
        say(message, message_len, "%s: not valid JSON at byte %ld: %s", json,
            (long)(parser.at - text), parser.error ? parser.error : "?");
        jfree(&header);
        free(text);
        return HPC_REFER_ERR_HEADER;
    }
    free(text);
    p = calloc(1, sizeof *p);
    if (p == NULL) { jfree(&header); return HPC_REFER_ERR_MEMORY; }
    code = load_header(p, &header, dir, message, message_len);
    jfree(&header);
    if (code == HPC_REFER_OK) {
        long w = p->max_width > p->obs_dim + p->carry_dim ? p->max_width
                                                          : p->obs_dim + p->carry_dim;
        p->x = malloc((size_t)w * sizeof *p->x);
        p->y = malloc((size_t)w * sizeof *p->y);
        p->gx = malloc((size_t)(p->max_gates + 1) * sizeof *p->gx);
        p->gh = malloc((size_t)(p->max_gates + 1) * sizeof *p->gh);
        if (!p->x || !p->y || !p->gx || !p->gh) code = HPC_REFER_ERR_MEMORY;
    }
    if (code == HPC_REFER_ERR_MEMORY) say(message, message_len, "out of memory");
    if (code != HPC_REFER_OK) {
        hpc_refer_policy_free(p);
        return code;
    }
    *policy = p;
    return HPC_REFER_OK;
}

void hpc_refer_policy_free(hpc_refer_policy *p) {
    if (p == NULL) return;
    free(p->ops);
    free(p->weights);
    free(p->bounded);
    free(p->center);
    free(p->half);
    free(p->obs);
    free(p->act);
    free(p->carry);
    free(p->last);
    free(p->x);
    free(p->y);
    free(p->gx);
    free(p->gh);
    free(p);
}

void hpc_refer_policy_reset(hpc_refer_policy *p) {
    if (p != NULL) p->started = 0;
}

const char *hpc_refer_policy_message(const hpc_refer_policy *p) {
    return p == NULL ? "no policy (its load failed)" : p->message;
}

int hpc_refer_policy_state_dim(const hpc_refer_policy *p) { return p ? (int)p->state_dim : 0; }
int hpc_refer_policy_act_dim(const hpc_refer_policy *p) { return p ? (int)p->act_dim : 0; }

/* ---- the forward --------------------------------------------------------------------- */

#if defined(__GNUC__)
typedef float v4f __attribute__((vector_size(16), aligned(4), may_alias));
#endif

/* y[0:m] += a w[0:m] (each y[j] summed in the order of the inputs, as a plain loop). */
static void axpy(long m, float a, const float *w, float *y) {
    long j = 0;
#if defined(__GNUC__)
    v4f av = {a, a, a, a};
    for (; j + 4 <= m; j += 4) *(v4f *)(y + j) += av * *(const v4f *)(w + j);
#endif
    for (; j < m; j++) y[j] += a * w[j];
}

/* y = x w + b for w [n, m] row-major. */
static void linear(long n, long m, const float *w, const float *b, const float *x, float *y) {
    long i;
    memcpy(y, b, (size_t)m * sizeof *y);
    for (i = 0; i < n; i++) axpy(m, x[i], w + i * m, y);
}

static float sigmoid(float v) { return 0.5f * (1.0f + tanhf(0.5f * v)); }

/* One step of a GRU or LSTM cell (hpc_refer/algorithms/kit/recurrent.py) on x [n]: h' is
 * written after x (x becomes [x, h']) and the carry is updated in place. */
static void cell(const hpc_refer_policy *p, const op_t *op, float *x, float *carry) {
    long w = op->width, n = op->in, g = (op->kind == OP_LSTM ? 4 : 3) * w, j;
    const float *w_ih = op->w, *b_ih = w_ih + n * g, *w_hh = b_ih + g, *b_hh = w_hh + w * g;
    float *gx = p->gx, *gh = p->gh, *h = x + n;
    linear(n, g, w_ih, b_ih, x, gx);
    linear(w, g, w_hh, b_hh, carry, gh);
    if (op->kind == OP_LSTM) {
        for (j = 0; j < w; j++) {
            float i_ = gx[j] + gh[j], f = gx[w + j] + gh[w + j], c_ = gx[2 * w + j] + gh[2 * w + j];
            float o = gx[3 * w + j] + gh[3 * w + j];
            float c = sigmoid(f) * carry[w + j] + sigmoid(i_) * tanhf(c_);
            h[j] = sigmoid(o) * tanhf(c);
            carry[w + j] = c;
        }
    } else {
        for (j = 0; j < w; j++) {
            float r = sigmoid(gx[j] + gh[j]), z = sigmoid(gx[w + j] + gh[w + j]);
            float nn = tanhf(gx[2 * w + j] + r * gh[2 * w + j]);
            h[j] = (1.0f - z) * nn + z * carry[j];
        }
    }
    memcpy(carry, h, (size_t)w * sizeof *h);
}

/* The mean m of one agent's observation x (obs_dim values, overwritten) and carry. */
static const float *mean(hpc_refer_policy *p, float *carry) {
    float *x = p->x, *y = p->y, *t;
    long i, j;
    for (i = 0; i < p->n_ops; i++) {
        const op_t *op = &p->ops[i];
        const float *w = op->w;
        long n = op->in;
        switch (op->kind) {
        case OP_NORMALIZE:
            for (j = 0; j < n; j++) x[j] = (x[j] - w[j]) * w[n + j];
            break;
        case OP_GRU: case OP_LSTM:
            cell(p, op, x, carry);
            break;
        case OP_LINEAR:
            linear(n, op->out, w, w + n * op->out, x, y);
            t = x; x = y; y = t;
            break;
        case OP_SOFTSIGN:
            for (j = 0; j < n; j++) x[j] = x[j] / (fabsf(x[j]) + 1.0f);
            break;
        case OP_RELU:
            for (j = 0; j < n; j++) x[j] = x[j] > 0.0f ? x[j] : 0.0f;
            break;
        case OP_TANH:
            for (j = 0; j < n; j++) x[j] = tanhf(x[j]);
            break;
        case OP_RENORM:
            for (j = 0; j < n; j++)
                x[j] = w[2 * n + j] * ((x[j] - w[j]) / sqrtf(w[n + j] + op->eps)) + w[3 * n + j];
            break;
        case OP_TAKE:
            memmove(x, x + op->start, (size_t)op->out * sizeof *x);
            break;
        }
    }
    /* keep the scratch buffers where load put them (x may be either) */
    if (x != p->x) memcpy(p->x, x, (size_t)p->act_dim * sizeof *x);
    return p->x;
}

static int start_episode(hpc_refer_policy *p, long agents) {
    long ka = p->hist_actions ? p->k : 0;
    if (agents != p->agents) {
        free(p->obs);
        free(p->act);
        free(p->carry);
        free(p->last);
        p->last = malloc((size_t)(agents * p->act_dim) * sizeof *p->last);
        p->obs = malloc((size_t)(agents * p->k * p->state_dim) * sizeof *p->obs);
        p->act = malloc((size_t)(agents * ka * p->act_dim + 1) * sizeof *p->act);
        p->carry = malloc((size_t)(agents * p->carry_dim + 1) * sizeof *p->carry);
        p->agents = agents;
        if (!p->obs || !p->act || !p->carry || !p->last) {
            p->agents = 0;
            return HPC_REFER_ERR_MEMORY;
        }
    }
    memset(p->act, 0, (size_t)(agents * ka * p->act_dim) * sizeof *p->act);
    memset(p->carry, 0, (size_t)(agents * p->carry_dim) * sizeof *p->carry);
    return HPC_REFER_OK;
}

int hpc_refer_policy_act(hpc_refer_policy *p, const double *state, size_t n_state,
                         double *action, size_t n_action) {
    long agents, a, i, j, bad = 0, sd, A, k, ka;
    if (p == NULL) return HPC_REFER_ERR_MEMORY;
    sd = p->state_dim; A = p->act_dim; k = p->k; ka = p->hist_actions ? k : 0;
    p->message[0] = '\0';
    if (n_state == 0 || n_state % (size_t)sd != 0 || n_action != n_state / (size_t)sd * (size_t)A) {
        say(p->message, sizeof p->message, "a state of %lu values and an action of %lu: this "
            "policy takes %ld values per agent and gives %ld", (unsigned long)n_state,
            (unsigned long)n_action, sd, A);
        return HPC_REFER_ERR_SHAPE;
    }
    agents = (long)(n_state / (size_t)sd);
    if (p->started && agents != p->agents) {
        say(p->message, sizeof p->message, "states of %ld agents inside an episode of %ld: "
            "the agent count changes only at an episode's start (reset)", agents, p->agents);
        return HPC_REFER_ERR_SHAPE;
    }
    for (i = 0; i < (long)n_state; i++) bad += !isfinite((float)state[i]);
    if (bad) {
        say(p->message, sizeof p->message, "the state holds %ld NaN or infinite value(s) (in "
            "float32): the policy's action would be NaN", bad);
        return HPC_REFER_ERR_NONFINITE;
    }
    if (!p->started) {
        if (start_episode(p, agents) != HPC_REFER_OK) {
            say(p->message, sizeof p->message, "out of memory");
            return HPC_REFER_ERR_MEMORY;
        }
    }
    for (a = 0; a < agents; a++) {
        float *obs = p->obs + a * k * sd, *act = p->act + a * ka * A;
        const double *s = state + a * sd;
        const float *m;
        if (p->started) { /* push: the newest first */
            memmove(obs + sd, obs, (size_t)((k - 1) * sd) * sizeof *obs);
            if (ka > 0) {
                memmove(act + A, act, (size_t)((ka - 1) * A) * sizeof *act);
                for (j = 0; j < A; j++) act[j] = (float)p->last[a * A + j];
            }
            for (j = 0; j < sd; j++) obs[j] = (float)s[j];
        } else {
            for (i = 0; i < k; i++)
                for (j = 0; j < sd; j++) obs[i * sd + j] = (float)s[j];
        }
        memcpy(p->x, obs, (size_t)(k * sd) * sizeof *obs);
        memcpy(p->x + k * sd, act, (size_t)(ka * A) * sizeof *act);
        m = mean(p, p->carry + a * p->carry_dim);
        for (j = 0; j < A; j++) {
            float u = m[j], squashed;
            if (!p->bounded[j]) {
                action[a * A + j] = (double)u;
                continue;
            }
            squashed = p->squash ? tanhf(u) : u < -1.0f ? -1.0f : u > 1.0f ? 1.0f : u;
            action[a * A + j] = p->center[j] + p->half[j] * (double)squashed;
        }
        memcpy(p->last + a * A, action + a * A, (size_t)A * sizeof *action);
    }
    p->started = 1;
    return HPC_REFER_OK;
}
