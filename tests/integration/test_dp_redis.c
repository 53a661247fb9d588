/* The data-parallel group's Redis transport (trainer/dp.h, bootstrap "redis") against a private redis-server:
 * three rank processes agree on rank 0's NCCL unique id published under one key (with an expiry); a rank whose
 * rank 0 never publishes gives up after its timeout naming the key; a key holding something else is refused.
 * Rank 0 draws a real id through NCCL (no GPU needed). Where NCCL cannot be loaded (or the build has no CUDA) the
 * three ranks cannot run: the test exits 77 with the reason once the rest has passed, a skip and not a pass. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/exit_status.h"
#include "queue/redis.h"
#include "tests/check.h"
#include "tests/integration/redis_helper.h"
#include "trainer/dp.h"

#ifdef CPT_HAVE_CUDA
#define KEY "cpt:dptest:dp_uid:1"

static cpt_redis *open_redis(const test_redis *t) {
    cpt_redis_opts o = {.url = t->srv.url};
    cpt_err err;
    cpt_redis *r = cpt_redis_open(&o, &err);
    if (!r) {
        fprintf(stderr, "redis: %s\n", err.msg);
        exit(1);
    }
    return r;
}

/* One rank in a child: writes its id (128 bytes) to fd, or its error message; exit 0 ok, 4 no NCCL, 2 error. */
static pid_t spawn_rank(const test_redis *t, int rank, int size, const char *key, double timeout_s, int fd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    char rs[8], ws[8];
    snprintf(rs, sizeof rs, "%d", rank);
    snprintf(ws, sizeof ws, "%d", size);
    setenv("CPT_RANK", rs, 1), setenv("CPT_WORLD_SIZE", ws, 1);
    cpt_redis *r = open_redis(t);
    cpt_dp_opts o = {.bootstrap = "redis", .redis = r, .redis_key = key, .timeout_s = timeout_s};
    cpt_err err;
    cpt_dp *dp = cpt_dp_new(&o, &err);
    if (!dp) {
        ssize_t w = write(fd, err.msg, strlen(err.msg));
        (void)w;
        _exit(strstr(err.msg, "cannot load NCCL") ? 4 : 2);
    }
    ssize_t w = write(fd, cpt_dp_unique_id(dp), 128);
    (void)w;
    _exit(cpt_dp_rank(dp) == rank && cpt_dp_size(dp) == size && !strcmp(cpt_dp_bootstrap_name(dp), "redis") ? 0
                                                                                                             : 3);
}

static int wait_code(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Returns 1 when NCCL could not be loaded (nothing checked), else 0. */
static int check_three_ranks(const test_redis *t) {
    int fds[3][2];
    pid_t pids[3];
    /* ranks 1 and 2 first: they must wait for rank 0's key */
    for (int r = 2; r >= 0; r--) {
        if (pipe(fds[r])) exit(1);
        pids[r] = spawn_rank(t, r, 3, KEY, 30, fds[r][1]);
        close(fds[r][1]);
        if (r > 0) usleep(200 * 1000);
    }
    unsigned char ids[3][1024];
    ssize_t got[3];
    int codes[3];
    codes[0] = wait_code(pids[0]);
    if (codes[0] == 4) {
        kill(pids[1], SIGKILL), kill(pids[2], SIGKILL);
        wait_code(pids[1]), wait_code(pids[2]);
        printf("three ranks over redis: skipped (no libnccl.so.2 to draw the id)\n");
        for (int r = 0; r < 3; r++) close(fds[r][0]);
        return 1;
    }
    for (int r = 1; r < 3; r++) codes[r] = wait_code(pids[r]);
    for (int r = 0; r < 3; r++) {
        got[r] = read(fds[r][0], ids[r], sizeof ids[r]);
        close(fds[r][0]);
        CHECK_MSG(codes[r] == 0, "rank %d exited %d: %.*s", r, codes[r], (int)(got[r] > 0 ? got[r] : 0),
                  (const char *)ids[r]);
        CHECK_EQ_INT(got[r], 128);
    }
    CHECK(memcmp(ids[0], ids[1], 128) == 0);
    CHECK(memcmp(ids[0], ids[2], 128) == 0);
    int nonzero = 0;
    for (int i = 0; i < 128; i++) nonzero |= ids[0][i];
    CHECK(nonzero);
    /* The key holds the id and expires. */
    cpt_redis *r = open_redis(t);
    const char *get[] = {"GET", KEY};
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, 2, get, NULL, KEY, 0, &err);
    CHECK(rep && rep->type == REDIS_REPLY_STRING && rep->len == 128 && !memcmp(rep->str, ids[0], 128));
    if (rep) freeReplyObject(rep);
    long long pttl = -3;
    const char *ttl[] = {"PTTL", KEY};
    CHECK(cpt_redis_integer(r, 2, ttl, KEY, &pttl, &err) == 0);
    CHECK_MSG(pttl > 0 && pttl <= 4 * 30 * 1000, "PTTL %lld", pttl);
    cpt_redis_close(r);
    printf("three ranks over redis: one id, key expires in %lld ms\n", pttl);
    return 0;
}

