/* A consumer killed with SIGKILL while holding pending messages: another consumer claims them after
 * queue.claim_idle_ms (XAUTOCLAIM) and finishes them; one released by a draining consumer is taken at once; a
 * message that keeps coming back is parked in dead. */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

#define N 10
#define HELD 4

static void add_prompts(cpt_queue *q, uint64_t from, int n) {
    cpt_err err;
    for (int i = 0; i < n; i++) {
        sample_prompt s;
        sample_prompt_init(&s, "claim", 0, from + (uint64_t)i, 6);
        cpt_buf b;
        CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &b, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, b.data, b.len, NULL, &err), 0);
        cpt_buf_free(&b);
    }
}

static void killed_consumer(test_redis *t) {
    cpt_queue *q = test_queue_open(t, "claim", 1000, 300);
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    add_prompts(q, 0, N);

    int pipefd[2];
    CHECK_EQ_INT(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        /* The doomed worker: its own connection, reads HELD messages and never acks them. */
        close(pipefd[0]);
        cpt_queue *cq = test_queue_open(t, "claim", 1000, 300);
        cpt_queue_msg msgs[HELD];
        int n = cpt_queue_read(cq, CPT_STREAM_PROMPTS, "rollout", "doomed", HELD, 1000, msgs, &err);
        char c = (char)n;
        if (write(pipefd[1], &c, 1) != 1) _exit(2);
        for (;;) pause();
    }
    close(pipefd[1]);
    char held = 0;
    CHECK_EQ_INT(read(pipefd[0], &held, 1), 1);
    CHECK_EQ_INT(held, HELD);
    close(pipefd[0]);
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), HELD);

    /* The rescuer finishes everything: the N - HELD fresh ones at once, the held ones once idle for 300 ms. */
    int seen[N] = {0}, total = 0;
    double start = cpt_now();
    cpt_queue_item it;
    while (total < N && cpt_now() - start < 20) {
        int rc = cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", "rescuer", &it, &err);
        CHECK(rc >= 0);
        if (rc < 0) break;
        if (rc == 0) continue;
        uint64_t i = it.prompt.id.index;
        if (i < N) seen[i]++;
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
        total++;
    }
    CHECK_EQ_INT(total, N);
    int once = 1;
    for (int i = 0; i < N; i++) once &= seen[i] == 1;
    CHECK(once);
    CHECK_EQ_INT(q->stats.claimed, HELD);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);
    cpt_queue_close(q);
}

static void poison(test_redis *t) {
    cpt_queue_opts o = {.url = t->srv.url, .run = "claim", .claim_idle_ms = 100, .block_ms = 100,
                        .max_deliveries = 2};
    cpt_err err = {{0}};
    cpt_queue *q = cpt_queue_open(&o, &err);
    CHECK(q != NULL);
    if (!q) return;
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_ROLLOUTS, "reward", &err), 0);
    CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_ROLLOUTS, "crashes-its-reader", 18, NULL, &err), 0);
    cpt_queue_msg m;
    /* A, B and C each take it and "crash" (never ack). The third delivery exceeds max_deliveries = 2. */
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_ROLLOUTS, "reward", "A", 1, 100, &m, &err), 1);
    cpt_queue_msg_free(&m);
    usleep(150 * 1000);
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_ROLLOUTS, "reward", "B", 1, 100, &m, &err), 1);
    CHECK(m.claimed);
    cpt_queue_msg_free(&m);
    usleep(150 * 1000);
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_ROLLOUTS, "reward", "C", 1, 100, &m, &err), 0);
    CHECK_EQ_INT(q->stats.dead, 1);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_ROLLOUTS, "reward"), 0);
    const char *argv[] = {"XREVRANGE", cpt_queue_key(q, CPT_STREAM_DEAD), "+", "-", "COUNT", "1"};
    redisReply *r = cpt_redis_command(q->redis, 6, argv, NULL, argv[1], 0, &err);
    int found = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        redisReply *f = r->element[0]->element[1];
        for (size_t k = 0; k + 1 < f->elements; k += 2)
            if (!strcmp(f->element[k]->str, "reason") && strstr(f->element[k + 1]->str, "delivered 3 times")) found = 1;
    }
    CHECK(found);
    if (r) freeReplyObject(r);
    cpt_queue_close(q);
}

