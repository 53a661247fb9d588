#include "queue/stats.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/fs.h"

/* Field of a flat [k, v, ...] reply. */
static redisReply *field(redisReply *flat, const char *name) {
    if (!flat || flat->type != REDIS_REPLY_ARRAY) return NULL;
    for (size_t i = 0; i + 1 < flat->elements; i += 2)
        if (flat->element[i]->type == REDIS_REPLY_STRING && !strcmp(flat->element[i]->str, name))
            return flat->element[i + 1];
    return NULL;
}

static long long int_field(redisReply *flat, const char *name, long long dflt) {
    redisReply *v = field(flat, name);
    return v && v->type == REDIS_REPLY_INTEGER ? v->integer : dflt;
}

static void str_field(redisReply *flat, const char *name, char *out, size_t cap) {
    redisReply *v = field(flat, name);
    snprintf(out, cap, "%s", v && (v->type == REDIS_REPLY_STRING || v->type == REDIS_REPLY_STATUS) ? v->str : "");
}

static int take_groups(cpt_queue *q, cpt_stats_stream *st, cpt_err *err) {
    const char *key = st->key;
    const char *argv[] = {"XINFO", "GROUPS", key};
    redisReply *r = cpt_redis_command(q->redis, 3, argv, NULL, key, 0, err);
    if (!r) return -1;
    for (size_t g = 0; g < r->elements && st->n_groups < CPT_STATS_MAX_GROUPS; g++) {
        cpt_stats_group *sg = &st->groups[st->n_groups++];
        str_field(r->element[g], "name", sg->name, sizeof sg->name);
        sg->pending = int_field(r->element[g], "pending", 0);
        sg->lag = int_field(r->element[g], "lag", -1);
        sg->entries_read = int_field(r->element[g], "entries-read", -1);
        str_field(r->element[g], "last-delivered-id", sg->last_delivered, sizeof sg->last_delivered);
        sg->out_per_s = -1;
        const char *cv[] = {"XINFO", "CONSUMERS", key, sg->name};
        redisReply *c = cpt_redis_command(q->redis, 4, cv, NULL, key, 0, err);
        if (!c) { freeReplyObject(r); return -1; }
        for (size_t i = 0; i < c->elements && sg->n_consumers < CPT_STATS_MAX_CONSUMERS; i++) {
            cpt_stats_consumer *sc = &sg->consumers[sg->n_consumers++];
            str_field(c->element[i], "name", sc->name, sizeof sc->name);
            sc->pending = int_field(c->element[i], "pending", 0);
            sc->idle_ms = int_field(c->element[i], "idle", 0);
        }
        freeReplyObject(c);
    }
    freeReplyObject(r);
    return 0;
}

/* Versions behind of the groups still queued (after the first group's last delivered entry). */
static int take_staleness(cpt_queue *q, cpt_stats_stream *st, const cpt_queue_snapshot *s, cpt_err *err) {
    st->stale_max = 0;
    st->stale_mean = 0;
    if (!s->has_version || !st->exists || st == &s->streams[CPT_STATS_ENV]) return 0; /* env requests: no version */
    char start[CPT_STREAM_ID_MAX + 1] = "-";
    const char *lowest = NULL;
    for (int g = 0; g < st->n_groups; g++)
        if (!lowest || cpt_stream_id_cmp(st->groups[g].last_delivered, lowest) < 0) lowest = st->groups[g].last_delivered;
    if (lowest && strcmp(lowest, "0-0")) snprintf(start, sizeof start, "(%s", lowest);
    const char *key = st->key;
    char cnt[16];
    snprintf(cnt, sizeof cnt, "%d", CPT_STATS_STALE_SAMPLE);
    const char *argv[] = {"XRANGE", key, start, "+", "COUNT", cnt};
    redisReply *r = cpt_redis_command(q->redis, 6, argv, NULL, key, 0, err);
    if (!r) return -1;
    double sum = 0;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *m = field(r->element[i]->element[1], "m");
        cpt_msg_header h;
        cpt_err e;
        if (!m || m->type != REDIS_REPLY_STRING || cpt_msg_peek_header(m->str, m->len, &h, &e) || !h.has_version) {
            st->stale_undecodable++;
            continue;
        }
        long long behind = h.version >= s->weight_version ? 0 : (long long)(s->weight_version - h.version);
        if (behind > st->stale_max) st->stale_max = behind;
        sum += (double)behind;
        st->stale_sampled++;
    }
    if (st->stale_sampled) st->stale_mean = sum / st->stale_sampled;
    freeReplyObject(r);
    return 0;
}

