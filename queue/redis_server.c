#include "queue/redis_server.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "queue/redis.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* 1: something answers on the socket (PONG, or NOAUTH / LOADING which also mean a live server), 0: nothing. */
static int socket_answers(const char *sock) {
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectUnixWithTimeout(sock, tv);
    if (!c) return 0;
    if (c->err) { redisFree(c); return 0; }
    redisSetTimeout(c, tv);
    redisReply *rep = redisCommand(c, "PING");
    int up = 0;
    if (rep) {
        if (rep->type == REDIS_REPLY_STATUS && !strcmp(rep->str, "PONG")) up = 1;
        else if (rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "NOAUTH", 6)) up = 1;
        else if (rep->type == REDIS_REPLY_ERROR && !strncmp(rep->str, "LOADING", 7)) up = 2;
        freeReplyObject(rep);
    }
    redisFree(c);
    return up;
}

/* The last ~1.5 KB of the log, for error messages. */
static void log_tail(const char *path, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        long want = (long)cap - 1 < 1500 ? (long)cap - 1 : 1500;
        fseek(f, n > want ? n - want : 0, SEEK_SET);
    }
    size_t got = fread(out, 1, cap - 1, f);
    out[got] = '\0';
    fclose(f);
}

/* Writes a double-quoted redis.conf string. Rejects newlines (they would end the directive). */
static int conf_quote(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '\n' || *s == '\r') return -1;
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
    return 0;
}

/* The TCP port: plain, or TLS only (port 0 and tls-port) when a certificate and key are given. */
static int write_tcp_conf(FILE *f, const cpt_redis_server_opts *o) {
    if (!(o->tls_cert && o->tls_cert[0])) {
        fprintf(f, "\nport %d\n", o->tcp_port);
        return 0;
    }
    int bad = 0;
    fprintf(f, "\nport 0\ntls-port %d\ntls-auth-clients no\ntls-cert-file ", o->tcp_port);
    bad |= conf_quote(f, o->tls_cert);
    fprintf(f, "\ntls-key-file ");
    bad |= conf_quote(f, o->tls_key ? o->tls_key : "");
    if (o->tls_ca && o->tls_ca[0]) {
        fprintf(f, "\ntls-ca-cert-file ");
        bad |= conf_quote(f, o->tls_ca);
    }
    fputc('\n', f);
    return bad;
}

static int write_conf(const cpt_redis_server_opts *o, const cpt_redis_server *srv, const char *fsync_policy,
                      cpt_err *err) {
    char conf[700], pass[CPT_REDIS_SECRET_MAX];
    snprintf(conf, sizeof conf, "%s/redis.conf", srv->dir);
    pass[0] = '\0';
    if (o->tcp_port && cpt_redis_read_password_file(o->password_file, pass, sizeof pass, err))
        return cpt_err_prefix(err, "redis-server on port %d", o->tcp_port);
    /* 0600 from the start: the file may hold the password. */
    char tmp[720];
    snprintf(tmp, sizeof tmp, "%s.tmp", conf);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) { explicit_bzero(pass, sizeof pass); return cpt_errno(err, "%s", tmp); }
    FILE *f = fdopen(fd, "w");
    if (!f) { close(fd); explicit_bzero(pass, sizeof pass); return cpt_errno(err, "%s", tmp); }
    int bad = 0;
    fprintf(f, "# written by cpt for this run; edits are overwritten at the next start\n");
    fprintf(f, "daemonize no\nprotected-mode yes\n");
    if (o->tcp_port) {
        fprintf(f, "bind");
        /* Each address its own argument: redis takes a list. */
        const char *b = o->bind && o->bind[0] ? o->bind : "127.0.0.1";
        while (*b) {
            size_t n = strcspn(b, " ");
            if (n) {
                char addr[64];
                if (n >= sizeof addr) bad = 1;
                snprintf(addr, sizeof addr, "%.*s", (int)n, b);
                fputc(' ', f);
                bad |= conf_quote(f, addr);
            }
            b += n;
            while (*b == ' ') b++;
        }
        bad |= write_tcp_conf(f, o);
        fprintf(f, "requirepass ");
        bad |= conf_quote(f, pass);
        fputc('\n', f);
    } else {
        fprintf(f, "port 0\n");
    }
    fprintf(f, "unixsocket ");
    bad |= conf_quote(f, srv->sock);
    fprintf(f, "\nunixsocketperm 700\ndir ");
    bad |= conf_quote(f, srv->dir);
    fprintf(f, "\nappendonly yes\nappendfsync %s\nsave \"\"\npidfile ", fsync_policy);
    char pidfile[600];
    snprintf(pidfile, sizeof pidfile, "%s/redis.pid", srv->dir);
    bad |= conf_quote(f, pidfile);
    fprintf(f, "\nlogfile ");
    bad |= conf_quote(f, srv->log);
    /* Streams of large messages: let a client's output buffer grow, the queue bounds the data anyway. */
    fprintf(f, "\nclient-output-buffer-limit normal 0 0 0\nproto-max-bulk-len 512mb\n");
    explicit_bzero(pass, sizeof pass);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) bad = 1;
    if (fclose(f) != 0) bad = 1;
    if (bad) { unlink(tmp); return cpt_errf(err, "%s: could not write (a newline in a path or the password?)", conf); }
    if (rename(tmp, conf) != 0) { unlink(tmp); return cpt_errno(err, "rename %s", conf); }
    return 0;
}

