/* Exactly-once bookkeeping of the online trainer (trainer/online_book.h): ids and attempts, duplicates, staleness
 * and re-issue, unknown ids, and the checkpoint round trip with resume. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "trainer/online_book.h"

static cpt_group_id gid(uint64_t e, uint64_t i) {
    cpt_group_id g = {e, i};
    return g;
}

static void test_wire_ids(void) {
    cpt_group_id b = gid(7, 42);
    cpt_group_id w = cpt_online_wire_id(b, 3);
    CHECK_EQ_INT(w.index, 42);
    CHECK(w.epoch != 7);
    CHECK_EQ_INT(cpt_online_attempt(w), 3);
    CHECK_EQ_INT(cpt_online_base_id(w).epoch, 7);
    CHECK_EQ_INT(cpt_online_base_id(w).index, 42);
    CHECK_EQ_INT(cpt_online_wire_id(b, 0).epoch, 7); /* the first attempt is the plain id */
}

/* Issues every TO_ISSUE entry at version v; returns how many. */
static int issue_all(cpt_online_book *b, int64_t v, cpt_group_id *last) {
    int n = 0;
    cpt_book_entry *e;
    while ((e = cpt_book_next_to_issue(b))) {
        *last = cpt_book_mark_issued(b, e, v);
        n++;
    }
    return n;
}

static void test_flow(void) {
    cpt_err err;
    cpt_online_book b;
    cpt_book_init(&b, 0, 0);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(cpt_book_add_new(&b, gid(0, (uint64_t)i), &err), 0);
    CHECK_EQ_INT(b.next_index, 3);
    CHECK_EQ_INT(cpt_book_add_new(&b, gid(0, 1), &err), -1); /* behind the cursor */
    CHECK(strstr(err.msg, "behind the cursor") != NULL);
    cpt_group_id last;
    CHECK_EQ_INT(issue_all(&b, 0, &last), 3);
    CHECK_EQ_INT(cpt_online_attempt(last), 0);
    CHECK_EQ_INT(cpt_book_count(&b, CPT_BOOK_IN_FLIGHT), 3);

    /* accept, then a second copy is a duplicate, also after training */
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 1), 0, 0, 0), CPT_BOOK_ACCEPT);
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 1), 0, 0, 0), CPT_BOOK_DUPLICATE);
    CHECK_EQ_INT(cpt_book_trained(&b, gid(0, 1), &err), 0);
    CHECK_EQ_INT(cpt_book_trained(&b, gid(0, 1), &err), -1);
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 1), 5, 5, 0), CPT_BOOK_DUPLICATE);
    CHECK_EQ_INT(b.duplicates, 2);
    CHECK_EQ_INT(b.trained, 1);
    CHECK_EQ_INT(b.n, 2);

    /* never issued */
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 9), 0, 0, 0), CPT_BOOK_UNKNOWN);
    CHECK_EQ_INT(cpt_book_receive(&b, gid(1, 0), 0, 0, 0), CPT_BOOK_UNKNOWN);
    CHECK_EQ_INT(b.unknown, 2);

    /* staleness: version 3, bound 1 -> weight version 2 is fine, 1 is stale */
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 0), 1, 3, 1), CPT_BOOK_STALE);
    CHECK_EQ_INT(b.stale, 1);
    CHECK_EQ_INT(cpt_book_count(&b, CPT_BOOK_TO_ISSUE), 1);
    CHECK_EQ_INT(issue_all(&b, 3, &last), 1);
    CHECK_EQ_INT(cpt_online_base_id(last).index, 0);
    CHECK_EQ_INT(cpt_online_attempt(last), 1); /* a new attempt: a new message for the workers */
    CHECK_EQ_INT(b.reissued, 1);
    /* a late stale copy of attempt 0 does not send it back again */
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 0), 0, 3, 1), CPT_BOOK_STALE);
    CHECK_EQ_INT(cpt_book_count(&b, CPT_BOOK_TO_ISSUE), 0);
    /* a fresh answer of either attempt is accepted once */
    CHECK_EQ_INT(cpt_book_receive(&b, cpt_online_wire_id(gid(0, 0), 1), 2, 3, 1), CPT_BOOK_ACCEPT);
    CHECK_EQ_INT(cpt_book_receive(&b, gid(0, 0), 3, 3, 1), CPT_BOOK_DUPLICATE);

    /* a held group found stale at training time goes back to issue */
    cpt_book_drop_stale(&b, gid(0, 0));
    CHECK_EQ_INT(cpt_book_find(&b, gid(0, 0))->state, CPT_BOOK_TO_ISSUE);
    CHECK_EQ_INT(b.stale, 3);

    /* checkpoint: outstanding ids with their attempts, in issue order */
    cpt_group_id *out;
    size_t n;
    CHECK_EQ_INT(cpt_book_outstanding(&b, &out, &n, &err), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(out[0].index, 0);
    CHECK_EQ_INT(cpt_online_attempt(out[0]), 1);
    CHECK_EQ_INT(out[1].index, 2);
    CHECK_EQ_INT(cpt_online_attempt(out[1]), 0);

    /* resume: a new book at the saved cursor re-issues both with the next attempt; the trained id stays closed */
    cpt_online_book r;
    cpt_book_init(&r, b.next_epoch, b.next_index);
    CHECK_EQ_INT(cpt_book_restore(&r, out, n, &err), 0);
    CHECK_EQ_INT(cpt_book_count(&r, CPT_BOOK_TO_ISSUE), 2);
    cpt_book_entry *e = cpt_book_next_to_issue(&r);
    cpt_group_id w = cpt_book_mark_issued(&r, e, 3);
    CHECK_EQ_INT(w.index, 0);
    CHECK_EQ_INT(cpt_online_attempt(w), 2);
    e = cpt_book_next_to_issue(&r);
    w = cpt_book_mark_issued(&r, e, 3);
    CHECK_EQ_INT(w.index, 2);
    CHECK_EQ_INT(cpt_online_attempt(w), 1);
    CHECK_EQ_INT(cpt_book_receive(&r, gid(0, 1), 3, 3, 0), CPT_BOOK_DUPLICATE);
    /* the old process's answer for id 2 (attempt 0) still counts: it is the same prompt */
    CHECK_EQ_INT(cpt_book_receive(&r, gid(0, 2), 3, 3, 0), CPT_BOOK_ACCEPT);
    CHECK_EQ_INT(cpt_book_receive(&r, cpt_online_wire_id(gid(0, 2), 1), 3, 3, 0), CPT_BOOK_DUPLICATE);
    /* new ids continue at the cursor */
    CHECK_EQ_INT(cpt_book_add_new(&r, gid(0, 3), &err), 0);
    /* an outstanding id at or beyond the cursor is a corrupt checkpoint */
    cpt_online_book bad;
    cpt_book_init(&bad, 0, 2);
    cpt_group_id ahead = gid(0, 2);
    CHECK_EQ_INT(cpt_book_restore(&bad, &ahead, 1, &err), -1);
    CHECK(strstr(err.msg, "cursor") != NULL);
    free(out);
    cpt_book_free(&b);
    cpt_book_free(&r);
    cpt_book_free(&bad);
}

