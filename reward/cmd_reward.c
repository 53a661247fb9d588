/* cpt-reward CONFIG [--worker-id ID] [section.key=value ...]: the reward worker (reward/worker.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "reward/worker.h"
#include "scheduler/commands.h"

/* SIGTERM / SIGINT / SIGUSR1: drain (finish the group in hand, take no more, exit 0). A handler can only reach a
 * static flag. */
static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { stop_requested = sig; }

static void usage(FILE *f) {
    fprintf(f, "usage: cpt-reward CONFIG [--worker-id ID] [section.key=value ...]\n"
               "  Scores rollout groups of the run (queue.url, else $CPT_RUN/queue.json) and forwards scored groups.\n"
               "  SIGTERM drains: the group in hand is finished, then the worker exits 0.\n");
}

int cmd_reward(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    char def_id[64];
    snprintf(def_id, sizeof def_id, "reward-%ld", (long)getpid());
    const char *id = def_id;
    char **ov = calloc((size_t)argc, sizeof *ov);
    int n_ov = 0;
    if (!ov) return 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--worker-id")) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "cpt-reward: --worker-id needs a value\n");
                free(ov);
                return 2;
            }
            id = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "cpt-reward: unknown option %s\n", argv[i]);
            usage(stderr);
            free(ov);
            return 2;
        } else {
            ov[n_ov++] = argv[i];
        }
    }
    if (strlen(id) >= 128) {
        fprintf(stderr, "cpt-reward: --worker-id is too long\n");
        free(ov);
        return 2;
    }
    cpt_err err;
    cpt_config *cfg = cpt_config_load(argv[1], n_ov, ov, &err);
    free(ov);
    if (!cfg) {
        fprintf(stderr, "cpt-reward: %s\n", err.msg);
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    int rc = cpt_reward_worker_run(cfg, id, &stop_requested, NULL, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "cpt-reward: %s\n", err.msg);
    cpt_config_free(cfg);
    return rc;
}