int cpt_redis_server_start(const cpt_redis_server_opts *o, cpt_redis_server *srv, cpt_err *err) {
    memset(srv, 0, sizeof *srv);
    srv->pid = -1;
    const char *policy = o->appendfsync && o->appendfsync[0] ? o->appendfsync : "everysec";
    if (strcmp(policy, "always") && strcmp(policy, "everysec") && strcmp(policy, "no"))
        return cpt_errf(err, "queue.appendfsync = \"%s\": expected always, everysec or no", policy);
    if (o->tcp_port && !(o->password_file && o->password_file[0]))
        return cpt_errf(err, "redis-server on TCP port %d needs queue.password_file (no open ports)", o->tcp_port);
    if (!o->dir || !o->dir[0]) return cpt_errf(err, "redis-server: no run directory");
    if (o->tcp_port && o->tls_cert && o->tls_cert[0]) {
        if (!(o->tls_key && o->tls_key[0])) return cpt_errf(err, "queue.tls_cert is set without queue.tls_key");
        if (access(o->tls_cert, R_OK) != 0) return cpt_errno(err, "queue.tls_cert %s", o->tls_cert);
        if (access(o->tls_key, R_OK) != 0) return cpt_errno(err, "queue.tls_key %s", o->tls_key);
    }
    if (cpt_mkdir_p(o->dir, 0700, err)) return cpt_err_prefix(err, "redis-server run directory");
    char *real = realpath(o->dir, NULL);
    if (!real) return cpt_errno(err, "%s", o->dir);
    if (strlen(real) + 16 >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
        cpt_errf(err, "run directory %s is too long for a unix socket path (max %zu bytes with /redis.sock); use a "
                 "shorter run.dir", real, sizeof(((struct sockaddr_un *)0)->sun_path) - 12);
        free(real);
        return -1;
    }
    snprintf(srv->dir, sizeof srv->dir, "%s", real);
    free(real);
    snprintf(srv->sock, sizeof srv->sock, "%s/redis.sock", srv->dir);
    snprintf(srv->url, sizeof srv->url, "unix://%s", srv->sock);
    snprintf(srv->log, sizeof srv->log, "%s/redis.log", srv->dir);
    srv->tcp_port = o->tcp_port;
    if (socket_answers(srv->sock))
        return cpt_errf(err, "a redis-server already answers on %s (another run using %s?); stop it first", srv->sock,
                        srv->dir);
    if (write_conf(o, srv, policy, err)) return -1;

    const char *exe = o->exe ? o->exe : getenv("CPT_REDIS_SERVER");
    if (!exe || !exe[0]) exe = "/usr/bin/redis-server";
    if (access(exe, X_OK) != 0) return cpt_errno(err, "redis-server %s", exe);
    char conf[700];
    snprintf(conf, sizeof conf, "%s/redis.conf", srv->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return cpt_errno(err, "fork for redis-server");
    if (pid == 0) {
        /* Dies with its parent: a crashed launcher or test leaves no server behind. SIGTERM is redis's orderly
         * shutdown (the AOF is flushed). The signal fires when the forking thread exits: callers start the server
         * from the thread that lives as long as they do. A parent gone before the prctl fires nothing: leave. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) _exit(1);
        /* Its own process group: a terminal's Ctrl-C (SIGINT to the foreground group, which redis takes for a
         * shutdown) reaches the launcher, which stops the roles in order while the queue stays up for them. */
        setpgid(0, 0);
        /* The AOF holds every prompt and completion: only the run's owner reads it. */
        umask(077);
        int null = open("/dev/null", O_RDWR);
        int logfd = open(srv->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (null >= 0) dup2(null, 0);
        if (logfd >= 0) { dup2(logfd, 1); dup2(logfd, 2); }
        execl(exe, exe, conf, (char *)NULL);
        _exit(127);
    }
    srv->pid = pid;
    int timeout = o->start_timeout_ms > 0 ? o->start_timeout_ms : 10000;
    double deadline = cpt_now() + timeout / 1000.0;
    for (;;) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            srv->pid = -1;
            char tail[1600];
            log_tail(srv->log, tail, sizeof tail);
            return cpt_errf(err, "redis-server %s exited (status %d) during start; %s says:\n%s", conf,
                            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), srv->log, tail);
        }
        if (socket_answers(srv->sock) == 1) return 0;
        if (cpt_now() > deadline) {
            cpt_redis_server_kill(srv);
            char tail[1600];
            log_tail(srv->log, tail, sizeof tail);
            return cpt_errf(err, "redis-server %s did not answer PING on %s within %d ms; %s says:\n%s", conf,
                            srv->sock, timeout, srv->log, tail);
        }
        sleep_ms(20);
    }
}

static int wait_exit(pid_t pid, int ms) {
    double deadline = cpt_now() + ms / 1000.0;
    for (;;) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) return 0;
        if (cpt_now() > deadline) return -1;
        sleep_ms(10);
    }
}

int cpt_redis_server_stop(cpt_redis_server *srv, cpt_err *err) {
    if (srv->pid <= 0) return 0;
    /* SIGTERM is redis's orderly shutdown: it fsyncs the AOF and removes the socket and pidfile. */
    kill(srv->pid, SIGTERM);
    if (wait_exit(srv->pid, 15000) != 0) {
        kill(srv->pid, SIGKILL);
        wait_exit(srv->pid, 5000);
        srv->pid = -1;
        return cpt_errf(err, "redis-server in %s did not stop within 15 s of SIGTERM; killed", srv->dir);
    }
    srv->pid = -1;
    return 0;
}

void cpt_redis_server_kill(cpt_redis_server *srv) {
    if (srv->pid <= 0) return;
    kill(srv->pid, SIGKILL);
    wait_exit(srv->pid, 5000);
    srv->pid = -1;
}

int cpt_free_tcp_port(cpt_err *err) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return cpt_errno(err, "socket");
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return cpt_errno(err, "bind 127.0.0.1:0");
    }
    close(fd);
    return ntohs(a.sin_port);
}
