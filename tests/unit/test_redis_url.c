/* Redis URLs, password files and redaction: no server needed. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/fs.h"
#include "queue/conn.h"
#include "queue/redis.h"
#include "queue/stream.h"
#include "tests/check.h"

static void test_urls(void) {
    cpt_redis_url u;
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_redis_parse_url("redis://127.0.0.1:6380/2", &u, &err), 0);
    CHECK(!u.is_unix);
    CHECK_EQ_STR(u.host, "127.0.0.1");
    CHECK_EQ_INT(u.port, 6380);
    CHECK_EQ_INT(u.db, 2);
    CHECK_EQ_STR(u.user, "");
    CHECK_EQ_STR(u.password, "");

    CHECK_EQ_INT(cpt_redis_parse_url("redis://node-7", &u, &err), 0);
    CHECK_EQ_STR(u.host, "node-7");
    CHECK_EQ_INT(u.port, 6379);
    CHECK_EQ_INT(u.db, 0);

    CHECK_EQ_INT(cpt_redis_parse_url("redis://alice:s3cr%40t@host:7000/1", &u, &err), 0);
    CHECK_EQ_STR(u.user, "alice");
    CHECK_EQ_STR(u.password, "s3cr@t");
    CHECK_EQ_STR(u.host, "host");
    CHECK_EQ_INT(u.port, 7000);
    CHECK_EQ_INT(u.db, 1);

    CHECK_EQ_INT(cpt_redis_parse_url("redis://:pw@[::1]:7001", &u, &err), 0);
    CHECK_EQ_STR(u.user, "");
    CHECK_EQ_STR(u.password, "pw");
    CHECK_EQ_STR(u.host, "::1");
    CHECK_EQ_INT(u.port, 7001);

    CHECK_EQ_INT(cpt_redis_parse_url("unix:///tmp/run/redis.sock", &u, &err), 0);
    CHECK(u.is_unix);
    CHECK_EQ_STR(u.path, "/tmp/run/redis.sock");
    CHECK_EQ_INT(cpt_redis_parse_url("unix:///tmp/r.sock?db=3", &u, &err), 0);
    CHECK_EQ_STR(u.path, "/tmp/r.sock");
    CHECK_EQ_INT(u.db, 3);

    /* Errors name the problem and never show the password. */
    CHECK_EQ_INT(cpt_redis_parse_url("redis://u:hunter2@host:99999", &u, &err), -1);
    CHECK_MSG(strstr(err.msg, "port must be 1..65535") != NULL, "%s", err.msg);
    CHECK_MSG(strstr(err.msg, "hunter2") == NULL, "%s", err.msg);
    CHECK_MSG(strstr(err.msg, "redis://u:***@host:99999") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_redis_parse_url("redis://host:12/x", &u, &err), -1);
    CHECK_MSG(strstr(err.msg, "database must be a number") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_redis_parse_url("http://host", &u, &err), -1);
    CHECK_MSG(strstr(err.msg, "expected redis://") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_redis_parse_url("unix://relative.sock", &u, &err), -1);
    CHECK_MSG(strstr(err.msg, "absolute path") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_redis_parse_url("redis://:p%zz@h", &u, &err), -1);
    CHECK_MSG(strstr(err.msg, "bad %-escape in the password") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_redis_parse_url("redis://ho st:1", &u, &err), -1);
    CHECK_EQ_INT(cpt_redis_parse_url("redis://:1", &u, &err), -1);
    CHECK_MSG(strstr(err.msg, "no host") != NULL, "%s", err.msg);

    char r[256];
    cpt_redis_url_redacted("redis://bob:topsecret@h:1/0", r, sizeof r);
    CHECK_EQ_STR(r, "redis://bob:***@h:1/0");
    cpt_redis_url_redacted("redis://:topsecret@h", r, sizeof r);
    CHECK_EQ_STR(r, "redis://:***@h");
    cpt_redis_url_redacted("redis://bob@h:1", r, sizeof r);
    CHECK_EQ_STR(r, "redis://bob@h:1");
    cpt_redis_url_redacted("unix:///a/b.sock", r, sizeof r);
    CHECK_EQ_STR(r, "unix:///a/b.sock");
}

