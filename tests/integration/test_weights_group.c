/* The Redis protocols of the GPU weight transports, on a real redis-server (no GPU):
 * - nccl membership and epochs (weights/weights_group.h): register, live set sorted (deterministic ranks), a
 *   crash = heartbeat expiry, a leave, a new epoch per change (old epoch hash gone: a stale worker sees it), the
 *   unique id and first version stored with it.
 * - cuda_ipc slot bookkeeping (weights/weights_ipc_book.h): a reader blocks the writer's claim, a claimed slot
 *   refuses readers, a reader of an old version is refused, an expired lease stops blocking, acks recorded. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "integration/redis_helper.h"
#include "weights/weights_group.h"
#include "weights/weights_ipc_book.h"

static void test_membership(cpt_redis *r) {
    cpt_err err;
    const char *run = "wg1";
    int64_t t = 1000000, ttl = 30000;
    CHECK(cpt_wg_register(r, run, "rollout-2", t, &err) == 0);
    CHECK(cpt_wg_register(r, run, "rollout-0", t, &err) == 0);
    CHECK(cpt_wg_register(r, run, "rollout-1", t + 5, &err) == 0);
    char(*names)[CPT_NAME_MAX] = NULL;
    int n = 0;
    CHECK(cpt_wg_live(r, run, t + 10, ttl, &names, &n, &err) == 0);
    CHECK_EQ_INT(n, 3);
    if (n == 3) CHECK(!strcmp(names[0], "rollout-0") && !strcmp(names[1], "rollout-1") && !strcmp(names[2], "rollout-2"));

    cpt_wg_epoch cur;
    CHECK(cpt_wg_current(r, run, &cur, &err) == 0); /* none yet */
    unsigned char uid1[CPT_WG_UID_BYTES];
    for (int i = 0; i < CPT_WG_UID_BYTES; i++) uid1[i] = (unsigned char)i;
    cpt_wg_epoch e1;
    CHECK(cpt_wg_open_epoch(r, run, names, n, uid1, 7, &e1, &err) == 0);
    CHECK(e1.epoch == 1);
    CHECK_EQ_INT(cpt_wg_rank(&e1, "rollout-0"), 1);
    CHECK_EQ_INT(cpt_wg_rank(&e1, "rollout-2"), 3);
    CHECK_EQ_INT(cpt_wg_rank(&e1, "rollout-9"), -1);
    CHECK(cpt_wg_current(r, run, &cur, &err) == 1);
    CHECK(cur.epoch == 1 && cur.n == 3 && cur.version == 7 && !memcmp(cur.uid, uid1, sizeof uid1));
    CHECK(cpt_wg_same_members(&cur, names, n));
    CHECK_EQ_INT(cpt_wg_rank(&cur, "rollout-1"), 2);
    cpt_wg_epoch_free(&cur);
    free(names);

    /* rollout-1 crashes: its heartbeat ages past the ttl; rollout-0 and -2 refresh */
    CHECK(cpt_wg_register(r, run, "rollout-0", t + 40000, &err) == 0);
    CHECK(cpt_wg_register(r, run, "rollout-2", t + 40000, &err) == 0);
    CHECK(cpt_wg_live(r, run, t + 40001, ttl, &names, &n, &err) == 0);
    CHECK_EQ_INT(n, 2);
    CHECK(!cpt_wg_same_members(&e1, names, n)); /* the trainer must open a new epoch */
    unsigned char uid2[CPT_WG_UID_BYTES];
    memset(uid2, 0xab, sizeof uid2);
    cpt_wg_epoch e2;
    CHECK(cpt_wg_open_epoch(r, run, names, n, uid2, 8, &e2, &err) == 0);
    CHECK(e2.epoch == 2);
    CHECK_EQ_INT(cpt_wg_rank(&e2, "rollout-2"), 2); /* ranks follow the new sorted list */
    free(names);
    /* the expired worker's field was deleted */
    const char *hl[] = {"HLEN", "cpt:wg1:wg:members"};
    long long hlen = -1;
    CHECK(cpt_redis_integer(r, 2, hl, hl[1], &hlen, &err) == 0 && hlen == 2);
    /* a stale worker holding epoch 1 sees that its epoch is gone */
    uint64_t now_epoch = 0;
    CHECK(cpt_wg_current_number(r, run, &now_epoch, &err) == 0 && now_epoch == 2);
    const char *ex[] = {"EXISTS", "cpt:wg1:wg:epoch:1"};
    long long exists = -1;
    CHECK(cpt_redis_integer(r, 2, ex, ex[1], &exists, &err) == 0 && exists == 0);

    /* rollout-0 drains (leave), rollout-3 joins (scale up): epoch 3 = {rollout-2, rollout-3} */
    CHECK(cpt_wg_leave(r, run, "rollout-0", &err) == 0);
    CHECK(cpt_wg_register(r, run, "rollout-3", t + 41000, &err) == 0);
    CHECK(cpt_wg_live(r, run, t + 41001, ttl, &names, &n, &err) == 0);
    CHECK_EQ_INT(n, 2);
    if (n == 2) CHECK(!strcmp(names[0], "rollout-2") && !strcmp(names[1], "rollout-3"));
    CHECK(!cpt_wg_same_members(&e2, names, n));
    cpt_wg_epoch e3;
    CHECK(cpt_wg_open_epoch(r, run, names, n, uid2, 9, &e3, &err) == 0 && e3.epoch == 3);
    CHECK_EQ_INT(cpt_wg_rank(&e3, "rollout-2"), 1);
    CHECK_EQ_INT(cpt_wg_rank(&e3, "rollout-0"), -1);
    free(names);
    /* unsorted or duplicate member lists are refused (ranks must be deterministic) */
    char bad[2][CPT_NAME_MAX] = {"b", "a"};
    cpt_wg_epoch e4;
    CHECK(cpt_wg_open_epoch(r, run, bad, 2, uid2, 10, &e4, &err) == -1);
    /* an empty epoch (no workers) is valid: the trainer announces, nobody receives */
    cpt_wg_epoch e5;
    CHECK(cpt_wg_open_epoch(r, run, NULL, 0, uid2, 10, &e5, &err) == 0 && e5.epoch == 4 && e5.n == 0);
    CHECK(cpt_wg_current(r, run, &cur, &err) == 1 && cur.n == 0);
    cpt_wg_epoch_free(&cur);
    cpt_wg_epoch_free(&e1);
    cpt_wg_epoch_free(&e2);
    cpt_wg_epoch_free(&e3);
    cpt_wg_epoch_free(&e5);
}

