/* cpt preflight CONFIG [k=v ...] [--slurm]: checks a run before it takes resources (scheduler/preflight.h).
 * Resources are checked against the Slurm allocation when run inside one (SLURM_JOB_ID) or with --slurm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "scheduler/preflight.h"
#include "scheduler/run_dir.h"

int cmd_preflight(int argc, char **argv) {
    const char *config = NULL;
    int slurm = getenv("SLURM_JOB_ID") != NULL, first_override = argc;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: cpt preflight CONFIG [section.key=value ...] [--slurm]\n");
            return 0;
        } else if (!strcmp(argv[i], "--slurm")) {
            slurm = 1;
        } else if (strchr(argv[i], '=') || config) {
            first_override = i;
            break;
        } else {
            config = argv[i];
        }
    }
    if (!config) {
        fprintf(stderr, "usage: cpt preflight CONFIG [section.key=value ...] [--slurm]\n");
        return 2;
    }
    /* --slurm may also come after the overrides. */
    char **ov = calloc((size_t)(argc - first_override) + 1, sizeof *ov);
    if (!ov) return 1;
    int nov = 0;
    for (int i = first_override; i < argc; i++) {
        if (!strcmp(argv[i], "--slurm")) slurm = 1;
        else ov[nov++] = argv[i];
    }
    cpt_err err;
    cpt_err_clear(&err);
    printf("preflight: %s\n", config);
    cpt_config *cfg = cpt_config_load(config, nov, ov, &err);
    free(ov);
    if (!cfg) {
        printf("  FAIL  config     %s\npreflight: 1 problem\n", err.msg);
        return 1;
    }
    char bin[2048];
    if (cpt_find_bin_dir(bin, sizeof bin, &err) != 0) {
        cpt_config_free(cfg);
        cpt_die(&err);
    }
    cpt_preflight p = {.cfg = cfg, .bin_dir = bin, .slurm = slurm, .out = stdout};
    int problems = cpt_preflight_run(&p);
    cpt_config_free(cfg);
    if (problems) {
        printf("preflight: %d problem%s\n", problems, problems == 1 ? "" : "s");
        return 1;
    }
    printf("preflight: ok%s\n", p.warnings ? " (with warnings)" : "");
    return 0;
}
