/* The signals that ask a front end to stop in order: SIGINT, SIGTERM, SIGUSR1 (Slurm's warning before a
 * preemption) and, for the launchers, SIGHUP (a closed terminal stops the run instead of orphaning it). */
#ifndef CPT_CLI_STOP_SIGNALS_H
#define CPT_CLI_STOP_SIGNALS_H

/* Installs handler for those signals (with_hup: SIGHUP too), no flags, an empty mask. */
void cpt_cli_catch_stop_signals(void (*handler)(int), int with_hup);

#endif
