/* Durability: redis-server is killed with SIGKILL in the middle of a stream of groups and restarted on the same
 * append-only file. The producer reconnects and carries on (retrying the add that was in flight); every group the
 * producer saw acknowledged is delivered, and the consumer drops the duplicates a retry can make, by group id.
 * Run once with appendfsync always and once with everysec (a process crash loses nothing with either: Redis
 * writes the AOF before it replies). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "tests/unit/test_schema_samples.h"

#define N 300
#define KILL_AT 100

static void run(const char *policy) {
    test_redis t;
    test_redis_start(&t, policy);
    cpt_queue *q = test_queue_open(&t, "dur", 100000, 60000);
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_queue_create_group(q, CPT_STREAM_SCORED, "trainer", &err), 0);

    int pipefd[2];
    CHECK_EQ_INT(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        close(pipefd[0]);
        cpt_queue *pq = test_queue_open(&t, "dur", 100000, 60000);
        for (int i = 0; i < N; i++) {
            cpt_rollout_group g = sample_group("dur", 0, (uint64_t)i, 2, 64, 1);
            cpt_buf b;
            if (cpt_rollout_group_encode(&g, &b, &err) ||
                cpt_queue_add(pq, CPT_STREAM_SCORED, b.data, b.len, NULL, &err)) {
                fprintf(stderr, "producer: %s\n", err.msg);
                _exit(1);
            }
            cpt_buf_free(&b);
            sample_group_free(&g);
            if (write(pipefd[1], &i, sizeof i) != sizeof i) _exit(1); /* acknowledged by Redis */
        }
        _exit(pq->redis->reconnects > 0 ? 0 : 3); /* 3: the kill did not hit the producer mid-stream */
    }
    close(pipefd[1]);
    int acked[N] = {0}, n_acked = 0, v, killed = 0;
    while (read(pipefd[0], &v, sizeof v) == sizeof v) {
        if (v >= 0 && v < N) acked[v] = 1;
        n_acked++;
        if (n_acked == KILL_AT && !killed) {
            cpt_redis_server_kill(&t.srv);
            killed = 1;
            usleep(300 * 1000);
            test_redis_restart(&t, policy);
        }
    }
    close(pipefd[0]);
    int status;
    CHECK_EQ_INT(waitpid(child, &status, 0), child);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: producer status %d", policy, status);
    CHECK(killed);
    CHECK_EQ_INT(n_acked, N);

    int delivered[N] = {0}, total = 0;
    cpt_queue_item it;
    int rc;
    while ((rc = cpt_queue_next(q, CPT_STREAM_SCORED, "trainer", "t0", &it, &err)) == 1) {
        uint64_t i = it.rollout.id.index;
        if (i < N) delivered[i]++;
        CHECK_EQ_INT(it.rollout.completions[1].n_tokens, 65);
        CHECK_EQ_INT(cpt_queue_done(q, &it, &err), 0);
        cpt_queue_item_free(&it);
        total++;
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    int lost = 0, twice = 0;
    for (int i = 0; i < N; i++) {
        if (acked[i] && !delivered[i]) lost++;
        if (delivered[i] > 1) twice++;
    }
    CHECK_MSG(lost == 0, "%s: %d acknowledged groups lost", policy, lost);
    CHECK_MSG(twice == 0, "%s: %d groups handed out twice", policy, twice);
    CHECK_EQ_INT(total, N);
    long long entries = test_xlen(q, CPT_STREAM_SCORED);
    CHECK_EQ_INT(entries, N + q->stats.duplicates); /* a retried add shows up as a dropped duplicate */
    printf("durability(%s): %d groups acknowledged, %d delivered, %ld duplicates dropped, consumer reconnects %ld\n",
           policy, n_acked, total, q->stats.duplicates, q->redis->reconnects);
    cpt_queue_close(q);
    test_redis_stop(&t);
}

int main(void) {
    run("always");
    run("everysec");
    return check_summary("test_queue_durability");
}
