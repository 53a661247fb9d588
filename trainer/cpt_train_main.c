/* cpt-train: see scheduler/commands.h. */
#include "scheduler/commands.h"

int main(int argc, char **argv) { return cpt_run_command("cpt-train", cmd_train, argc, argv); }
