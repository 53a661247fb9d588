/* cpt-queue: what an operator watches.
 *   cpt-queue stats [--watch SECS [--count N]] [--window SECS] [--json] [--gone-after SECS] [--prune-gone]
 *   cpt-queue peek STREAM [N]
 *   cpt-queue dead [--requeue ID | --drop ID] [--count N]
 * Connection (every subcommand): --run RUN_DIR (or --job JOBID, $CPT_RUN, else the user's one live run:
 * scheduler/run_registry.h): RUN_DIR/queue.json or RUN_DIR/redis.sock; or --url URL [--password-file FILE]; --name
 * RUN picks the run when Redis holds several. A password is never
 * accepted on the command line. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "queue/admin.h"
#include "queue/conn.h"
#include "queue/redis.h"
#include "queue/stats.h"
#include "queue/stream.h"
#include "scheduler/run_registry.h"

static const char USAGE[] =
    "usage: cpt-queue stats [--watch SECS [--count N]] [--window SECS] [--json] [--gone-after SECS] [--prune-gone]\n"
    "       cpt-queue peek STREAM [N]        STREAM: prompts|rollouts|scored|dead|weights|control|workers\n"
    "       cpt-queue dead [--requeue ID | --drop ID] [--count N]\n"
    "connection: --run RUN_DIR | --job JOBID (default $CPT_RUN, else your one live run) | --url URL\n"
    "            [--password-file FILE] [--tls-ca FILE]; --name RUN\n";

typedef struct cli {
    const char *run_dir, *job, *url, *password_file, *tls_ca, *name;
    int json, count, n, prune_gone;
    double watch, window, gone_after;
    const char *requeue, *drop;
    const char *stream;
} cli;

static int parse_double(const char *s, double *out) {
    char *end;
    *out = strtod(s, &end);
    return end != s && *end == '\0' && *out >= 0 && *out < 1e7 ? 0 : -1;
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 100000000) return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, cli *c, cpt_err *err) {
    memset(c, 0, sizeof *c);
    c->window = 1.0;
    c->n = 10;
    int positional = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEXT() do { if (!v) return cpt_errf(err, "%s needs a value", a); i++; } while (0)
        if (!strcmp(a, "--run")) { NEXT(); c->run_dir = v; }
        else if (!strcmp(a, "--job")) { NEXT(); c->job = v; }
        else if (!strcmp(a, "--url")) { NEXT(); c->url = v; }
        else if (!strcmp(a, "--password-file")) { NEXT(); c->password_file = v; }
        else if (!strcmp(a, "--tls-ca")) { NEXT(); c->tls_ca = v; }
        else if (!strcmp(a, "--name")) { NEXT(); c->name = v; }
        else if (!strcmp(a, "--json")) c->json = 1;
        else if (!strcmp(a, "--prune-gone")) c->prune_gone = 1;
        else if (!strcmp(a, "--gone-after")) { NEXT(); if (parse_double(v, &c->gone_after) || c->gone_after < 1) return cpt_errf(err, "--gone-after %s: seconds >= 1", v); }
        else if (!strcmp(a, "--watch")) { NEXT(); if (parse_double(v, &c->watch) || c->watch < 0.1) return cpt_errf(err, "--watch %s: seconds >= 0.1", v); }
        else if (!strcmp(a, "--window")) { NEXT(); if (parse_double(v, &c->window)) return cpt_errf(err, "--window %s: seconds >= 0", v); }
        else if (!strcmp(a, "--count")) { NEXT(); if (parse_int(v, &c->count) || c->count < 1) return cpt_errf(err, "--count %s: a positive integer", v); }
        else if (!strcmp(a, "--requeue")) { NEXT(); c->requeue = v; }
        else if (!strcmp(a, "--drop")) { NEXT(); c->drop = v; }
        else if (a[0] == '-' && a[1]) return cpt_errf(err, "unknown option %s", a);
        else if (positional == 0) { c->stream = a; positional++; }
        else if (positional == 1) { if (parse_int(a, &c->n) || c->n < 1) return cpt_errf(err, "N = %s: a positive integer", a); positional++; }
        else return cpt_errf(err, "unexpected argument %s", a);
#undef NEXT
    }
    return 0;
}

static cpt_queue *connect_queue(const cli *c, char *shown, size_t shown_cap, cpt_err *err) {
    cpt_queue_conn conn;
    memset(&conn, 0, sizeof conn);
    if (c->url) {
        cpt_redis_url u;
        if (cpt_redis_parse_url(c->url, &u, err)) return NULL;
        int has_pw = u.password[0] != 0;
        explicit_bzero(&u, sizeof u);
        if (has_pw) {
            cpt_errf(err, "--url carries a password, which would show in ps and shell history; put it in a file "
                          "(chmod 600) and pass --password-file FILE");
            return NULL;
        }
        snprintf(conn.url, sizeof conn.url, "%s", c->url);
        if (c->password_file) snprintf(conn.password_file, sizeof conn.password_file, "%s", c->password_file);
        if (c->tls_ca) snprintf(conn.tls_ca, sizeof conn.tls_ca, "%s", c->tls_ca);
    } else {
        char dir[2048];
        if (cpt_run_choose("cpt-queue", c->run_dir, c->job, dir, sizeof dir, err)) {
            cpt_err_prefix(err, "no queue to look at (or pass --url URL)");
            return NULL;
        }
        if (cpt_queue_conn_from_run_dir(dir, &conn, err)) return NULL;
        if (c->password_file) snprintf(conn.password_file, sizeof conn.password_file, "%s", c->password_file);
    }
    if (c->name) snprintf(conn.run, sizeof conn.run, "%s", c->name);
    cpt_redis_url_redacted(conn.url, shown, shown_cap);
    if (!conn.run[0]) {
        cpt_redis_opts ro = {.url = conn.url, .password_file = conn.password_file[0] ? conn.password_file : NULL,
                             .tls_ca = conn.tls_ca, .reconnect_ms = 2000};
        cpt_redis *r = cpt_redis_open(&ro, err);
        if (!r) return NULL;
        char names[16][CPT_RUN_ID_MAX];
        int n = cpt_queue_discover_runs(r, names, 16, err);
        cpt_redis_close(r);
        if (n < 0) return NULL;
        if (n == 0) { cpt_errf(err, "no cpt:* keys on %s: has the run started?", shown); return NULL; }
        if (n > 1) {
            char list[1024] = "";
            for (int i = 0; i < n; i++) {
                strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, names[i], sizeof list - strlen(list) - 1);
            }
            cpt_errf(err, "%s holds several runs (%s): pass --name RUN", shown, list);
            return NULL;
        }
        snprintf(conn.run, sizeof conn.run, "%s", names[0]);
    }
    cpt_queue_opts o = {.url = conn.url, .password_file = conn.password_file[0] ? conn.password_file : NULL,
                        .tls_ca = conn.tls_ca[0] ? conn.tls_ca : NULL, .run = conn.run, .reconnect_ms = 5000};
    return cpt_queue_open(&o, err);
}

/* ---- stats ---- */