/* Failed groups: bounded re-issue, then a skip; only the latest attempt in flight counts; a skipped id is not
 * outstanding (not in the checkpoint, not issued again after a resume) and a late answer is a duplicate. */
static void test_failures(void) {
    cpt_err err;
    cpt_online_book b;
    cpt_book_init(&b, 0, 0);
    CHECK_EQ_INT(cpt_book_add_new(&b, gid(0, 0), &err), 0);
    CHECK_EQ_INT(cpt_book_add_new(&b, gid(0, 1), &err), 0);
    cpt_group_id w0 = cpt_book_mark_issued(&b, cpt_book_next_to_issue(&b), 0);
    cpt_group_id w1 = cpt_book_mark_issued(&b, cpt_book_next_to_issue(&b), 0);
    /* not in flight, unknown, or an older attempt: ignored */
    CHECK_EQ_INT(cpt_book_failed(&b, gid(0, 5), 2), CPT_BOOK_FAIL_IGNORED);
    CHECK_EQ_INT(cpt_book_failed(&b, cpt_online_wire_id(gid(0, 0), 9), 2), CPT_BOOK_FAIL_IGNORED);
    CHECK_EQ_INT(b.failed, 0);
    /* retries = 2: two re-issues, the third failure skips */
    CHECK_EQ_INT(cpt_book_failed(&b, w0, 2), CPT_BOOK_FAIL_RETRY);
    CHECK_EQ_INT(cpt_book_failed(&b, w0, 2), CPT_BOOK_FAIL_IGNORED); /* a second copy of the same attempt */
    cpt_book_entry *e = cpt_book_next_to_issue(&b);
    CHECK(e && e->id.index == 0);
    cpt_group_id w0b = cpt_book_mark_issued(&b, e, 0);
    CHECK_EQ_INT(cpt_online_attempt(w0b), 1);
    CHECK_EQ_INT(cpt_book_failed(&b, w0, 2), CPT_BOOK_FAIL_IGNORED); /* the first attempt again: old */
    CHECK_EQ_INT(cpt_book_failed(&b, w0b, 2), CPT_BOOK_FAIL_RETRY);
    cpt_group_id w0c = cpt_book_mark_issued(&b, cpt_book_next_to_issue(&b), 0);
    CHECK_EQ_INT(cpt_book_failed(&b, w0c, 2), CPT_BOOK_FAIL_SKIP);
    CHECK_EQ_INT(b.failed, 3);
    CHECK_EQ_INT(b.skipped, 1);
    CHECK_EQ_INT(b.reissued, 2);
    CHECK_EQ_INT(b.n, 1);
    CHECK(cpt_book_find(&b, gid(0, 0)) == NULL);
    CHECK(cpt_book_next_to_issue(&b) == NULL);
    /* a late answer of the skipped id is a duplicate, never trained */
    CHECK_EQ_INT(cpt_book_receive(&b, w0b, 0, 0, 0), CPT_BOOK_DUPLICATE);
    /* a received group is not failed by a dead copy */
    CHECK_EQ_INT(cpt_book_receive(&b, w1, 0, 0, 0), CPT_BOOK_ACCEPT);
    CHECK_EQ_INT(cpt_book_failed(&b, w1, 2), CPT_BOOK_FAIL_IGNORED);
    /* retries = 0: the first failure skips */
    CHECK_EQ_INT(cpt_book_add_new(&b, gid(0, 2), &err), 0);
    cpt_group_id w2 = cpt_book_mark_issued(&b, cpt_book_next_to_issue(&b), 0);
    CHECK_EQ_INT(cpt_book_failed(&b, w2, 0), CPT_BOOK_FAIL_SKIP);
    CHECK_EQ_INT(b.skipped, 2);
    /* the checkpoint: only (0, 1) is outstanding; trained + skipped + outstanding = issued (3) */
    CHECK_EQ_INT(cpt_book_trained(&b, gid(0, 1), &err), 0);
    cpt_group_id *out;
    size_t n;
    CHECK_EQ_INT(cpt_book_outstanding(&b, &out, &n, &err), 0);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(b.trained + b.skipped + (long)b.n, 3);
    free(out);
    /* a resume from that checkpoint issues nothing again; the skipped ids are below the cursor: duplicates */
    cpt_online_book r;
    cpt_book_init(&r, b.next_epoch, b.next_index);
    CHECK_EQ_INT(cpt_book_restore(&r, NULL, 0, &err), 0);
    CHECK(cpt_book_next_to_issue(&r) == NULL);
    CHECK_EQ_INT(cpt_book_receive(&r, w2, 0, 0, 0), CPT_BOOK_DUPLICATE);
    CHECK_EQ_INT(cpt_book_receive(&r, w0c, 0, 0, 0), CPT_BOOK_DUPLICATE);
    cpt_book_free(&r);
    cpt_book_free(&b);
}

