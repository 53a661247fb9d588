/* Where a run's queue lives, for every process of the run and for cpt-queue.
 *
 * The launcher writes RUN_DIR/queue.json: {"url": "...", "password_file": "...", "tls_ca": "...", "run": "NAME"}
 * (the password itself is never in it; tls_ca is optional). A run directory without queue.json but with redis.sock is a local run on its private
 * server. Configs give queue.url / queue.password_file / run.name; an empty queue.url means RUN_DIR/redis.sock. */
#ifndef CPT_QUEUE_CONN_H
#define CPT_QUEUE_CONN_H

#include "core/config.h"
#include "core/error.h"
#include "queue/stream.h"

typedef struct cpt_queue_conn {
    char url[1024];
    char password_file[1024];
    char tls_ca[1024]; /* rediss://: the CA file of the server's certificate; empty: none (or the system's) */
    char run[CPT_RUN_ID_MAX]; /* empty: unknown (cpt-queue then looks for it in Redis) */
} cpt_queue_conn;

/* Parses the text of a queue.json (path names it in errors). */
int cpt_queue_conn_parse(const char *text, size_t len, const char *path, cpt_queue_conn *c, cpt_err *err);

/* Reads RUN_DIR/queue.json, else falls back to RUN_DIR/redis.sock. */
int cpt_queue_conn_from_run_dir(const char *run_dir, cpt_queue_conn *c, cpt_err *err);

/* Writes RUN_DIR/queue.json atomically. Refuses a URL that carries a password. */
int cpt_queue_conn_write(const char *run_dir, const cpt_queue_conn *c, cpt_err *err);

/* From a loaded config: queue.url (or RUN_DIR/redis.sock), queue.password_file, queue.tls_ca, run.name. */
int cpt_queue_conn_from_config(const cpt_config *cfg, cpt_queue_conn *c, cpt_err *err);

/* Queue options from a config and a connection (pointers into c stay valid while c lives). */
void cpt_queue_opts_from_config(const cpt_config *cfg, const cpt_queue_conn *c, cpt_queue_opts *o);

/* A worker's queue: queue.url, else the run directory's queue.json ($CPT_RUN, else run.dir); the run name from the
 * connection, else run.name; stop as the queue's stop flag. conn must outlive the queue. */
cpt_queue *cpt_queue_open_for_worker(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_queue_conn *conn,
                                     cpt_err *err);

#endif
