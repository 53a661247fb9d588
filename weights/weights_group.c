/* nccl weight-group membership over Redis (weights/weights_group.h). */
#include "weights/weights_group.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void key(char *out, size_t cap, const char *run, const char *what) { snprintf(out, cap, "cpt:%s:wg:%s", run, what); }

void cpt_wg_epoch_free(cpt_wg_epoch *e) {
    free(e->members);
    memset(e, 0, sizeof *e);
}

int64_t cpt_wg_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cpt_wg_register(cpt_redis *r, const char *run, const char *worker, int64_t now_ms, cpt_err *err) {
    char k[256], t[32];
    key(k, sizeof k, run, "members");
    snprintf(t, sizeof t, "%" PRId64, now_ms);
    const char *argv[] = {"HSET", k, worker, t};
    long long n;
    return cpt_redis_integer(r, 4, argv, k, &n, err);
}

int cpt_wg_leave(cpt_redis *r, const char *run, const char *worker, cpt_err *err) {
    char k[256];
    key(k, sizeof k, run, "members");
    const char *argv[] = {"HDEL", k, worker};
    long long n;
    return cpt_redis_integer(r, 3, argv, k, &n, err);
}

static int cmp_name(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

int cpt_wg_live(cpt_redis *r, const char *run, int64_t now_ms, int64_t ttl_ms, char (**names)[CPT_NAME_MAX], int *n,
                cpt_err *err) {
    char k[256];
    key(k, sizeof k, run, "members");
    *names = NULL;
    *n = 0;
    const char *argv[] = {"HGETALL", k};
    redisReply *rep = cpt_redis_command(r, 2, argv, NULL, k, 0, err);
    if (!rep) return -1;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2) {
        freeReplyObject(rep);
        return cpt_errf(err, "HGETALL %s: not a field/value array", k);
    }
    char (*out)[CPT_NAME_MAX] = calloc(rep->elements / 2 + 1, sizeof *out);
    if (!out) {
        freeReplyObject(rep);
        return cpt_errf(err, "out of memory");
    }
    int m = 0, rc = 0;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || f->len == 0 || f->len >= CPT_NAME_MAX ||
            memchr(f->str, ',', f->len))
            continue; /* not a worker id we could have written: ignore */
        int64_t seen = strtoll(v->str, NULL, 10);
        if (seen < now_ms - ttl_ms) {
            const char *dargv[] = {"HDEL", k, f->str};
            long long d;
            if (cpt_redis_integer(r, 3, dargv, k, &d, err)) rc = -1;
            continue;
        }
        memcpy(out[m], f->str, f->len);
        out[m][f->len] = 0;
        m++;
    }
    freeReplyObject(rep);
    if (rc) {
        free(out);
        return -1;
    }
    qsort(out, (size_t)m, sizeof *out, cmp_name);
    *names = out;
    *n = m;
    return 0;
}

int cpt_wg_current_number(cpt_redis *r, const char *run, uint64_t *epoch, cpt_err *err) {
    char k[256];
    key(k, sizeof k, run, "current");
    const char *argv[] = {"GET", k};
    redisReply *rep = cpt_redis_command(r, 2, argv, NULL, k, 0, err);
    if (!rep) return -1;
    *epoch = rep->type == REDIS_REPLY_STRING ? strtoull(rep->str, NULL, 10) : 0;
    freeReplyObject(rep);
    return 0;
}

static int parse_members(cpt_wg_epoch *e, const char *s, cpt_err *err) {
    int n = 0;
    if (*s) {
        n = 1;
        for (const char *p = s; *p; p++) n += *p == ',';
    }
    if (n > CPT_WG_MAX_MEMBERS) return cpt_errf(err, "epoch %" PRIu64 ": %d members, max %d", e->epoch, n, CPT_WG_MAX_MEMBERS);
    e->members = calloc((size_t)n + 1, sizeof *e->members);
    if (!e->members) return cpt_errf(err, "out of memory");
    const char *p = s;
    for (int i = 0; i < n; i++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (!len || len >= CPT_NAME_MAX) return cpt_errf(err, "epoch %" PRIu64 ": member %d is empty or too long", e->epoch, i);
        memcpy(e->members[i], p, len);
        p = c ? c + 1 : p + len;
    }
    e->n = n;
    return 0;
}

