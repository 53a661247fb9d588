/* The command line both queue workers take, `cpt-ROLE CONFIG [--worker-id ID] [section.key=value ...]`, and the
 * signals that drain them (SIGTERM, SIGINT, SIGUSR1: finish the work in hand, take no more, exit 0; SIGUSR2: the
 * job ends in seconds, as for a preempted satellite: hand back what is held unfinished, at once, and exit 0).
 * cpt-rollout and cpt-reward differ only in what they run. */
#ifndef CPT_CLI_WORKER_ARGS_H
#define CPT_CLI_WORKER_ARGS_H

#include <signal.h>
#include <stdio.h>

#include "core/config.h"

typedef struct cpt_worker_args {
    cpt_config *cfg; /* CONFIG with the overrides applied; the caller frees it */
    const char *id;  /* --worker-id, else def_id */
    char def_id[64]; /* "ROLE-PID" */
    volatile sig_atomic_t *stop; /* the drain signal's number once one arrived, else 0 */
} cpt_worker_args;

/* Parses argv for prog ("cpt-rollout") whose default worker id is "ROLE-PID", loads the config and then installs the
 * drain handler (a signal handler can only reach a static flag: this module's, which a->stop points at). Returns -1
 * when the worker should run (a filled), else the exit status: 0 after --help, 2 for a usage error, 1 when the
 * config does not load (the message is printed, prefixed with prog). */
int cpt_worker_args_parse(cpt_worker_args *a, const char *prog, const char *role, void (*usage)(FILE *), int argc,
                          char **argv);

#endif
