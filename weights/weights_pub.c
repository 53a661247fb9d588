#include "weights/weights_pub.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fs.h"

void cpt_weights_path(const char *run_dir, uint64_t version, char *out, size_t cap) {
    snprintf(out, cap, "%s/weights/v%" PRIu64 ".safetensors", run_dir, version);
}

int cpt_weights_write(const cpt_model *m, const char *run_dir, const char *run, uint64_t version, cpt_weights_msg *w,
                      cpt_err *err) {
    char dir[4096], tmp[4200], src[4300], dst[4200];
    snprintf(dir, sizeof dir, "%s/weights", run_dir);
    if (cpt_mkdir_p(dir, 0755, err)) return -1;
    /* save_hf writes a folder; its safetensors file is moved into place with one rename, so readers only ever see
     * a complete vN file. */
    snprintf(tmp, sizeof tmp, "%s/.tmp-v%" PRIu64 "-%ld", dir, version, (long)getpid());
    if (cpt_path_exists(tmp) && cpt_remove_tree(tmp, err)) return -1;
    if (cpt_model_save_hf(m, tmp, 0, err)) return cpt_err_prefix(err, "weights v%" PRIu64, version);
    snprintf(src, sizeof src, "%s/model.safetensors", tmp);
    cpt_weights_path(run_dir, version, dst, sizeof dst);
    if (rename(src, dst)) {
        cpt_errno(err, "rename %s -> %s", src, dst);
        cpt_err e2;
        cpt_remove_tree(tmp, &e2);
        return -1;
    }
    /* config.json beside the versions: a worker that starts from model.init = random reads the shape from it */
    char cfg_src[4300], cfg_dst[4200];
    snprintf(cfg_src, sizeof cfg_src, "%s/config.json", tmp);
    snprintf(cfg_dst, sizeof cfg_dst, "%s/config.json", dir);
    if (rename(cfg_src, cfg_dst)) return cpt_errno(err, "rename %s -> %s", cfg_src, cfg_dst);
    if (cpt_fsync_dir(dir, err)) return -1;
    if (cpt_remove_tree(tmp, err)) return -1;
    uint64_t h = 0, bytes = 0;
    if (cpt_checksum_file(dst, &h, &bytes, err)) return -1;
    memset(w, 0, sizeof *w);
    snprintf(w->run, sizeof w->run, "%s", run);
    w->version = version;
    snprintf(w->transport, sizeof w->transport, "file");
    if (snprintf(w->location, sizeof w->location, "%s", dst) >= (int)sizeof w->location)
        return cpt_errf(err, "weights path too long: %s", dst);
    w->bytes = bytes;
    char hex[CPT_CHECKSUM_HEX_LEN + 1];
    snprintf(w->checksum, sizeof w->checksum, "xxh64:%s", cpt_checksum_hex(h, hex));
    w->membership_epoch = 0;
    return 0;
}

int cpt_weights_prune(const char *run_dir, uint64_t newest, int keep, cpt_err *err) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/weights", run_dir);
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : cpt_errno(err, "opendir %s", dir);
    int removed = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unsigned long long v;
        char tail[32];
        if (sscanf(de->d_name, "v%llu.%31s", &v, tail) == 2 && !strcmp(tail, "safetensors")) {
            if (v + (uint64_t)keep <= newest) {
                if (unlink(path) && errno != ENOENT) rc = cpt_errno(err, "unlink %s", path);
                else removed++;
            }
        } else if (!strncmp(de->d_name, ".tmp-v", 6)) {
            long pid = 0;
            const char *dash = strrchr(de->d_name, '-');
            if (dash) pid = strtol(dash + 1, NULL, 10);
            if (pid != (long)getpid() && cpt_remove_tree(path, err)) rc = -1;
        }
    }
    closedir(d);
    return rc ? -1 : removed;
}
