#include "cli/worker_args.h"

#include "cli/stop_signals.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/config_keys.h"

/* The id names the worker in Redis (consumer name, workers hash), which bounds it. */
#define WORKER_ID_MAX 128

static volatile sig_atomic_t drain_requested;
static void on_drain(int sig) { drain_requested = sig; }

int cpt_worker_args_parse(cpt_worker_args *a, const char *prog, const char *role, void (*usage)(FILE *), int argc,
                          char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    snprintf(a->def_id, sizeof a->def_id, "%s-%ld", role, (long)getpid());
    a->id = a->def_id;
    a->cfg = NULL;
    a->stop = NULL;
    char **ov = calloc((size_t)argc, sizeof *ov);
    int n_ov = 0;
    if (!ov) return 1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--worker-id")) {
            if (i + 1 >= argc || !*argv[i + 1] || strlen(argv[i + 1]) >= WORKER_ID_MAX) {
                fprintf(stderr, "%s: --worker-id needs a value (1..%d characters)\n", prog, WORKER_ID_MAX - 1);
                free(ov);
                return 2;
            }
            a->id = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "%s: unknown option %s\n", prog, argv[i]);
            usage(stderr);
            free(ov);
            return 2;
        } else {
            ov[n_ov++] = argv[i];
        }
    }
    cpt_err err;
    a->cfg = cpt_config_load(argv[1], n_ov, ov, &err);
    free(ov);
    if (!a->cfg) {
        fprintf(stderr, "%s: %s\n", prog, err.msg);
        return 1;
    }
    cpt_cli_catch_stop_signals(on_drain, 0);
    struct sigaction sa; /* SIGUSR2: the job ends in seconds (a satellite preempted): hand back at once */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_drain;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
    a->stop = &drain_requested;
    return -1;
}
