/* cpt run CONFIG [k=v ...] | cpt run --resume RUN_DIR [--from-scratch] [k=v ...]: a whole job on this machine (see
 * launcher.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/stop_signals.h"
#include "cli/config_keys.h"
#include "scheduler/launcher.h"

static volatile sig_atomic_t stop_requested = 0;

static void on_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

int cmd_run(int argc, char **argv) {
    const char *config = NULL, *resume = NULL;
    int first_override = argc, from_scratch = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--resume") && i + 1 < argc) {
            resume = argv[++i];
        } else if (!strcmp(argv[i], "--from-scratch")) {
            from_scratch = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: cpt run CONFIG [section.key=value ...]\n"
                   "       cpt run --resume RUN_DIR [--from-scratch] [section.key=value ...]\n"
                   "  --resume refuses a run directory with no valid checkpoint unless --from-scratch is given.\n");
            return 0;
        } else if (strchr(argv[i], '=') || config || resume) {
            first_override = i;
            break;
        } else {
            config = argv[i];
        }
    }
    if ((!config && !resume) || (from_scratch && !resume)) {
        fprintf(stderr, "usage: cpt run CONFIG [section.key=value ...] | cpt run --resume RUN_DIR [--from-scratch]\n");
        return 2;
    }
    /* The run directory holds the data, the weights and the queue's AOF: only its owner reads them. Every role
     * and the redis-server inherit this. */
    umask(077);
    cpt_cli_catch_stop_signals(on_stop, 1);
    cpt_launcher L;
    cpt_err err;
    cpt_err_clear(&err);
    if (cpt_launcher_prepare(&L, CPT_EXEC_LOCAL, &cpt_config_table, config, argc - first_override, argv + first_override, resume,
                             from_scratch, &err) != 0) {
        cpt_launcher_free(&L);
        cpt_die(&err);
    }
    L.stop_flag = &stop_requested;
    int status = cpt_launcher_run(&L, &err);
    if (status == 0) fprintf(stderr, "cpt: run finished: %s\n", L.run_dir);
    else if (status == CPT_EXIT_STOPPED) fprintf(stderr, "cpt: run stopped; continue it with `cpt run --resume %s`\n", L.run_dir);
    else fprintf(stderr, "cpt: %s\n", err.msg);
    cpt_launcher_free(&L);
    return status;
}
