/* BPE: merges by rank over one word, in the same order as HF's Word::merge_all (so ties and stale entries resolve
 * identically): a min-heap of candidate merges keyed by (rank, position) over a linked list of symbols.
 *
 * Words are raw bytes: the ByteLevel map is a bijection, so symbol i is the one-char token of byte i, and only
 * ignore_merges (a whole-word vocabulary lookup) needs the mapped string. A per-thread cache keeps the ids of
 * recent short words, which are most of any text. */
#include <stdlib.h>
#include <string.h>

#include "core/tokenizer_internal.h"

static int reserve_word(tok_scratch *s, size_t n, cpt_err *err) {
    if (n > s->sym_cap) {
        size_t cap = n * 2 > 64 ? n * 2 : 64;
        int32_t *a = realloc(s->sym_id, cap * sizeof *a);
        if (a) s->sym_id = a;
        int32_t *b = realloc(s->sym_prev, cap * sizeof *b);
        if (b) s->sym_prev = b;
        int32_t *c = realloc(s->sym_next, cap * sizeof *c);
        if (c) s->sym_next = c;
        uint8_t *d = realloc(s->sym_alive, cap);
        if (d) s->sym_alive = d;
        if (!a || !b || !c || !d) return cpt_errf(err, "out of memory for a word of %zu bytes", n);
        s->sym_cap = cap;
    }
    size_t hn = 3 * n + 3; /* n-1 initial pairs, at most 2 new pairs per merge */
    if (hn > s->heap_cap) {
        size_t cap = hn * 2;
        uint64_t *h = realloc(s->heap, cap * sizeof *h);
        if (h) s->heap = h;
        int32_t *hi = realloc(s->heap_id, cap * sizeof *hi);
        if (hi) s->heap_id = hi;
        if (!h || !hi) return cpt_errf(err, "out of memory for a word of %zu bytes", n);
        s->heap_cap = cap;
    }
    return 0;
}

static void heap_push(tok_scratch *s, size_t *n, uint64_t key, int32_t id) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (s->heap[parent] <= key) break;
        s->heap[i] = s->heap[parent];
        s->heap_id[i] = s->heap_id[parent];
        i = parent;
    }
    s->heap[i] = key;
    s->heap_id[i] = id;
}

static void heap_pop(tok_scratch *s, size_t *n, uint64_t *key, int32_t *id) {
    *key = s->heap[0];
    *id = s->heap_id[0];
    size_t last = --(*n);
    uint64_t k = s->heap[last];
    int32_t kid = s->heap_id[last];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= last) break;
        if (c + 1 < last && s->heap[c + 1] < s->heap[c]) c++;
        if (s->heap[c] >= k) break;
        s->heap[i] = s->heap[c];
        s->heap_id[i] = s->heap_id[c];
        i = c;
    }
    s->heap[i] = k;
    s->heap_id[i] = kid;
}

static void try_push_pair(const cpt_tokenizer *tok, tok_scratch *s, size_t *hn, int32_t pos) {
    int32_t next = s->sym_next[pos];
    if (next < 0) return;
    const tok_merge_slot *m = tok_mergemap_get(&tok->merges, s->sym_id[pos], s->sym_id[next]);
    if (m) heap_push(s, hn, ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)pos, m->id);
}

/* Whole-word lookup for ignore_merges: the word in the byte-level alphabet (at most 2 bytes per byte).
 * Returns the id, -1 if absent, -2 out of memory. */
static int whole_word_id(const cpt_tokenizer *tok, tok_scratch *s, const uint8_t *word, size_t len, cpt_err *err) {
    if (len * 2 > s->wbuf_cap) {
        char *b = realloc(s->wbuf, len * 2);
        if (!b) {
            cpt_errf(err, "out of memory for a word of %zu bytes", len);
            return -2;
        }
        s->wbuf = b;
        s->wbuf_cap = len * 2;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) o += (size_t)tok_utf8_put(tok_byte_to_cp(word[i]), s->wbuf + o);
    return tok_strmap_get(&tok->vocab, s->wbuf, o);
}

int tok_bpe_word(const cpt_tokenizer *tok, tok_scratch *s, const uint8_t *word, size_t len, cpt_err *err) {
    if (tok->ignore_merges) {
        int32_t id = whole_word_id(tok, s, word, len, err);
        if (id == -2) return -1;
        if (id >= 0) return tok_push_id(s, id, err);
    }
    uint64_t h = 0;
    tok_cache_entry *ce = NULL;
    if (s->cache && len <= TOK_CACHE_MAX_WORD) {
        h = tok_hash(word, len);
        size_t slot = (size_t)(h & (TOK_CACHE_SLOTS - 1));
        ce = &s->cache[slot];
        if (ce->len == len && ce->hash == h && memcmp(s->cache_words + slot * TOK_CACHE_MAX_WORD, word, len) == 0) {
            for (uint32_t i = 0; i < ce->n_ids; i++)
                if (tok_push_id(s, s->cache_ids[ce->off + i], err) != 0) return -1;
            return 0;
        }
    }
    if (reserve_word(s, len, err) != 0) return -1;
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = tok->byte_id[word[i]];
        if (id < 0) continue; /* no token for this byte and no unk_token: dropped, as HF does */
        s->sym_id[n] = id;
        s->sym_prev[n] = n - 1;
        s->sym_next[n] = n + 1;
        s->sym_alive[n] = 1;
        n++;
    }
    if (n == 0) return 0;
    s->sym_next[n - 1] = -1;

    size_t hn = 0;
    for (int32_t i = 0; i + 1 < n; i++) try_push_pair(tok, s, &hn, i);
    while (hn > 0) {
        uint64_t key;
        int32_t new_id;
        heap_pop(s, &hn, &key, &new_id);
        int32_t pos = (int32_t)(uint32_t)key;
        if (!s->sym_alive[pos]) continue;
        int32_t next = s->sym_next[pos];
        if (next < 0) continue;
        /* A stale entry: the pair at pos changed since it was pushed. HF compares only the merged id. */
        const tok_merge_slot *m = tok_mergemap_get(&tok->merges, s->sym_id[pos], s->sym_id[next]);
        if (!m || m->id != new_id) continue;
        s->sym_id[pos] = new_id;
        s->sym_alive[next] = 0;
        int32_t after = s->sym_next[next];
        s->sym_next[pos] = after;
        if (after >= 0) s->sym_prev[after] = pos;
        if (s->sym_prev[pos] >= 0) try_push_pair(tok, s, &hn, s->sym_prev[pos]);
        try_push_pair(tok, s, &hn, pos);
    }

    size_t first = s->n_ids;
    for (int32_t i = 0; i >= 0; i = s->sym_next[i])
        if (tok_push_id(s, s->sym_id[i], err) != 0) return -1;
    size_t count = s->n_ids - first;
    if (ce && count <= TOK_CACHE_MAX_IDS) {
        size_t slot = (size_t)(ce - s->cache);
        ce->hash = h;
        ce->len = (uint32_t)len;
        ce->n_ids = (uint32_t)count;
        ce->off = (uint32_t)(slot * TOK_CACHE_MAX_IDS);
        memcpy(s->cache_words + slot * TOK_CACHE_MAX_WORD, word, len);
        memcpy(s->cache_ids + ce->off, s->ids + first, count * sizeof(int32_t));
    }
    return 0;
}
