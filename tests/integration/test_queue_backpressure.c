/* Backpressure: with queue.max_len = 8 a producer of 40 groups blocks at 8 unacked entries and resumes as a
 * consumer drains; the stream never holds more than 8 entries and nothing is lost or trimmed unread. */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

#define N 40
#define MAX_LEN 8

int main(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_queue *q = test_queue_open(&t, "bp", MAX_LEN, 60000);
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_PROMPTS, "rollout", &err), 0);

    int pipefd[2];
    CHECK_EQ_INT(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        close(pipefd[0]);
        cpt_queue *pq = test_queue_open(&t, "bp", MAX_LEN, 60000);
        for (int i = 0; i < N; i++) {
            sample_prompt s;
            sample_prompt_init(&s, "bp", 0, (uint64_t)i, 4);
            cpt_buf b;
            if (cpt_prompt_group_encode(&s.m, &b, &err) || cpt_queue_add(pq, CPT_STREAM_PROMPTS, b.data, b.len, NULL, &err)) {
                fprintf(stderr, "producer: %s\n", err.msg);
                _exit(1);
            }
            cpt_buf_free(&b);
            if (write(pipefd[1], &i, sizeof i) != sizeof i) _exit(1);
        }
        int waits = (int)pq->stats.waits;
        _exit(waits > 0 ? 0 : 3); /* 3: it never had to wait, so backpressure was not exercised */
    }
    close(pipefd[1]);
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);

    /* Give the producer a second: it must stop at MAX_LEN. */
    usleep(1000 * 1000);
    int produced = 0, v;
    while (read(pipefd[0], &v, sizeof v) == sizeof v) produced++;
    CHECK_EQ_INT(produced, MAX_LEN);
    CHECK_EQ_INT(test_xlen(q, CPT_STREAM_PROMPTS), MAX_LEN);
    int status;
    CHECK_EQ_INT(waitpid(child, &status, WNOHANG), 0); /* still blocked, not failed */

    /* Drain slowly; the stream never exceeds the bound and every group arrives once, in order. */
    int got = 0, in_order = 1;
    long long max_seen = 0;
    double start = cpt_now();
    cpt_queue_item it;
    while (got < N && cpt_now() - start < 60) {
        int rc = cpt_queue_next(q, CPT_STREAM_PROMPTS, "rollout", "c0", &it, &err);
        if (rc < 0) { fprintf(stderr, "%s\n", err.msg); break; }
        if (rc == 0) continue;
        if (it.prompt.id.index != (uint64_t)got) in_order = 0;
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
        got++;
        long long len = test_xlen(q, CPT_STREAM_PROMPTS);
        if (len > max_seen) max_seen = len;
        if (got % 5 == 0) usleep(20 * 1000);
    }
    while (read(pipefd[0], &v, sizeof v) == sizeof v) produced++;
    CHECK_EQ_INT(got, N);
    CHECK(in_order);
    CHECK_MSG(max_seen <= MAX_LEN, "stream held %lld entries", max_seen);
    CHECK_EQ_INT(waitpid(child, &status, 0), child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer status %d", status);
    while (read(pipefd[0], &v, sizeof v) == sizeof v) produced++;
    CHECK_EQ_INT(produced, N);
    CHECK_EQ_INT(test_pending(q, CPT_STREAM_PROMPTS, "rollout"), 0);

    /* An add that cannot find room gives up after add_timeout_s with a clear message. */
    cpt_queue_opts o = {.url = t.srv.url, .run = "bp", .max_len = 2, .add_timeout_s = 0.3};
    cpt_queue *full = cpt_queue_open(&o, &err);
    CHECK(full != NULL);
    if (full) {
        CHECK_EQ_INT(cpt_queue_add(full, CPT_STREAM_ROLLOUTS, "x", 1, NULL, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(full, CPT_STREAM_ROLLOUTS, "y", 1, NULL, &err), 0);
        CHECK_EQ_INT(cpt_queue_add(full, CPT_STREAM_ROLLOUTS, "z", 1, NULL, &err), -1);
        CHECK_MSG(strstr(err.msg, "XADD cpt:bp:rollouts: stream full (queue.max_len = 2") != NULL, "%s", err.msg);
        CHECK_EQ_INT(test_xlen(full, CPT_STREAM_ROLLOUTS), 2); /* nothing trimmed: nobody read them */
        cpt_queue_close(full);
    }
    close(pipefd[0]);
    cpt_queue_close(q);
    test_redis_stop(&t);
    return check_summary("test_queue_backpressure");
}
