#include "trainer/online_idle.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/toml.h"
#include "queue/stats.h"

#define IDLE_MAX_WORKERS 32 /* named in the warning; more are counted */

static int describe(cpt_strbuf *b, const cpt_stats_worker *w, int n, uint64_t version) {
    int rc = 0, behind = 0;
    if (n == 0) return cpt_strbuf_printf(b, "no worker has sent a heartbeat: are the rollout and reward workers running?");
    rc |= cpt_strbuf_printf(b, "workers:");
    for (int i = 0; i < n; i++) {
        const cpt_heartbeat_msg *h = &w[i].hb;
        rc |= cpt_strbuf_printf(b, "%s %s", i ? "," : "", h->worker);
        if (!w[i].ok) {
            rc |= cpt_strbuf_printf(b, " (heartbeat unreadable)");
        } else if (w[i].gone) {
            rc |= cpt_strbuf_printf(b, " gone (no heartbeat for %.0f s)", w[i].age_s);
        } else if (!strcmp(h->role, "rollout")) {
            rc |= cpt_strbuf_printf(b, " holds weights v%llu (heartbeat %.0f s ago)", (unsigned long long)h->version,
                                    w[i].age_s);
            behind += h->version != version;
        } else {
            rc |= cpt_strbuf_printf(b, " (%s, heartbeat %.0f s ago)", h->role, w[i].age_s);
        }
    }
    if (n == IDLE_MAX_WORKERS) rc |= cpt_strbuf_printf(b, ", and maybe more");
    if (behind)
        rc |= cpt_strbuf_printf(b, "; %d rollout worker%s not on v%llu: see %s log for why it did not load", behind,
                                behind > 1 ? "s" : "", (unsigned long long)version, behind > 1 ? "their" : "its");
    return rc;
}

char *cpt_online_idle_workers(cpt_queue *q, uint64_t version) {
    cpt_strbuf b = {0};
    cpt_stats_worker *w = calloc(IDLE_MAX_WORKERS, sizeof *w);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    cpt_err err;
    int n = w ? cpt_queue_workers_take(q, tv.tv_sec + tv.tv_usec / 1e6, CPT_STATS_GONE_AFTER_S, w, IDLE_MAX_WORKERS,
                                       &err)
              : -1;
    int rc = n < 0 ? cpt_strbuf_printf(&b, "workers not read: %s", w ? err.msg : "out of memory")
                   : describe(&b, w, n, version);
    free(w);
    if (rc) {
        free(b.data);
        return NULL;
    }
    return b.data;
}
