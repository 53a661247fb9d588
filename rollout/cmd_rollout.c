/* cpt-rollout CONFIG [--worker-id ID] [section.key=value ...]: the rollout worker (rollout/worker.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "rollout/worker.h"
#include "scheduler/commands.h"

/* SIGTERM / SIGINT / SIGUSR1: drain. A handler can only reach a static flag. */
static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { stop_requested = sig; }

static void usage(FILE *f) {
    fprintf(f, "usage: cpt-rollout CONFIG [--worker-id ID] [section.key=value ...]\n"
               "  Generates completions for the run's prompt groups (queue.url, else $CPT_RUN/queue.json) and\n"
               "  forwards rollout groups. SIGTERM drains: groups in flight are finished, then it exits 0.\n");
}

int cmd_rollout(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    char def_id[64];
    snprintf(def_id, sizeof def_id, "rollout-%ld", (long)getpid());
    const char *id = def_id;
    char **ov = calloc((size_t)argc, sizeof *ov);
    int n_ov = 0;
    if (!ov) return 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--worker-id")) {
            if (i + 1 >= argc || !*argv[i + 1] || strlen(argv[i + 1]) >= 128) {
                fprintf(stderr, "cpt-rollout: --worker-id needs a value (1..127 characters)\n");
                free(ov);
                return 2;
            }
            id = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "cpt-rollout: unknown option %s\n", argv[i]);
            usage(stderr);
            free(ov);
            return 2;
        } else {
            ov[n_ov++] = argv[i];
        }
    }
    cpt_err err;
    cpt_config *cfg = cpt_config_load(argv[1], n_ov, ov, &err);
    free(ov);
    if (!cfg) {
        fprintf(stderr, "cpt-rollout: %s\n", err.msg);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    int rc = cpt_rollout_worker_run(cfg, id, &stop_requested, NULL, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "cpt-rollout %s: %s\n", id, err.msg);
    cpt_config_free(cfg);
    return rc;
}