static void test_ipc_book(cpt_redis *r) {
    cpt_err err;
    const char *run = "ipc1";
    int64_t t = 5000000, lease = 60000;
    long readers = -1;
    /* v0 into slot 0 */
    CHECK_EQ_INT(cpt_ipc_book_claim(r, run, 0, t, &readers, &err), 1);
    CHECK_EQ_INT(cpt_ipc_book_enter(r, run, 0, 0, "w1", t, lease, &err), 0); /* being written */
    CHECK(cpt_ipc_book_publish(r, run, 0, 0, &err) == 0);
    CHECK_EQ_INT(cpt_ipc_book_enter(r, run, 0, 0, "w1", t, lease, &err), 1);
    CHECK_EQ_INT(cpt_ipc_book_enter(r, run, 0, 5, "w2", t, lease, &err), 0); /* not the version it holds */
    CHECK_EQ_INT(cpt_ipc_book_enter(r, run, 0, 0, "w2", t, lease, &err), 1);
    /* v2 wants slot 0: two readers block it */
    CHECK_EQ_INT(cpt_ipc_book_claim(r, run, 0, t + 10, &readers, &err), 0);
    CHECK_EQ_INT(readers, 2);
    CHECK(cpt_ipc_book_leave(r, run, 0, "w1", 0, &err) == 0);
    CHECK_EQ_INT(cpt_ipc_book_claim(r, run, 0, t + 20, &readers, &err), 0);
    CHECK_EQ_INT(readers, 1);
    uint64_t acked = 99;
    CHECK(cpt_ipc_book_acked(r, run, "w1", &acked, &err) == 1 && acked == 0);
    CHECK(cpt_ipc_book_acked(r, run, "w3", &acked, &err) == 0);
    /* w2 crashed holding its lease: after the deadline it no longer blocks */
    CHECK_EQ_INT(cpt_ipc_book_claim(r, run, 0, t + lease - 1, &readers, &err), 0);
    CHECK_EQ_INT(cpt_ipc_book_claim(r, run, 0, t + lease + 1, &readers, &err), 1);
    /* claimed: a reader that still wants v0 is refused (it would read a torn buffer) */
    CHECK_EQ_INT(cpt_ipc_book_enter(r, run, 0, 0, "w1", t + lease + 2, lease, &err), 0);
    CHECK(cpt_ipc_book_publish(r, run, 0, 2, &err) == 0);
    CHECK_EQ_INT(cpt_ipc_book_enter(r, run, 0, 2, "w1", t + lease + 3, lease, &err), 1);
    /* slot 1 is independent */
    CHECK_EQ_INT(cpt_ipc_book_claim(r, run, 1, t + lease + 4, &readers, &err), 1);
    CHECK(cpt_ipc_book_publish(r, run, 1, 3, &err) == 0);
    CHECK(cpt_ipc_book_leave(r, run, 0, "w1", 2, &err) == 0);
    CHECK(cpt_ipc_book_acked(r, run, "w1", &acked, &err) == 1 && acked == 2);
}

/* Members' last-seen times are compared across hosts: they must be wall-clock Unix ms. */
static void test_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wall = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    int64_t got = cpt_wg_now_ms();
    CHECK_MSG(got >= wall - 1000 && got <= wall + 1000, "cpt_wg_now_ms %lld, wall clock %lld", (long long)got,
              (long long)wall);
}

int main(void) {
    test_clock();
    test_redis t;
    test_redis_start(&t, "everysec");
    cpt_queue *q = test_queue_open(&t, "wg1", 1000, 60000);
    test_membership(q->redis);
    test_ipc_book(q->redis);
    cpt_queue_close(q);
    test_redis_stop(&t);
    return check_summary("test_weights_group");
}
