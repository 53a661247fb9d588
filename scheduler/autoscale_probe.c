/* The launcher's side of the autoscaler (autoscale.h): the figures of each period, the control hash, the log. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "scheduler/autoscale.h"

int cpt_autoscaler_init(cpt_autoscaler *A, const cpt_config *cfg, const char *run_dir, double now, cpt_err *err) {
    memset(A, 0, sizeof *A);
    if (cpt_autoscale_params_from_config(cfg, &A->p, err)) return -1;
    A->on = cpt_cfg_bool(cfg, "roles.rollout_auto");
    A->period_s = cpt_cfg_float(cfg, "roles.autoscale_period_s");
    const char *run = cpt_cfg_str(cfg, "run.name");
    snprintf(A->control_key, sizeof A->control_key, "cpt:%s:control", run);
    snprintf(A->prompts_key, sizeof A->prompts_key, "cpt:%s:prompts", run);
    snprintf(A->scored_key, sizeof A->scored_key, "cpt:%s:scored", run);
    snprintf(A->metrics_path, sizeof A->metrics_path, "%s/metrics.jsonl", run_dir);
    /* Steps before this launcher started are not this period's. */
    struct stat st;
    A->metrics_off = stat(A->metrics_path, &st) == 0 ? (long)st.st_size : 0;
    A->period_start = now;
    A->b_min = -1;
    return 0;
}

/* A hash field as a string ("" when absent). */
static void hget(cpt_redis *r, const char *key, const char *f, char *out, size_t cap) {
    const char *argv[] = {"HGET", key, f};
    cpt_err err;
    out[0] = '\0';
    redisReply *rep = cpt_redis_command(r, 3, argv, NULL, key, 0, &err);
    if (!rep) return;
    if (rep->type == REDIS_REPLY_STRING) snprintf(out, cap, "%s", rep->str);
    freeReplyObject(rep);
}

static void publish(cpt_autoscaler *A, cpt_redis *r, int want) {
    char mode[64], w[32];
    if (A->on) snprintf(mode, sizeof mode, "auto %d-%d", A->p.min, A->p.max);
    else snprintf(mode, sizeof mode, "fixed");
    snprintf(w, sizeof w, "%d", want);
    const char *argv[] = {"HSET", A->control_key, "autoscale_rollout", mode, "autoscale_want_rollout", w,
                          "autoscale_last_rollout", A->last[0] ? A->last : "-"};
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, 8, argv, NULL, A->control_key, 0, &err);
    if (rep) freeReplyObject(rep);
}

/* A resumed or requeued run in auto mode starts where the autoscaler was (its last desired count, within the bounds). */
static int restored_want(cpt_autoscaler *A, cpt_redis *r, int current) {
    char last[32], *end;
    hget(r, A->control_key, "autoscale_want_rollout", last, sizeof last);
    long v = last[0] ? strtol(last, &end, 10) : -1;
    return last[0] && !*end && v >= A->p.min && v <= A->p.max ? (int)v : current;
}