static void check_errors(const test_redis *t) {
    /* rank 1 of 2, nobody publishes: gives up after 1 s naming the key */
    int fd[2];
    if (pipe(fd)) exit(1);
    double t0 = cpt_now();
    pid_t pid = spawn_rank(t, 1, 2, "cpt:dptest:dp_uid:never", 1.0, fd[1]);
    close(fd[1]);
    int code = wait_code(pid);
    char msg[1100] = {0};
    ssize_t n = read(fd[0], msg, sizeof msg - 1);
    close(fd[0]);
    (void)n;
    CHECK_EQ_INT(code, 2);
    CHECK_MSG(strstr(msg, "waited 1 s") && strstr(msg, "cpt:dptest:dp_uid:never") && strstr(msg, "rank 1"), "%s",
              msg);
    CHECK(cpt_now() - t0 < 10);

    /* a key holding something that is not an id */
    cpt_redis *r = open_redis(t);
    const char *set[] = {"SET", "cpt:dptest:dp_uid:bad", "short"};
    cpt_err err;
    redisReply *rep = cpt_redis_command(r, 3, set, NULL, set[1], 0, &err);
    CHECK(rep != NULL);
    if (rep) freeReplyObject(rep);
    cpt_redis_close(r);
    if (pipe(fd)) exit(1);
    pid = spawn_rank(t, 1, 2, "cpt:dptest:dp_uid:bad", 5.0, fd[1]);
    close(fd[1]);
    code = wait_code(pid);
    memset(msg, 0, sizeof msg);
    n = read(fd[0], msg, sizeof msg - 1);
    close(fd[0]);
    CHECK_EQ_INT(code, 2);
    CHECK_MSG(strstr(msg, "holds 5 bytes"), "%s", msg);

    /* no connection or key */
    setenv("CPT_RANK", "1", 1), setenv("CPT_WORLD_SIZE", "2", 1);
    cpt_dp_opts o = {.bootstrap = "redis"};
    CHECK(cpt_dp_new(&o, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "needs a connection and a key"), "%s", err.msg);
    unsetenv("CPT_RANK"), unsetenv("CPT_WORLD_SIZE");
}

#endif

int main(void) {
#ifdef CPT_HAVE_CUDA
    test_redis t;
    test_redis_start(&t, "everysec");
    check_errors(&t);
    int no_nccl = check_three_ranks(&t);
    test_redis_stop(&t);
    if (no_nccl && !check_failures) {
        printf("test_dp_redis: SKIP (the errors passed; three ranks need libnccl.so.2 to draw the id)\n");
        return CPT_EXIT_SKIP;
    }
#else
    printf("test_dp_redis: SKIP (built without CUDA: groups of several ranks need NCCL)\n");
    return CPT_EXIT_SKIP;
#endif
    return check_summary("test_dp_redis");
}
