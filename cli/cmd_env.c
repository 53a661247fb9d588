/* cpt-env CONFIG [--worker-id ID] [section.key=value ...]: the env worker (reward/env_worker.h), which answers the
 * run's tool calls; the command line and its drain signals are cli/worker_args.h's. */
#include <stdio.h>

#include "cli/commands.h"
#include "cli/worker_args.h"
#include "core/config.h"
#include "reward/env_worker.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cpt-env CONFIG [--worker-id ID] [section.key=value ...]\n"
               "  Answers the run's tool calls (env.type: calculator, countdown or plugin) from the stream\n"
               "  cpt:RUN:env (queue.url, else $CPT_RUN/queue.json) and replies on cpt:RUN:env:WORKER.\n"
               "  SIGTERM drains: the call in hand is answered, then the worker exits 0.\n");
}

int cmd_env(int argc, char **argv) {
    cpt_worker_args a;
    int rc = cpt_worker_args_parse(&a, "cpt-env", "env", usage, argc, argv);
    if (rc >= 0) return rc;
    cpt_err err;
    rc = cpt_env_worker_run(a.cfg, a.id, a.stop, NULL, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "cpt-env: %s\n", err.msg);
    cpt_config_free(a.cfg);
    return rc;
}
