/* cpt-rollout: see scheduler/commands.h. */
#include <sys/stat.h>

#include "scheduler/commands.h"

int main(int argc, char **argv) {
    umask(077); /* what a role writes into the run directory is for the run's owner only */
    return cpt_run_command("cpt-rollout", cmd_rollout, argc, argv);
}
