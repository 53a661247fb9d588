/* cpt-queue: see scheduler/commands.h. */
#include "scheduler/commands.h"

int main(int argc, char **argv) { return cpt_run_command("cpt-queue", cmd_queue, argc, argv); }
