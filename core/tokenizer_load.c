/* Loading: HF tokenizer.json (or GPT-2's encoder.json + vocab.bpe, turned into the same document) -> the tables of
 * tokenizer_internal.h; tokenizer_config.json's special ids; the getters.
 *
 * Only what byte-level BPE tokenizers use is accepted; anything else (another model type, byte_fallback, an
 * unknown normalizer or pre-tokenizer) is an error naming the field, never a silently different tokenizer. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/tokenizer_internal.h"

#define TOK_MAX_IDS (1 << 24) /* ids above this are surely a broken file, not a vocabulary */

/* GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex true. */
static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- byte-level alphabet (GPT-2's bytes_to_unicode): printable Latin-1 bytes stand for themselves, the other 68
 * bytes take the code points 256.. in byte order. ---- */

uint32_t tok_byte_to_cp(uint8_t b) {
    if (b <= 32) return 256u + b;
    if (b >= 127 && b <= 160) return 289u + (b - 127u);
    if (b == 173) return 323u;
    return b;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) ? -1 : (int)cp;
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(cp - 289 + 127);
    if (cp == 323) return 173;
    return -1;
}

/* ---- hash tables ---- */

uint64_t tok_hash(const void *data, size_t len) {
    const uint8_t *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (len * 0xC2B2AE3D27D4EB4Full);
    while (len >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ k) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        len -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < len; i++) k |= (uint64_t)p[i] << (8 * i);
    h = (h ^ k) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return h;
}

static uint32_t pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

int tok_strmap_build(tok_strmap *m, const char *const *strs, const uint32_t *lens, int32_t n, cpt_err *err) {
    m->mask = pow2_at_least((size_t)n * 2 + 1) - 1;
    m->strs = strs;
    m->lens = lens;
    m->slots = malloc(((size_t)m->mask + 1) * sizeof *m->slots);
    if (!m->slots) return cpt_errf(err, "out of memory for the vocabulary table");
    memset(m->slots, 0xff, ((size_t)m->mask + 1) * sizeof *m->slots);
    for (int32_t id = 0; id < n; id++) {
        if (!strs[id]) continue;
        uint32_t i = (uint32_t)tok_hash(strs[id], lens[id]) & m->mask;
        while (m->slots[i] >= 0) i = (i + 1) & m->mask;
        m->slots[i] = id;
    }
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *s, size_t len) {
    if (!m->slots) return -1;
    uint32_t i = (uint32_t)tok_hash(s, len) & m->mask;
    for (;;) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (m->lens[id] == len && memcmp(m->strs[id], s, len) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

static uint64_t merge_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

/* Fibonacci hashing of the pair: one multiply, the high bits spread well. */
static uint32_t merge_slot(uint64_t key, uint32_t mask) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & mask;
}

int tok_mergemap_init(tok_mergemap *m, size_t expected, cpt_err *err) {
    m->mask = pow2_at_least(expected * 2 + 1) - 1;
    m->count = 0;
    m->slots = malloc(((size_t)m->mask + 1) * sizeof *m->slots);
    if (!m->slots) return cpt_errf(err, "out of memory for the merges table");
    for (size_t i = 0; i <= m->mask; i++) m->slots[i].key = UINT64_MAX;
    return 0;
}

/* A pair listed twice keeps its last rank, as HF's map does. The table is sized for every merge up front. */
void tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = merge_key(a, b);
    uint32_t i = merge_slot(key, m->mask);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & m->mask;
    if (m->slots[i].key == UINT64_MAX) m->count++;
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
}

