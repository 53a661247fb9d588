/* What an ended satellite's worker held goes to the other workers at once (satellite.h, queue/release.h). */
#include <stdio.h>

#include "queue/release.h"
#include "scheduler/satellite.h"

void cpt_sat_release_ended(cpt_satellites *S, cpt_redis *r, const char *run, long long claim_idle_ms) {
    for (int i = 0; i < S->n_ended; i++) {
        /* rollout workers hold prompts (group "rollout"), reward workers rollouts (group "reward"), env workers
         * tool calls (group "env") */
        int role = S->ended_role[i];
        char key[512], workers[512];
        snprintf(key, sizeof key, "cpt:%s:%s", run, cpt_role_input(role));
        cpt_err err;
        cpt_err_clear(&err);
        long n = cpt_queue_release_consumer(r, key, cpt_role_group(role), S->ended[i], claim_idle_ms, &err);
        if (n < 0)
            fprintf(stderr, "cpt: handing %s's pending groups to the other workers: %s (they go after "
                            "queue.claim_idle_ms)\n", S->ended[i], err.msg);
        else if (n > 0)
            fprintf(stderr, "cpt: satellite %s held %ld group%s unfinished; handed to the other workers at once\n",
                    S->ended[i], n, n == 1 ? "" : "s");
        /* its heartbeat would stay listed until it counts as gone */
        snprintf(workers, sizeof workers, "cpt:%s:workers", run);
        const char *argv[] = {"HDEL", workers, S->ended[i]};
        redisReply *rep = cpt_redis_command(r, 3, argv, NULL, workers, 0, &err);
        if (rep) freeReplyObject(rep);
    }
    S->n_ended = 0;
}
