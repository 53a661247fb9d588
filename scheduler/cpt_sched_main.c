/* cpt-sched: see scheduler/commands.h. */
#include "scheduler/commands.h"

int main(int argc, char **argv) { return cpt_run_command("cpt-sched", cmd_sched, argc, argv); }