int cpt_queue_snapshot_take(cpt_queue *q, cpt_queue_snapshot *s, cpt_err *err) {
    double gone_after = s->gone_after_s > 0 ? s->gone_after_s : CPT_STATS_GONE_AFTER_S;
    memset(s, 0, sizeof *s);
    s->gone_after_s = gone_after;
    snprintf(s->run, sizeof s->run, "%s", q->run);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    s->time = tv.tv_sec + tv.tv_usec / 1e6;
    s->mono = cpt_now();

    const char *wv[] = {"HGET", cpt_queue_key(q, CPT_HASH_WEIGHTS), "version"};
    redisReply *r = cpt_redis_command(q->redis, 3, wv, NULL, wv[1], 0, err);
    if (!r) return -1;
    if (r->type == REDIS_REPLY_STRING) {
        char *end;
        s->weight_version = strtoull(r->str, &end, 10);
        s->has_version = *end == '\0' && end != r->str;
    }
    freeReplyObject(r);

    const char *ctl[] = {"HMGET", cpt_queue_key(q, CPT_HASH_CONTROL), "autoscale_rollout", "autoscale_want_rollout",
                         "autoscale_last_rollout"};
    r = cpt_redis_command(q->redis, 5, ctl, NULL, ctl[1], 0, err);
    if (!r) return -1;
    char *dst[3] = {s->autoscale_mode, s->autoscale_want, s->autoscale_last};
    size_t cap[3] = {sizeof s->autoscale_mode, sizeof s->autoscale_want, sizeof s->autoscale_last};
    for (size_t i = 0; i < 3 && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_STRING) snprintf(dst[i], cap[i], "%s", r->element[i]->str);
    freeReplyObject(r);

    const char *dl[] = {"XLEN", cpt_queue_key(q, CPT_STREAM_DEAD)};
    if (cpt_redis_integer(q->redis, 2, dl, dl[1], &s->dead, err)) return -1;

    for (int i = 0; i < CPT_STATS_N_STREAMS; i++) {
        cpt_stats_stream *st = &s->streams[i];
        st->in_per_s = -1;
        if (i == CPT_STATS_ENV) {
            st->stream = CPT_STREAM_DEAD; /* not one of the queue's streams: name and key say which */
            snprintf(st->name, sizeof st->name, "env");
            if (!cpt_env_stream(q->run, st->key)) continue;
        } else {
            st->stream = (cpt_stream)i;
            snprintf(st->name, sizeof st->name, "%s", cpt_stream_name(st->stream));
            snprintf(st->key, sizeof st->key, "%s", cpt_queue_key(q, st->stream));
        }
        const char *key = st->key;
        const char *ex[] = {"EXISTS", key};
        long long exists = 0;
        if (cpt_redis_integer(q->redis, 2, ex, key, &exists, err)) return -1;
        if (!exists) continue;
        st->exists = 1;
        const char *xi[] = {"XINFO", "STREAM", key};
        r = cpt_redis_command(q->redis, 3, xi, NULL, key, 0, err);
        if (!r) return -1;
        st->length = int_field(r, "length", 0);
        st->entries_added = int_field(r, "entries-added", -1);
        freeReplyObject(r);
        if (take_groups(q, st, err) || take_staleness(q, st, s, err)) return -1;
    }

    int n = cpt_queue_workers_take(q, s->time, gone_after, s->workers, CPT_STATS_MAX_WORKERS, err);
    if (n < 0) return -1;
    s->n_workers = n;
    return 0;
}

