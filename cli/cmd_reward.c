/* cpt-reward CONFIG [--worker-id ID] [section.key=value ...]: the reward worker (reward/worker.h); the command line and
 * its drain signals are cli/worker_args.h's. */
#include <stdio.h>

#include "cli/commands.h"
#include "cli/worker_args.h"
#include "core/config.h"
#include "reward/worker.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cpt-reward CONFIG [--worker-id ID] [section.key=value ...]\n"
               "  Scores rollout groups of the run (queue.url, else $CPT_RUN/queue.json) and forwards scored groups.\n"
               "  SIGTERM drains: the group in hand is finished, then the worker exits 0.\n");
}

int cmd_reward(int argc, char **argv) {
    cpt_worker_args a;
    int rc = cpt_worker_args_parse(&a, "cpt-reward", "reward", usage, argc, argv);
    if (rc >= 0) return rc;
    cpt_err err;
    rc = cpt_reward_worker_run(a.cfg, a.id, a.stop, NULL, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "cpt-reward: %s\n", err.msg);
    cpt_config_free(a.cfg);
    return rc;
}
