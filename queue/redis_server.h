/* A private redis-server for one run: a child process that keeps its data in the run directory.
 *
 * Locally it listens only on RUN_DIR/redis.sock (mode 0700, no TCP port); with tcp_port set it also listens on
 * BIND:PORT (127.0.0.1 unless bind names other addresses, e.g. for workers on other nodes) and requires the
 * password read from password_file; with tls_cert and tls_key that port speaks only TLS (the unix socket stays
 * plain: it never leaves the host), and clients authenticate with the password, not certificates. Persistence is the append-only file in
 * RUN_DIR/appendonlydir (fsync policy from queue.appendfsync), so a restarted server on the same folder continues
 * where the last one stopped. Settings go in RUN_DIR/redis.conf (mode 0600), never on the command line, so the
 * password is not visible in ps. Used by tests, `cpt run` and cpt-sched. */
#ifndef CPT_QUEUE_REDIS_SERVER_H
#define CPT_QUEUE_REDIS_SERVER_H

#include <sys/types.h>

#include "core/error.h"

typedef struct cpt_redis_server_opts {
    const char *dir;           /* run directory (created if absent) */
    const char *appendfsync;   /* always | everysec | no; NULL: everysec */
    int tcp_port;              /* 0: unix socket only */
    const char *password_file; /* required with tcp_port */
    const char *bind;          /* addresses for tcp_port, space-separated; NULL or "": 127.0.0.1 */
    const char *tls_cert;      /* with tls_key: tcp_port speaks only TLS (clients use rediss://); NULL or "": none */
    const char *tls_key;
    const char *tls_ca;        /* optional: given to redis-server as tls-ca-cert-file */
    const char *exe;           /* NULL: $CPT_REDIS_SERVER or /usr/bin/redis-server */
    int start_timeout_ms;      /* 0: 10000 */
} cpt_redis_server_opts;

typedef struct cpt_redis_server {
    pid_t pid;
    char dir[512];
    char sock[512];      /* RUN_DIR/redis.sock */
    char url[600];       /* unix:///RUN_DIR/redis.sock */
    char log[600];       /* RUN_DIR/redis.log */
    int tcp_port;
} cpt_redis_server;

/* Starts redis-server and waits until it answers PING on the socket. Fails if another server already answers
 * on RUN_DIR/redis.sock. On failure the tail of RUN_DIR/redis.log is in the message. */
int cpt_redis_server_start(const cpt_redis_server_opts *opts, cpt_redis_server *srv, cpt_err *err);

/* SHUTDOWN (the AOF is flushed), then SIGTERM and finally SIGKILL if it does not exit; reaps the child. */
int cpt_redis_server_stop(cpt_redis_server *srv, cpt_err *err);

/* SIGKILL and reap: the crash a test simulates. */
void cpt_redis_server_kill(cpt_redis_server *srv);

/* A free localhost TCP port (for tests). */
int cpt_free_tcp_port(cpt_err *err);

#endif
