/* Rank bootstrap for collective groups (NCCL data parallel, weight sync): learn this process's rank and the group
 * size, and share one opaque blob (an ncclUniqueId, 128 bytes) from rank 0 to every rank.
 *
 * Two transports:
 *  - pmix: inside `srun --mpi=pmix`: PMIx_Init, rank 0 Puts the blob, Commit, Fence (collect data), every rank
 *    Gets it from rank 0. Selected when the PMIx environment is present (PMIX_RANK / PMIX_NAMESPACE).
 *  - file: outside srun (local runs, tests): ranks come from CPT_RANK / CPT_WORLD_SIZE and rank 0 writes the blob
 *    atomically to a shared path that the others poll for.
 * PMIx_Init failing outside srun is reported as such, with the fix ("run under srun --mpi=pmix or set
 * CPT_BOOTSTRAP=file"). */
#ifndef CPT_CORE_BOOTSTRAP_H
#define CPT_CORE_BOOTSTRAP_H

#include <stddef.h>

#include "core/error.h"

typedef enum { CPT_BOOT_PMIX = 0, CPT_BOOT_FILE } cpt_boot_kind;

typedef struct cpt_bootstrap {
    cpt_boot_kind kind;
    int rank, size;
    char file_dir[4096]; /* file transport: where blobs are exchanged */
    double timeout_s;    /* file transport: how long ranks wait for rank 0 */
    void *pmix_proc;     /* pmix transport: this process's pmix_proc_t (opaque here) */
} cpt_bootstrap;

/* kind_name: "auto" (pmix under srun, else file), "pmix" or "file". file_dir is used by the file transport. */
int cpt_boot_init(cpt_bootstrap *b, const char *kind_name, const char *file_dir, cpt_err *err);
/* Rank 0's blob reaches every rank under key (distinct keys for distinct exchanges). len is the same on all. */
int cpt_boot_share(cpt_bootstrap *b, const char *key, void *blob, size_t len, cpt_err *err);
/* Every rank waits until all arrive (PMIx_Fence, or files). */
int cpt_boot_barrier(cpt_bootstrap *b, const char *key, cpt_err *err);
void cpt_boot_finalize(cpt_bootstrap *b);
/* An integer environment variable (ranks, sizes, local ranks); fallback when unset, empty or not a number. */
int cpt_boot_env_int(const char *name, int fallback);

#endif
