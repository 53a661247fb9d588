/* SFT packing and the data cursor: targets only on loss tokens, sequence boundaries, token budgets, truncation,
 * epoch wrap, and a cursor restored mid-epoch continuing exactly as the uninterrupted one. */
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "trainer/sft_data.h"

static int64_t epoch_of(const cpt_sft_cursor *c) {
    int64_t e, i;
    cpt_sft_cursor_tell(c, &e, &i);
    return e;
}
static int64_t index_of(const cpt_sft_cursor *c) {
    int64_t e, i;
    cpt_sft_cursor_tell(c, &e, &i);
    return i;
}

static void add(cpt_sft_dataset *ds, int n, int n_prompt, int base, int max_len) {
    int32_t ids[64];
    uint8_t mask[64];
    for (int i = 0; i < n; i++) {
        ids[i] = base + i;
        mask[i] = i >= n_prompt;
    }
    cpt_err err;
    CHECK_EQ_INT(cpt_sft_dataset_add(ds, ids, mask, n, n_prompt, n - n_prompt, max_len, &err), 0);
}

int main(void) {
    cpt_err err;
    cpt_sft_dataset ds = {0};
    add(&ds, 5, 3, 100, 16);  /* ex 0: 5 tokens, loss on 2 */
    add(&ds, 4, 1, 200, 16);  /* ex 1: 4 tokens, loss on 3 */
    add(&ds, 6, 6, 300, 16);  /* no loss token: skipped */
    add(&ds, 20, 2, 400, 8);  /* truncated to 8: loss on 6 */
    add(&ds, 3, 2, 500, 16);  /* ex 3: loss on 1 */
    CHECK_EQ_INT(ds.n, 4);
    CHECK_EQ_INT(ds.n_skipped, 1);
    CHECK_EQ_INT(ds.n_truncated, 1);
    CHECK_EQ_INT(ds.ex[2].n, 8);
    CHECK_EQ_INT(ds.ex[2].n_prompt, 2);
    CHECK_EQ_INT(ds.ex[2].n_answer, 6);

    /* in order (no shuffle), budget 10: [ex0 ex1] (9 tokens), [ex2] (8), [ex3 ex0] ... */
    cpt_sft_cursor c;
    CHECK_EQ_INT(cpt_sft_cursor_init(&c, &ds, 7, 0, 0, 0, &err), 0);
    cpt_sft_batch b = {0};
    CHECK_EQ_INT(cpt_sft_pack_next(&c, 10, &b, &err), 0);
    CHECK_EQ_INT(b.n_seqs, 2);
    CHECK_EQ_INT(b.n_tokens, 9);
    CHECK_EQ_INT(b.seq_start[0], 0);
    CHECK_EQ_INT(b.seq_start[1], 5);
    CHECK_EQ_INT(b.seq_start[2], 9);
    CHECK_EQ_INT(b.n_loss, 5);
    /* ex0 = 100..104, prompt 3: positions 2, 3 predict 103, 104; position 4 (last) has no target */
    CHECK_EQ_INT(b.targets[0], -1);
    CHECK_EQ_INT(b.targets[1], -1);
    CHECK_EQ_INT(b.targets[2], 103);
    CHECK_EQ_INT(b.targets[3], 104);
    CHECK_EQ_INT(b.targets[4], -1);
    /* no target crosses into the next sequence */
    CHECK_EQ_INT(b.tokens[5], 200);
    CHECK_EQ_INT(b.targets[5], 201);
    CHECK_EQ_INT(b.targets[8], -1);
    CHECK_EQ_INT(epoch_of(&c), 0);
    CHECK_EQ_INT(index_of(&c), 2);
    CHECK_EQ_INT(cpt_sft_pack_next(&c, 10, &b, &err), 0);
    CHECK_EQ_INT(b.n_seqs, 1);
    CHECK_EQ_INT(b.tokens[0], 400);
    CHECK_EQ_INT(b.n_loss, 6);
    CHECK_EQ_INT(cpt_sft_pack_next(&c, 10, &b, &err), 0); /* ex3 then wraps to epoch 1: ex0 */
    CHECK_EQ_INT(b.n_seqs, 2);
    CHECK_EQ_INT(b.tokens[0], 500);
    CHECK_EQ_INT(b.tokens[3], 100);
    CHECK_EQ_INT(epoch_of(&c), 1);
    CHECK_EQ_INT(index_of(&c), 1);
    /* an example longer than the budget is an error naming both sizes */
    cpt_sft_cursor c2;
    CHECK_EQ_INT(cpt_sft_cursor_init(&c2, &ds, 7, 0, 0, 2, &err), 0);
    CHECK_EQ_INT(cpt_sft_pack_next(&c2, 6, &b, &err), -1);
    CHECK(strstr(err.msg, "8 tokens") && strstr(err.msg, "budget of 6"));
    cpt_sft_cursor_free(&c2);
    cpt_sft_cursor_free(&c);

    /* shuffled: every epoch is a permutation; a cursor restored at (epoch, index) continues identically */
    cpt_sft_dataset big = {0};
    for (int i = 0; i < 40; i++) add(&big, 3, 1, 1000 * (i + 1), 16);
    cpt_sft_cursor a, r;
    CHECK_EQ_INT(cpt_sft_cursor_init(&a, &big, 42, 1, 0, 0, &err), 0);
    int seen[40] = {0}, firsts[40], order_changed = 0;
    for (int k = 0; k < 40; k++) {
        CHECK_EQ_INT(cpt_sft_pack_next(&a, 3, &b, &err), 0);
        int id = b.tokens[0] / 1000 - 1;
        firsts[k] = id;
        if (id >= 0 && id < 40) seen[id]++;
        order_changed |= id != k;
    }
    int all_once = 1;
    for (int i = 0; i < 40; i++) all_once &= seen[i] == 1;
    CHECK(all_once);
    CHECK(order_changed);
    for (int k = 0; k < 13; k++) CHECK_EQ_INT(cpt_sft_pack_next(&a, 7, &b, &err), 0); /* into epoch 1 */
    CHECK_EQ_INT(epoch_of(&a), 1);
    CHECK_EQ_INT(cpt_sft_cursor_init(&r, &big, 42, 1, epoch_of(&a), index_of(&a), &err), 0);
    cpt_sft_batch b2 = {0};
    int same = 1;
    for (int k = 0; k < 30; k++) {
        CHECK_EQ_INT(cpt_sft_pack_next(&a, 7, &b, &err), 0);
        CHECK_EQ_INT(cpt_sft_pack_next(&r, 7, &b2, &err), 0);
        same &= b.n_tokens == b2.n_tokens && !memcmp(b.tokens, b2.tokens, (size_t)b.n_tokens * 4);
    }
    CHECK(same);
    /* epoch 1's order differs from epoch 0's */
    cpt_sft_cursor e1;
    CHECK_EQ_INT(cpt_sft_cursor_init(&e1, &big, 42, 1, 1, 0, &err), 0);
    int differs = 0;
    for (int k = 0; k < 40; k++) {
        CHECK_EQ_INT(cpt_sft_pack_next(&e1, 3, &b, &err), 0);
        differs |= b.tokens[0] / 1000 - 1 != firsts[k];
    }
    CHECK(differs);
    /* a cursor out of range is refused */
    cpt_sft_cursor_free(&r);
    CHECK_EQ_INT(cpt_sft_cursor_init(&r, &big, 42, 1, 0, 41, &err), -1);

    /* pack_range: eval packing in dataset order */
    CHECK_EQ_INT(cpt_sft_pack_range(&ds, 0, ds.n, 10, &b, &err), 2);
    CHECK_EQ_INT(cpt_sft_pack_range(&ds, 2, ds.n - 2, 11, &b, &err), 2);
    CHECK_EQ_INT(b.n_tokens, 11);

    cpt_sft_cursor_free(&a);
    cpt_sft_cursor_free(&e1);
    cpt_sft_batch_free(&b);
    cpt_sft_batch_free(&b2);
    cpt_sft_dataset_free(&ds);
    cpt_sft_dataset_free(&big);
    return check_summary("test_sft_pack");
}
