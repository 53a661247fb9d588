#include "rollout/prompts.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_util.h"

#define MAX_PROMPT_IDS (1 << 20)

void cpt_prompt_list_free(cpt_prompt_list *pl) {
    for (int i = 0; i < pl->n; i++) free(pl->ids[i]);
    free(pl->ids);
    free(pl->len);
    memset(pl, 0, sizeof *pl);
}

int cpt_prompt_list_add(cpt_prompt_list *pl, const int32_t *ids, int n, cpt_err *err) {
    if (pl->n == pl->cap) {
        int cap = pl->cap ? pl->cap * 2 : 8;
        int32_t **a = realloc(pl->ids, sizeof *a * (size_t)cap);
        if (!a) return cpt_errf(err, "out of memory for prompts");
        pl->ids = a;
        int *l = realloc(pl->len, sizeof *l * (size_t)cap);
        if (!l) return cpt_errf(err, "out of memory for prompts");
        pl->len = l;
        pl->cap = cap;
    }
    int32_t *p = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!p) return cpt_errf(err, "out of memory for a prompt of %d tokens", n);
    if (n) memcpy(p, ids, sizeof(int32_t) * (size_t)n);
    pl->ids[pl->n] = p;
    pl->len[pl->n++] = n;
    return 0;
}

int cpt_prompt_list_add_ids(cpt_prompt_list *pl, const char *s, const char *where, cpt_err *err) {
    int n = 0, cap = 16, rc = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) return cpt_errf(err, "out of memory");
    for (const char *p = s; *p && !rc;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',') || *p == ' ' || *p == '+') {
            rc = cpt_errf(err, "%s: token %d of '%.64s' is not a non-negative integer", where, n, s);
            break;
        }
        if (n == cap) {
            int32_t *q = n < MAX_PROMPT_IDS ? realloc(ids, sizeof(int32_t) * (size_t)(cap *= 2)) : NULL;
            if (!q) {
                rc = cpt_errf(err, "%s: too many token ids", where);
                break;
            }
            ids = q;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) rc = cpt_errf(err, "%s: trailing comma in '%.64s'", where, s);
    }
    if (!rc && !n) rc = cpt_errf(err, "%s: no token ids", where);
    if (!rc) rc = cpt_prompt_list_add(pl, ids, n, err);
    free(ids);
    return rc;
}

int cpt_prompt_list_add_text(cpt_prompt_list *pl, const cpt_tokenizer *tok, const char *text, size_t len,
                             const char *where, cpt_err *err) {
    if (!tok) return cpt_errf(err, "%s: a text prompt needs a tokenizer (--tokenizer)", where);
    int32_t *ids = NULL;
    long n = cpt_tokenizer_encode(tok, text, len, &ids, err);
    if (n < 0) return cpt_err_prefix(err, "%s", where);
    int rc = n == 0 ? cpt_errf(err, "%s: the prompt encodes to no tokens", where) : cpt_prompt_list_add(pl, ids, (int)n, err);
    free(ids);
    return rc;
}

static int add_json_ids(cpt_prompt_list *pl, json_t *ids, const char *where, cpt_err *err) {
    size_t n = json_array_size(ids);
    if (n == 0) return cpt_errf(err, "%s: prompt_ids is empty", where);
    if (n > MAX_PROMPT_IDS) return cpt_errf(err, "%s: prompt_ids has %zu ids (at most %d)", where, n, MAX_PROMPT_IDS);
    int32_t *v = malloc(sizeof(int32_t) * n);
    if (!v) return cpt_errf(err, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *x = json_array_get(ids, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            rc = cpt_errf(err, "%s: prompt_ids[%zu] is not a token id (a non-negative integer)", where, i);
        else
            v[i] = (int32_t)json_integer_value(x);
    }
    if (!rc) rc = cpt_prompt_list_add(pl, v, (int)n, err);
    free(v);
    return rc;
}

int cpt_prompt_list_parse_jsonl(cpt_prompt_list *pl, const char *text, size_t len, const char *name,
                                const cpt_tokenizer *tok, cpt_err *err) {
    int line = 0, before = pl->n;
    size_t pos = 0;
    while (pos < len) {
        const char *l = text + pos;
        const char *nl = memchr(l, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - l) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        size_t k = 0;
        while (k < n && (l[k] == ' ' || l[k] == '\t' || l[k] == '\r')) k++;
        if (k == n) continue;
        char where[600];
        snprintf(where, sizeof where, "%.500s:%d", name, line);
        json_t *j = cpt_json_loadb(l, n, 0, where, err);
        if (!j) return -1;
        int rc;
        json_t *p = json_object_get(j, "prompt"), *ids = json_object_get(j, "prompt_ids");
        if (!json_is_object(j))
            rc = cpt_errf(err, "%s: expected an object {\"prompt\": TEXT} or {\"prompt_ids\": [ids]}", where);
        else if (p && ids)
            rc = cpt_errf(err, "%s: give prompt or prompt_ids, not both", where);
        else if (json_is_string(p))
            rc = cpt_prompt_list_add_text(pl, tok, json_string_value(p), json_string_length(p), where, err);
        else if (json_is_array(ids))
            rc = add_json_ids(pl, ids, where, err);
        else
            rc = cpt_errf(err, "%s: expected {\"prompt\": TEXT} or {\"prompt_ids\": [ids]}", where);
        json_decref(j);
        if (rc) return -1;
    }
    if (pl->n == before) return cpt_errf(err, "%s: no prompts", name);
    return 0;
}