int cpt_wg_current(cpt_redis *r, const char *run, cpt_wg_epoch *e, cpt_err *err) {
    memset(e, 0, sizeof *e);
    uint64_t E;
    if (cpt_wg_current_number(r, run, &E, err)) return -1;
    if (!E) return 0;
    char k[256], what[64];
    snprintf(what, sizeof what, "epoch:%" PRIu64, E);
    key(k, sizeof k, run, what);
    const char *argv[] = {"HMGET", k, "members", "uid", "version"};
    redisReply *rep = cpt_redis_command(r, 5, argv, NULL, k, 0, err);
    if (!rep) return -1;
    int rc = 1;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 || rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_STRING || rep->element[2]->type != REDIS_REPLY_STRING) {
        rc = 0; /* the epoch was replaced between the two reads: no current epoch this time */
    } else {
        e->epoch = E;
        e->version = strtoull(rep->element[2]->str, NULL, 10);
        if (cpt_hex_decode(rep->element[1]->str, e->uid, CPT_WG_UID_BYTES))
            rc = cpt_errf(err, "%s: uid is not %d hex digits", k, 2 * CPT_WG_UID_BYTES);
        else if (parse_members(e, rep->element[0]->str, err))
            rc = -1;
    }
    freeReplyObject(rep);
    if (rc != 1) cpt_wg_epoch_free(e);
    return rc;
}

int cpt_wg_same_members(const cpt_wg_epoch *e, char (*names)[CPT_NAME_MAX], int n) {
    if (!e->epoch || e->n != n) return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(e->members[i], names[i])) return 0;
    return 1;
}

int cpt_wg_open_epoch(cpt_redis *r, const char *run, char (*names)[CPT_NAME_MAX], int n,
                      const unsigned char uid[CPT_WG_UID_BYTES], uint64_t version, cpt_wg_epoch *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    if (n < 0 || n > CPT_WG_MAX_MEMBERS) return cpt_errf(err, "weight group: %d members, max %d", n, CPT_WG_MAX_MEMBERS);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) >= 0) return cpt_errf(err, "weight group: members not sorted and distinct");
    uint64_t old;
    if (cpt_wg_current_number(r, run, &old, err)) return -1;
    uint64_t E = old + 1;
    char *list = malloc((size_t)(n ? n : 1) * CPT_NAME_MAX);
    if (!list) return cpt_errf(err, "out of memory");
    list[0] = 0;
    size_t at = 0;
    for (int i = 0; i < n; i++) at += (size_t)sprintf(list + at, "%s%s", i ? "," : "", names[i]);
    char kcur[256], knew[256], kold[256], what[64], es[32], vs[32], uh[2 * CPT_WG_UID_BYTES + 1];
    key(kcur, sizeof kcur, run, "current");
    snprintf(what, sizeof what, "epoch:%" PRIu64, E);
    key(knew, sizeof knew, run, what);
    snprintf(what, sizeof what, "epoch:%" PRIu64, old);
    key(kold, sizeof kold, run, what);
    snprintf(es, sizeof es, "%" PRIu64, E);
    snprintf(vs, sizeof vs, "%" PRIu64, version);
    cpt_hex_encode(uid, CPT_WG_UID_BYTES, uh);
    const char *a0[] = {"MULTI"};
    const char *a1[] = {"HSET", knew, "members", list, "uid", uh, "version", vs};
    const char *a2[] = {"SET", kcur, es};
    const char *a3[] = {"DEL", kold};
    const char *a4[] = {"EXEC"};
    cpt_redis_cmd cmds[] = {{1, a0, NULL, NULL}, {8, a1, NULL, knew}, {3, a2, NULL, kcur}, {2, a3, NULL, kold},
                            {1, a4, NULL, NULL}};
    redisReply *reps[5];
    int rc = cpt_redis_pipeline(r, 5, cmds, reps, err);
    free(list);
    if (rc) return -1;
    int ok = reps[4]->type == REDIS_REPLY_ARRAY;
    for (int i = 0; i < 5; i++) freeReplyObject(reps[i]);
    if (!ok) return cpt_errf(err, "weight group: opening epoch %" PRIu64 ": EXEC did not run", E);
    out->epoch = E;
    out->n = n;
    out->version = version;
    memcpy(out->uid, uid, CPT_WG_UID_BYTES);
    out->members = calloc((size_t)n + 1, sizeof *out->members);
    if (!out->members) return cpt_errf(err, "out of memory");
    if (n > 0) memcpy(out->members, names, (size_t)n * sizeof *names); /* names is NULL for an empty epoch */
    return 0;
}

int cpt_wg_rank(const cpt_wg_epoch *e, const char *worker) {
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->members[i], worker)) return i + 1;
    return -1;
}
