#include "queue/redis.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/redact.h"
#include "queue/tls.h"

/* ---- URLs ---- */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies [s, s+n) into out with %XX decoding. what names the part for errors (never its value). */
static int copy_decoded(const char *s, size_t n, char *out, size_t cap, const char *what, cpt_err *err) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0)
                return cpt_errf(err, "bad %%-escape in the %s of the Redis URL", what);
            c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
            i += 2;
            if (c == 0) return cpt_errf(err, "NUL byte in the %s of the Redis URL", what);
        }
        if (o + 1 >= cap) return cpt_errf(err, "the %s of the Redis URL is too long (max %zu bytes)", what, cap - 1);
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

static int parse_int(const char *s, size_t n, long lo, long hi, long *out) {
    if (n == 0 || n > 10) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cpt_redis_parse_url(const char *url, cpt_redis_url *out, cpt_err *err) {
    memset(out, 0, sizeof *out);
    if (!url || !*url) return cpt_errf(err, "empty Redis URL");
    char shown[CPT_REDIS_URL_MAX];
    cpt_redis_url_redacted(url, shown, sizeof shown);
    if (strlen(url) >= CPT_REDIS_URL_MAX) return cpt_errf(err, "Redis URL too long: %s", shown);
    if (!strncmp(url, "unix://", 7)) {
        const char *p = url + 7;
        if (*p != '/') return cpt_errf(err, "Redis URL %s: a unix socket URL needs an absolute path (unix:///path)", shown);
        const char *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n >= sizeof out->path) return cpt_errf(err, "Redis URL %s: socket path too long", shown);
        memcpy(out->path, p, n);
        out->path[n] = '\0';
        if (q) {
            long db;
            if (strncmp(q, "?db=", 4) || parse_int(q + 4, strlen(q + 4), 0, 1000000, &db))
                return cpt_errf(err, "Redis URL %s: the only query allowed is ?db=N", shown);
            out->db = (int)db;
        }
        out->is_unix = 1;
        return 0;
    }
    out->tls = !strncmp(url, "rediss://", 9);
    if (strncmp(url, "redis://", 8) && !out->tls)
        return cpt_errf(err, "Redis URL %s: expected redis://host:port/db, rediss://host:port/db or unix:///path", shown);
    const char *p = url + (out->tls ? 9 : 8);
    const char *end = p + strlen(p);
    const char *slash = strchr(p, '/');
    const char *auth_end = NULL;
    for (const char *s = p; s < (slash ? slash : end); s++)
        if (*s == '@') auth_end = s; /* the last @ before the path: passwords may hold '@' only %-escaped anyway */
    if (auth_end) {
        const char *colon = memchr(p, ':', (size_t)(auth_end - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(auth_end - p);
        if (copy_decoded(p, ulen, out->user, sizeof out->user, "user", err)) return cpt_err_prefix(err, "%s", shown);
        if (colon && copy_decoded(colon + 1, (size_t)(auth_end - colon - 1), out->password, sizeof out->password,
                                  "password", err))
            return cpt_err_prefix(err, "%s", shown);
        p = auth_end + 1;
    }
    const char *hostend = slash ? slash : end;
    const char *portsep = NULL;
    if (*p == '[') {
        const char *rb = memchr(p, ']', (size_t)(hostend - p));
        if (!rb) return cpt_errf(err, "Redis URL %s: unclosed [ in host", shown);
        if ((size_t)(rb - p - 1) >= sizeof out->host) return cpt_errf(err, "Redis URL %s: host too long", shown);
        memcpy(out->host, p + 1, (size_t)(rb - p - 1));
        out->host[rb - p - 1] = '\0';
        if (rb + 1 < hostend) {
            if (rb[1] != ':') return cpt_errf(err, "Redis URL %s: expected :port after ]", shown);
            portsep = rb + 1;
        }
    } else {
        portsep = memchr(p, ':', (size_t)(hostend - p));
        size_t hlen = portsep ? (size_t)(portsep - p) : (size_t)(hostend - p);
        if (hlen >= sizeof out->host) return cpt_errf(err, "Redis URL %s: host too long", shown);
        memcpy(out->host, p, hlen);
        out->host[hlen] = '\0';
    }
    if (!out->host[0]) return cpt_errf(err, "Redis URL %s: no host", shown);
    for (const char *h = out->host; *h; h++)
        if (!(isalnum((unsigned char)*h) || *h == '.' || *h == '-' || *h == ':' || *h == '_'))
            return cpt_errf(err, "Redis URL %s: bad character in host", shown);
    out->port = 6379;
    if (portsep) {
        long port;
        if (parse_int(portsep + 1, (size_t)(hostend - portsep - 1), 1, 65535, &port))
            return cpt_errf(err, "Redis URL %s: port must be 1..65535", shown);
        out->port = (int)port;
    }
    if (slash && slash + 1 < end) {
        long db;
        if (parse_int(slash + 1, strlen(slash + 1), 0, 1000000, &db))
            return cpt_errf(err, "Redis URL %s: database must be a number after the /", shown);
        out->db = (int)db;
    }
    return 0;
}

void cpt_redis_url_redacted(const char *url, char *out, size_t cap) { cpt_redact_url(url, out, cap); }

int cpt_redis_read_password_file(const char *path, char *out, size_t cap, cpt_err *err) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return cpt_errno(err, "queue.password_file %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return cpt_errno(err, "queue.password_file %s: stat", path); }
    if (!S_ISREG(st.st_mode)) { close(fd); return cpt_errf(err, "queue.password_file %s: not a regular file", path); }
    if (st.st_mode & 077) {
        close(fd);
        return cpt_errf(err, "queue.password_file %s has mode %04o; it must be 0600 (chmod 600 %s)", path,
                        (unsigned)(st.st_mode & 07777), path);
    }
    char buf[CPT_REDIS_SECRET_MAX + 2];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int saved = errno;
    close(fd);
    if (n < 0) { errno = saved; return cpt_errno(err, "queue.password_file %s: read", path); }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) n--;
    if (n == 0) { explicit_bzero(buf, sizeof buf); return cpt_errf(err, "queue.password_file %s is empty", path); }
    if ((size_t)n >= cap || (size_t)n > CPT_REDIS_SECRET_MAX - 1) {
        explicit_bzero(buf, sizeof buf);
        return cpt_errf(err, "queue.password_file %s: password longer than %d bytes", path, CPT_REDIS_SECRET_MAX - 1);
    }
    if (memchr(buf, '\0', (size_t)n) || memchr(buf, '\n', (size_t)n)) {
        explicit_bzero(buf, sizeof buf);
        return cpt_errf(err, "queue.password_file %s: the password must be one line without NUL bytes", path);
    }
    memcpy(out, buf, (size_t)n);
    out[n] = '\0';
    explicit_bzero(buf, sizeof buf);
    return 0;
}

/* ---- connection ---- */

static struct timeval ms_tv(int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Writing to a connection the server dropped raises SIGPIPE, which would kill the process. Like libpq, block it
 * in this thread around our socket work and swallow one it caused, leaving the program's own disposition alone. */
typedef struct sigpipe_guard {
    sigset_t old;
    int was_pending;
} sigpipe_guard;

static void sigpipe_block(sigpipe_guard *g) {
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &g->old);
}

static void sigpipe_restore(const sigpipe_guard *g) {
    sigset_t pipe_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    if (!g->was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static void drop_ctx(cpt_redis *r) {
    if (r->ctx) redisFree(r->ctx);
    r->ctx = NULL;
    cpt_tls_session_end(r->tls); /* after redisFree closed its end: the relay thread has ended or is ending */
    r->tls = NULL;
}

/* rediss://: hiredis speaks plain RESP on a socket pair whose other end a TLS session relays (queue/tls.h).
 * NULL with *rc = -1 (retry) or -2 (a certificate or setup problem: no retry). */
static redisContext *connect_tls(cpt_redis *r, int *rc, cpt_err *err) {
    int fd;
    *rc = cpt_tls_connect(r->url.host, r->url.port, r->tls_ca, r->connect_timeout_ms, &fd, &r->tls, err);
    if (*rc) return NULL;
    redisContext *c = redisConnectFd(fd);
    if (!c) {
        close(fd);
        cpt_tls_session_end(r->tls);
        r->tls = NULL;
        *rc = -1;
        cpt_errf(err, "connect %s: out of memory", r->redacted);
    }
    return c;
}

/* One connection attempt including AUTH and SELECT. */
static int connect_once(cpt_redis *r, cpt_err *err) {
    drop_ctx(r);
    struct timeval tv = ms_tv(r->connect_timeout_ms);
    int tls_rc = 0;
    redisContext *c = r->url.tls       ? connect_tls(r, &tls_rc, err)
                      : r->url.is_unix ? redisConnectUnixWithTimeout(r->url.path, tv)
                                       : redisConnectWithTimeout(r->url.host, r->url.port, tv);
    if (tls_rc) return tls_rc;
    if (!c) return cpt_errf(err, "connect %s: out of memory", r->redacted);
    if (c->err) {
        cpt_errf(err, "connect %s: %s", r->redacted, c->errstr);
        redisFree(c);
        return -1;
    }
    r->ctx = c;
    redisSetTimeout(c, ms_tv(r->command_timeout_ms));
    if (!r->url.is_unix && !r->url.tls) redisEnableKeepAlive(c); /* TLS: on the TCP socket under the session */
    if (r->url.password[0]) {
        const char *argv[3] = {"AUTH", r->url.user[0] ? r->url.user : r->url.password, r->url.password};
        int argc = r->url.user[0] ? 3 : 2;
        redisReply *rep = redisCommandArgv(c, argc, argv, NULL);
        if (!rep) {
            cpt_errf(err, "AUTH on %s: %s", r->redacted, c->errstr);
            drop_ctx(r);
            return -1;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            /* The reply text is Redis's own ("WRONGPASS ..."), it never contains the password. */
            cpt_errf(err, "AUTH on %s: %s", r->redacted, rep->str);
            freeReplyObject(rep);
            drop_ctx(r);
            return -2; /* not worth retrying */
        }
        freeReplyObject(rep);
    }
    if (r->url.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->url.db);
        const char *argv[2] = {"SELECT", db};
        redisReply *rep = redisCommandArgv(c, 2, argv, NULL);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            cpt_errf(err, "SELECT %s on %s: %s", db, r->redacted, rep ? rep->str : c->errstr);
            if (rep) freeReplyObject(rep);
            drop_ctx(r);
            return rep ? -2 : -1;
        }
        freeReplyObject(rep);
    }
    return 0;
}

/* Connects with exponential backoff (50 ms doubling to 2 s) for up to reconnect_ms. */
static int connect_retry(cpt_redis *r, cpt_err *err) {
    double start = cpt_now();
    int delay = 50, tries = 0;
    for (;;) {
        tries++;
        int rc = connect_once(r, err);
        if (rc == 0) return 0;
        if (rc == -2 || r->reconnect_ms < 0) return -1;
        double spent_ms = (cpt_now() - start) * 1000.0;
        if (spent_ms + delay > r->reconnect_ms)
            return cpt_err_prefix(err, "gave up after %d tries over %.1f s", tries, spent_ms / 1000.0);
        sleep_ms(delay);
        delay = delay * 2 > 2000 ? 2000 : delay * 2;
    }
}

cpt_redis *cpt_redis_open(const cpt_redis_opts *opts, cpt_err *err) {
    cpt_redis *r = calloc(1, sizeof *r);
    if (!r) { cpt_errf(err, "out of memory"); return NULL; }
    cpt_redis_url_redacted(opts->url, r->redacted, sizeof r->redacted);
    if (cpt_redis_parse_url(opts->url, &r->url, err)) { cpt_redis_close(r); return NULL; }
    if (opts->password_file && opts->password_file[0]) {
        if (r->url.password[0]) {
            cpt_errf(err, "Redis URL %s carries a password and queue.password_file is set too; keep only the file",
                     r->redacted);
            cpt_redis_close(r);
            return NULL;
        }
        if (cpt_redis_read_password_file(opts->password_file, r->url.password, sizeof r->url.password, err)) {
            cpt_redis_close(r);
            return NULL;
        }
    }
    snprintf(r->tls_ca, sizeof r->tls_ca, "%s", opts->tls_ca ? opts->tls_ca : "");
    r->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 5000;
    r->command_timeout_ms = opts->command_timeout_ms > 0 ? opts->command_timeout_ms : 30000;
    r->reconnect_ms = opts->reconnect_ms == 0 ? 30000 : opts->reconnect_ms;
    sigpipe_guard g;
    sigpipe_block(&g);
    int rc = connect_retry(r, err);
    sigpipe_restore(&g);
    if (rc) { cpt_redis_close(r); return NULL; }
    return r;
}

void cpt_redis_close(cpt_redis *r) {
    if (!r) return;
    drop_ctx(r);
    explicit_bzero(r, sizeof *r);
    free(r);
}

/* ---- commands ---- */

static void name_cmd(const cpt_redis_cmd *c, char *out, size_t cap) {
    snprintf(out, cap, "%.*s%s%s", c->lens ? (int)c->lens[0] : (int)strlen(c->argv[0]), c->argv[0],
             c->key ? " " : "", c->key ? c->key : "");
}

/* Sends the batch once. Returns 0, -1 on an error reply or protocol error (no retry), -2 on a connection failure,
   -3 when every reply is LOADING (nothing ran). */
static int send_batch(cpt_redis *r, int n, const cpt_redis_cmd *cmds, redisReply **replies, int block_ms,
                      cpt_err *err) {
    char what[300];
    for (int i = 0; i < n; i++) replies[i] = NULL;
    if (!r->ctx) {
        /* an earlier command's reconnect failed: the caller reconnects, and its log line quotes this text */
        name_cmd(&cmds[0], what, sizeof what);
        cpt_errf(err, "%s on %s: not connected", what, r->redacted);
        return -2;
    }
    if (block_ms > 0) redisSetTimeout(r->ctx, ms_tv(r->command_timeout_ms + block_ms));
    for (int i = 0; i < n; i++) {
        if (redisAppendCommandArgv(r->ctx, cmds[i].argc, cmds[i].argv, cmds[i].lens) != REDIS_OK) {
            name_cmd(&cmds[i], what, sizeof what);
            cpt_errf(err, "%s: %s", what, r->ctx->errstr);
            return -1;
        }
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        void *rep = NULL;
        if (redisGetReply(r->ctx, &rep) != REDIS_OK) {
            name_cmd(&cmds[i], what, sizeof what);
            cpt_errf(err, "%s on %s: %s", what, r->redacted,
                     r->ctx->errstr[0] ? r->ctx->errstr : "connection failed");
            for (int j = 0; j < i; j++) { if (replies[j]) freeReplyObject(replies[j]); replies[j] = NULL; }
            drop_ctx(r);
            return -2;
        }
        replies[i] = rep;
    }
    if (block_ms > 0 && r->ctx) redisSetTimeout(r->ctx, ms_tv(r->command_timeout_ms));
    /* A restarted server answers LOADING to every command until its AOF is read back; none of them ran, so the
       whole batch is safe to send again. */
    int loading = 0;
    for (int i = 0; i < n; i++)
        if (replies[i]->type == REDIS_REPLY_ERROR && !strncmp(replies[i]->str, "LOADING", 7)) loading++;
    if (loading == n) {
        for (int i = 0; i < n; i++) { freeReplyObject(replies[i]); replies[i] = NULL; }
        name_cmd(&cmds[0], what, sizeof what);
        cpt_errf(err, "%s on %s: server is loading its dataset", what, r->redacted);
        return -3;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (replies[i]->type == REDIS_REPLY_ERROR) {
            name_cmd(&cmds[i], what, sizeof what);
            snprintf(r->server_error, sizeof r->server_error, "%s", replies[i]->str);
            cpt_errf(err, "%s: %s", what, replies[i]->str);
            rc = -1;
        }
    }
    if (rc) for (int i = 0; i < n; i++) { freeReplyObject(replies[i]); replies[i] = NULL; }
    return rc;
}

/* Sends the batch again while the server answers LOADING, within the reconnect budget. Returns send_batch's code. */
static int resend_while_loading(cpt_redis *r, int n, const cpt_redis_cmd *cmds, redisReply **replies, int block_ms,
                                cpt_err *err) {
    double start = cpt_now();
    int delay = 50, rc = -3;
    while (rc == -3) {
        if (r->reconnect_ms < 0 || (cpt_now() - start) * 1000.0 + delay > r->reconnect_ms)
            return cpt_err_prefix(err, "still loading after %.1f s", cpt_now() - start);
        sleep_ms(delay);
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
        r->loading_waits++;
        rc = send_batch(r, n, cmds, replies, block_ms, err);
    }
    return rc;
}

static int run_batch_unguarded(cpt_redis *r, int n, const cpt_redis_cmd *cmds, redisReply **replies, int block_ms,
                               cpt_err *err) {
    r->server_error[0] = '\0';
    int rc = send_batch(r, n, cmds, replies, block_ms, err);
    if (rc == -3) rc = resend_while_loading(r, n, cmds, replies, block_ms, err);
    if (rc != -2) return rc;
    if (r->reconnect_ms < 0) return -1;
    char first[CPT_ERR_MAX];
    snprintf(first, sizeof first, "%s", err ? err->msg : "connection failed");
    cpt_warn("%s; reconnecting", first);
    for (;;) {
        cpt_err cerr;
        if (connect_retry(r, &cerr)) return cpt_errf(err, "%s; reconnect failed: %s", first, cerr.msg);
        r->reconnects++;
        rc = send_batch(r, n, cmds, replies, block_ms, err);
        if (rc == -3) rc = resend_while_loading(r, n, cmds, replies, block_ms, err);
        if (rc != -2) return rc;
    }
}

static int run_batch(cpt_redis *r, int n, const cpt_redis_cmd *cmds, redisReply **replies, int block_ms,
                     cpt_err *err) {
    sigpipe_guard g;
    sigpipe_block(&g);
    int rc = run_batch_unguarded(r, n, cmds, replies, block_ms, err);
    sigpipe_restore(&g);
    return rc;
}

redisReply *cpt_redis_command(cpt_redis *r, int argc, const char **argv, const size_t *lens, const char *key,
                              int block_ms, cpt_err *err) {
    cpt_redis_cmd c = {argc, argv, lens, key};
    redisReply *rep = NULL;
    if (run_batch(r, 1, &c, &rep, block_ms, err)) return NULL;
    return rep;
}

int cpt_redis_pipeline(cpt_redis *r, int n, const cpt_redis_cmd *cmds, redisReply **replies, cpt_err *err) {
    return run_batch(r, n, cmds, replies, 0, err);
}

int cpt_redis_integer(cpt_redis *r, int argc, const char **argv, const char *key, long long *out, cpt_err *err) {
    redisReply *rep = cpt_redis_command(r, argc, argv, NULL, key, 0, err);
    if (!rep) return -1;
    if (rep->type != REDIS_REPLY_INTEGER) {
        int t = rep->type;
        freeReplyObject(rep);
        return cpt_errf(err, "%s %s: expected an integer reply, got type %d", argv[0], key ? key : "", t);
    }
    if (out) *out = rep->integer;
    freeReplyObject(rep);
    return 0;
}
