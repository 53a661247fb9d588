/* cpt check-bootstrap: proves the rank bootstrap works where a job runs. Rank 0 draws a 128-byte blob (the size
 * of an ncclUniqueId) and shares it; every rank prints its rank, the group size and the blob's first bytes, so
 * `srun --mpi=pmix -n N cpt check-bootstrap` shows at a glance whether all ranks agree. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/bootstrap.h"

int cmd_check_bootstrap(int argc, char **argv) {
    const char *kind = "auto", *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kind") && i + 1 < argc) kind = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else {
            fprintf(stderr, "usage: cpt check-bootstrap [--kind auto|pmix|file] [--dir SHARED_DIR]\n");
            return 2;
        }
    }
    cpt_bootstrap b;
    cpt_err err;
    if (cpt_boot_init(&b, kind, dir, &err) != 0) cpt_die(&err);
    unsigned char blob[128];
    memset(blob, 0, sizeof blob);
    if (b.rank == 0) {
        /* Distinct per run: time and pid mixed through a small LCG. */
        unsigned long long x = (unsigned long long)time(NULL) * 6364136223846793005ULL ^ (unsigned long long)getpid();
        for (size_t i = 0; i < sizeof blob; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            blob[i] = (unsigned char)(x >> 56);
        }
    }
    if (cpt_boot_share(&b, "cpt-check-blob", blob, sizeof blob, &err) != 0) cpt_die(&err);
    if (cpt_boot_barrier(&b, "cpt-check-barrier", &err) != 0) cpt_die(&err);
    printf("rank %d/%d transport %s blob ", b.rank, b.size, b.kind == CPT_BOOT_PMIX ? "pmix" : "file");
    for (int i = 0; i < 8; i++) printf("%02x", blob[i]);
    printf("\n");
    fflush(stdout);
    cpt_boot_finalize(&b);
    return 0;
}