const tok_merge_slot *tok_mergemap_get(const tok_mergemap *m, int32_t a, int32_t b) {
    uint64_t key = merge_key(a, b);
    uint32_t i = merge_slot(key, m->mask);
    for (;;) {
        const tok_merge_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}

void tok_mergemap_free(tok_mergemap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* ---- the document ---- */

static int get_bool(json_t *obj, const char *key, int dflt) {
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *type_of(json_t *obj) {
    json_t *t = json_object_get(obj, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static int load_normalizer(cpt_tokenizer *tok, json_t *n, const char *name, cpt_err *err) {
    if (!n || json_is_null(n)) return 0;
    const char *type = type_of(n);
    if (!type) return cpt_errf(err, "%s: normalizer: missing \"type\"", name);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return cpt_errf(err, "%s: normalizer: Sequence without a \"normalizers\" array", name);
        size_t i;
        json_t *item;
        json_array_foreach(list, i, item) {
            if (load_normalizer(tok, item, name, err) != 0) return -1;
        }
        return 0;
    }
    tok_norm_kind kind = strcmp(type, "NFC") == 0    ? TOK_NORM_NFC
                         : strcmp(type, "NFD") == 0  ? TOK_NORM_NFD
                         : strcmp(type, "NFKC") == 0 ? TOK_NORM_NFKC
                         : strcmp(type, "NFKD") == 0 ? TOK_NORM_NFKD
                                                     : TOK_NORM_NONE;
    if (kind == TOK_NORM_NONE)
        return cpt_errf(err, "%s: normalizer: unsupported type \"%s\" (supported: NFC, NFD, NFKC, NFKD, Sequence)", name,
                        type);
    if (tok->n_norms == TOK_MAX_NORMS) return cpt_errf(err, "%s: normalizer: more than %d normalizers", name, TOK_MAX_NORMS);
    tok->norms[tok->n_norms++] = kind;
    return 0;
}

static int add_step(cpt_tokenizer *tok, const char *name, cpt_err *err) {
    if (tok->n_steps == TOK_MAX_STEPS)
        return cpt_errf(err, "%s: pre_tokenizer: more than %d splitting steps", name, TOK_MAX_STEPS);
    memset(&tok->steps[tok->n_steps], 0, sizeof tok->steps[0]);
    tok->n_steps++;
    return 0;
}

static int load_pretokenizer(cpt_tokenizer *tok, json_t *p, const char *name, cpt_err *err) {
    if (!p || json_is_null(p)) return 0;
    const char *type = type_of(p);
    if (!type) return cpt_errf(err, "%s: pre_tokenizer: missing \"type\"", name);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return cpt_errf(err, "%s: pre_tokenizer: Sequence without a \"pretokenizers\" array", name);
        size_t i;
        json_t *item;
        json_array_foreach(list, i, item) {
            if (load_pretokenizer(tok, item, name, err) != 0) return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (tok->byte_level) return cpt_errf(err, "%s: pre_tokenizer: ByteLevel appears twice", name);
        tok->byte_level = 1;
        int prefix = get_bool(p, "add_prefix_space", 1);
        int use_regex = get_bool(p, "use_regex", 1);
        if (!prefix && !use_regex) return 0; /* only the byte mapping, which BPE does on raw bytes */
        if (add_step(tok, name, err) != 0) return -1;
        tok_split_step *st = &tok->steps[tok->n_steps - 1];
        st->add_prefix_space = prefix;
        if (use_regex && tok_compile_regex(st, GPT2_REGEX, strlen(GPT2_REGEX), 0, err) != 0)
            return cpt_err_prefix(err, "%s: pre_tokenizer ByteLevel", name);
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        if (tok->byte_level)
            return cpt_errf(err, "%s: pre_tokenizer: a Split after ByteLevel is not supported (it would split "
                            "byte-level text)", name);
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        if (!json_is_string(re) && !json_is_string(str))
            return cpt_errf(err, "%s: pre_tokenizer Split: \"pattern\" needs a \"Regex\" or \"String\" string", name);
        json_t *beh = json_object_get(p, "behavior");
        const char *b = json_is_string(beh) ? json_string_value(beh) : "";
        int removed = strcmp(b, "Removed") == 0;
        if (strcmp(b, "Isolated") != 0 && !removed)
            return cpt_errf(err, "%s: pre_tokenizer Split: unsupported behavior \"%s\" (supported: Isolated, Removed)",
                            name, b);
        if (get_bool(p, "invert", 0))
            return cpt_errf(err, "%s: pre_tokenizer Split: invert true is not supported", name);
        if (add_step(tok, name, err) != 0) return -1;
        tok_split_step *st = &tok->steps[tok->n_steps - 1];
        st->remove_matches = removed;
        json_t *src = json_is_string(re) ? re : str;
        if (tok_compile_regex(st, json_string_value(src), json_string_length(src), !json_is_string(re), err) != 0)
            return cpt_err_prefix(err, "%s: pre_tokenizer Split", name);
        return 0;
    }
    return cpt_errf(err, "%s: pre_tokenizer: unsupported type \"%s\" (supported: ByteLevel, Split, Sequence)", name,
                    type);
}

static int check_decoder(json_t *d, const char *name, cpt_err *err) {
    const char *type = type_of(d);
    if (type && strcmp(type, "ByteLevel") == 0) return 0;
    if (type && strcmp(type, "Sequence") == 0) { /* accepted when it is a ByteLevel alone */
        json_t *list = json_object_get(d, "decoders");
        if (json_is_array(list) && json_array_size(list) == 1) return check_decoder(json_array_get(list, 0), name, err);
    }
    return cpt_errf(err, "%s: decoder: %s%s%s is not supported (byte-level BPE needs the ByteLevel decoder)", name,
                    type ? "\"" : "", type ? type : "a missing or null decoder", type ? "\"" : "");
}

/* Vocabulary and merges into tok (n_ids already covers every id). */
static int load_model(cpt_tokenizer *tok, json_t *model, const char *name, cpt_err *err) {
    const char *type = type_of(model);
    if (type && strcmp(type, "BPE") != 0)
        return cpt_errf(err, "%s: model.type \"%s\" is not supported (only BPE)", name, type);
    if (get_bool(model, "byte_fallback", 0)) return cpt_errf(err, "%s: model.byte_fallback true is not supported", name);
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return cpt_errf(err, "%s: model.dropout is not supported", name);
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(model, affix[i]);
        if (json_is_string(v) && json_string_length(v) > 0)
            return cpt_errf(err, "%s: model.%s is not supported", name, affix[i]);
    }
    tok->ignore_merges = get_bool(model, "ignore_merges", 0);

    json_t *vocab = json_object_get(model, "vocab");
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        size_t klen = strlen(key); /* jansson object keys hold no NUL */
        if (tok->model_tokens[id]) continue; /* two tokens with one id: the first wins */
        tok->model_tokens[id] = malloc(klen + 1);
        if (!tok->model_tokens[id]) return cpt_errf(err, "out of memory");
        memcpy(tok->model_tokens[id], key, klen + 1);
        tok->model_lens[id] = (uint32_t)klen;
    }
    if (tok_strmap_build(&tok->vocab, (const char *const *)tok->model_tokens, tok->model_lens, tok->n_ids, err) != 0)
        return -1;

    json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_array(merges)) return cpt_errf(err, "%s: model.merges must be an array", name);
    size_t n_merges = json_array_size(merges);
    if (tok_mergemap_init(&tok->merges, n_merges, err) != 0) return -1;
    char *joined = NULL;
    size_t joined_cap = 0;
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(m)) { /* "a b" */
            const char *s = json_string_value(m);
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(joined);
                return cpt_errf(err, "%s: model.merges[%zu]: \"%s\" is not two tokens separated by one space", name, i,
                                s);
            }
            a = s;
            alen = (size_t)(sp - s);
            b = sp + 1;
            blen = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) { /* ["a", "b"] */
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        } else {
            free(joined);
            return cpt_errf(err, "%s: model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", name, i);
        }
        int32_t ia = tok_strmap_get(&tok->vocab, a, alen), ib = tok_strmap_get(&tok->vocab, b, blen);
        if (alen + blen + 1 > joined_cap) {
            joined_cap = (alen + blen + 1) * 2;
            char *nj = realloc(joined, joined_cap);
            if (!nj) { free(joined); return cpt_errf(err, "out of memory"); }
            joined = nj;
        }
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        int32_t iab = tok_strmap_get(&tok->vocab, joined, alen + blen);
        if (ia < 0 || ib < 0 || iab < 0) {
            joined[alen + blen] = 0;
            const char *missing = ia < 0 ? a : ib < 0 ? b : joined;
            int mlen = (int)(ia < 0 ? alen : ib < 0 ? blen : alen + blen);
            cpt_errf(err, "%s: model.merges[%zu]: token \"%.*s\" is not in the vocabulary", name, i, mlen, missing);
            free(joined);
            return -1;
        }
        tok_mergemap_put(&tok->merges, ia, ib, (int32_t)i, iab);
    }
    free(joined);

    /* One-byte tokens: the byte-level char of each byte. unk_token stands in where one is missing. */
    int32_t unk = -1;
    json_t *unk_tok = json_object_get(model, "unk_token");
    if (json_is_string(unk_tok)) unk = tok_strmap_get(&tok->vocab, json_string_value(unk_tok), json_string_length(unk_tok));
    for (int b = 0; b < 256; b++) {
        char buf[4];
        int n = tok_utf8_put(tok_byte_to_cp((uint8_t)b), buf);
        int32_t id = tok_strmap_get(&tok->vocab, buf, (size_t)n);
        tok->byte_id[b] = id >= 0 ? id : unk;
    }
    return 0;
}