/* A worker that takes longer than claim_idle_ms keeps its message by touching it. */
static void touch(test_redis *t) {
    cpt_queue *q = test_queue_open(t, "claim", 1000, 300);
    cpt_queue *other = test_queue_open(t, "claim", 1000, 300);
    other->block_ms = 20; /* so the loop below checks for claimable work every ~170 ms */
    cpt_err err = {{0}};
    add_prompts(q, 100, 1);
    cpt_queue_item it;
    CHECK_EQ_INT(cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", "slow", &it, &err), 1);
    CHECK_EQ_INT(it.prompt.id.index, 100);
    cpt_queue_item o;
    for (int i = 0; i < 4; i++) { /* 4 x 150 ms = 600 ms of work, never 300 ms idle */
        usleep(150 * 1000);
        CHECK_EQ_INT(cpt_queue_touch(q, &it, &err), 0);
        CHECK_EQ_INT(cpt_queue_next(other, CPT_STREAM_PROMPTS, "rollout", "thief", &o, &err), 0);
    }
    usleep(400 * 1000); /* the slow worker stops touching: now it is claimable */
    other->last_claim[CPT_STREAM_PROMPTS] = 0;
    CHECK_EQ_INT(cpt_queue_next(other, CPT_STREAM_PROMPTS, "rollout", "thief", &o, &err), 1);
    CHECK(o.msg.claimed && o.prompt.id.index == 100);
    CHECK_EQ_INT(cpt_queue_done(other, &o, &err), 0);
    cpt_queue_item_free(&o);
    cpt_queue_item_free(&it);
    cpt_queue_close(other);
    cpt_queue_close(q);
}

/* A draining worker hands back what it holds: another consumer takes it at its next look for abandoned work,
 * long before claim_idle_ms (60 s here). */
static void release(test_redis *t) {
    cpt_queue *q = test_queue_open(t, "claim", 1000, 60000);
    cpt_queue *other = test_queue_open(t, "claim", 1000, 60000);
    cpt_err err = {{0}};
    add_prompts(q, 200, 1);
    cpt_queue_item it, o;
    CHECK_EQ_INT(cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", "leaver", &it, &err), 1);
    CHECK_EQ_INT(it.prompt.id.index, 200);
    other->last_claim[CPT_STREAM_PROMPTS] = 0;
    CHECK_EQ_INT(cpt_queue_next(other, CPT_STREAM_PROMPTS, "rollout", "taker", &o, &err), 0); /* still held */
    CHECK_EQ_INT(cpt_queue_release(q, &it, &err), 0);
    other->last_claim[CPT_STREAM_PROMPTS] = 0;
    double t0 = cpt_now();
    CHECK_EQ_INT(cpt_queue_next(other, CPT_STREAM_PROMPTS, "rollout", "taker", &o, &err), 1);
    CHECK(cpt_now() - t0 < 1.0);
    CHECK(o.msg.claimed && o.prompt.id.index == 200);
    CHECK_EQ_INT(cpt_queue_done(other, &o, &err), 0);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);
    cpt_queue_item_free(&o);
    cpt_queue_item_free(&it);
    cpt_queue_close(other);
    cpt_queue_close(q);
}

/* A new launch attempt (after a requeue): what consumers of the earlier attempt held is taken at once; what a
 * consumer of this attempt holds stays its own for claim_idle_ms (60 s here). */
static void orphans_of_earlier_attempt(test_redis *t) {
    cpt_queue *old = test_queue_open(t, "claim", 1000, 60000);
    cpt_err err = {{0}};
    add_prompts(old, 300, 2);
    cpt_queue_item held, mine, got;
    CHECK_EQ_INT(cpt_queue_next(old, CPT_STREAM_PROMPTS, "rollout", "gone", &held, &err), 1);
    CHECK_EQ_INT(held.prompt.id.index, 300);
    usleep(1200 * 1000); /* more than the 0.5 s clock-skew margin between the two attempts */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cpt_queue_opts o = {.url = t->srv.url, .run = "claim", .max_len = 1000, .claim_idle_ms = 60000, .block_ms = 200,
                        .orphan_before = (double)now.tv_sec + now.tv_nsec / 1e9};
    cpt_queue *a = cpt_queue_open(&o, &err), *b = cpt_queue_open(&o, &err);
    CHECK_MSG(a && b, "%s", err.msg);
    /* a's first read claims the orphan before reading anything new */
    CHECK_EQ_INT(cpt_queue_next(a, CPT_STREAM_PROMPTS, "rollout", "a", &got, &err), 1);
    CHECK(got.msg.claimed && got.prompt.id.index == 300);
    /* b takes the new prompt 301; a's look for abandoned work must not take it from b (nor 300 back from a) */
    CHECK_EQ_INT(cpt_queue_next(b, CPT_STREAM_PROMPTS, "rollout", "b", &mine, &err), 1);
    CHECK(!mine.msg.claimed && mine.prompt.id.index == 301);
    cpt_queue_item none;
    a->last_claim[CPT_STREAM_PROMPTS] = 0;
    snprintf(a->claim_cursor[CPT_STREAM_PROMPTS], sizeof a->claim_cursor[0], "0-0");
    CHECK_EQ_INT(cpt_queue_next(a, CPT_STREAM_PROMPTS, "rollout", "a", &none, &err), 0);
    CHECK_EQ_INT(cpt_queue_done(a, &got, &err), 0);
    CHECK_EQ_INT(cpt_queue_done(b, &mine, &err), 0);
    CHECK_EQ_INT(test_pending(a, CPT_STREAM_PROMPTS, "rollout"), 0);
    cpt_queue_item_free(&got);
    cpt_queue_item_free(&mine);
    cpt_queue_item_free(&held);
    cpt_queue_close(a);
    cpt_queue_close(b);
    cpt_queue_close(old);
}

int main(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    killed_consumer(&t);
    touch(&t);
    release(&t);
    orphans_of_earlier_attempt(&t);
    poison(&t);
    test_redis_stop(&t);
    return check_summary("test_queue_claim");
}
