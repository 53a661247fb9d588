/* Durability: redis-server is killed with SIGKILL in the middle of a stream of groups and restarted on the same
 * append-only file. The producer reconnects and carries on (retrying the add that was in flight); every group the
 * producer saw acknowledged is delivered, and the consumer drops the duplicates a retry can make, by group id.
 * Run once with appendfsync always and once with everysec (a process crash loses nothing with either: Redis
 * writes the AOF before it replies). */
#include <pthread.h>
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

/* A restarted server answers LOADING while it reads its AOF back. A client whose command lands in that window waits
 * and sends it again (nothing ran) instead of failing. Half a million keys make the window wide enough to hit; the
 * command is sent from a second thread while the main thread restarts the server (the server must stay the main
 * thread's child: it dies with the thread that started it). */
typedef struct incr_job {
    cpt_redis *r;
    long long v;
    int rc;
    cpt_err err;
} incr_job;

static void *incr_during_restart(void *arg) {
    incr_job *j = arg;
    const char *incr[] = {"INCR", "k500000"};
    j->rc = cpt_redis_integer(j->r, 2, incr, "k500000", &j->v, &j->err);
    return NULL;
}

static void loading_window(void) {
    test_redis t;
    test_redis_start(&t, "everysec");
    incr_job j = {0};
    cpt_redis_opts o = {.url = t.srv.url};
    j.r = cpt_redis_open(&o, &j.err);
    CHECK_MSG(j.r != NULL, "%s", j.err.msg);
    const char *fill[] = {"EVAL", "for i = 1, 500000 do redis.call('SET', 'k' .. i, i) end return 1", "0"};
    long long one = 0;
    CHECK_EQ_INT(cpt_redis_integer(j.r, 3, fill, "k*", &one, &j.err), 0);
    cpt_redis_server_kill(&t.srv);
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, incr_during_restart, &j), 0);
    usleep(100 * 1000); /* the client is in its reconnect backoff when the new server appears */
    test_redis_restart(&t, "everysec");
    pthread_join(th, NULL);
    CHECK_MSG(j.rc == 0, "%s", j.err.msg);
    CHECK_EQ_INT(j.v, 500001); /* ran once, on the fully loaded dataset */
    CHECK_MSG(j.r->loading_waits > 0, "the command never met a loading server: the window was not exercised");
    printf("loading window: command sent again %ld times while the server loaded, reconnects %ld\n",
           j.r->loading_waits, j.r->reconnects);
    cpt_redis_close(j.r);
    test_redis_stop(&t);
}

int main(void) {
    loading_window();
    run("always");
    run("everysec");
    return check_summary("test_queue_durability");
}
