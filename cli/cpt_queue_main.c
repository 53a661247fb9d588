/* cpt-queue: see cli/commands.h. */
#include "cli/commands.h"

int main(int argc, char **argv) { return cmd_queue(argc, argv); }
