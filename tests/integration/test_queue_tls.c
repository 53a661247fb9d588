/* TLS on the private redis-server's TCP port (queue/tls.h, queue.tls_*): a CA and a server certificate made by
 * `openssl` here; the server speaks only TLS on the port; a rediss:// client with the CA authenticates and moves a
 * 8 MB value both ways, reconnects after a server restart, and a client without the CA, with another CA, to an
 * address the certificate does not name, or a plain redis:// client fails with a clear error (no password shown);
 * the online trainer connects with queue.tls_ca (its queue and its lease) and issues prompts there. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/config_keys.h"
#include "queue/conn.h"
#include "queue/tls.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"

#define SECRET "tls-t3st-pw"

static int sh(const char *cmd) {
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s: status %d", cmd, rc);
    return rc;
}

static int make_certs(const char *d) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt -days 2 "
             "-subj '/CN=cpt test CA' 2>/dev/null && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout other.key -out other.crt -days 2 "
             "-subj '/CN=another CA' 2>/dev/null && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key -out srv.csr -subj '/CN=localhost' 2>/dev/null && "
             "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext && "
             "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 "
             "-extfile ext 2>/dev/null && chmod 600 srv.key",
             d);
    return sh(cmd);
}

static int count_threads(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static cpt_redis *open_client(const char *url, const char *pw, const char *ca, cpt_err *err) {
    cpt_redis_opts o = {.url = url, .password_file = pw, .tls_ca = ca, .reconnect_ms = 3000,
                        .connect_timeout_ms = 2000};
    return cpt_redis_open(&o, err);
}

int main(void) {
    char dir[] = "/tmp/cpt-tls-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    cpt_err err = {{0}};
    char url[96];
    int port = cpt_free_tcp_port(&err);
    CHECK(port > 0);
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d/0", port);
    if (!cpt_tls_available()) { /* a build without OpenSSL says so */
        CHECK(open_client(url, NULL, NULL, &err) == NULL);
        CHECK_MSG(strstr(err.msg, "built without OpenSSL") != NULL, "%s", err.msg);
        return check_summary("test_queue_tls");
    }
    if (make_certs(dir)) return check_summary("test_queue_tls");
    char pw[128], ca[128], other[128], crt[128], key[128];
    snprintf(pw, sizeof pw, "%s/pw", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    snprintf(other, sizeof other, "%s/other.crt", dir);
    snprintf(crt, sizeof crt, "%s/srv.crt", dir);
    snprintf(key, sizeof key, "%s/srv.key", dir);
    int fd = open(pw, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, SECRET "\n", strlen(SECRET) + 1) > 0);
    close(fd);

    cpt_redis_server srv;
    /* every address, as for satellites */
    cpt_redis_server_opts so = {.dir = dir, .tcp_port = port, .password_file = pw, .appendfsync = "no",
                                .bind = "0.0.0.0", .tls_cert = crt, .tls_key = key};
    if (cpt_redis_server_start(&so, &srv, &err)) {
        fprintf(stderr, "redis-server with TLS: %s\n", err.msg);
        CHECK(0);
        return check_summary("test_queue_tls");
    }

    /* with the CA: AUTH, then an 8 MB value each way through the tunnel */
    cpt_redis *r = open_client(url, pw, ca, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    size_t big = 8u << 20; /* several MB: the relay fills the TCP buffers and waits (WANT_WRITE) */
    char *val = malloc(big);
    for (size_t i = 0; i < big; i++) val[i] = (char)('a' + i % 26);
    if (r) {
        const char *set[3] = {"SET", "k", val};
        size_t lens[3] = {3, 1, big};
        redisReply *rep = cpt_redis_command(r, 3, set, lens, "k", 0, &err);
        CHECK_MSG(rep != NULL, "%s", err.msg);
        if (rep) freeReplyObject(rep);
        const char *get[2] = {"GET", "k"};
        rep = cpt_redis_command(r, 2, get, NULL, "k", 0, &err);
        CHECK(rep && rep->type == REDIS_REPLY_STRING && rep->len == big && !memcmp(rep->str, val, big));
        if (rep) freeReplyObject(rep);
        /* a restarted server (same port, same certificate): the client reconnects through a new session */
        CHECK_EQ_INT(cpt_redis_server_stop(&srv, &err), 0);
        CHECK_MSG(cpt_redis_server_start(&so, &srv, &err) == 0, "%s", err.msg);
        const char *ping[1] = {"PING"};
        rep = cpt_redis_command(r, 1, ping, NULL, NULL, 0, &err);
        CHECK_MSG(rep && rep->type == REDIS_REPLY_STATUS && !strcmp(rep->str, "PONG"), "%s", err.msg);
        if (rep) freeReplyObject(rep);
        CHECK(r->reconnects >= 1);
        cpt_redis_close(r);
    }
    free(val);
    /* what a satellite's role does: a queue from its config (queue.url = rediss://, queue.tls_ca) */
    char ov_url[160], ov_pw[160], ov_ca[160];
    snprintf(ov_url, sizeof ov_url, "queue.url=%s", url);
    snprintf(ov_pw, sizeof ov_pw, "queue.password_file=%s", pw);
    snprintf(ov_ca, sizeof ov_ca, "queue.tls_ca=%s", ca);
    char *ov[] = {ov_url, ov_pw, ov_ca, "run.name=tlsrun"};
    cpt_config *cfg = cpt_config_load(NULL, 4, ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    cpt_queue_conn conn;
    if (cfg && cpt_queue_conn_from_config(cfg, &conn, &err) == 0) {
        CHECK_EQ_STR(conn.tls_ca, ca);
        cpt_queue_opts qo;
        cpt_queue_opts_from_config(cfg, &conn, &qo);
        cpt_queue *q = cpt_queue_open(&qo, &err);
        CHECK_MSG(q != NULL, "%s", err.msg);
        if (q) {
            CHECK_MSG(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err) == 0, "%s", err.msg);
            CHECK_MSG(cpt_queue_add(q, CPT_STREAM_PROMPTS, "hello", 5, NULL, &err) == 0, "%s", err.msg);
            CHECK_EQ_INT(test_xlen(q, CPT_STREAM_PROMPTS), 1);
            cpt_queue_close(q);
        }
    } else {
        CHECK_MSG(0, "queue from config: %s", err.msg);
    }
    cpt_config_free(cfg);
    /* cpt-queue reaches it with --tls-ca */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/cpt-queue stats --url %s --password-file %s --tls-ca %s --name tlsrun > %s/stats.txt "
             "2>&1", getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build", url, pw, ca, dir);
    sh(cmd);
    snprintf(cmd, sizeof cmd, "grep -q prompts %s/stats.txt", dir);
    sh(cmd);

    /* the online trainer (cpt train) on a rediss:// queue with queue.tls_ca: its queue and its lease (a connection
     * of its own) connect, and it issues the first prompts there; then it waits for workers and is stopped */
    {
        char run_dir[160], a_url[200], a_pw[200], a_ca[200], a_dir[200], logf[200], exe[600];
        snprintf(run_dir, sizeof run_dir, "%s/trun", dir);
        snprintf(a_url, sizeof a_url, "queue.url=%s", url);
        snprintf(a_pw, sizeof a_pw, "queue.password_file=%s", pw);
        snprintf(a_ca, sizeof a_ca, "queue.tls_ca=%s", ca);
        snprintf(a_dir, sizeof a_dir, "run.dir=%s", run_dir);
        snprintf(logf, sizeof logf, "%s/train.log", dir);
        snprintf(exe, sizeof exe, "%s/cpt", getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build");
        pid_t pid = fork();
        if (pid == 0) {
            int lf = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (lf >= 0) dup2(lf, 1), dup2(lf, 2);
            execl(exe, "cpt", "train", "examples/grpo_arithmetic.toml", a_url, a_pw, a_ca, a_dir, "run.name=tlsrun2",
                  "train.steps=2", "train.threads=1", (char *)NULL);
            _exit(127);
        }
        cpt_queue_opts to = {.url = url, .password_file = pw, .tls_ca = ca, .run = "tlsrun2", .reconnect_ms = 3000};
        cpt_queue *tq = cpt_queue_open(&to, &err);
        CHECK_MSG(tq != NULL, "%s", err.msg);
        long long issued = 0;
        int status = 0, exited = 0;
        for (int i = 0; tq && i < 300 && issued <= 0 && !exited; i++) {
            usleep(100 * 1000);
            issued = test_xlen(tq, CPT_STREAM_PROMPTS);
            exited = waitpid(pid, &status, WNOHANG) == pid;
        }
        if (!exited) {
            kill(pid, SIGTERM);
            waitpid(pid, &status, 0);
        }
        char *log = cpt_read_file(logf, NULL, &err);
        CHECK_MSG(issued > 0, "the trainer issued no prompt on the TLS queue; its log:\n%s", log ? log : "(none)");
        free(log);
        if (tq) cpt_queue_close(tq);
    }

    /* a hostname the certificate names works too */
    char url_name[96];
    snprintf(url_name, sizeof url_name, "rediss://localhost:%d", port);
    r = open_client(url_name, pw, ca, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    cpt_redis_close(r);

    /* without the CA (the system's CAs do not know ours), with another CA: refused at once, saying why */
    double t0 = cpt_now();
    CHECK(open_client(url, pw, NULL, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "not trusted: ") && strstr(err.msg, "queue.tls_ca"), "%s", err.msg);
    CHECK_MSG(cpt_now() - t0 < 2.0, "a certificate error was retried (%.1f s)", cpt_now() - t0);
    CHECK(open_client(url, pw, other, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "not trusted") && strstr(err.msg, other), "%s", err.msg);
    CHECK(!strstr(err.msg, SECRET));
    /* a certificate that does not name the address (127.0.0.2 reaches the server, the certificate says 127.0.0.1) */
    char url_other[96];
    snprintf(url_other, sizeof url_other, "rediss://127.0.0.2:%d", port);
    CHECK(open_client(url_other, pw, ca, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "not trusted: IP address mismatch") != NULL, "%s", err.msg);
    /* a plain client on the TLS port fails (no plain text answer), and says where */
    char plain[96];
    snprintf(plain, sizeof plain, "redis://127.0.0.1:%d/0", port);
    cpt_redis_opts po = {.url = plain, .password_file = pw, .reconnect_ms = -1, .connect_timeout_ms = 2000,
                         .command_timeout_ms = 2000};
    CHECK(cpt_redis_open(&po, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "127.0.0.1") != NULL, "%s", err.msg);
    /* the server's settings: TLS only on the port */
    char conf[700];
    snprintf(conf, sizeof conf, "%s/redis.conf", srv.dir);
    char *text = cpt_read_file(conf, NULL, &err);
    CHECK(text && strstr(text, "\nport 0\n") && strstr(text, "tls-port ") && strstr(text, "tls-auth-clients no"));
    free(text);

    /* every relay thread ended with its connection */
    int threads = 0;
    for (int i = 0; i < 100 && (threads = count_threads()) > 1; i++) usleep(10000);
    CHECK_EQ_INT(threads, 1);
    CHECK_EQ_INT(cpt_redis_server_stop(&srv, &err), 0);
    int rc = check_summary("test_queue_tls");
    if (!rc) cpt_remove_tree(dir, &err);
    else fprintf(stderr, "kept %s\n", dir);
    return rc;
}