static void write_file(const char *path, const char *text, mode_t mode) {
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) return;
    if (write(fd, text, strlen(text)) < 0) perror(path);
    fchmod(fd, mode);
    close(fd);
}

static void test_password_file(void) {
    char dir[] = "/tmp/cpt-test-redis-url-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[512], pw[CPT_REDIS_SECRET_MAX];
    cpt_err err = {{0}};
    snprintf(path, sizeof path, "%s/pw", dir);

    write_file(path, "correct horse\n", 0600);
    CHECK_EQ_INT(cpt_redis_read_password_file(path, pw, sizeof pw, &err), 0);
    CHECK_EQ_STR(pw, "correct horse");

    write_file(path, "leaky\n", 0644);
    CHECK_EQ_INT(cpt_redis_read_password_file(path, pw, sizeof pw, &err), -1);
    CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, "mode 0644") && strstr(err.msg, "must be 0600"), "%s", err.msg);
    CHECK_MSG(strstr(err.msg, "leaky") == NULL, "%s", err.msg);

    write_file(path, "\n", 0600);
    CHECK_EQ_INT(cpt_redis_read_password_file(path, pw, sizeof pw, &err), -1);
    CHECK_MSG(strstr(err.msg, "is empty") != NULL, "%s", err.msg);

    write_file(path, "two\nlines\n", 0600);
    CHECK_EQ_INT(cpt_redis_read_password_file(path, pw, sizeof pw, &err), -1);
    CHECK_MSG(strstr(err.msg, "one line") != NULL, "%s", err.msg);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope", dir);
    CHECK_EQ_INT(cpt_redis_read_password_file(missing, pw, sizeof pw, &err), -1);
    CHECK_MSG(strstr(err.msg, missing) && strstr(err.msg, "No such file"), "%s", err.msg);

    /* Opening refuses the file before any connection is tried, and a URL password plus a file is ambiguous. */
    write_file(path, "pw\n", 0640);
    cpt_redis_opts o = {.url = "redis://127.0.0.1:1", .password_file = path, .reconnect_ms = -1};
    CHECK(cpt_redis_open(&o, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "mode 0640") != NULL, "%s", err.msg);
    write_file(path, "pw\n", 0600);
    o.url = "redis://:inline@127.0.0.1:1";
    CHECK(cpt_redis_open(&o, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "keep only the file") && !strstr(err.msg, "inline"), "%s", err.msg);

    /* Nothing listens on port 1: the failure names the (redacted) address, fast with reconnects off. */
    o.password_file = NULL;
    CHECK(cpt_redis_open(&o, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "connect redis://:***@127.0.0.1:1") != NULL, "%s", err.msg);

    unlink(path);
    rmdir(dir);
}

static void test_ids(void) {
    uint64_t ms, seq;
    CHECK_EQ_INT(cpt_stream_id_parse("1764670000123-7", &ms, &seq), 0);
    CHECK(ms == 1764670000123ull && seq == 7);
    CHECK_EQ_INT(cpt_stream_id_parse("12", &ms, &seq), -1);
    CHECK_EQ_INT(cpt_stream_id_parse("1-x", &ms, &seq), -1);
    CHECK(cpt_stream_id_cmp("5-1", "5-2") < 0);
    CHECK(cpt_stream_id_cmp("10-0", "9-99") > 0);
    CHECK(cpt_stream_id_cmp("7-3", "7-3") == 0);
    CHECK_EQ_INT(cpt_stream_from_name("scored"), CPT_STREAM_SCORED);
    CHECK_EQ_INT(cpt_stream_from_name("nope"), -1);
    CHECK_EQ_INT(cpt_stream_msg_type(CPT_STREAM_ROLLOUTS), CPT_MSG_ROLLOUT_GROUP);
}