static int load_added(cpt_tokenizer *tok, json_t *added, const char *name, cpt_err *err) {
    size_t n = json_array_size(added);
    if (n == 0) return 0;
    tok->added = calloc(n, sizeof *tok->added);
    if (!tok->added) return cpt_errf(err, "out of memory");
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *content = json_object_get(a, "content");
        tok_added *t = &tok->added[tok->n_added];
        if (!json_is_string(content) || json_string_length(content) == 0)
            return cpt_errf(err, "%s: added_tokens[%zu]: \"content\" must be a non-empty string", name, i);
        t->len = json_string_length(content);
        t->content = malloc(t->len + 1);
        if (!t->content) return cpt_errf(err, "out of memory");
        memcpy(t->content, json_string_value(content), t->len + 1);
        t->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        t->special = get_bool(a, "special", 0);
        t->lstrip = get_bool(a, "lstrip", 0);
        t->rstrip = get_bool(a, "rstrip", 0);
        t->single_word = get_bool(a, "single_word", 0);
        t->normalized = get_bool(a, "normalized", !t->special);
        tok->n_added++;
        if (t->len > tok->added_max_len) tok->added_max_len = t->len;
        tok->added_first[(uint8_t)t->content[0]] |= t->normalized ? 2 : 1;
        tok->tokens[t->id] = t->content;
        tok->token_lens[t->id] = (uint32_t)t->len;
        if (t->special) tok->is_special[t->id] = 1;
    }
    return 0;
}

