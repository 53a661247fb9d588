#include "trainer/dpo_data.h"

#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"

static int seq_set(cpt_dpo_seq *s, const int32_t *ids, const uint8_t *amask, int n, int max_len, int *truncated,
                   cpt_err *err) {
    if (n > max_len) {
        n = max_len;
        *truncated = 1;
    }
    s->ids = malloc((size_t)(n ? n : 1) * sizeof *s->ids);
    s->mask = calloc((size_t)(n ? n : 1), sizeof *s->mask);
    s->ref = calloc((size_t)(n ? n : 1), sizeof *s->ref);
    if (!s->ids || !s->mask || !s->ref) return cpt_errf(err, "out of memory");
    memcpy(s->ids, ids, (size_t)n * sizeof *ids);
    s->n = n;
    int loss = 0;
    for (int i = 0; i + 1 < n; i++) {
        s->mask[i] = amask[i + 1] ? 1.0f : 0.0f;
        loss += amask[i + 1] != 0;
    }
    return loss;
}

static void seq_free(cpt_dpo_seq *s) {
    free(s->ids);
    free(s->mask);
    free(s->ref);
    memset(s, 0, sizeof *s);
}

/* ids and assistant mask of prompt + answer. */
static int tokenize_one(const cpt_record *r, const char *answer, const cpt_dpo_data_opts *o, int32_t **ids,
                        uint8_t **amask, int *n, cpt_err *err) {
    if (o->tpl) {
        size_t nm = r->prompt ? 1 : r->n_messages;
        cpt_chat_message *msgs = calloc(nm + 1, sizeof *msgs);
        if (!msgs) return cpt_errf(err, "out of memory");
        if (r->prompt)
            msgs[0] = (cpt_chat_message){.role = "user", .content = r->prompt, .content_len = strlen(r->prompt)};
        else
            for (size_t i = 0; i < nm; i++)
                msgs[i] = (cpt_chat_message){.role = r->messages[i].role, .content = r->messages[i].content,
                                             .content_len = strlen(r->messages[i].content)};
        msgs[nm] = (cpt_chat_message){.role = "assistant", .content = answer, .content_len = strlen(answer)};
        cpt_chat_options co = {0};
        cpt_chat_rendered out;
        memset(&out, 0, sizeof out);
        int rc = cpt_chat_render(o->tpl, o->tok, msgs, nm + 1, &co, &out, err);
        free(msgs);
        if (rc) return -1;
        *ids = out.ids;
        *amask = out.assistant_mask;
        *n = (int)out.n_ids;
        out.ids = NULL;
        out.assistant_mask = NULL;
        cpt_chat_rendered_free(&out);
        return 0;
    }
    if (!r->prompt) return cpt_errf(err, "a messages prompt needs a chat template (data.chat_template)");
    int32_t *p = NULL, *a = NULL;
    long np = cpt_tokenizer_encode(o->tok, r->prompt, strlen(r->prompt), &p, err);
    long na = np < 0 ? -1 : cpt_tokenizer_encode(o->tok, answer, strlen(answer), &a, err);
    if (na < 0) {
        free(p);
        return -1;
    }
    int n_all = (int)(np + na + (o->eos_id >= 0));
    *ids = malloc((size_t)(n_all ? n_all : 1) * sizeof **ids);
    *amask = calloc((size_t)(n_all ? n_all : 1), 1);
    if (!*ids || !*amask) {
        free(p);
        free(a);
        return cpt_errf(err, "out of memory");
    }
    if (np) memcpy(*ids, p, (size_t)np * sizeof *p);
    if (na) memcpy(*ids + np, a, (size_t)na * sizeof *a);
    if (o->eos_id >= 0) (*ids)[n_all - 1] = o->eos_id;
    for (int i = (int)np; i < n_all; i++) (*amask)[i] = 1;
    *n = n_all;
    free(p);
    free(a);
    return 0;
}

int cpt_dpo_data_load(const char *path, const cpt_config *cfg, const cpt_dpo_data_opts *o, cpt_dpo_data *d,
                      cpt_err *err) {
    memset(d, 0, sizeof *d);
    cpt_dataset *ds = cpt_dataset_load_config(path, cfg, err);
    if (!ds) return -1;
    if (cpt_dataset_format(ds) != CPT_DATA_PREFERENCE) {
        cpt_errf(err, "%s: %s records; DPO needs preference records {\"prompt\", \"chosen\", \"rejected\"}", path,
                 cpt_data_format_name(cpt_dataset_format(ds)));
        cpt_dataset_free(ds);
        return -1;
    }
    size_t n = cpt_dataset_count(ds);
    if (o->max_pairs && o->max_pairs < n) n = o->max_pairs;
    d->pairs = calloc(n + 1, sizeof *d->pairs); /* one spare: cpt_dpo_data_free also frees a pair left half-built */
    if (!d->pairs) {
        cpt_dataset_free(ds);
        return cpt_errf(err, "out of memory");
    }
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const cpt_record *r = cpt_dataset_get(ds, i);
        cpt_dpo_pair *p = &d->pairs[d->n];
        p->line = r->line;
        int truncated = 0, ok = 1;
        for (int j = 0; j < 2 && !rc; j++) {
            int32_t *ids = NULL;
            uint8_t *am = NULL;
            int len = 0;
            if (tokenize_one(r, j == 0 ? r->chosen : r->rejected, o, &ids, &am, &len, err)) {
                rc = cpt_err_prefix(err, "%s:%d: %s", path, r->line, j == 0 ? "chosen" : "rejected");
            } else {
                int loss = seq_set(&p->s[j], ids, am, len, o->max_seq_len, &truncated, err);
                if (loss < 0) rc = -1;
                else if (loss == 0) ok = 0;
            }
            free(ids);
            free(am);
        }
        if (rc) break;
        d->n_truncated += truncated;
        if (!ok) {
            seq_free(&p->s[0]);
            seq_free(&p->s[1]);
            d->n_skipped++;
            continue;
        }
        d->n++;
    }
    cpt_dataset_free(ds);
    if (!rc && d->n == 0) rc = cpt_errf(err, "%s: no usable preference pair (%zu skipped)", path, d->n_skipped);
    if (rc) cpt_dpo_data_free(d);
    return rc;
}

