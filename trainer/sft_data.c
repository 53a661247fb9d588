/* Reading SFT examples from JSONL and tokenizing them (see trainer/sft_data.h). */
#include "trainer/sft_data.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The last run of mask = 1: the final completion. */
static void last_answer(const uint8_t *mask, int n, int *start, int *len) {
    int end = n;
    while (end > 0 && !mask[end - 1]) end--;
    int s = end;
    while (s > 0 && mask[s - 1]) s--;
    *start = s;
    *len = end - s;
}

/* Raw (no chat template): encode(prompt) + encode(completion) + [eos], loss on the completion and the eos. */
static int tokenize_raw(const cpt_sft_data_opts *o, const char *p, const char *c, int32_t **ids, uint8_t **mask,
                        int *n, cpt_err *err) {
    int32_t *pi = NULL, *ci = NULL;
    long np = cpt_tokenizer_encode(o->tok, p, strlen(p), &pi, err);
    if (np < 0) return cpt_err_prefix(err, "prompt");
    long nc = cpt_tokenizer_encode(o->tok, c, strlen(c), &ci, err);
    if (nc < 0) {
        free(pi);
        return cpt_err_prefix(err, "completion");
    }
    int extra = o->eos_id >= 0;
    *n = (int)(np + nc + extra);
    *ids = malloc((size_t)(*n ? *n : 1) * sizeof **ids);
    *mask = malloc((size_t)(*n ? *n : 1));
    int rc = 0;
    if (!*ids || !*mask) {
        rc = cpt_errf(err, "out of memory");
    } else {
        memcpy(*ids, pi, (size_t)np * sizeof *pi);
        memcpy(*ids + np, ci, (size_t)nc * sizeof *ci);
        if (extra) (*ids)[np + nc] = o->eos_id;
        memset(*mask, 0, (size_t)np);
        memset(*mask + np, 1, (size_t)(nc + extra));
    }
    free(pi);
    free(ci);
    return rc;
}

/* Appends encode(text) to ids/mask with mask value train, leaving room for one more id. */
static int append_text(const cpt_tokenizer *tok, const char *text, uint8_t train, int32_t **ids, uint8_t **mask,
                       int *n, int *cap, cpt_err *err) {
    int32_t *t = NULL;
    long nt = cpt_tokenizer_encode(tok, text, strlen(text), &t, err);
    if (nt < 0) return -1;
    if (*n + nt + 1 > *cap) {
        int nc = (int)(*n + nt + 1) * 2;
        int32_t *ni = realloc(*ids, (size_t)nc * sizeof *ni);
        if (ni) *ids = ni;
        uint8_t *nm = realloc(*mask, (size_t)nc);
        if (nm) *mask = nm;
        if (!ni || !nm) {
            free(t);
            return cpt_errf(err, "out of memory");
        }
        *cap = nc;
    }
    memcpy(*ids + *n, t, (size_t)nt * sizeof *t);
    memset(*mask + *n, train, (size_t)nt);
    *n += (int)nt;
    free(t);
    return 0;
}

/* Raw segments: encode(prompt) + encode(segment 1) + ... + [eos], each segment encoded on its own (as a rollout
 * appends an observation's tokens), the loss on the segments with "train": true and on the eos. */
static int tokenize_segments(const cpt_sft_data_opts *o, const char *prompt, json_t *segs, int32_t **ids,
                             uint8_t **mask, int *n, cpt_err *err) {
    int cap = 0;
    *n = 0;
    if (!json_is_array(segs) || json_array_size(segs) == 0)
        return cpt_errf(err, "field 'segments': expected a non-empty list of {\"text\": str, \"train\": bool}");
    if (append_text(o->tok, prompt, 0, ids, mask, n, &cap, err)) return cpt_err_prefix(err, "prompt");
    size_t i;
    json_t *seg;
    json_array_foreach(segs, i, seg) {
        json_t *text = json_object_get(seg, "text"), *train = json_object_get(seg, "train");
        if (!json_is_string(text) || !json_is_boolean(train))
            return cpt_errf(err, "field 'segments' [%zu]: expected {\"text\": str, \"train\": bool}", i);
        if (append_text(o->tok, json_string_value(text), json_is_true(train), ids, mask, n, &cap, err))
            return cpt_err_prefix(err, "field 'segments' [%zu]", i);
    }
    if (o->eos_id >= 0) { /* append_text keeps room for one more id */
        (*ids)[*n] = o->eos_id;
        (*mask)[*n] = 1;
        (*n)++;
    }
    return 0;
}

/* The "segments" of an rl_prompt record (kept in its extra JSON), or NULL. */
static json_t *record_segments(const cpt_record *r) {
    if (!r->extra || !strstr(r->extra, "\"segments\"")) return NULL;
    json_t *extra = json_loads(r->extra, 0, NULL);
    json_t *segs = json_incref(json_object_get(extra, "segments"));
    json_decref(extra);
    return segs;
}

