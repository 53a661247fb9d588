#include "cli/stop_signals.h"

#include <signal.h>
#include <string.h>

void cpt_cli_catch_stop_signals(void (*handler)(int), int with_hup) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    if (with_hup) sigaction(SIGHUP, &sa, NULL);
}