/* The ByteLevel decoder's view of each id: byte-level chars back to bytes; a token holding any other char (an
 * added token such as "<|im end|>" with a space) decodes to its own UTF-8. */
static int build_decode_table(cpt_tokenizer *tok, cpt_err *err) {
    tok->dec_bytes = calloc((size_t)tok->n_ids, sizeof *tok->dec_bytes);
    tok->dec_lens = calloc((size_t)tok->n_ids, sizeof *tok->dec_lens);
    if (!tok->dec_bytes || !tok->dec_lens) return cpt_errf(err, "out of memory");
    for (int32_t id = 0; id < tok->n_ids; id++) {
        const char *t = tok->tokens[id];
        if (!t) continue;
        size_t n = tok->token_lens[id];
        char *out = malloc(n + 1);
        if (!out) return cpt_errf(err, "out of memory");
        size_t o = 0, i = 0;
        int mapped = 1;
        while (i < n) {
            uint32_t cp;
            int k = tok_utf8_next((const uint8_t *)t + i, n - i, &cp);
            int b = tok_cp_to_byte(cp);
            if (b < 0) { mapped = 0; break; }
            out[o++] = (char)b;
            i += (size_t)k;
        }
        if (!mapped) {
            memcpy(out, t, n);
            o = n;
        }
        out[o] = 0;
        tok->dec_bytes[id] = out;
        tok->dec_lens[id] = (uint32_t)o;
    }
    return 0;
}

static int32_t max_id_of(json_t *vocab, json_t *added, const char *name, cpt_err *err) {
    int32_t max = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= TOK_MAX_IDS) {
            cpt_errf(err, "%s: model.vocab[\"%s\"]: the id must be an integer in [0, %d)", name, key, TOK_MAX_IDS);
            return -2;
        }
        if (json_integer_value(val) > max) max = (int32_t)json_integer_value(val);
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOK_MAX_IDS) {
            cpt_errf(err, "%s: added_tokens[%zu]: \"id\" must be an integer in [0, %d)", name, i, TOK_MAX_IDS);
            return -2;
        }
        if (json_integer_value(id) > max) max = (int32_t)json_integer_value(id);
    }
    return max;
}

