/* cpt-reward: see scheduler/commands.h. */
#include "scheduler/commands.h"

int main(int argc, char **argv) { return cpt_run_command("cpt-reward", cmd_reward, argc, argv); }
