#include "scheduler/commands.h"

#include <stdio.h>

int cpt_run_command(const char *name, int (*fn)(int, char **), int argc, char **argv) {
    if (!fn) {
        fprintf(stderr, "cpt: the '%s' command is not part of this build\n", name);
        return 2;
    }
    return fn(argc, argv);
}