int cpt_queue_workers_take(cpt_queue *q, double now, double gone_after, cpt_stats_worker *out, int cap, cpt_err *err) {
    const char *hw[] = {"HGETALL", cpt_queue_key(q, CPT_HASH_WORKERS)};
    redisReply *r = cpt_redis_command(q->redis, 2, hw, NULL, hw[1], 0, err);
    if (!r) return -1;
    int n = 0;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements && n < cap; i += 2) {
        cpt_stats_worker *w = &out[n++];
        memset(w, 0, sizeof *w);
        cpt_err e;
        w->ok = cpt_heartbeat_decode(r->element[i + 1]->str, r->element[i + 1]->len, &w->hb, &e) == 0;
        if (!w->ok) snprintf(w->hb.worker, sizeof w->hb.worker, "%.100s", r->element[i]->str);
        w->age_s = w->ok ? now - w->hb.time : 0;
        w->gone = w->ok && w->age_s > gone_after;
    }
    freeReplyObject(r);
    return n;
}

int cpt_queue_prune_gone(cpt_queue *q, const cpt_queue_snapshot *s, cpt_err *err) {
    int n = 0;
    for (int w = 0; w < s->n_workers; w++) {
        if (!s->workers[w].gone) continue;
        if (cpt_queue_worker_gone(q, s->workers[w].hb.worker, err)) return -1;
        n++;
    }
    return n;
}

void cpt_queue_snapshot_rates(cpt_queue_snapshot *cur, const cpt_queue_snapshot *prev) {
    double dt = cur->mono - prev->mono;
    if (dt <= 0) return;
    for (int i = 0; i < CPT_STATS_N_STREAMS; i++) {
        cpt_stats_stream *a = &cur->streams[i];
        const cpt_stats_stream *b = &prev->streams[i];
        if (a->entries_added >= 0 && b->entries_added >= 0 && b->exists)
            a->in_per_s = (double)(a->entries_added - b->entries_added) / dt;
        for (int g = 0; g < a->n_groups; g++)
            for (int h = 0; h < b->n_groups; h++)
                if (!strcmp(a->groups[g].name, b->groups[h].name) && a->groups[g].entries_read >= 0 &&
                    b->groups[h].entries_read >= 0)
                    a->groups[g].out_per_s = (double)(a->groups[g].entries_read - b->groups[h].entries_read) / dt;
    }
}

static void rate(char *out, size_t cap, double v) {
    if (v < 0) snprintf(out, cap, "-");
    else snprintf(out, cap, "%.1f", v);
}

