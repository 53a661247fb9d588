/* cpt-env: see cli/commands.h. */
#include <sys/stat.h>

#include "cli/commands.h"

int main(int argc, char **argv) {
    umask(077); /* what a role writes into the run directory is for the run's owner only */
    return cmd_env(argc, argv);
}