static cpt_tokenizer *load_doc(json_t *doc, const char *name, cpt_err *err) {
    if (!json_is_object(doc)) { cpt_errf(err, "%s: not a JSON object", name); return NULL; }
    json_t *model = json_object_get(doc, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(doc, "added_tokens");
    if (!json_is_object(model)) { cpt_errf(err, "%s: missing \"model\" object", name); return NULL; }
    if (!json_is_object(vocab)) { cpt_errf(err, "%s: model.vocab must be an object (token -> id)", name); return NULL; }
    if (added && !json_is_null(added) && !json_is_array(added)) {
        cpt_errf(err, "%s: added_tokens must be an array", name);
        return NULL;
    }
    int32_t max_id = max_id_of(vocab, added, name, err);
    if (max_id == -2) return NULL;
    if (max_id < 0) { cpt_errf(err, "%s: the vocabulary is empty", name); return NULL; }

    cpt_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) { cpt_errf(err, "out of memory"); return NULL; }
    tok->eos_id = tok->bos_id = tok->pad_id = -1;
    tok->n_ids = max_id + 1;
    tok->tokens = calloc((size_t)tok->n_ids, sizeof *tok->tokens);
    tok->token_lens = calloc((size_t)tok->n_ids, sizeof *tok->token_lens);
    tok->model_tokens = calloc((size_t)tok->n_ids, sizeof *tok->model_tokens);
    tok->model_lens = calloc((size_t)tok->n_ids, sizeof *tok->model_lens);
    tok->is_special = calloc((size_t)tok->n_ids, 1);
    if (!tok->tokens || !tok->token_lens || !tok->model_tokens || !tok->model_lens || !tok->is_special) {
        cpt_errf(err, "out of memory");
        goto fail;
    }
    if (load_model(tok, model, name, err) != 0) goto fail;
    for (int32_t id = 0; id < tok->n_ids; id++) {
        tok->tokens[id] = tok->model_tokens[id];
        tok->token_lens[id] = tok->model_lens[id];
    }
    if (load_added(tok, added, name, err) != 0) goto fail;
    if (load_normalizer(tok, json_object_get(doc, "normalizer"), name, err) != 0) goto fail;
    if (tok_build_nfc_table(tok, err) != 0) goto fail;
    if (load_pretokenizer(tok, json_object_get(doc, "pre_tokenizer"), name, err) != 0) goto fail;
    if (!tok->byte_level) {
        cpt_errf(err, "%s: pre_tokenizer: no ByteLevel step (only byte-level BPE tokenizers are supported)", name);
        goto fail;
    }
    if (check_decoder(json_object_get(doc, "decoder"), name, err) != 0) goto fail;
    if (build_decode_table(tok, err) != 0) goto fail;
    return tok;
fail:
    cpt_tokenizer_free(tok);
    return NULL;
}

cpt_tokenizer *cpt_tokenizer_load_json(const char *json, size_t len, const char *name, cpt_err *err) {
    json_error_t je;
    json_t *doc = json_loadb(json, len, 0, &je);
    if (!doc) {
        cpt_errf(err, "%s:%d:%d: invalid JSON: %s", name, je.line, je.column, je.text);
        return NULL;
    }
    cpt_tokenizer *tok = load_doc(doc, name, err);
    json_decref(doc);
    return tok;
}

/* tokenizer_config.json: eos/bos/pad tokens as strings or {"content": ...} objects. A missing file is fine. */
static int load_config(cpt_tokenizer *tok, const char *path, cpt_err *err) {
    if (!cpt_path_exists(path)) return 0;
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return cpt_errf(err, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
    const char *keys[3] = {"eos_token", "bos_token", "pad_token"};
    int32_t *dst[3] = {&tok->eos_id, &tok->bos_id, &tok->pad_id};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (!json_is_string(v)) continue;
        int32_t id = cpt_tokenizer_token_id(tok, json_string_value(v));
        if (id < 0) {
            cpt_errf(err, "%s: %s \"%s\" is not a token of the tokenizer", path, keys[i], json_string_value(v));
            json_decref(cfg);
            return -1;
        }
        *dst[i] = id;
    }
    json_decref(cfg);
    return 0;
}

/* GPT-2's folder: encoder.json (token -> id) and vocab.bpe ("#version" line, then "a b" merges), loaded as the
 * tokenizer.json GPT-2 ships: ByteLevel with GPT-2's regex, no normalizer, <|endoftext|> special. */