static int cmd_stats(cpt_queue *q, const cli *c, const char *shown, cpt_err *err) {
    cpt_queue_snapshot *prev = calloc(1, sizeof *prev), *cur = calloc(1, sizeof *cur);
    int rc = -1;
    if (!prev || !cur) { cpt_errf(err, "out of memory"); goto out; }
    prev->gone_after_s = cur->gone_after_s = c->gone_after;
    if (cpt_queue_snapshot_take(q, prev, err)) goto out;
    if (c->prune_gone) {
        int n = cpt_queue_prune_gone(q, prev, err);
        if (n < 0) goto out;
        fprintf(stderr, "cpt-queue: removed %d gone worker%s from %s\n", n, n == 1 ? "" : "s",
                cpt_queue_key(q, CPT_HASH_WORKERS));
        if (cpt_queue_snapshot_take(q, prev, err)) goto out;
    }
    int tty = isatty(STDOUT_FILENO);
    for (int round = 0;; round++) {
        double wait = c->watch > 0 ? c->watch : c->window;
        if (wait > 0) usleep((useconds_t)(wait * 1e6));
        if (wait > 0 || c->watch > 0) {
            if (cpt_queue_snapshot_take(q, cur, err)) goto out;
            cpt_queue_snapshot_rates(cur, prev);
        } else {
            *cur = *prev;
        }
        if (c->json) {
            cpt_queue_snapshot_json(stdout, cur);
        } else {
            if (c->watch > 0 && tty) fputs("\033[H\033[2J", stdout); /* redraw in place */
            else if (round) fputs("\n", stdout);
            cpt_queue_snapshot_print(stdout, cur, shown);
        }
        fflush(stdout);
        if (c->watch <= 0 || (c->count && round + 1 >= c->count)) break;
        cpt_queue_snapshot *t = prev;
        prev = cur;
        cur = t;
    }
    rc = 0;
out:
    free(prev);
    free(cur);
    return rc;
}