void cpt_queue_snapshot_print(FILE *f, const cpt_queue_snapshot *s, const char *url_shown) {
    char ver[32];
    if (s->has_version) snprintf(ver, sizeof ver, "%llu", s->weight_version);
    else snprintf(ver, sizeof ver, "none");
    fprintf(f, "run %s   %s   weight version %s   dead letters %lld\n", s->run, url_shown, ver, s->dead);
    if (s->autoscale_mode[0])
        fprintf(f, "rollout workers: %s, desired %s; last change: %s\n", s->autoscale_mode,
                s->autoscale_want[0] ? s->autoscale_want : "?",
                s->autoscale_last[0] && strcmp(s->autoscale_last, "-") ? s->autoscale_last : "none");
    fprintf(f, "\n");
    fprintf(f, "%-9s %8s %8s  %-10s %5s %8s %8s %8s  %s\n", "stream", "length", "in/s", "group", "cons", "pending",
            "lag", "out/s", "staleness (versions behind: max / mean of queued)");
    for (int i = 0; i < CPT_STATS_N_STREAMS; i++) {
        const cpt_stats_stream *st = &s->streams[i];
        char in[32], stale[96];
        rate(in, sizeof in, st->in_per_s);
        if (!st->exists && i == CPT_STATS_ENV) continue; /* a run without tools */
        if (!st->exists) {
            fprintf(f, "%-9s %8s\n", st->name, "absent");
            continue;
        }
        if (i == CPT_STATS_ENV) snprintf(stale, sizeof stale, "- (tool calls)");
        else if (!s->has_version) snprintf(stale, sizeof stale, "- (no weights announced)");
        else if (!st->stale_sampled) snprintf(stale, sizeof stale, "- (nothing queued)");
        else
            snprintf(stale, sizeof stale, "%lld / %.2f over %d%s", st->stale_max, st->stale_mean, st->stale_sampled,
                     st->stale_sampled + st->stale_undecodable >= CPT_STATS_STALE_SAMPLE ? " (the first)" : "");
        if (s->has_version && st->stale_undecodable) {
            size_t l = strlen(stale);
            snprintf(stale + l, sizeof stale - l, ", %d undecodable", st->stale_undecodable);
        }
        if (!st->n_groups) {
            fprintf(f, "%-9s %8lld %8s  %-10s %5s %8s %8s %8s  %s\n", st->name, st->length, in,
                    "(none)", "-", "-", "-", "-", stale);
            continue;
        }
        char len[32];
        snprintf(len, sizeof len, "%lld", st->length);
        for (int g = 0; g < st->n_groups; g++) { /* one row per consumer group; the stream's columns on the first */
            const cpt_stats_group *sg = &st->groups[g];
            char out[32], lag[32];
            rate(out, sizeof out, sg->out_per_s);
            if (sg->lag < 0) snprintf(lag, sizeof lag, "?");
            else snprintf(lag, sizeof lag, "%lld", sg->lag);
            fprintf(f, "%-9s %8s %8s  %-10s %5d %8lld %8s %8s  %s\n", g ? "" : st->name,
                    g ? "" : len, g ? "" : in, sg->name, sg->n_consumers, sg->pending, lag, out, g ? "" : stale);
        }
    }
    fprintf(f, "\nconsumers\n");
    int any = 0;
    for (int i = 0; i < CPT_STATS_N_STREAMS; i++)
        for (int g = 0; g < s->streams[i].n_groups; g++)
            for (int c = 0; c < s->streams[i].groups[g].n_consumers; c++) {
                const cpt_stats_consumer *sc = &s->streams[i].groups[g].consumers[c];
                fprintf(f, "  %-9s %-10s %-24s pending %-6lld idle %.1f s\n", s->streams[i].name,
                        s->streams[i].groups[g].name, sc->name, sc->pending, sc->idle_ms / 1000.0);
                any = 1;
            }
    if (!any) fprintf(f, "  (none)\n");
    fprintf(f, "\nworkers\n");
    int n_gone = 0;
    for (int w = 0; w < s->n_workers; w++) {
        const cpt_heartbeat_msg *h = &s->workers[w].hb;
        if (!s->workers[w].ok) {
            fprintf(f, "  %-24s (heartbeat does not decode)\n", h->worker);
            continue;
        }
        if (s->workers[w].gone) {
            n_gone++;
            continue;
        }
        fprintf(f, "  %-24s %-8s %-16s v%-6llu %9.1f tok/s  occupancy %.2f  seen %.1f s ago\n", h->worker, h->role,
                h->host, (unsigned long long)h->version, h->tokens_per_s, h->occupancy, s->workers[w].age_s);
    }
    if (!s->n_workers) fprintf(f, "  (none)\n");
    if (n_gone) {
        /* crashed workers leave their last heartbeat behind: named once, not listed as if alive */
        fprintf(f, "  gone (no heartbeat for over %.0f s; --prune-gone removes them):", s->gone_after_s);
        for (int w = 0; w < s->n_workers; w++)
            if (s->workers[w].gone)
                fprintf(f, " %s (%.0f s)", s->workers[w].hb.worker, s->workers[w].age_s);
        fprintf(f, "\n");
    }
}

static json_t *jrate(double v) { return v < 0 ? json_null() : json_real(v); }

