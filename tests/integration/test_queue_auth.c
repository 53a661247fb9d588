/* Password over TCP: a private redis-server on a random localhost port with requirepass (from a 0600 file,
 * written to redis.conf, never on a command line). The queue connects with queue.password_file; without it, or
 * with a wrong one, the error names the command and key and never the password. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/integration/redis_helper.h"

#define SECRET "tr0ub4dor-and-3"

static int file_contains(const char *path, const char *needle, size_t n) {
    size_t len;
    char *d = cpt_read_file(path, &len, NULL);
    if (!d) return 0;
    int found = memmem(d, len, needle, n) != NULL;
    free(d);
    return found;
}

int main(void) {
    char dir[] = "/tmp/cpt-q-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char pw[600], badpw[600];
    snprintf(pw, sizeof pw, "%s/redis.password", dir);
    snprintf(badpw, sizeof badpw, "%s/wrong.password", dir);
    int fd = open(pw, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, SECRET "\n", strlen(SECRET) + 1) > 0);
    close(fd);
    fd = open(badpw, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, "nope\n", 5) == 5);
    close(fd);

    cpt_err err = {{0}};
    int port = cpt_free_tcp_port(&err);
    CHECK(port > 0);
    cpt_redis_server srv;
    cpt_redis_server_opts so = {.dir = dir, .tcp_port = port, .password_file = pw, .appendfsync = "always"};
    if (cpt_redis_server_start(&so, &srv, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    /* The password is in the 0600 redis.conf, not on the server's command line. */
    char conf[700], cmdline[64];
    snprintf(conf, sizeof conf, "%s/redis.conf", srv.dir);
    struct stat st;
    CHECK(stat(conf, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(file_contains(conf, SECRET, strlen(SECRET)));
    snprintf(cmdline, sizeof cmdline, "/proc/%d/cmdline", (int)srv.pid);
    CHECK(!file_contains(cmdline, SECRET, strlen(SECRET)));

    /* A TCP server without a password file is refused outright. */
    cpt_redis_server other;
    cpt_redis_server_opts open_port = {.dir = dir, .tcp_port = port + 1};
    CHECK_EQ_INT(cpt_redis_server_start(&open_port, &other, &err), -1);
    CHECK_MSG(strstr(err.msg, "needs queue.password_file") != NULL, "%s", err.msg);

    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", port);
    cpt_queue_opts o = {.url = url, .password_file = pw, .run = "auth", .reconnect_ms = -1};
    cpt_queue *q = cpt_queue_open(&o, &err);
    CHECK_MSG(q != NULL, "%s", err.msg);
    if (q) {
        CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
        CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, "hello", 5, NULL, &err), 0);
        cpt_queue_msg m;
        CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_PROMPTS, "rollout", "c", 1, 100, &m, &err), 1);
        CHECK(m.len == 5 && !memcmp(m.data, "hello", 5));
        CHECK_EQ_INT(cpt_queue_ack(q, CPT_STREAM_PROMPTS, "rollout", m.id, &err), 0);
        cpt_queue_msg_free(&m);
        cpt_queue_close(q);
    }
    /* Database 3 through the URL, with the password: SELECT follows AUTH. */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/3", port);
    q = cpt_queue_open(&o, &err);
    CHECK_MSG(q != NULL, "%s", err.msg);
    if (q) {
        CHECK_EQ_INT(test_xlen(q, CPT_STREAM_PROMPTS), 0); /* db 3 is empty */
        cpt_queue_close(q);
    }
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", port);

    /* No password: the first command fails with NOAUTH, naming the command and the key. */
    o.password_file = NULL;
    q = cpt_queue_open(&o, &err);
    CHECK(q != NULL);
    if (q) {
        CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, "x", 1, NULL, &err), -1);
        CHECK_MSG(strstr(err.msg, "EVAL cpt:auth:prompts: NOAUTH") != NULL, "%s", err.msg);
        cpt_queue_close(q);
    }
    /* Wrong password: refused at connect, and the message does not carry either password. */
    o.password_file = badpw;
    q = cpt_queue_open(&o, &err);
    CHECK(q == NULL);
    CHECK_MSG(strstr(err.msg, "AUTH on redis://127.0.0.1:") && strstr(err.msg, "WRONGPASS"), "%s", err.msg);
    CHECK_MSG(!strstr(err.msg, "nope") && !strstr(err.msg, SECRET), "%s", err.msg);
    /* The log does not either. */
    CHECK(!file_contains(srv.log, SECRET, strlen(SECRET)));

    CHECK_EQ_INT(cpt_redis_server_stop(&srv, &err), 0);
    cpt_remove_tree(dir, &err);
    return check_summary("test_queue_auth");
}
