/* cpt-train: see cli/commands.h. */
#include "cli/commands.h"

int main(int argc, char **argv) { return cmd_train(argc, argv); }
