#include "queue/conn.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "queue/redis.h"

static int copy_field(json_t *root, const char *key, char *out, size_t cap, int required, const char *path,
                      cpt_err *err) {
    json_t *v = json_object_get(root, key);
    if (!v) {
        out[0] = '\0';
        return required ? cpt_errf(err, "%s: missing \"%s\"", path, key) : 0;
    }
    if (!json_is_string(v)) return cpt_errf(err, "%s: \"%s\" must be a string", path, key);
    if (strlen(json_string_value(v)) >= cap) return cpt_errf(err, "%s: \"%s\" is too long", path, key);
    snprintf(out, cap, "%s", json_string_value(v));
    return 0;
}

int cpt_queue_conn_parse(const char *text, size_t len, const char *path, cpt_queue_conn *c, cpt_err *err) {
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return cpt_errf(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    int rc = -1;
    if (!json_is_object(root)) cpt_errf(err, "%s: expected a JSON object", path);
    else if (!copy_field(root, "url", c->url, sizeof c->url, 1, path, err) &&
             !copy_field(root, "password_file", c->password_file, sizeof c->password_file, 0, path, err) &&
             !copy_field(root, "tls_ca", c->tls_ca, sizeof c->tls_ca, 0, path, err) &&
             !copy_field(root, "run", c->run, sizeof c->run, 0, path, err))
        rc = 0;
    json_decref(root);
    if (rc) return -1;
    cpt_redis_url u;
    if (cpt_redis_parse_url(c->url, &u, err)) return cpt_err_prefix(err, "%s", path);
    int has_pw = u.password[0] != 0;
    explicit_bzero(&u, sizeof u);
    if (has_pw) return cpt_errf(err, "%s: the url carries a password; use password_file", path);
    if (c->run[0] && !cpt_run_id_valid(c->run)) return cpt_errf(err, "%s: run \"%s\" is not a valid run id", path, c->run);
    return 0;
}

int cpt_queue_conn_from_run_dir(const char *run_dir, cpt_queue_conn *c, cpt_err *err) {
    memset(c, 0, sizeof *c);
    char path[4096];
    snprintf(path, sizeof path, "%s/queue.json", run_dir);
    if (cpt_path_exists(path)) {
        size_t len;
        char *text = cpt_read_file(path, &len, err);
        if (!text) return -1;
        int rc = cpt_queue_conn_parse(text, len, path, c, err);
        free(text);
        return rc;
    }
    char *real = realpath(run_dir, NULL);
    if (!real) return cpt_errno(err, "run directory %s", run_dir);
    snprintf(path, sizeof path, "%s/redis.sock", real);
    free(real);
    if (!cpt_path_exists(path))
        return cpt_errf(err, "%s has neither queue.json nor redis.sock: is the run started, or pass --url", run_dir);
    snprintf(c->url, sizeof c->url, "unix://%s", path);
    return 0;
}

int cpt_queue_conn_write(const char *run_dir, const cpt_queue_conn *c, cpt_err *err) {
    cpt_redis_url u;
    if (cpt_redis_parse_url(c->url, &u, err)) return -1;
    int has_pw = u.password[0] != 0;
    explicit_bzero(&u, sizeof u);
    if (has_pw) return cpt_errf(err, "queue url carries a password; put it in queue.password_file instead");
    json_t *root = json_pack("{s:s, s:s, s:s, s:s}", "url", c->url, "password_file", c->password_file, "tls_ca",
                             c->tls_ca, "run", c->run);
    if (!root) return cpt_errf(err, "queue.json: out of memory");
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text) return cpt_errf(err, "queue.json: out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/queue.json", run_dir);
    int rc = cpt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

int cpt_queue_conn_from_config(const cpt_config *cfg, cpt_queue_conn *c, cpt_err *err) {
    memset(c, 0, sizeof *c);
    const char *url = cpt_cfg_str(cfg, "queue.url");
    const char *dir = cpt_cfg_str(cfg, "run.dir");
    const char *run = cpt_cfg_str(cfg, "run.name");
    if (!cpt_run_id_valid(run)) return cpt_errf(err, "run.name = \"%s\": use letters, digits, '.', '_' and '-' (1..127)", run);
    snprintf(c->run, sizeof c->run, "%s", run);
    snprintf(c->password_file, sizeof c->password_file, "%s", cpt_cfg_str(cfg, "queue.password_file"));
    snprintf(c->tls_ca, sizeof c->tls_ca, "%s", cpt_cfg_str(cfg, "queue.tls_ca"));
    if (url[0]) {
        cpt_redis_url u;
        if (cpt_redis_parse_url(url, &u, err)) return cpt_err_prefix(err, "queue.url");
        int has_pw = u.password[0] != 0;
        explicit_bzero(&u, sizeof u);
        if (has_pw) return cpt_errf(err, "queue.url carries a password; put it in a file (mode 0600) named by queue.password_file");
        snprintf(c->url, sizeof c->url, "%s", url);
        return 0;
    }
    char *real = realpath(dir, NULL);
    snprintf(c->url, sizeof c->url, "unix://%s/redis.sock", real ? real : dir);
    free(real);
    return 0;
}

void cpt_queue_opts_from_config(const cpt_config *cfg, const cpt_queue_conn *c, cpt_queue_opts *o) {
    memset(o, 0, sizeof *o);
    o->url = c->url;
    o->password_file = c->password_file[0] ? c->password_file : NULL;
    o->tls_ca = c->tls_ca[0] ? c->tls_ca : NULL;
    o->run = c->run;
    o->max_len = cpt_cfg_int(cfg, "queue.max_len");
    o->claim_idle_ms = (int)cpt_cfg_int(cfg, "queue.claim_idle_ms");
    o->block_ms = (int)cpt_cfg_int(cfg, "queue.block_ms");
    o->max_deliveries = (int)cpt_cfg_int(cfg, "queue.max_deliveries");
}

cpt_queue *cpt_queue_open_for_worker(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_queue_conn *conn,
                                     cpt_err *err) {
    const char *run_dir = getenv("CPT_RUN");
    if (!run_dir || !*run_dir) run_dir = cpt_cfg_str(cfg, "run.dir");
    if (*cpt_cfg_str(cfg, "queue.url")) {
        if (cpt_queue_conn_from_config(cfg, conn, err)) return NULL;
    } else if (cpt_queue_conn_from_run_dir(run_dir, conn, err)) {
        cpt_err_prefix(err, "finding the run's queue (queue.url is empty)");
        return NULL;
    }
    if (!conn->run[0]) snprintf(conn->run, sizeof conn->run, "%s", cpt_cfg_str(cfg, "run.name"));
    cpt_queue_opts o;
    cpt_queue_opts_from_config(cfg, conn, &o);
    o.run = conn->run;
    o.stop = stop;
    return cpt_queue_open(&o, err);
}
