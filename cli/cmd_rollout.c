/* cpt-rollout CONFIG [--worker-id ID] [section.key=value ...]: the rollout worker (rollout/worker.h); the command line
 * and its drain signals are cli/worker_args.h's. */
#include <stdio.h>

#include "cli/commands.h"
#include "cli/worker_args.h"
#include "core/config.h"
#include "rollout/worker.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cpt-rollout CONFIG [--worker-id ID] [section.key=value ...]\n"
               "  Generates completions for the run's prompt groups (queue.url, else $CPT_RUN/queue.json) and\n"
               "  forwards rollout groups. SIGTERM drains: groups in flight are finished, then it exits 0.\n"
               "  SIGUSR2 (the job ends in seconds): groups in flight are handed back to the other workers at once.\n");
}

int cmd_rollout(int argc, char **argv) {
    cpt_worker_args a;
    int rc = cpt_worker_args_parse(&a, "cpt-rollout", "rollout", usage, argc, argv);
    if (rc >= 0) return rc;
    cpt_err err;
    rc = cpt_rollout_worker_run(a.cfg, a.id, a.stop, NULL, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "cpt-rollout %s: %s\n", a.id, err.msg);
    cpt_config_free(a.cfg);
    return rc;
}