/* A group that goes stale at every issue is issued at most CPT_ONLINE_ATTEMPTS_PER_START times in one trainer
 * start, then skipped: its attempt numbers never reach the next start's range. */
static void test_exhausted(void) {
    cpt_err err;
    cpt_online_book b;
    cpt_book_init(&b, 0, 0);
    b.attempt_base = 2 * CPT_ONLINE_ATTEMPTS_PER_START; /* the third start */
    CHECK_EQ_INT(cpt_book_add_new(&b, gid(0, 0), &err), 0);
    uint32_t issues = 0, last = 0;
    cpt_book_entry *e;
    while ((e = cpt_book_next_to_issue(&b)) && !cpt_book_skip_if_exhausted(&b, e)) {
        cpt_group_id w = cpt_book_mark_issued(&b, e, (int64_t)issues);
        last = cpt_online_attempt(w);
        issues++;
        /* made by version 0, received at the issue's version + 5: stale with max_staleness 1 */
        CHECK_EQ_INT(cpt_book_receive(&b, w, 0, (int64_t)issues + 5, 1), CPT_BOOK_STALE);
        if (issues > 1000) break;
    }
    CHECK_EQ_INT(issues, CPT_ONLINE_ATTEMPTS_PER_START);
    CHECK_EQ_INT(last, 3 * CPT_ONLINE_ATTEMPTS_PER_START - 1); /* the start's last number */
    CHECK_EQ_INT(b.skipped, 1);
    CHECK_EQ_INT(b.n, 0);
    cpt_book_free(&b);
}

int main(void) {
    test_wire_ids();
    test_flow();
    test_failures();
    test_exhausted();
    return check_summary("test_online_book");
}
