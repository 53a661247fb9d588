/* The trainer lease against a real redis-server: two holders, expiry, renewal, a stale token refused by the
 * fenced writes (prompt add, weights announcement, the ack and dead letter of scored groups), the renewal thread, a
 * bounded wait; and the error text of a command sent on a connection whose reconnect failed. */
#include <sys/wait.h>
#include <unistd.h>

#include "queue/lease.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

static void two_holders_expiry_renewal(cpt_queue *q) {
    cpt_err err = {{0}};
    cpt_redis *r = q->redis;
    int64_t a = 0, b = 0;
    char other[256] = "";
    long long left = 0;
    CHECK_EQ_INT(cpt_lease_try(r, "runL", "A", 400, &a, other, sizeof other, &left, &err), 1);
    CHECK(a >= 1);
    /* a second holder is refused and told who holds it */
    CHECK_EQ_INT(cpt_lease_try(r, "runL", "B", 400, &b, other, sizeof other, &left, &err), 0);
    char want[64];
    snprintf(want, sizeof want, "%lld A", (long long)a);
    CHECK_EQ_STR(other, want);
    CHECK(left > 0 && left <= 400);
    CHECK_EQ_INT(cpt_lease_check(r, "runL", a, &err), 0);
    /* renewal keeps it past its first ttl */
    for (int i = 0; i < 4; i++) {
        usleep(200 * 1000);
        CHECK_EQ_INT(cpt_lease_renew(r, "runL", a, "A", 400, &err), 1);
    }
    CHECK_EQ_INT(cpt_lease_try(r, "runL", "B", 400, &b, other, sizeof other, &left, &err), 0);
    /* without renewal it expires, and B gets a newer token */
    usleep(550 * 1000);
    CHECK_EQ_INT(cpt_lease_try(r, "runL", "B", 400, &b, other, sizeof other, &left, &err), 1);
    CHECK_EQ_INT(b, a + 1);
    /* A is fenced off: its renewal and its check fail, and it cannot take B's lease back */
    CHECK_EQ_INT(cpt_lease_renew(r, "runL", a, "A", 400, &err), 0);
    CHECK_EQ_INT(cpt_lease_check(r, "runL", a, &err), -1);
    CHECK_MSG(strstr(err.msg, "fenced off") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_lease_give_back(r, "runL", a, &err), 0);
    CHECK_EQ_INT(cpt_lease_check(r, "runL", b, &err), 0);
    /* a lease that expired with nobody taking it is renewed by its holder */
    usleep(550 * 1000);
    CHECK_EQ_INT(cpt_lease_renew(r, "runL", b, "B", 400, &err), 1);
    CHECK_EQ_INT(cpt_lease_give_back(r, "runL", b, &err), 1);
    int64_t c = 0;
    CHECK_EQ_INT(cpt_lease_try(r, "runL", "C", 400, &c, other, sizeof other, &left, &err), 1);
    CHECK_EQ_INT(c, b + 1); /* tokens never repeat */
    CHECK_EQ_INT(cpt_lease_give_back(r, "runL", c, &err), 1);
}

static long long hlen_weights(cpt_queue *q) {
    const char *argv[] = {"HLEN", cpt_queue_key(q, CPT_HASH_WEIGHTS)};
    return test_int(q, 2, argv);
}

