#include "trainer/online_book.h"

#include <stdlib.h>
#include <string.h>

cpt_group_id cpt_online_base_id(cpt_group_id wire) {
    cpt_group_id b = {wire.epoch & CPT_ONLINE_EPOCH_MASK, wire.index};
    return b;
}

uint32_t cpt_online_attempt(cpt_group_id wire) { return (uint32_t)(wire.epoch >> CPT_ONLINE_ATTEMPT_SHIFT); }

cpt_group_id cpt_online_wire_id(cpt_group_id base, uint32_t attempt) {
    cpt_group_id w = {(base.epoch & CPT_ONLINE_EPOCH_MASK) | ((uint64_t)(attempt & 0xffff) << CPT_ONLINE_ATTEMPT_SHIFT),
                      base.index};
    return w;
}

void cpt_book_init(cpt_online_book *b, uint64_t cursor_epoch, uint64_t cursor_index) {
    memset(b, 0, sizeof *b);
    b->next_epoch = cursor_epoch;
    b->next_index = cursor_index;
}

void cpt_book_free(cpt_online_book *b) {
    free(b->e);
    memset(b, 0, sizeof *b);
}

static int id_eq(cpt_group_id a, cpt_group_id b) { return a.epoch == b.epoch && a.index == b.index; }

/* a < the cursor */
static int before_cursor(const cpt_online_book *b, cpt_group_id a) {
    return a.epoch < b->next_epoch || (a.epoch == b->next_epoch && a.index < b->next_index);
}

cpt_book_entry *cpt_book_find(cpt_online_book *b, cpt_group_id base) {
    for (size_t i = 0; i < b->n; i++)
        if (id_eq(b->e[i].id, base)) return &b->e[i];
    return NULL;
}

static cpt_book_entry *push(cpt_online_book *b, cpt_err *err) {
    if (b->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 64;
        cpt_book_entry *e = realloc(b->e, c * sizeof *e);
        if (!e) {
            cpt_errf(err, "out of memory");
            return NULL;
        }
        b->e = e;
        b->cap = c;
    }
    cpt_book_entry *e = &b->e[b->n++];
    memset(e, 0, sizeof *e);
    return e;
}

int cpt_book_add_new(cpt_online_book *b, cpt_group_id base, cpt_err *err) {
    if (base.epoch > CPT_ONLINE_EPOCH_MASK) return cpt_errf(err, "group epoch %llu too large", (unsigned long long)base.epoch);
    if (before_cursor(b, base))
        return cpt_errf(err, "group (%llu, %llu) is behind the cursor (%llu, %llu)", (unsigned long long)base.epoch,
                        (unsigned long long)base.index, (unsigned long long)b->next_epoch,
                        (unsigned long long)b->next_index);
    cpt_book_entry *e = push(b, err);
    if (!e) return -1;
    e->id = base;
    e->state = CPT_BOOK_TO_ISSUE;
    e->attempt = b->attempt_base;
    e->issued_version = -1;
    b->next_epoch = base.epoch;
    b->next_index = base.index + 1;
    return 0;
}

int cpt_book_restore(cpt_online_book *b, const cpt_group_id *wire, size_t n, cpt_err *err) {
    for (size_t i = 0; i < n; i++) {
        cpt_group_id base = cpt_online_base_id(wire[i]);
        if (!before_cursor(b, base))
            return cpt_errf(err, "checkpoint: outstanding group (%llu, %llu) is not behind the data cursor (%llu, %llu)",
                            (unsigned long long)base.epoch, (unsigned long long)base.index,
                            (unsigned long long)b->next_epoch, (unsigned long long)b->next_index);
        if (cpt_book_find(b, base)) continue;
        cpt_book_entry *e = push(b, err);
        if (!e) return -1;
        e->id = base;
        e->attempt = cpt_online_attempt(wire[i]);
        if (b->attempt_base > e->attempt) e->attempt = b->attempt_base; /* the next issue is base + 1 */
        e->state = CPT_BOOK_TO_ISSUE;
        e->issued_version = 0; /* issued before: the next issue is a new attempt */
    }
    return 0;
}

int cpt_book_outstanding(const cpt_online_book *b, cpt_group_id **out, size_t *n, cpt_err *err) {
    *out = NULL;
    *n = b->n;
    if (!b->n) return 0;
    *out = malloc(b->n * sizeof **out);
    if (!*out) return cpt_errf(err, "out of memory");
    for (size_t i = 0; i < b->n; i++) (*out)[i] = cpt_online_wire_id(b->e[i].id, b->e[i].attempt);
    return 0;
}

