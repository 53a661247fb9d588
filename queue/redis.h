/* A Redis connection over hiredis (0.14, blocking API) for the queue.
 *
 * URLs: redis://[user[:password]@]host[:port][/db] (host may be [v6addr]), the same with rediss:// for TLS (the
 * server's certificate checked against tls_ca; queue/tls.h), and unix:///path/to/sock[?db=N].
 * The password comes from a file (queue.password_file, mode 0600 or stricter) or, for programs only, from the URL;
 * it is sent with AUTH after every connect, then SELECT db, and it never appears in a message or a log line
 * (cpt_redis_url_redacted gives a printable form).
 *
 * A command that fails on the connection (EOF, reset, timeout) reconnects with exponential backoff and is sent
 * again, up to reconnect_ms in all; a command answered LOADING (a restarted server reading its AOF back; nothing
 * ran) is sent again within the same budget. A retried XADD may therefore be applied twice: consumers drop duplicates by
 * group id (queue/seen.h). Every error names the command and the key. */
#ifndef CPT_QUEUE_REDIS_H
#define CPT_QUEUE_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "core/error.h"

#define CPT_REDIS_URL_MAX 1024
#define CPT_REDIS_SECRET_MAX 512

typedef struct cpt_redis_url {
    int is_unix;
    int tls; /* rediss:// (queue/tls.h) */
    char host[256];
    int port;
    char path[512]; /* unix socket */
    int db;
    char user[128];
    char password[CPT_REDIS_SECRET_MAX]; /* from the URL; empty if none */
} cpt_redis_url;

typedef struct cpt_redis_opts {
    const char *url;           /* required */
    const char *password_file; /* NULL or "": none */
    const char *tls_ca;        /* rediss://: CA file that signed the server's certificate; NULL or "": the system's */
    int connect_timeout_ms;    /* 0: 5000 */
    int command_timeout_ms;    /* socket timeout of non-blocking commands; 0: 30000 */
    int reconnect_ms;          /* total time spent reconnecting before a command fails; 0: 30000, <0: never retry */
} cpt_redis_opts;

typedef struct cpt_redis {
    redisContext *ctx;
    cpt_redis_url url;           /* password filled from the file if one is given */
    char redacted[CPT_REDIS_URL_MAX];
    char tls_ca[1024];
    struct cpt_tls_session *tls; /* rediss://: the relay of the current connection (queue/tls.h) */
    int connect_timeout_ms, command_timeout_ms, reconnect_ms;
    long reconnects;             /* successful reconnects since open (for tests and stats) */
    long loading_waits;          /* commands sent again because a restarted server was still loading its AOF */
    char server_error[256];      /* the last error reply ("BUSYGROUP ..."), empty if the last failure was not one */
} cpt_redis;

/* Parses url into out (zeroed first). Errors never echo the password. */
int cpt_redis_parse_url(const char *url, cpt_redis_url *out, cpt_err *err);

/* url with any password replaced by "***", for messages. */
void cpt_redis_url_redacted(const char *url, char *out, size_t cap);

/* Reads a password file: must be a regular file of mode 0600 (no group/other bits), non-empty; trailing newline
 * stripped. Errors name the file. */
int cpt_redis_read_password_file(const char *path, char *out, size_t cap, cpt_err *err);

/* Connects (AUTH, SELECT), retrying with backoff for up to reconnect_ms. NULL on failure. */
cpt_redis *cpt_redis_open(const cpt_redis_opts *opts, cpt_err *err);
void cpt_redis_close(cpt_redis *r); /* wipes the password */

/* Sends one command (argv with lengths; lens NULL: strlen of each) and returns its reply, which the caller frees
 * with freeReplyObject. An error reply returns NULL with err = "CMD KEY: <error>" and server_error set.
 * key names the key for messages (may be NULL). block_ms > 0 widens the socket timeout for a blocking command. */
redisReply *cpt_redis_command(cpt_redis *r, int argc, const char **argv, const size_t *lens, const char *key,
                              int block_ms, cpt_err *err);

/* Sends n commands in one round trip (e.g. MULTI ... EXEC) and stores their replies in replies[0..n). On a
 * connection failure the whole batch is retried after reconnecting. An error reply of any command fails the call
 * (all replies freed) with that command named. */
typedef struct cpt_redis_cmd {
    int argc;
    const char **argv;
    const size_t *lens;
    const char *key;
} cpt_redis_cmd;
int cpt_redis_pipeline(cpt_redis *r, int n, const cpt_redis_cmd *cmds, redisReply **replies, cpt_err *err);

/* Convenience: a command whose reply is an integer (XLEN, XACK, HSET, ...). */
int cpt_redis_integer(cpt_redis *r, int argc, const char **argv, const char *key, long long *out, cpt_err *err);

#endif