int cpt_autoscaler_read_control(cpt_autoscaler *A, cpt_redis *r, int *want) {
    int current = *want, first = !A->mode_seen[0];
    char mode[64], lo[32], hi[32];
    hget(r, A->control_key, "rollout_mode", mode, sizeof mode);
    if (!mode[0]) { /* never set live: the config decides */
        if (first && A->on) *want = restored_want(A, r, current);
        snprintf(A->mode_seen, sizeof A->mode_seen, "-");
        return A->on;
    }
    hget(r, A->control_key, "rollout_min", lo, sizeof lo);
    hget(r, A->control_key, "rollout_max", hi, sizeof hi);
    char seen[64];
    snprintf(seen, sizeof seen, "%.20s %.20s %.20s", mode, lo, hi);
    if (!strcmp(seen, A->mode_seen)) return A->on;
    snprintf(A->mode_seen, sizeof A->mode_seen, "%s", seen);
    if (!strcmp(mode, "fixed")) {
        if (A->on) fprintf(stderr, "cpt: autoscale rollout off (cpt-scale set a fixed count)\n");
        A->on = 0;
        publish(A, r, current);
        return 0;
    }
    if (strcmp(mode, "auto")) {
        fprintf(stderr, "cpt: ignoring %s field rollout_mode = \"%.40s\": not auto or fixed\n", A->control_key, mode);
        return A->on;
    }
    char *end;
    long a = lo[0] ? strtol(lo, &end, 10) : A->p.min;
    if (lo[0] && *end) a = -1;
    long b = hi[0] ? strtol(hi, &end, 10) : A->p.max;
    if (hi[0] && *end) b = -1;
    if (a < 0 || b < a || b > 4096) {
        fprintf(stderr, "cpt: ignoring %s rollout_min/rollout_max = \"%.20s\"/\"%.20s\": not 0 <= min <= max\n",
                A->control_key, lo, hi);
        return A->on;
    }
    A->p.min = (int)a;
    A->p.max = (int)b;
    if (!A->on) {
        A->s.grow_streak = A->s.shrink_streak = 0;
        A->s.changed = 0;
    }
    A->on = 1;
    if (first) current = *want = restored_want(A, r, current);
    fprintf(stderr, "cpt: autoscale rollout on: %d..%d workers, a decision every %.0f s (now %d)\n", A->p.min,
            A->p.max, A->period_s, current);
    publish(A, r, current);
    return 1;
}

/* Prompts not yet delivered to any rollout worker: the lag of the prompts stream's "rollout" group (the whole
 * stream before the group exists). -1: the queue did not answer. */
static long long prompts_backlog(cpt_autoscaler *A, cpt_redis *r) {
    const char *argv[] = {"XINFO", "GROUPS", A->prompts_key};
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, 3, argv, NULL, A->prompts_key, 0, &err);
    if (!rep) return -1;
    long long v = -1;
    char last[64] = "";
    if (rep->type == REDIS_REPLY_ARRAY) {
        for (size_t g = 0; g < rep->elements; g++) {
            redisReply *e = rep->element[g];
            int mine = 0;
            long long lag = -1;
            for (size_t i = 0; e->type == REDIS_REPLY_ARRAY && i + 1 < e->elements; i += 2) {
                const char *k = e->element[i]->str;
                redisReply *val = e->element[i + 1];
                if (!k) continue;
                if (!strcmp(k, "name") && val->type == REDIS_REPLY_STRING && !strcmp(val->str, "rollout")) mine = 1;
                if (!strcmp(k, "lag") && val->type == REDIS_REPLY_INTEGER) lag = val->integer;
                if (!strcmp(k, "last-delivered-id") && val->type == REDIS_REPLY_STRING)
                    snprintf(last, sizeof last, "%s", val->str);
            }
            if (mine) {
                v = lag;
                if (v < 0 && !last[0]) snprintf(last, sizeof last, "0-0");
                break;
            }
            last[0] = '\0';
        }
    }
    freeReplyObject(rep);
    if (v >= 0) return v;
    /* No group yet, or Redis cannot tell the lag: count what lies after the last delivered entry. */
    char start[80];
    snprintf(start, sizeof start, "(%s", last[0] ? last : "0-0");
    const char *xr[] = {"XRANGE", A->prompts_key, start, "+", "COUNT", "100000"};
    rep = cpt_redis_command(r, 6, xr, NULL, A->prompts_key, 0, &err);
    if (!rep) return -1;
    v = rep->type == REDIS_REPLY_ARRAY ? (long long)rep->elements : 0;
    freeReplyObject(rep);
    return v;
}