/* ---- peek ---- */

static void print_tokens(const int32_t *t, uint32_t n) {
    printf("[");
    for (uint32_t i = 0; i < n && i < 8; i++) printf("%s%d", i ? " " : "", t[i]);
    printf("%s]", n > 8 ? " ..." : "");
}

static void print_text(const char *s, size_t max) {
    putchar('"');
    size_t i = 0;
    for (; s[i] && i < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch == '\n') printf("\\n");
        else if (ch < 0x20 || ch == 0x7f) printf("\\x%02x", ch);
        else putchar(ch);
    }
    printf("%s\"", s[i] ? "..." : "");
}

static void print_prompt(const cpt_prompt_group *m) {
    const cpt_sampling *s = &m->sampling;
    printf("  group (%llu, %llu)  run %s  prompt %u tokens ", (unsigned long long)m->id.epoch,
           (unsigned long long)m->id.index, m->run, m->n_prompt);
    print_tokens(m->prompt, m->n_prompt);
    printf("\n  n %u  temperature %g  top_p %g  top_k %d  min_p %g  max_new_tokens %u  seed %llu\n", m->n_samples,
           s->temperature, s->top_p, s->top_k, s->min_p, s->max_new_tokens, (unsigned long long)s->seed);
    printf("  stop ids ");
    print_tokens(s->stop_ids, s->n_stop_ids);
    printf("  stop strings [");
    for (uint32_t i = 0; i < s->n_stop_strs; i++) {
        if (i) printf(", ");
        print_text(s->stop_strs[i], 40);
    }
    printf("]  min_version %llu\n", (unsigned long long)m->min_version);
    if (m->extra) {
        printf("  extra ");
        print_text(m->extra, 160);
        printf("\n");
    }
}

static void print_group(const cpt_rollout_group *m) {
    printf("  group (%llu, %llu)  run %s  weight version %llu  worker %s  gen %.2f s  queued %.2f s\n",
           (unsigned long long)m->id.epoch, (unsigned long long)m->id.index, m->run,
           (unsigned long long)m->weight_version, m->worker, m->timings.gen_s, m->timings.queue_s);
    printf("  prompt %u tokens ", m->n_prompt);
    print_tokens(m->prompt, m->n_prompt);
    printf("\n");
    for (uint32_t c = 0; c < m->n_completions; c++) {
        const cpt_completion *k = &m->completions[c];
        double sum = 0;
        for (uint32_t i = 0; i < k->n_tokens; i++) sum += k->logprobs[i];
        printf("  #%-3u %6u tokens  %-6s  mean logprob %8.4f", c, k->n_tokens, cpt_finish_name(k->finish),
               k->n_tokens ? sum / k->n_tokens : 0.0);
        if (m->has_rewards) {
            printf("  reward %8.4f", m->rewards[c]);
            for (uint32_t p = 0; p < m->n_parts; p++)
                printf("  %s %.4f", m->part_names[p], m->part_values[(size_t)p * m->n_completions + c]);
            if (k->teacher_logprobs) printf("  (teacher logprobs)");
        }
        printf("  ");
        print_tokens(k->tokens, k->n_tokens);
        printf("\n");
    }
    if (m->extra) {
        printf("  extra ");
        print_text(m->extra, 160);
        printf("\n");
    }
}

