/* What the launcher does for a satellite whose job ended (queue/release.h): the entries its consumer still holds
 * are made to look abandoned, so another consumer takes them at its next look (at most 1 s), not after
 * queue.claim_idle_ms (10 minutes here); entries the worker already handed back are not counted again; a stream
 * nobody read from has nothing to release. */
#include <unistd.h>

#include "queue/release.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

#define N 5
#define HELD 3
#define IDLE_MS 600000

int main(void) {
    unsetenv("CPT_QUEUE_ORPHAN_BEFORE"); /* not a launcher's role: no earlier attempt's orphans */
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_queue *q = test_queue_open(&t, "rel", 1000, IDLE_MS);
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);
    for (int i = 0; i < N; i++) {
        sample_prompt s;
        sample_prompt_init(&s, "rel", 0, (uint64_t)i, 6);
        cpt_buf b;
        CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &b, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(q, CPT_STREAM_PROMPTS, b.data, b.len, NULL, &err), 0);
        cpt_buf_free(&b);
    }
    /* the satellite's worker takes HELD and is gone; another worker takes the rest, then finds nothing */
    cpt_queue_msg m[N];
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_PROMPTS, "rollout", "rollout-sat0", HELD, 100, m, &err), HELD);
    for (int i = 0; i < HELD; i++) cpt_queue_msg_free(&m[i]);
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_PROMPTS, "rollout", "rollout-0", N, 100, m, &err), N - HELD);
    for (int i = 0; i < N - HELD; i++) cpt_queue_msg_free(&m[i]);
    usleep(1100 * 1000);
    CHECK_EQ_INT(cpt_queue_read(q, CPT_STREAM_PROMPTS, "rollout", "rollout-0", N, 100, m, &err), 0);

    const char *key = cpt_queue_key(q, CPT_STREAM_PROMPTS);
    CHECK_EQ_INT(cpt_queue_release_consumer(q->redis, key, "rollout", "rollout-sat0", IDLE_MS, &err), HELD);
    CHECK_EQ_INT(cpt_queue_release_consumer(q->redis, key, "rollout", "rollout-sat0", IDLE_MS, &err), 0);
    CHECK_EQ_INT(cpt_queue_release_consumer(q->redis, key, "rollout", "nobody", IDLE_MS, &err), 0);
    CHECK_EQ_INT(cpt_queue_release_consumer(q->redis, cpt_queue_key(q, CPT_STREAM_ROLLOUTS), "reward", "reward-sat0",
                                            IDLE_MS, &err), 0); /* no group yet */

    /* the other worker's next look (at most 1 s apart) takes them */
    double t0 = cpt_now();
    int got = 0;
    while (got < HELD && cpt_now() - t0 < 5) {
        int n = cpt_queue_read(q, CPT_STREAM_PROMPTS, "rollout", "rollout-0", N, 100, m, &err);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            CHECK(m[i].claimed);
            cpt_queue_msg_free(&m[i]);
        }
        got += n > 0 ? n : 0;
    }
    CHECK_EQ_INT(got, HELD);
    CHECK(cpt_now() - t0 < 2.5);
    cpt_queue_close(q);
    test_redis_stop(&t);
    return check_summary("test_queue_release");
}