static cpt_tokenizer *load_gpt2_folder(const char *dir, cpt_err *err) {
    char enc_path[4096], bpe_path[4096];
    snprintf(enc_path, sizeof enc_path, "%s/encoder.json", dir);
    snprintf(bpe_path, sizeof bpe_path, "%s/vocab.bpe", dir);
    json_error_t je;
    json_t *vocab = json_load_file(enc_path, 0, &je);
    if (!vocab) { cpt_errf(err, "%s:%d:%d: invalid JSON: %s", enc_path, je.line, je.column, je.text); return NULL; }
    size_t len;
    char *bpe = cpt_read_file(bpe_path, &len, err);
    if (!bpe) { json_decref(vocab); return NULL; }
    json_t *merges = json_array();
    size_t line = 0;
    for (char *p = bpe; p < bpe + len;) {
        char *nl = memchr(p, '\n', (size_t)(bpe + len - p));
        char *end = nl ? nl : bpe + len;
        line++;
        size_t n = (size_t)(end - p);
        if (n && p[n - 1] == '\r') n--;
        if (n > 0 && !(line == 1 && strncmp(p, "#version", 8) == 0)) json_array_append_new(merges, json_stringn(p, n));
        p = end + 1;
    }
    free(bpe);
    json_t *doc = json_pack("{s:{s:s, s:o, s:o}, s:[], s:n, s:{s:s, s:b, s:b}, s:{s:s}}", "model", "type", "BPE",
                            "vocab", vocab, "merges", merges, "added_tokens", "normalizer", "pre_tokenizer", "type",
                            "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder", "type", "ByteLevel");
    if (!doc) { cpt_errf(err, "out of memory"); return NULL; }
    json_t *eot = json_object_get(vocab, "<|endoftext|>");
    int32_t eot_id = json_is_integer(eot) ? (int32_t)json_integer_value(eot) : -1;
    if (eot_id >= 0)
        json_array_append_new(json_object_get(doc, "added_tokens"),
                              json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (int)eot_id, "content",
                                        "<|endoftext|>", "special", 1, "normalized", 0, "lstrip", 0, "rstrip", 0,
                                        "single_word", 0));
    cpt_tokenizer *tok = load_doc(doc, enc_path, err);
    json_decref(doc);
    if (tok && eot_id >= 0) tok->eos_id = tok->bos_id = eot_id;
    return tok;
}

cpt_tokenizer *cpt_tokenizer_load(const char *path, cpt_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) { cpt_errno(err, "tokenizer %s", path); return NULL; }
    char file[4096], dir[4096];
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
        if (!cpt_path_exists(file)) {
            char enc[4096];
            snprintf(enc, sizeof enc, "%s/encoder.json", path);
            if (cpt_path_exists(enc)) return load_gpt2_folder(path, err);
            cpt_errf(err, "tokenizer %s: the folder holds neither tokenizer.json nor encoder.json + vocab.bpe", path);
            return NULL;
        }
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    size_t len;
    char *text = cpt_read_file(file, &len, err);
    if (!text) return NULL;
    cpt_tokenizer *tok = cpt_tokenizer_load_json(text, len, file, err);
    free(text);
    if (!tok) return NULL;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    if (load_config(tok, cfg, err) != 0) {
        cpt_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

void cpt_tokenizer_free(cpt_tokenizer *tok) {
    if (!tok) return;
    if (tok->model_tokens)
        for (int32_t i = 0; i < tok->n_ids; i++) free(tok->model_tokens[i]);
    if (tok->dec_bytes)
        for (int32_t i = 0; i < tok->n_ids; i++) free(tok->dec_bytes[i]);
    for (size_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    for (int i = 0; i < tok->n_steps; i++) pcre2_code_free(tok->steps[i].re);
    free(tok->added);
    free(tok->model_tokens);
    free(tok->model_lens);
    free(tok->tokens);
    free(tok->token_lens);
    free(tok->dec_bytes);
    free(tok->dec_lens);
    free(tok->is_special);
    free(tok->nfc_stable);
    tok_strmap_free(&tok->vocab);
    tok_mergemap_free(&tok->merges);
    free(tok);
}

int32_t cpt_tokenizer_vocab_size(const cpt_tokenizer *tok) { return tok->n_ids; }

int32_t cpt_tokenizer_token_id(const cpt_tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && memcmp(tok->added[i].content, token, len) == 0) return tok->added[i].id;
    return tok_strmap_get(&tok->vocab, token, len);
}

const char *cpt_tokenizer_id_token(const cpt_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids ? tok->tokens[id] : NULL;
}

const char *cpt_tokenizer_id_bytes(const cpt_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_ids || !tok->dec_bytes[id]) return NULL;
    if (len) *len = tok->dec_lens[id];
    return tok->dec_bytes[id];
}

int cpt_tokenizer_is_special(const cpt_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && tok->is_special[id];
}

int32_t cpt_tokenizer_eos_id(const cpt_tokenizer *tok) { return tok->eos_id; }
int32_t cpt_tokenizer_bos_id(const cpt_tokenizer *tok) { return tok->bos_id; }
int32_t cpt_tokenizer_pad_id(const cpt_tokenizer *tok) { return tok->pad_id; }
