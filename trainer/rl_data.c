#include "trainer/rl_data.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cpt_rl_prompt_ids(const cpt_chat_template *tpl, const cpt_tokenizer *tok, const cpt_record *r, int32_t **ids,
                      size_t *n, cpt_err *err) {
    *ids = NULL;
    *n = 0;
    if (!tpl) {
        if (!r->prompt) return cpt_errf(err, "line %d: a prompt given as messages needs a chat template (data.chat_template)", r->line);
        long k = cpt_tokenizer_encode(tok, r->prompt, strlen(r->prompt), ids, err);
        if (k < 0) return cpt_err_prefix(err, "line %d: prompt", r->line);
        *n = (size_t)k;
    } else {
        size_t nm = r->prompt ? 1 : r->n_messages;
        cpt_chat_message *msgs = calloc(nm ? nm : 1, sizeof *msgs);
        if (!msgs) return cpt_errf(err, "out of memory");
        if (r->prompt) {
            msgs[0].role = "user";
            msgs[0].content = r->prompt;
            msgs[0].content_len = strlen(r->prompt);
        } else {
            for (size_t i = 0; i < nm; i++) {
                msgs[i].role = r->messages[i].role;
                msgs[i].content = r->messages[i].content;
                msgs[i].content_len = strlen(r->messages[i].content);
            }
        }
        cpt_chat_options opt = {.add_generation_prompt = 1};
        cpt_chat_rendered out;
        memset(&out, 0, sizeof out);
        int rc = cpt_chat_render(tpl, tok, msgs, nm, &opt, &out, err);
        free(msgs);
        if (rc) return cpt_err_prefix(err, "line %d: chat template", r->line);
        *ids = out.ids;
        *n = out.n_ids;
        out.ids = NULL;
        cpt_chat_rendered_free(&out);
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return cpt_errf(err, "line %d: the prompt has no tokens", r->line);
    }
    return 0;
}

char *cpt_rl_extra_json(const cpt_record *r, cpt_err *err) {
    json_error_t je;
    json_t *o = json_loads(r->extra ? r->extra : "{}", 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        cpt_errf(err, "line %d: extra fields are not a JSON object", r->line);
        return NULL;
    }
    if (r->answer && json_object_set_new(o, "answer", json_string(r->answer))) {
        json_decref(o);
        cpt_errf(err, "line %d: answer is not valid UTF-8", r->line);
        return NULL;
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (!s) cpt_errf(err, "out of memory");
    return s;
}

void cpt_rl_batch_reset(cpt_rl_batch *b) {
    b->n_tokens = b->n_seqs = b->n_groups = 0;
    b->n_truncated = 0;
    b->has_teacher = 1;
    if (b->seq_start) b->seq_start[0] = 0;
}

void cpt_rl_batch_free(cpt_rl_batch *b) {
    free(b->tokens);
    free(b->targets);
    free(b->seq_start);
    free(b->mask);
    free(b->behav_logprobs);
    free(b->teacher_logprobs);
    free(b->seq_reward);
    free(b->seq_group);
    free(b->seq_resp_len);
    free(b->group_seq0);
    free(b->group_size);
    free(b->group_version);
    memset(b, 0, sizeof *b);
}

#define GROW(ptr, n) ((ptr) = realloc((ptr), (size_t)(n) * sizeof *(ptr)))

static int reserve(cpt_rl_batch *b, int tokens, int seqs, int groups) {
    if (tokens > b->cap_tokens) {
        int c = b->cap_tokens ? b->cap_tokens : 1024;
        while (c < tokens) c *= 2;
        if (!GROW(b->tokens, c) || !GROW(b->targets, c) || !GROW(b->mask, c) || !GROW(b->behav_logprobs, c) ||
            !GROW(b->teacher_logprobs, c))
            return -1;
        b->cap_tokens = c;
    }
    if (seqs > b->cap_seqs) {
        int c = b->cap_seqs ? b->cap_seqs : 64;
        while (c < seqs) c *= 2;
        int first = b->seq_start == NULL;
        if (!GROW(b->seq_start, c + 1) || !GROW(b->seq_reward, c) || !GROW(b->seq_group, c) ||
            !GROW(b->seq_resp_len, c))
            return -1;
        if (first) b->seq_start[0] = 0;
        b->cap_seqs = c;
    }
    if (groups > b->cap_groups) {
        int c = b->cap_groups ? b->cap_groups : 16;
        while (c < groups) c *= 2;
        if (!GROW(b->group_seq0, c) || !GROW(b->group_size, c) || !GROW(b->group_version, c)) return -1;
        b->cap_groups = c;
    }
    return 0;
}

int cpt_rl_batch_add_group(cpt_rl_batch *b, const cpt_rollout_group *g, int max_seq_len, int vocab_size,
                           cpt_err *err) {
    if (!g->has_rewards) return cpt_errf(err, "group (%llu, %llu) has no rewards", (unsigned long long)g->id.epoch,
                                         (unsigned long long)g->id.index);
    if (g->n_prompt < 1 || (int64_t)g->n_prompt >= max_seq_len)
        return cpt_errf(err, "group (%llu, %llu): prompt of %u tokens does not fit train.max_seq_len %d",
                        (unsigned long long)g->id.epoch, (unsigned long long)g->id.index, g->n_prompt, max_seq_len);
    if (b->n_groups == 0 && b->n_seqs == 0) b->has_teacher = 1;
    int np = (int)g->n_prompt;
    long need = 0;
    for (uint32_t k = 0; k < g->n_completions; k++) {
        long len = np + (long)g->completions[k].n_tokens;
        need += len < max_seq_len ? len : max_seq_len;
    }
    if (b->n_tokens + need > 0x3fffffff) return cpt_errf(err, "batch too large");
    if (reserve(b, b->n_tokens + (int)need, b->n_seqs + (int)g->n_completions, b->n_groups + 1))
        return cpt_errf(err, "out of memory");
    for (uint32_t i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] < 0 || g->prompt[i] >= vocab_size)
            return cpt_errf(err, "group (%llu, %llu): prompt token %d outside the vocabulary (%d)",
                            (unsigned long long)g->id.epoch, (unsigned long long)g->id.index, g->prompt[i], vocab_size);
    int gi = b->n_groups;
    b->group_seq0[gi] = b->n_seqs;
    b->group_size[gi] = (int32_t)g->n_completions;
    b->group_version[gi] = g->weight_version;
    for (uint32_t k = 0; k < g->n_completions; k++) {
        const cpt_completion *c = &g->completions[k];
        int nc = (int)c->n_tokens;
        if (np + nc > max_seq_len) {
            nc = max_seq_len - np;
            b->n_truncated++;
        }
        for (int i = 0; i < nc; i++)
            if (c->tokens[i] < 0 || c->tokens[i] >= vocab_size)
                return cpt_errf(err, "group (%llu, %llu) completion %u: token %d outside the vocabulary (%d)",
                                (unsigned long long)g->id.epoch, (unsigned long long)g->id.index, k, c->tokens[i],
                                vocab_size);
        if (!c->teacher_logprobs) b->has_teacher = 0;
        int s0 = b->n_tokens, len = np + nc;
        memcpy(b->tokens + s0, g->prompt, (size_t)np * sizeof *b->tokens);
        memcpy(b->tokens + s0 + np, c->tokens, (size_t)nc * sizeof *b->tokens);
        for (int i = 0; i < len; i++) {
            int t = s0 + i, j = i - (np - 1); /* completion token predicted at position i */
            b->targets[t] = i + 1 < len ? b->tokens[t + 1] : -1;
            /* a token the model did not generate (a tool's observation) carries no weight */
            int on = j >= 0 && j < nc && (!c->mask || c->mask[j]);
            b->mask[t] = on ? 1.0f : 0.0f;
            b->behav_logprobs[t] = on ? c->logprobs[j] : 0.0f;
            b->teacher_logprobs[t] = on && c->teacher_logprobs ? c->teacher_logprobs[j] : 0.0f;
        }
        int s = b->n_seqs++;
        b->seq_reward[s] = g->rewards[k];
        b->seq_group[s] = gi;
        b->seq_resp_len[s] = nc;
        b->n_tokens += len;
        b->seq_start[s + 1] = b->n_tokens;
    }
    b->n_groups++;
    return 0;
}

