/* cpt-scale: see scheduler/commands.h. */
#include "scheduler/commands.h"

int main(int argc, char **argv) { return cpt_run_command("cpt-scale", cmd_scale, argc, argv); }