void cpt_dpo_data_free(cpt_dpo_data *d) {
    for (size_t i = 0; i < d->n; i++) {
        seq_free(&d->pairs[i].s[0]);
        seq_free(&d->pairs[i].s[1]);
    }
    /* a pair being built when a load failed */
    if (d->pairs) {
        seq_free(&d->pairs[d->n].s[0]);
        seq_free(&d->pairs[d->n].s[1]);
    }
    free(d->pairs);
    memset(d, 0, sizeof *d);
}

void cpt_dpo_batch_reset(cpt_dpo_batch *b) {
    b->n_tokens = b->n_seqs = 0;
}

/* Grows an array of elem-sized entries to cap entries. */
static int grow_to(void **p, size_t elem, int cap) {
    void *q = realloc(*p, (size_t)cap * elem);
    if (!q) return -1;
    *p = q;
    return 0;
}

int cpt_dpo_batch_add(cpt_dpo_batch *b, const cpt_dpo_pair *p, cpt_err *err) {
    int need = b->n_tokens + cpt_dpo_pair_tokens(p);
    if (need > b->cap_tokens) {
        int c = b->cap_tokens ? b->cap_tokens : 256;
        while (c < need) c *= 2;
        if (grow_to((void **)&b->tokens, sizeof *b->tokens, c) || grow_to((void **)&b->targets, sizeof *b->targets, c) ||
            grow_to((void **)&b->mask, sizeof *b->mask, c) || grow_to((void **)&b->ref, sizeof *b->ref, c))
            return cpt_errf(err, "out of memory");
        b->cap_tokens = c;
    }
    if (b->n_seqs + 3 > b->cap_seqs) {
        int c = b->cap_seqs ? b->cap_seqs : 64;
        while (c < b->n_seqs + 3) c *= 2;
        if (grow_to((void **)&b->seq_start, sizeof *b->seq_start, c)) return cpt_errf(err, "out of memory");
        b->cap_seqs = c;
    }
    for (int j = 0; j < 2; j++) {
        const cpt_dpo_seq *s = &p->s[j];
        int at = b->n_tokens;
        b->seq_start[b->n_seqs] = at;
        memcpy(b->tokens + at, s->ids, (size_t)s->n * sizeof *s->ids);
        memcpy(b->mask + at, s->mask, (size_t)s->n * sizeof *s->mask);
        memcpy(b->ref + at, s->ref, (size_t)s->n * sizeof *s->ref);
        for (int i = 0; i < s->n; i++) b->targets[at + i] = i + 1 < s->n ? s->ids[i + 1] : -1;
        b->n_tokens += s->n;
        b->n_seqs++;
    }
    b->seq_start[b->n_seqs] = b->n_tokens;
    return 0;
}

void cpt_dpo_batch_free(cpt_dpo_batch *b) {
    free(b->tokens);
    free(b->seq_start);
    free(b->targets);
    free(b->mask);
    free(b->ref);
    memset(b, 0, sizeof *b);
}

int cpt_dpo_data_reference(cpt_dpo_data *d, cpt_model *m, int budget, cpt_err *err) {
    cpt_dpo_batch b;
    memset(&b, 0, sizeof b);
    float *lp = NULL;
    int cap = 0, rc = 0;
    int vocab = cpt_model_cfg(m)->vocab_size;
    for (size_t i = 0; i < d->n && !rc;) {
        cpt_dpo_batch_reset(&b);
        size_t first = i;
        while (i < d->n && (i == first || b.n_tokens + cpt_dpo_pair_tokens(&d->pairs[i]) <= budget)) {
            for (int j = 0; j < 2; j++)
                for (int t = 0; t < d->pairs[i].s[j].n; t++)
                    if (d->pairs[i].s[j].ids[t] >= vocab) {
                        cpt_dpo_batch_free(&b);
                        free(lp);
                        return cpt_errf(err, "line %d: token id %d outside the model's vocabulary (%d)",
                                        d->pairs[i].line, d->pairs[i].s[j].ids[t], vocab);
                    }
            if (cpt_dpo_batch_add(&b, &d->pairs[i], err)) {
                rc = -1;
                break;
            }
            i++;
        }
        if (rc) break;
        if (b.n_tokens > cap) {
            free(lp);
            cap = b.cap_tokens;
            if (!(lp = malloc((size_t)cap * sizeof *lp))) {
                rc = cpt_errf(err, "out of memory");
                break;
            }
        }
        cpt_batch mb = {.n_tokens = b.n_tokens, .n_seqs = b.n_seqs, .tokens = b.tokens, .seq_start = b.seq_start,
                        .targets = b.targets};
        cpt_forward_out fo = {.logprobs = lp};
        if (cpt_model_forward(m, &mb, &fo, 0, err)) {
            rc = cpt_err_prefix(err, "reference forward");
            break;
        }
        int at = 0;
        for (size_t k = first; k < i; k++)
            for (int j = 0; j < 2; j++) {
                cpt_dpo_seq *s = &d->pairs[k].s[j];
                memcpy(s->ref, lp + at, (size_t)s->n * sizeof *lp);
                at += s->n;
            }
    }
    cpt_dpo_batch_free(&b);
    free(lp);
    return rc;
}