int cpt_rl_group_check(const cpt_rollout_group *g, const cpt_rl_group_limits *lim, cpt_err *err) {
    if (!g->has_rewards) return cpt_errf(err, "no rewards");
    if (g->n_prompt < 1 || (int64_t)g->n_prompt >= lim->max_seq_len)
        return cpt_errf(err, "prompt of %u tokens does not fit train.max_seq_len %d", g->n_prompt, lim->max_seq_len);
    for (uint32_t i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] < 0 || g->prompt[i] >= lim->vocab_size)
            return cpt_errf(err, "prompt[%u]: token %d outside the vocabulary [0, %d)", i, g->prompt[i],
                            lim->vocab_size);
    if (g->n_completions < 1 || (lim->group_size && g->n_completions != lim->group_size))
        return cpt_errf(err, "%u completions, the run asks %u (rollout.group_size)", g->n_completions,
                        lim->group_size);
    if ((int64_t)g->weight_version > lim->max_version || (int64_t)g->weight_version < 0)
        return cpt_errf(err, "weight_version %llu was never issued (newest %lld)",
                        (unsigned long long)g->weight_version, (long long)lim->max_version);
    for (uint32_t k = 0; k < g->n_completions; k++) {
        const cpt_completion *c = &g->completions[k];
        for (uint32_t i = 0; i < c->n_tokens; i++)
            if (c->tokens[i] < 0 || c->tokens[i] >= lim->vocab_size)
                return cpt_errf(err, "completions[%u].tokens[%u]: token %d outside the vocabulary [0, %d)", k, i,
                                c->tokens[i], lim->vocab_size);
        if (lim->need_teacher && !c->teacher_logprobs)
            return cpt_errf(err, "completions[%u]: no teacher_logprobs (opd)", k);
        double r = g->rewards[k];
        if (!isfinite(r) || (lim->max_abs_reward > 0 && fabs(r) > lim->max_abs_reward))
            return cpt_errf(err, "rewards[%u]: %g is not finite or exceeds reward.max_abs = %g", k, r,
                            lim->max_abs_reward);
    }
    return 0;
}