static void test_conn(void) {
    char dir[] = "/tmp/cpt-test-conn-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    cpt_err err = {{0}};
    cpt_queue_conn c, d;
    /* nothing there yet */
    CHECK_EQ_INT(cpt_queue_conn_from_run_dir(dir, &c, &err), -1);
    CHECK_MSG(strstr(err.msg, "neither queue.json nor redis.sock") != NULL, "%s", err.msg);
    /* queue.json round trip; a password in the url is refused */
    memset(&c, 0, sizeof c);
    snprintf(c.url, sizeof c.url, "redis://:pw@h:1");
    CHECK_EQ_INT(cpt_queue_conn_write(dir, &c, &err), -1);
    CHECK_MSG(strstr(err.msg, "password_file") && !strstr(err.msg, "pw@"), "%s", err.msg);
    snprintf(c.url, sizeof c.url, "redis://node3:6390/2");
    snprintf(c.password_file, sizeof c.password_file, "/secrets/redis.pw");
    snprintf(c.run, sizeof c.run, "grpo-1");
    CHECK_EQ_INT(cpt_queue_conn_write(dir, &c, &err), 0);
    CHECK_EQ_INT(cpt_queue_conn_from_run_dir(dir, &d, &err), 0);
    CHECK_EQ_STR(d.url, "redis://node3:6390/2");
    CHECK_EQ_STR(d.password_file, "/secrets/redis.pw");
    CHECK_EQ_STR(d.run, "grpo-1");
    /* a broken queue.json is reported with file:line:column */
    char path[600];
    snprintf(path, sizeof path, "%s/queue.json", dir);
    CHECK_EQ_INT(cpt_write_file_atomic(path, "{\"url\": 5,\n", 12, &err), 0);
    CHECK_EQ_INT(cpt_queue_conn_from_run_dir(dir, &d, &err), -1);
    CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, ":2:"), "%s", err.msg);
    CHECK_EQ_INT(cpt_write_file_atomic(path, "{\"url\": 5}", 10, &err), 0);
    CHECK_EQ_INT(cpt_queue_conn_from_run_dir(dir, &d, &err), -1);
    CHECK_MSG(strstr(err.msg, "\"url\" must be a string") != NULL, "%s", err.msg);
    unlink(path);

    /* from a config: an empty queue.url means the run directory's socket */
    char over_dir[700];
    snprintf(over_dir, sizeof over_dir, "run.dir=%s", dir);
    char *ov1[] = {over_dir, "run.name=exp-3", "queue.max_len=77", "queue.claim_idle_ms=5000"};
    cpt_config *cfg = cpt_config_load(NULL, 4, ov1, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (cfg) {
        CHECK_EQ_INT(cpt_queue_conn_from_config(cfg, &d, &err), 0);
        char want[700];
        snprintf(want, sizeof want, "unix://%s/redis.sock", dir);
        CHECK_EQ_STR(d.url, want);
        CHECK_EQ_STR(d.run, "exp-3");
        cpt_queue_opts o;
        cpt_queue_opts_from_config(cfg, &d, &o);
        CHECK_EQ_INT(o.max_len, 77);
        CHECK_EQ_INT(o.claim_idle_ms, 5000);
        CHECK_EQ_INT(o.block_ms, 2000);
        CHECK(o.password_file == NULL);
        cpt_config_free(cfg);
    }
    char *ov2[] = {"queue.url=redis://:inline@h:1"};
    cfg = cpt_config_load(NULL, 1, ov2, &err);
    CHECK(cfg != NULL);
    if (cfg) {
        CHECK_EQ_INT(cpt_queue_conn_from_config(cfg, &d, &err), -1);
        CHECK_MSG(strstr(err.msg, "queue.url carries a password") && !strstr(err.msg, "inline"), "%s", err.msg);
        cpt_config_free(cfg);
    }
    char *ov3[] = {"queue.appendfsync=sometimes"};
    cfg = cpt_config_load(NULL, 1, ov3, &err);
    CHECK(cfg == NULL);
    if (cfg) cpt_config_free(cfg);
    cpt_remove_tree(dir, &err);
}

int main(void) {
    test_urls();
    test_password_file();
    test_ids();
    test_conn();
    return check_summary("test_redis_url");
}