static redisReply *entry_field(redisReply *fields, const char *name) {
    for (size_t i = 0; fields && fields->type == REDIS_REPLY_ARRAY && i + 1 < fields->elements; i += 2)
        if (!strcmp(fields->element[i]->str, name)) return fields->element[i + 1];
    return NULL;
}

static void print_dead(redisReply *fields) {
    redisReply *from = entry_field(fields, "from"), *id = entry_field(fields, "id"), *group = entry_field(fields, "group"),
               *reason = entry_field(fields, "reason"), *m = entry_field(fields, "m");
    printf("  from %s %s (group %s), %zu bytes\n  reason: %s\n", from ? from->str : "?", id ? id->str : "?",
           group ? group->str : "?", m ? m->len : 0, reason ? reason->str : "?");
    cpt_msg_header h;
    cpt_err e;
    if (m && cpt_msg_peek_header(m->str, m->len, &h, &e) == 0) {
        printf("  header: schema %lld, type %s, run %s", (long long)h.schema, cpt_msg_type_name(h.type), h.run);
        if (h.has_id) printf(", group (%llu, %llu)", (unsigned long long)h.id.epoch, (unsigned long long)h.id.index);
        printf("\n");
    }
}

static void print_message(cpt_stream s, const char *data, size_t len) {
    cpt_err e;
    if (s == CPT_STREAM_PROMPTS) {
        cpt_prompt_group m;
        if (cpt_prompt_group_decode(data, len, &m, &e)) { printf("  undecodable (%zu bytes): %s\n", len, e.msg); return; }
        print_prompt(&m);
        cpt_prompt_group_free(&m);
    } else {
        cpt_rollout_group m;
        if (cpt_rollout_group_decode(data, len, cpt_stream_msg_type(s), &m, &e)) {
            printf("  undecodable (%zu bytes): %s\n", len, e.msg);
            return;
        }
        print_group(&m);
        cpt_rollout_group_free(&m);
    }
}

static int peek_hash(cpt_queue *q, cpt_stream s, cpt_err *err) {
    if (s == CPT_HASH_WEIGHTS) {
        cpt_weights_msg w;
        int rc = cpt_queue_get_weights(q, &w, err);
        if (rc < 0) return -1;
        if (!rc) { printf("%s: no weights announced yet\n", cpt_queue_key(q, s)); return 0; }
        printf("%s: version %llu  transport %s  location %s  bytes %llu  checksum %s  membership epoch %llu\n",
               cpt_queue_key(q, s), (unsigned long long)w.version, w.transport, w.location,
               (unsigned long long)w.bytes, w.checksum, (unsigned long long)w.membership_epoch);
        return 0;
    }
    if (s == CPT_HASH_CONTROL) {
        cpt_control_msg c;
        int rc = cpt_queue_get_control(q, &c, err);
        if (rc < 0) return -1;
        if (!rc) { printf("%s: empty\n", cpt_queue_key(q, s)); return 0; }
        printf("%s: state %s  desired", cpt_queue_key(q, s), c.state);
        for (uint32_t i = 0; i < c.n_roles; i++) printf("  %s=%u", c.roles[i].role, c.roles[i].count);
        printf("\n");
        return 0;
    }
    cpt_queue_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return cpt_errf(err, "out of memory");
    int rc = cpt_queue_snapshot_take(q, snap, err);
    if (!rc) {
        printf("%s: %d workers\n", cpt_queue_key(q, s), snap->n_workers);
        for (int w = 0; w < snap->n_workers; w++) {
            const cpt_heartbeat_msg *h = &snap->workers[w].hb;
            if (!snap->workers[w].ok) printf("  %s: heartbeat does not decode\n", h->worker);
            else
                printf("  %s  role %s  host %s  version %llu  %.1f tok/s  occupancy %.2f  seen %.1f s ago%s\n",
                       h->worker, h->role, h->host, (unsigned long long)h->version, h->tokens_per_s, h->occupancy,
                       snap->workers[w].age_s, snap->workers[w].gone ? " (gone)" : "");
        }
    }
    free(snap);
    return rc;
}

