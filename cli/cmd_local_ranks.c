/* cpt local-ranks N [--clear DIR] -- PROGRAM ARGS...: see scheduler/local_ranks.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "scheduler/local_ranks.h"

int cmd_local_ranks(int argc, char **argv) {
    cpt_local_ranks_opts o = {0};
    int i = 1;
    char *end = NULL;
    if (i < argc) o.n = (int)strtol(argv[i++], &end, 10);
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "--clear") && i + 1 < argc) o.clear_dir = argv[++i];
        else break;
    }
    if (!end || *end || o.n < 1 || i >= argc || strcmp(argv[i], "--") || i + 1 >= argc) {
        fprintf(stderr, "usage: cpt local-ranks N [--clear DIR] -- PROGRAM ARGS...\n");
        return 2;
    }
    o.argv = argv + i + 1;
    cpt_err err;
    int rc = cpt_local_ranks_run(&o, &err);
    if (rc < 0) cpt_die(&err);
    return rc;
}