void cpt_queue_snapshot_json(FILE *f, const cpt_queue_snapshot *s) {
    json_t *root = json_object();
    json_object_set_new(root, "run", json_string(s->run));
    json_object_set_new(root, "time", json_real(s->time));
    json_object_set_new(root, "weight_version", s->has_version ? json_integer((json_int_t)s->weight_version) : json_null());
    json_object_set_new(root, "dead", json_integer(s->dead));
    json_t *streams = json_array();
    for (int i = 0; i < CPT_STATS_N_STREAMS; i++) {
        const cpt_stats_stream *st = &s->streams[i];
        if (i == CPT_STATS_ENV && !st->exists) continue;
        json_t *js = json_object();
        json_object_set_new(js, "name", json_string(st->name));
        json_object_set_new(js, "exists", json_boolean(st->exists));
        json_object_set_new(js, "length", json_integer(st->length));
        json_object_set_new(js, "entries_added", json_integer(st->entries_added));
        json_object_set_new(js, "in_per_s", jrate(st->in_per_s));
        json_t *stale = json_object();
        json_object_set_new(stale, "sampled", json_integer(st->stale_sampled));
        json_object_set_new(stale, "undecodable", json_integer(st->stale_undecodable));
        json_object_set_new(stale, "max", st->stale_sampled ? json_integer(st->stale_max) : json_null());
        json_object_set_new(stale, "mean", st->stale_sampled ? json_real(st->stale_mean) : json_null());
        json_object_set_new(js, "staleness", stale);
        json_t *groups = json_array();
        for (int g = 0; g < st->n_groups; g++) {
            const cpt_stats_group *sg = &st->groups[g];
            json_t *jg = json_object();
            json_object_set_new(jg, "name", json_string(sg->name));
            json_object_set_new(jg, "pending", json_integer(sg->pending));
            json_object_set_new(jg, "lag", sg->lag < 0 ? json_null() : json_integer(sg->lag));
            json_object_set_new(jg, "entries_read", json_integer(sg->entries_read));
            json_object_set_new(jg, "out_per_s", jrate(sg->out_per_s));
            json_t *cons = json_array();
            for (int c = 0; c < sg->n_consumers; c++)
                json_array_append_new(cons, json_pack("{s:s, s:I, s:I}", "name", sg->consumers[c].name, "pending",
                                                      (json_int_t)sg->consumers[c].pending, "idle_ms",
                                                      (json_int_t)sg->consumers[c].idle_ms));
            json_object_set_new(jg, "consumers", cons);
            json_array_append_new(groups, jg);
        }
        json_object_set_new(js, "groups", groups);
        json_array_append_new(streams, js);
    }
    json_object_set_new(root, "streams", streams);
    json_t *workers = json_array();
    for (int w = 0; w < s->n_workers; w++) {
        const cpt_heartbeat_msg *h = &s->workers[w].hb;
        if (!s->workers[w].ok) {
            json_array_append_new(workers, json_pack("{s:s, s:b}", "worker", h->worker, "ok", 0));
            continue;
        }
        json_array_append_new(workers, json_pack("{s:s, s:s, s:s, s:I, s:f, s:f, s:f, s:b, s:b}", "worker", h->worker,
                                                 "role", h->role, "host", h->host, "version", (json_int_t)h->version,
                                                 "tokens_per_s", h->tokens_per_s, "occupancy", h->occupancy,
                                                 "age_s", s->workers[w].age_s, "ok", 1, "gone", s->workers[w].gone));
    }
    json_object_set_new(root, "workers", workers);
    json_object_set_new(root, "autoscale_rollout",
                        !s->autoscale_mode[0] ? json_null()
                                              : json_pack("{s:s, s:s, s:s}", "mode", s->autoscale_mode, "desired",
                                                          s->autoscale_want, "last", s->autoscale_last));
    char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (text) fprintf(f, "%s\n", text);
    free(text);
    json_decref(root);
}
