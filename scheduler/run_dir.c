#include "scheduler/run_dir.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cpt_run_dir_open(const char *run_dir, const cpt_key_table *keys, cpt_config **cfg, cpt_redis **redis, cpt_err *err) {
    *cfg = NULL;
    *redis = NULL;
    if (!run_dir) run_dir = getenv("CPT_RUN");
    if (!run_dir || !*run_dir) return cpt_errf(err, "which run? pass --run RUN_DIR or set CPT_RUN");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.toml", run_dir);
    *cfg = cpt_config_load_file(keys, path, 0, NULL, err);
    if (!*cfg) return cpt_err_prefix(err, "%s: not a run directory", run_dir);
    char url[1024];
    snprintf(url, sizeof url, "%s", cpt_cfg_str(*cfg, "queue.url"));
    if (!url[0]) {
        snprintf(path, sizeof path, "%s/queue.json", run_dir);
        json_error_t je;
        json_t *j = json_load_file(path, 0, &je);
        const char *u = j ? json_string_value(json_object_get(j, "url")) : NULL;
        if (!u) {
            json_decref(j);
            cpt_config_free(*cfg);
            *cfg = NULL;
            return cpt_errf(err, "%s: no queue URL (is the run started?)", path);
        }
        snprintf(url, sizeof url, "%s", u);
        json_decref(j);
    }
    cpt_redis_opts o = {.url = url, .password_file = cpt_cfg_str(*cfg, "queue.password_file"), .reconnect_ms = 2000};
    *redis = cpt_redis_open(&o, err);
    if (!*redis) {
        cpt_config_free(*cfg);
        *cfg = NULL;
        return -1;
    }
    return 0;
}

int cpt_find_bin_dir(char *out, size_t cap, cpt_err *err) {
    const char *env = getenv("CPT_BIN");
    if (env && *env) {
        char real[PATH_MAX];
        if (!realpath(env, real)) return cpt_errno(err, "CPT_BIN=%s", env);
        if (strlen(real) >= cap) return cpt_errf(err, "CPT_BIN=%s: path too long", env);
        snprintf(out, cap, "%s", real);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return cpt_errno(err, "cannot find this program's folder (/proc/self/exe)");
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(out, cap, "%s", exe);
    return 0;
}