static void stale_token_refused(const test_redis *t) {
    cpt_err err = {{0}};
    cpt_queue *old = test_queue_open(t, "runF", 64, 60000), *cur = test_queue_open(t, "runF", 64, 60000);
    int64_t a = 0, b = 0;
    CHECK_EQ_INT(cpt_lease_try(old->redis, "runF", "old", 300, &a, NULL, 0, NULL, &err), 1);
    cpt_queue_set_fence(old, a);
    sample_prompt s;
    sample_prompt_init(&s, "runF", 0, 1, 8);
    cpt_buf buf;
    CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &buf, &err), 0);
    CHECK_MSG(cpt_queue_add(old, CPT_STREAM_PROMPTS, buf.data, buf.len, NULL, &err) == 0, "%s", err.msg);
    cpt_weights_msg w;
    memset(&w, 0, sizeof w);
    snprintf(w.run, sizeof w.run, "runF");
    w.version = 1;
    snprintf(w.transport, sizeof w.transport, "file");
    snprintf(w.location, sizeof w.location, "/x/v1.safetensors");
    snprintf(w.checksum, sizeof w.checksum, "xxh64:0000000000000000");
    CHECK_MSG(cpt_queue_publish_weights(old, &w, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(hlen_weights(old), 2);

    /* the old holder stalls past its ttl; a new trainer takes over */
    usleep(450 * 1000);
    CHECK_EQ_INT(cpt_lease_try(cur->redis, "runF", "new", 300, &b, NULL, 0, NULL, &err), 1);
    cpt_queue_set_fence(cur, b);
    CHECK_MSG(cpt_queue_add(old, CPT_STREAM_PROMPTS, buf.data, buf.len, NULL, &err) == -1, "stale add accepted");
    CHECK_MSG(strstr(err.msg, "FENCED") != NULL, "%s", err.msg);
    CHECK(cpt_lease_is_fenced_reply(old->redis));
    CHECK_EQ_INT(test_xlen(old, CPT_STREAM_PROMPTS), 1);
    w.version = 2;
    CHECK_EQ_INT(cpt_queue_publish_weights(old, &w, &err), -1);
    CHECK(cpt_lease_is_fenced_reply(old->redis));
    cpt_weights_msg got;
    CHECK_EQ_INT(cpt_queue_get_weights(cur, &got, &err), 1);
    CHECK_EQ_INT(got.version, 1);
    /* the new holder writes */
    CHECK_MSG(cpt_queue_add(cur, CPT_STREAM_PROMPTS, buf.data, buf.len, NULL, &err) == 0, "%s", err.msg);
    w.version = 3;
    CHECK_MSG(cpt_queue_publish_weights(cur, &w, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(test_xlen(cur, CPT_STREAM_PROMPTS), 2);
    CHECK_EQ_INT(cpt_queue_get_weights(cur, &got, &err), 1);
    CHECK_EQ_INT(got.version, 3);
    cpt_buf_free(&buf);
    cpt_queue_close(old);
    cpt_queue_close(cur);
}

static void held_lease_thread(const test_redis *t) {
    cpt_err err = {{0}};
    cpt_lease_opts o = {.url = t->srv.url, .run = "runT", .holder = "first", .ttl_ms = 300, .wait_s = 0};
    cpt_lease *l1 = cpt_lease_acquire(&o, &err);
    CHECK_MSG(l1 != NULL, "%s", err.msg);
    if (!l1) return;
    /* the thread renews: after several ttls it still holds, and a second one waiting 0.8 s is refused by name */
    usleep(900 * 1000);
    cpt_lease_opts o2 = o;
    o2.holder = "second";
    o2.wait_s = 0.8;
    double t0 = cpt_now();
    cpt_lease *l2 = cpt_lease_acquire(&o2, &err);
    CHECK(l2 == NULL);
    CHECK(cpt_now() - t0 >= 0.75);
    CHECK_MSG(strstr(err.msg, "first") != NULL && strstr(err.msg, "another trainer") != NULL, "%s", err.msg);
    CHECK(!cpt_lease_lost(l1));
    /* a clean release lets the next one in at once */
    int64_t tok1 = cpt_lease_token(l1);
    cpt_lease_release(l1);
    o2.wait_s = 0;
    l2 = cpt_lease_acquire(&o2, &err);
    CHECK_MSG(l2 != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_lease_token(l2), tok1 + 1);
    /* someone else bumping the fence (a takeover after a stall) is noticed by the renewal thread */
    cpt_queue *q = test_queue_open(t, "runT", 64, 60000);
    const char *argv[] = {"INCR", "cpt:runT:trainer_fence"};
    CHECK_EQ_INT(test_int(q, 2, argv), tok1 + 2);
    for (int i = 0; i < 30 && !cpt_lease_lost(l2); i++) usleep(50 * 1000);
    CHECK(cpt_lease_lost(l2));
    cpt_lease_release(l2);
    cpt_queue_close(q);
}

/* The lease of a trainer of this host killed with -9 is taken over at once; a live holder's is not. */
static void dead_holder_taken_over(const test_redis *t) {
    cpt_err err = {{0}};
    cpt_queue *q = test_queue_open(t, "runD", 64, 60000);
    char host[64] = "", dead[128], live[128];
    gethostname(host, sizeof host - 1);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    snprintf(dead, sizeof dead, "%s:%ld", host, (long)child);
    snprintf(live, sizeof live, "%s:%ld", host, (long)getppid());
    int64_t a = 0;
    CHECK_EQ_INT(cpt_lease_try(q->redis, "runD", dead, 60000, &a, NULL, 0, NULL, &err), 1);
    cpt_lease_opts o = {.url = t->srv.url, .run = "runD", .ttl_ms = 60000, .wait_s = 0};
    cpt_lease *l = cpt_lease_acquire(&o, &err);
    CHECK_MSG(l != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_lease_token(l), a + 1);
    cpt_lease_release(l);
    CHECK_EQ_INT(cpt_lease_try(q->redis, "runD", live, 60000, &a, NULL, 0, NULL, &err), 1);
    CHECK(cpt_lease_acquire(&o, &err) == NULL);
    CHECK_MSG(strstr(err.msg, live) != NULL, "%s", err.msg);
    /* a take-over of a value that changed meanwhile does nothing */
    int64_t b = 0;
    CHECK_EQ_INT(cpt_lease_take_over(q->redis, "runD", "1 someone:1", "x", 1000, &b, &err), 0);
    CHECK_EQ_INT(b, 0);
    cpt_queue_close(q);
}

/* A command after a failed reconnect used to log and return whatever bytes were in the caller's error. */
static void error_text_after_failed_reconnect(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_err err = {{0}};
    cpt_redis_opts ro = {.url = t.srv.url, .reconnect_ms = 200, .connect_timeout_ms = 200};
    cpt_redis *r = cpt_redis_open(&ro, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    test_redis_stop(&t);
    if (!r) return;
    const char *argv[] = {"PING"};
    CHECK(cpt_redis_command(r, 1, argv, NULL, NULL, 0, &err) == NULL);
    CHECK(r->ctx == NULL);
    snprintf(err.msg, sizeof err.msg, "GARBAGE-BYTES");
    CHECK(cpt_redis_command(r, 1, argv, NULL, NULL, 0, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "GARBAGE") == NULL, "%s", err.msg);
    CHECK_MSG(strstr(err.msg, "PING") != NULL && strstr(err.msg, "not connected") != NULL, "%s", err.msg);
    cpt_redis_close(r);
}


/* A fenced-off trainer can neither ack nor dead-letter the scored groups it read (the one that took over has them
 * to train); the current holder can. A dead letter only counts when it acks: an entry acked before is not put in
 * dead again. */
static void stale_token_ack_dead(const test_redis *t) {
    cpt_err err = {{0}};
    cpt_queue *old = test_queue_open(t, "runG", 64, 60000), *cur = test_queue_open(t, "runG", 64, 60000);
    CHECK_EQ_INT(cpt_queue_create_group(cur, CPT_STREAM_SCORED, "trainer", &err), 0);
    for (int i = 0; i < 2; i++)
        CHECK_MSG(cpt_queue_add(cur, CPT_STREAM_SCORED, "x", 1, NULL, &err) == 0, "%s", err.msg);
    int64_t a = 0, b = 0;
    CHECK_EQ_INT(cpt_lease_try(old->redis, "runG", "old", 300, &a, NULL, 0, NULL, &err), 1);
    cpt_queue_set_fence(old, a);
    cpt_queue_msg m[2];
    memset(m, 0, sizeof m);
    CHECK_EQ_INT(cpt_queue_read(old, CPT_STREAM_SCORED, "trainer", "trainer", 2, 0, m, &err), 2);
    CHECK_EQ_INT(test_pending(old, CPT_STREAM_SCORED, "trainer"), 2);
    usleep(450 * 1000); /* the old holder stalls past its ttl; a new trainer takes over */
    CHECK_EQ_INT(cpt_lease_try(cur->redis, "runG", "new", 300, &b, NULL, 0, NULL, &err), 1);
    cpt_queue_set_fence(cur, b);
    CHECK_EQ_INT(cpt_queue_ack(old, CPT_STREAM_SCORED, "trainer", m[0].id, &err), -1);
    CHECK_MSG(strstr(err.msg, "FENCED") != NULL, "%s", err.msg);
    CHECK_EQ_INT(cpt_queue_dead_letter(old, CPT_STREAM_SCORED, "trainer", &m[1], "test", &err), -1);
    CHECK_MSG(strstr(err.msg, "FENCED") != NULL, "%s", err.msg);
    CHECK_EQ_INT(test_pending(cur, CPT_STREAM_SCORED, "trainer"), 2);
    CHECK_EQ_INT(test_xlen(cur, CPT_STREAM_DEAD), 0);
    /* the holder dead-letters one, twice: one dead entry; and acks the other */
    CHECK_MSG(cpt_queue_dead_letter(cur, CPT_STREAM_SCORED, "trainer", &m[1], "test", &err) == 0, "%s", err.msg);
    CHECK_MSG(cpt_queue_dead_letter(cur, CPT_STREAM_SCORED, "trainer", &m[1], "test", &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(test_xlen(cur, CPT_STREAM_DEAD), 1);
    CHECK_MSG(cpt_queue_ack(cur, CPT_STREAM_SCORED, "trainer", m[0].id, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(test_pending(cur, CPT_STREAM_SCORED, "trainer"), 0);
    /* the same for an unfenced queue (a worker's): an entry acked before is not dead-lettered */
    cpt_queue *w = test_queue_open(t, "runG", 64, 60000);
    CHECK_MSG(cpt_queue_dead_letter(w, CPT_STREAM_SCORED, "trainer", &m[0], "test", &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(test_xlen(w, CPT_STREAM_DEAD), 1);
    cpt_queue_msg_free(&m[0]);
    cpt_queue_msg_free(&m[1]);
    cpt_queue_close(w);
    cpt_queue_close(old);
    cpt_queue_close(cur);
}

int main(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_queue *q = test_queue_open(&t, "runL", 64, 60000);
    two_holders_expiry_renewal(q);
    cpt_queue_close(q);
    stale_token_refused(&t);
    stale_token_ack_dead(&t);
    held_lease_thread(&t);
    dead_holder_taken_over(&t);
    test_redis_stop(&t);
    error_text_after_failed_reconnect();
    return check_summary("test_trainer_lease");
}
