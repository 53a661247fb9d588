#include "core/bootstrap.h"

#include <errno.h>
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"

int cpt_boot_env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    if (!s || !*s) return fallback;
    char *end;
    long v = strtol(s, &end, 10);
    return *end ? fallback : (int)v;
}

static int pmix_init(cpt_bootstrap *b, cpt_err *err) {
    pmix_proc_t *me = calloc(1, sizeof *me);
    if (!me) return cpt_errf(err, "out of memory");
    pmix_status_t rc = PMIx_Init(me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        free(me);
        return cpt_errf(err, "PMIx_Init failed (%s): run under `srun --mpi=pmix`, or set CPT_BOOTSTRAP=file",
                        PMIx_Error_string(rc));
    }
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me->nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) {
        PMIx_Finalize(NULL, 0);
        free(me);
        return cpt_errf(err, "PMIx_Get(PMIX_JOB_SIZE) failed: %s", PMIx_Error_string(rc));
    }
    b->size = (int)val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    b->rank = (int)me->rank;
    b->pmix_proc = me;
    return 0;
}

int cpt_boot_init(cpt_bootstrap *b, const char *kind_name, const char *file_dir, cpt_err *err) {
    memset(b, 0, sizeof *b);
    b->timeout_s = 300;
    if (file_dir) snprintf(b->file_dir, sizeof b->file_dir, "%s", file_dir);
    int under_pmix = getenv("PMIX_RANK") != NULL || getenv("PMIX_NAMESPACE") != NULL;
    if (!kind_name || !strcmp(kind_name, "auto")) kind_name = under_pmix ? "pmix" : "file";
    if (!strcmp(kind_name, "pmix")) {
        b->kind = CPT_BOOT_PMIX;
        return pmix_init(b, err);
    }
    if (strcmp(kind_name, "file") != 0) return cpt_errf(err, "bootstrap '%s': expected auto, pmix or file", kind_name);
    b->kind = CPT_BOOT_FILE;
    b->rank = cpt_boot_env_int("CPT_RANK", 0);
    b->size = cpt_boot_env_int("CPT_WORLD_SIZE", 1);
    if (b->rank < 0 || b->size < 1 || b->rank >= b->size)
        return cpt_errf(err, "bootstrap: CPT_RANK=%d is outside CPT_WORLD_SIZE=%d", b->rank, b->size);
    if (b->size > 1 && !b->file_dir[0]) return cpt_errf(err, "bootstrap: the file transport needs a shared folder");
    if (b->file_dir[0] && cpt_mkdir_p(b->file_dir, 0700, err) != 0) return -1;
    return 0;
}

static int wait_for_file(const cpt_bootstrap *b, const char *path, cpt_err *err) {
    double deadline = cpt_now() + b->timeout_s;
    while (!cpt_path_exists(path)) {
        if (cpt_now() > deadline) return cpt_errf(err, "bootstrap: waited %.0f s for %s", b->timeout_s, path);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int cpt_boot_share(cpt_bootstrap *b, const char *key, void *blob, size_t len, cpt_err *err) {
    if (b->size == 1) return 0;
    if (b->kind == CPT_BOOT_FILE) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s.blob", b->file_dir, key);
        if (b->rank == 0) return cpt_write_file_atomic(path, blob, len, err);
        if (wait_for_file(b, path, err) != 0) return -1;
        size_t got = 0;
        char *data = cpt_read_file(path, &got, err);
        if (!data) return -1;
        if (got != len) {
            free(data);
            return cpt_errf(err, "bootstrap: %s holds %zu bytes, expected %zu", path, got, len);
        }
        memcpy(blob, data, len);
        free(data);
        return 0;
    }
    pmix_proc_t *me = b->pmix_proc;
    pmix_status_t rc;
    if (b->rank == 0) {
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        v.data.bo.bytes = blob;
        v.data.bo.size = len;
        rc = PMIx_Put(PMIX_GLOBAL, key, &v);
        if (rc != PMIX_SUCCESS) return cpt_errf(err, "PMIx_Put(%s): %s", key, PMIx_Error_string(rc));
    }
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return cpt_errf(err, "PMIx_Commit: %s", PMIx_Error_string(rc));
    /* Fence with data collection, so the Get below is served locally. */
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, me->nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Fence(&wild, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) return cpt_errf(err, "PMIx_Fence(%s): %s", key, PMIx_Error_string(rc));
    if (b->rank == 0) return 0;
    pmix_proc_t root;
    PMIX_LOAD_PROCID(&root, me->nspace, 0);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&root, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) return cpt_errf(err, "PMIx_Get(%s from rank 0): %s", key, PMIx_Error_string(rc));
    int bad = val->type != PMIX_BYTE_OBJECT || val->data.bo.size != len;
    if (!bad) memcpy(blob, val->data.bo.bytes, len);
    size_t got = val->type == PMIX_BYTE_OBJECT ? val->data.bo.size : 0;
    PMIX_VALUE_RELEASE(val);
    if (bad) return cpt_errf(err, "PMIx_Get(%s): got %zu bytes, expected %zu", key, got, len);
    return 0;
}

int cpt_boot_barrier(cpt_bootstrap *b, const char *key, cpt_err *err) {
    if (b->size == 1) return 0;
    if (b->kind == CPT_BOOT_PMIX) {
        pmix_status_t rc = PMIx_Fence(NULL, 0, NULL, 0);
        if (rc != PMIX_SUCCESS) return cpt_errf(err, "PMIx_Fence(%s): %s", key, PMIx_Error_string(rc));
        return 0;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.rank%d", b->file_dir, key, b->rank);
    if (cpt_write_file_atomic(path, "", 0, err) != 0) return -1;
    for (int r = 0; r < b->size; r++) {
        snprintf(path, sizeof path, "%s/%s.rank%d", b->file_dir, key, r);
        if (wait_for_file(b, path, err) != 0) return -1;
    }
    return 0;
}

void cpt_boot_finalize(cpt_bootstrap *b) {
    if (b->kind == CPT_BOOT_PMIX && b->pmix_proc) {
        PMIx_Finalize(NULL, 0);
        free(b->pmix_proc);
        b->pmix_proc = NULL;
    }
}