/* Scored groups the trainer has not read yet (its group's lag); 0 when unknown. */
static long long scored_waiting(cpt_autoscaler *A, cpt_redis *r) {
    const char *argv[] = {"XINFO", "GROUPS", A->scored_key};
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, 3, argv, NULL, A->scored_key, 0, &err);
    if (!rep) return 0;
    long long v = 0;
    for (size_t g = 0; rep->type == REDIS_REPLY_ARRAY && g < rep->elements; g++) {
        redisReply *e = rep->element[g];
        for (size_t i = 0; e->type == REDIS_REPLY_ARRAY && i + 1 < e->elements; i += 2)
            if (e->element[i]->str && !strcmp(e->element[i]->str, "lag") && e->element[i + 1]->type == REDIS_REPLY_INTEGER)
                v += e->element[i + 1]->integer;
    }
    freeReplyObject(rep);
    return v;
}

/* The trainer's steps appended to metrics.jsonl since the last read: their wait on scored groups and their wall time
 * (wait + train + weight sync). Only whole lines are read; a file that shrank (a resumed trainer cut it) is read from
 * its new end. */
static int read_steps(cpt_autoscaler *A, double *wait, double *total) {
    *wait = *total = 0;
    FILE *f = fopen(A->metrics_path, "r");
    if (!f) return 0;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return 0; }
    long size = ftell(f);
    if (size < A->metrics_off) A->metrics_off = size;
    if (fseek(f, A->metrics_off, SEEK_SET) != 0) { fclose(f); return 0; }
    int steps = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) > 0) {
        size_t len = (size_t)got;
        if (line[len - 1] != '\n') break; /* a line still being written */
        A->metrics_off += (long)len;
        json_t *j = json_loads(line, 0, NULL);
        if (!j) continue;
        json_t *w = json_object_get(j, "time/wait_scored");
        if (json_is_number(w)) {
            double t = json_number_value(w), tr = 0, sy = 0;
            json_t *v = json_object_get(j, "time/train");
            if (json_is_number(v)) tr = json_number_value(v);
            v = json_object_get(j, "time/weight_sync");
            if (json_is_number(v)) sy = json_number_value(v);
            *wait += t;
            *total += t + tr + sy;
            steps++;
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    return steps;
}

void cpt_autoscaler_tick(cpt_autoscaler *A, cpt_redis *r, double now, int *want) {
    if (!A->on) {
        A->period_start = now;
        A->n_samples = 0;
        return;
    }
    if (now >= A->next_sample) {
        /* A few looks per period, so "never emptied" and "always empty" mean something. */
        double every = A->period_s / 4 < 1.0 ? A->period_s / 4 : 1.0;
        A->next_sample = now + every;
        long long b = prompts_backlog(A, r);
        if (b >= 0) {
            if (A->n_samples == 0) A->b_start = A->b_min = A->b_max = b;
            if (b < A->b_min) A->b_min = b;
            if (b > A->b_max) A->b_max = b;
            A->b_last = b;
            A->n_samples++;
        }
    }
    if (now - A->period_start < A->period_s) return;
    cpt_autoscale_obs o = {.period_s = now - A->period_start};
    o.steps = read_steps(A, &o.trainer_wait_s, &o.trainer_time_s);
    if (o.steps == 0) /* no step finished: waiting when nothing scored is left for it to read, else training */
        o.trainer_wait_s = scored_waiting(A, r) == 0 ? o.period_s : 0;
    o.backlog_start = A->b_start;
    o.backlog_end = A->b_last;
    o.backlog_min = A->b_min;
    o.backlog_max = A->b_max;
    int looked = A->n_samples > 0;
    A->period_start = now;
    A->n_samples = 0;
    if (!looked) return; /* the queue did not answer: no figures, no decision */
    char why[480];
    int to = cpt_autoscale_decide(&A->p, &A->s, &o, *want, now, why, sizeof why);
    if (to != *want) {
        snprintf(A->last, sizeof A->last, "%d -> %d: %s", *want, to, why);
        fprintf(stderr, "cpt: autoscale rollout %s\n", A->last);
        *want = to;
    }
    publish(A, r, *want);
}
