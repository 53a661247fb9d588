/* The env worker (cpt-env): answers the run's tool calls (docs/env.md).
 *
 *   XREADGROUP cpt:RUN:env (consumer group "env") -> decode the env request (queue/env_msg.h) -> cpt_env_answer in
 *   the sandbox (reward/env.h) -> in one MULTI/EXEC: XADD the env reply to cpt:RUN:env:WORKER (MAXLEN ~ 10000),
 *   XACK the request and XDEL it (the env stream holds only the requests in flight).
 *
 * A request that does not decode, belongs to another run, or was delivered more than queue.max_deliveries times
 * without an ack goes to the dead stream with the reason, and is acked and deleted. Requests left pending by a dead
 * env worker for queue.claim_idle_ms (at once when they predate this launch attempt) are claimed with XAUTOCLAIM. A
 * tool that fails is no error of the worker: the reply carries ok = false and the observation says why. Heartbeats
 * go to the workers hash (role "env") every env.heartbeat_s. On stop (SIGTERM, SIGINT, SIGUSR1, SIGUSR2) the call in
 * hand is answered (it lasts at most env.timeout_ms), no more are taken, and the worker returns 0. */
#ifndef CPT_REWARD_ENV_WORKER_H
#define CPT_REWARD_ENV_WORKER_H

#include <signal.h>

#include "core/config.h"
#include "core/error.h"

typedef struct cpt_env_worker_stats {
    long answered; /* replies sent */
    long failed;   /* of those, with ok = false */
    long dead;     /* requests dead-lettered */
    long claimed;  /* requests taken over from another consumer */
} cpt_env_worker_stats;

/* The worker loop on the run of cfg (queue.url, else RUN_DIR/queue.json with RUN_DIR = $CPT_RUN or run.dir; run id
 * = run.name) until *stop. Returns 0 after a drain, -1 on a fatal error (no queue, no environment). */
int cpt_env_worker_run(const cpt_config *cfg, const char *worker_id, volatile sig_atomic_t *stop,
                       cpt_env_worker_stats *stats, cpt_err *err);

#endif