static int cmd_peek(cpt_queue *q, const cli *c, cpt_err *err) {
    if (!c->stream) return cpt_errf(err, "peek needs a STREAM (prompts|rollouts|scored|dead|weights|control|workers)");
    int s = cpt_stream_from_name(c->stream);
    if (s < 0) return cpt_errf(err, "unknown stream \"%s\": prompts|rollouts|scored|dead|weights|control|workers", c->stream);
    if (s >= CPT_HASH_WEIGHTS) return peek_hash(q, (cpt_stream)s, err);
    const char *key = cpt_queue_key(q, (cpt_stream)s);
    char cnt[16];
    snprintf(cnt, sizeof cnt, "%d", c->n);
    const char *argv[] = {"XRANGE", key, "-", "+", "COUNT", cnt};
    redisReply *r = cpt_redis_command(q->redis, 6, argv, NULL, key, 0, err);
    if (!r) return -1;
    const char *lv[] = {"XLEN", key};
    long long len = 0;
    if (cpt_redis_integer(q->redis, 2, lv, key, &len, err)) { freeReplyObject(r); return -1; }
    printf("%s: %lld entries, the first %zu\n", key, len, r->elements);
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *e = r->element[i];
        printf("%s\n", e->element[0]->str);
        if (s == CPT_STREAM_DEAD) { print_dead(e->element[1]); continue; }
        redisReply *m = entry_field(e->element[1], "m");
        if (!m) printf("  entry has no \"m\" field\n");
        else print_message((cpt_stream)s, m->str, m->len);
    }
    freeReplyObject(r);
    return 0;
}

/* ---- dead ---- */

static int cmd_dead(cpt_queue *q, const cli *c, cpt_err *err) {
    const char *dead = cpt_queue_key(q, CPT_STREAM_DEAD);
    if (c->requeue && c->drop) return cpt_errf(err, "pass --requeue or --drop, not both");
    if (c->drop) {
        if (cpt_queue_dead_drop(q, c->drop, err)) return -1;
        printf("dropped %s %s\n", dead, c->drop);
        return 0;
    }
    if (c->requeue) {
        char key[CPT_RUN_ID_MAX + 32], id[64];
        if (cpt_queue_dead_requeue(q, c->requeue, key, sizeof key, id, sizeof id, err)) return -1;
        printf("requeued %s %s to %s as %s\n", dead, c->requeue, key, id);
        return 0;
    }
    cli p = *c;
    p.stream = "dead";
    p.n = c->count ? c->count : 100;
    return cmd_peek(q, &p, err);
}

int cmd_queue(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "stats") && strcmp(sub, "peek") && strcmp(sub, "dead")) {
        fprintf(stderr, "cpt-queue: unknown subcommand \"%s\"\n%s", sub, USAGE);
        return 2;
    }
    cli c;
    cpt_err err = {{0}};
    if (parse_args(argc, argv, &c, &err)) {
        fprintf(stderr, "cpt-queue %s: %s\n%s", sub, err.msg, USAGE);
        return 2;
    }
    if (strcmp(sub, "peek") && c.stream) {
        fprintf(stderr, "cpt-queue %s: unexpected argument %s\n", sub, c.stream);
        return 2;
    }
    char shown[CPT_REDIS_URL_MAX];
    cpt_queue *q = connect_queue(&c, shown, sizeof shown, &err);
    if (!q) {
        fprintf(stderr, "cpt-queue %s: %s\n", sub, err.msg);
        return 1;
    }
    int rc = !strcmp(sub, "stats") ? cmd_stats(q, &c, shown, &err) : !strcmp(sub, "peek") ? cmd_peek(q, &c, &err)
                                                                                           : cmd_dead(q, &c, &err);
    cpt_queue_close(q);
    if (rc) {
        fprintf(stderr, "cpt-queue %s: %s\n", sub, err.msg);
        return 1;
    }
    return 0;
}
