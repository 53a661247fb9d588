#include "trainer/online_idle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "queue/stats.h"

#define IDLE_MAX_WORKERS 32 /* named in the warning; more are counted */

/* Appends to out at *len, keeping it terminated and within cap. */
static void put(char *out, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *out, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

void cpt_online_idle_workers(cpt_queue *q, uint64_t version, char *out, size_t cap) {
    size_t len = 0;
    if (!cap) return;
    out[0] = '\0';
    cpt_stats_worker *w = calloc(IDLE_MAX_WORKERS, sizeof *w);
    if (!w) {
        put(out, cap, &len, "workers not read: out of memory");
        return;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    cpt_err err;
    int n = cpt_queue_workers_take(q, tv.tv_sec + tv.tv_usec / 1e6, CPT_STATS_GONE_AFTER_S, w, IDLE_MAX_WORKERS, &err);
    if (n < 0) {
        put(out, cap, &len, "workers not read: %s", err.msg);
    } else if (n == 0) {
        put(out, cap, &len, "no worker has sent a heartbeat: are the rollout and reward workers running?");
    } else {
        int behind = 0;
        put(out, cap, &len, "workers:");
        for (int i = 0; i < n; i++) {
            const cpt_heartbeat_msg *h = &w[i].hb;
            put(out, cap, &len, "%s %s", i ? "," : "", h->worker);
            if (!w[i].ok) {
                put(out, cap, &len, " (heartbeat unreadable)");
            } else if (w[i].gone) {
                put(out, cap, &len, " gone (no heartbeat for %.0f s)", w[i].age_s);
            } else if (!strcmp(h->role, "rollout")) {
                put(out, cap, &len, " holds weights v%llu (heartbeat %.0f s ago)", (unsigned long long)h->version,
                    w[i].age_s);
                behind += h->version != version;
            } else {
                put(out, cap, &len, " (%s, heartbeat %.0f s ago)", h->role, w[i].age_s);
            }
        }
        if (n == IDLE_MAX_WORKERS) put(out, cap, &len, ", and maybe more");
        if (behind)
            put(out, cap, &len, "; %d rollout worker%s not on v%llu: see %s log for why it did not load",
                behind, behind > 1 ? "s" : "", (unsigned long long)version, behind > 1 ? "their" : "its");
    }
    free(w);
}
