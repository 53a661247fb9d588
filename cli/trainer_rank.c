#include "cli/trainer_rank.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "core/bootstrap.h"

static int env_int(const char *const *names, int fallback) {
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return cpt_boot_env_int(names[i], fallback);
    }
    return fallback;
}

void cpt_cli_trainer_rank_setup(void) {
    const char *run = getenv("CPT_RUN"), *role = getenv("CPT_ROLE");
    if (!run || !*run || !role || !*role) return;
    static const char *const sizes[] = {"OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "CPT_WORLD_SIZE", NULL};
    static const char *const ranks[] = {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "CPT_RANK", NULL};
    int world = env_int(sizes, 1), rank = env_int(ranks, 0);
    if (world <= 1) return;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) perror("cpt: prctl(PR_SET_PDEATHSIG)");
    if (rank <= 0) return;
    char path[4300];
    snprintf(path, sizeof path, "%s/logs/%s.rank%d.log", run, role, rank);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "cpt: rank %d: cannot open %s; writing to the shared log\n", rank, path);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
}