/* One record -> ids + mask. */
static int tokenize_record(const cpt_record *r, cpt_data_format fmt, const cpt_sft_data_opts *o, int32_t **ids,
                           uint8_t **mask, int *n, cpt_err *err) {
    *ids = NULL;
    *mask = NULL;
    cpt_chat_message pc[2], *msgs = NULL;
    size_t nm = 0;
    /* rl_prompt records train as prompt -> answer (the synthetic tasks' reference answers). */
    const char *completion = fmt == CPT_DATA_RL_PROMPT ? r->answer : r->completion;
    json_t *segs = fmt == CPT_DATA_RL_PROMPT ? record_segments(r) : NULL;
    if (segs) {
        int rc = -1;
        if (o->tpl || !r->prompt)
            cpt_errf(err, "field 'segments': needs a string prompt and data.chat_template = \"none\"");
        else
            rc = tokenize_segments(o, r->prompt, segs, ids, mask, n, err);
        json_decref(segs);
        if (rc) {
            free(*ids);
            free(*mask);
            *ids = NULL;
            *mask = NULL;
        }
        return rc;
    }
    if ((fmt == CPT_DATA_PROMPT_COMPLETION || fmt == CPT_DATA_RL_PROMPT) && r->prompt) {
        if (!o->tpl) return tokenize_raw(o, r->prompt, completion, ids, mask, n, err);
        pc[0] = (cpt_chat_message){.role = "user", .content = r->prompt, .content_len = strlen(r->prompt)};
        pc[1] = (cpt_chat_message){.role = "assistant", .content = completion, .content_len = strlen(completion)};
        msgs = pc;
        nm = 2;
    } else if (fmt == CPT_DATA_MESSAGES || fmt == CPT_DATA_RL_PROMPT) {
        if (!o->tpl) return cpt_errf(err, "messages need a chat template (data.chat_template is \"none\")");
        int add_answer = fmt == CPT_DATA_RL_PROMPT;
        nm = r->n_messages + (size_t)add_answer;
        msgs = calloc(nm ? nm : 1, sizeof *msgs);
        if (!msgs) return cpt_errf(err, "out of memory");
        for (size_t i = 0; i < r->n_messages; i++)
            msgs[i] = (cpt_chat_message){.role = r->messages[i].role, .content = r->messages[i].content,
                                         .content_len = strlen(r->messages[i].content)};
        if (add_answer)
            msgs[nm - 1] = (cpt_chat_message){.role = "assistant", .content = completion,
                                              .content_len = strlen(completion)};
    } else {
        return cpt_errf(err, "format %s is not an SFT format (prompt_completion, messages or rl_prompt)",
                        cpt_data_format_name(fmt));
    }
    cpt_chat_options opt = {0};
    cpt_chat_rendered out = {0};
    int rc = cpt_chat_render(o->tpl, o->tok, msgs, nm, &opt, &out, err);
    if (msgs != pc) free(msgs);
    if (rc) return -1;
    *n = (int)out.n_ids;
    *ids = out.ids;
    *mask = out.assistant_mask;
    out.ids = NULL;
    out.assistant_mask = NULL;
    cpt_chat_rendered_free(&out);
    return 0;
}

int cpt_sft_dataset_load(const char *path, const cpt_sft_data_opts *o, cpt_sft_dataset *ds, cpt_err *err) {
    memset(ds, 0, sizeof *ds);
    cpt_dataset_opts dopt = {.skip_bad_lines = o->skip_bad_lines, .max_records = o->max_examples};
    if (cpt_data_format_parse(o->format, &dopt.format))
        return cpt_errf(err, "data.format \"%s\" is unknown", o->format);
    cpt_dataset *raw = cpt_dataset_load(path, &dopt, err);
    if (!raw) return cpt_err_prefix(err, "data");
    cpt_data_format fmt = cpt_dataset_format(raw);
    int rc = 0;
    for (size_t i = 0; i < cpt_dataset_count(raw) && !rc; i++) {
        const cpt_record *r = cpt_dataset_get(raw, i);
        int32_t *ids = NULL;
        uint8_t *mask = NULL;
        int n = 0;
        if (tokenize_record(r, fmt, o, &ids, &mask, &n, err)) {
            rc = cpt_err_prefix(err, "%s:%d", path, r->line);
        } else {
            int s, l;
            last_answer(mask, n, &s, &l);
            rc = cpt_sft_dataset_add(ds, ids, mask, n, s, l, o->max_seq_len, err);
        }
        free(ids);
        free(mask);
    }
    ds->n_skipped += cpt_dataset_bad_lines(raw); /* core/dataset.c has reported them */
    cpt_dataset_free(raw);
    if (rc) {
        cpt_sft_dataset_free(ds);
        return -1;
    }
    if (ds->n == 0) return cpt_errf(err, "data: %s: no example has a token to learn", path);
    return 0;
}
