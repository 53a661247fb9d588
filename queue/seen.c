#include "queue/seen.h"

#include <stdlib.h>
#include <string.h>

void cpt_seen_init(cpt_seen *s) { memset(s, 0, sizeof *s); }

void cpt_seen_free(cpt_seen *s) {
    free(s->slots);
    free(s->used);
    memset(s, 0, sizeof *s);
}

static size_t hash_id(cpt_group_id id) {
    uint64_t h = id.epoch * 0x9E3779B97F4A7C15ull ^ (id.index + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return (size_t)h;
}

static size_t find(const cpt_seen *s, cpt_group_id id, int *found) {
    size_t i = hash_id(id) & (s->cap - 1);
    while (s->used[i]) {
        if (s->slots[i].epoch == id.epoch && s->slots[i].index == id.index) { *found = 1; return i; }
        i = (i + 1) & (s->cap - 1);
    }
    *found = 0;
    return i;
}

int cpt_seen_has(const cpt_seen *s, cpt_group_id id) {
    if (!s->cap) return 0;
    int found;
    find(s, id, &found);
    return found;
}

static int grow(cpt_seen *s) {
    size_t cap = s->cap ? s->cap * 2 : 1024;
    cpt_seen t = {calloc(cap, sizeof *t.slots), calloc(cap, 1), cap, 0};
    if (!t.slots || !t.used) { free(t.slots); free(t.used); return -1; }
    for (size_t i = 0; i < s->cap; i++)
        if (s->used[i]) {
            int found;
            size_t j = find(&t, s->slots[i], &found);
            t.slots[j] = s->slots[i];
            t.used[j] = 1;
            t.n++;
        }
    cpt_seen_free(s);
    *s = t;
    return 0;
}

int cpt_seen_add(cpt_seen *s, cpt_group_id id) {
    if ((s->n + 1) * 2 > s->cap && grow(s)) return -1; /* load factor <= 1/2 */
    int found;
    size_t i = find(s, id, &found);
    if (found) return 0;
    s->slots[i] = id;
    s->used[i] = 1;
    s->n++;
    return 1;
}