cpt_book_entry *cpt_book_next_to_issue(cpt_online_book *b) {
    for (size_t i = 0; i < b->n; i++)
        if (b->e[i].state == CPT_BOOK_TO_ISSUE) return &b->e[i];
    return NULL;
}

cpt_group_id cpt_book_mark_issued(cpt_online_book *b, cpt_book_entry *e, int64_t version) {
    if (e->issued_version >= 0) {
        e->attempt++;
        b->reissued++;
    }
    e->issued_version = version;
    e->state = CPT_BOOK_IN_FLIGHT;
    return cpt_online_wire_id(e->id, e->attempt);
}

static void remove_at(cpt_online_book *b, size_t i);

int cpt_book_skip_if_exhausted(cpt_online_book *b, cpt_book_entry *e) {
    uint32_t next = e->issued_version >= 0 ? e->attempt + 1 : e->attempt;
    if (next - b->attempt_base < CPT_ONLINE_ATTEMPTS_PER_START) return 0;
    b->skipped++;
    remove_at(b, (size_t)(e - b->e));
    return 1;
}

size_t cpt_book_count(const cpt_online_book *b, cpt_book_state s) {
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++) k += b->e[i].state == s;
    return k;
}

cpt_book_verdict cpt_book_receive(cpt_online_book *b, cpt_group_id wire, uint64_t weight_version, int64_t version,
                                  int64_t max_staleness) {
    cpt_group_id base = cpt_online_base_id(wire);
    cpt_book_entry *e = cpt_book_find(b, base);
    if (!e) {
        if (before_cursor(b, base)) {
            b->duplicates++;
            return CPT_BOOK_DUPLICATE;
        }
        b->unknown++;
        return CPT_BOOK_UNKNOWN;
    }
    if (e->state == CPT_BOOK_RECEIVED) {
        b->duplicates++;
        return CPT_BOOK_DUPLICATE;
    }
    if ((int64_t)weight_version + max_staleness < version) {
        b->stale++;
        /* Only the latest attempt's staleness sends it back; an older attempt's stale copy is just dropped. */
        if (cpt_online_attempt(wire) == (e->attempt & 0xffff) && e->state == CPT_BOOK_IN_FLIGHT) e->state = CPT_BOOK_TO_ISSUE;
        return CPT_BOOK_STALE;
    }
    e->state = CPT_BOOK_RECEIVED;
    return CPT_BOOK_ACCEPT;
}

void cpt_book_drop_stale(cpt_online_book *b, cpt_group_id base) {
    cpt_book_entry *e = cpt_book_find(b, base);
    if (!e) return;
    e->state = CPT_BOOK_TO_ISSUE;
    b->stale++;
}

static void remove_at(cpt_online_book *b, size_t i) {
    /* keep issue order: re-issues go out oldest first */
    memmove(&b->e[i], &b->e[i + 1], (b->n - i - 1) * sizeof *b->e);
    b->n--;
}

cpt_book_fail_verdict cpt_book_failed(cpt_online_book *b, cpt_group_id wire, uint32_t max_retries) {
    cpt_book_entry *e = cpt_book_find(b, cpt_online_base_id(wire));
    if (!e || e->state != CPT_BOOK_IN_FLIGHT || cpt_online_attempt(wire) != (e->attempt & 0xffff))
        return CPT_BOOK_FAIL_IGNORED;
    b->failed++;
    if (e->failures >= max_retries) {
        b->skipped++;
        remove_at(b, (size_t)(e - b->e));
        return CPT_BOOK_FAIL_SKIP;
    }
    e->failures++;
    e->state = CPT_BOOK_TO_ISSUE;
    return CPT_BOOK_FAIL_RETRY;
}

int cpt_book_trained(cpt_online_book *b, cpt_group_id base, cpt_err *err) {
    for (size_t i = 0; i < b->n; i++)
        if (id_eq(b->e[i].id, base)) {
            remove_at(b, i);
            b->trained++;
            return 0;
        }
    return cpt_errf(err, "group (%llu, %llu) trained but not outstanding", (unsigned long long)base.epoch,
                    (unsigned long long)base.index);
}
