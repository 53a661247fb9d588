#include "reward/worker.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "queue/conn.h"
#include "queue/stream.h"
#include "reward/reward_model.h"
#include "reward/teacher.h"

/* ---------------- scoring one group ---------------- */

/* extra with "n_tokens" set (NULL: a fresh object). An extra that is not a JSON object with distinct keys goes to
 * the reward as it came, so the reward refuses it with its own reason (read as {} it would lose the record's fields
 * without a word). */
static char *extra_with_tokens(const char *extra, uint32_t n_tokens) {
    json_t *o = NULL;
    if (extra) {
        json_error_t je;
        o = json_loads(extra, JSON_REJECT_DUPLICATES, &je);
        if (!o || !json_is_object(o)) {
            json_decref(o);
            return strdup(extra);
        }
    }
    if (!o) o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "n_tokens", json_integer((json_int_t)n_tokens));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* A decoded text (len bytes) with every NUL byte (a byte-level vocabulary's token for 0x00) replaced by U+FFFD: the
 * rewards read C strings, so a NUL would hide what follows it from them (a length or format rule dodged). */
static char *without_nul(char *text, size_t len) {
    size_t nuls = 0;
    for (size_t i = 0; i < len; i++) nuls += text[i] == '\0';
    if (!nuls) return text;
    char *out = malloc(len + 2 * nuls + 1), *o = out;
    if (!out) {
        free(text);
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i]) *o++ = text[i];
        else memcpy(o, "\xEF\xBF\xBD", 3), o += 3;
    }
    *o = '\0';
    free(text);
    return out;
}

static int part_index(char names[][CPT_REWARD_NAME_MAX], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

int cpt_reward_score_group(const cpt_reward_scorer *s, cpt_rollout_group *g, cpt_err *err) {
    int n = (int)g->n_completions, rc = -1;
    char *prompt = NULL;
    char **texts = calloc((size_t)n + 1, sizeof *texts), **extras = calloc((size_t)n + 1, sizeof *extras);
    cpt_reward_item *items = calloc((size_t)n + 1, sizeof *items);
    cpt_reward_result *res = calloc((size_t)n + 1, sizeof *res);
    double *rewards = NULL, *pv = NULL;
    char **pn = NULL;
    float **tlp = NULL;
    int n_parts = 0;
    char names[CPT_MAX_REWARD_PARTS][CPT_REWARD_NAME_MAX];
    if (!texts || !extras || !items || !res) {
        cpt_errf(err, "out of memory");
        goto done;
    }
    size_t len;
    prompt = cpt_tokenizer_decode(s->tok, g->prompt, g->n_prompt, 0, &len, err);
    if (!prompt) {
        cpt_err_prefix(err, "decoding the prompt");
        goto done;
    }
    if (!(prompt = without_nul(prompt, len))) {
        cpt_errf(err, "out of memory");
        goto done;
    }
    for (int c = 0; c < n; c++) {
        const cpt_completion *k = &g->completions[c];
        texts[c] = cpt_tokenizer_decode(s->tok, k->tokens, k->n_tokens, 1, &len, err);
        if (!texts[c]) {
            cpt_err_prefix(err, "decoding completions[%d]", c);
            goto done;
        }
        if (!(texts[c] = without_nul(texts[c], len))) {
            cpt_errf(err, "out of memory");
            goto done;
        }
        extras[c] = extra_with_tokens(g->extra, k->n_tokens);
        if (!extras[c]) {
            cpt_errf(err, "out of memory");
            goto done;
        }
        items[c] = (cpt_reward_item){.prompt = prompt, .completion = texts[c], .extra = extras[c]};
    }
    if (cpt_reward_score_batch(s->reward, n, items, res, err)) goto done;
    rewards = malloc((size_t)n * sizeof *rewards);
    if (!rewards) {
        cpt_errf(err, "out of memory");
        goto done;
    }
    for (int c = 0; c < n; c++) {
        if (!isfinite(res[c].value)) {
            cpt_errf(err, "reward %s: completions[%d]: score is not finite (%g)", cpt_reward_name(s->reward), c,
                     res[c].value);
            goto done;
        }
        if (s->max_abs > 0 && fabs(res[c].value) > s->max_abs) {
            cpt_errf(err, "reward %s: completions[%d]: score %g exceeds reward.max_abs = %g",
                     cpt_reward_name(s->reward), c, res[c].value, s->max_abs);
            goto done;
        }
        rewards[c] = res[c].value;
        for (int p = 0; p < res[c].n_parts && p < CPT_REWARD_MAX_PARTS; p++)
            if (part_index(names, n_parts, res[c].parts[p].name) < 0 && n_parts < CPT_MAX_REWARD_PARTS)
                snprintf(names[n_parts++], CPT_REWARD_NAME_MAX, "%s", res[c].parts[p].name);
    }
    if (n_parts) {
        pn = calloc((size_t)n_parts, sizeof *pn);
        pv = calloc((size_t)n_parts * (size_t)n, sizeof *pv);
        if (!pn || !pv) {
            cpt_errf(err, "out of memory");
            goto done;
        }
        for (int p = 0; p < n_parts; p++)
            if (!(pn[p] = strdup(names[p]))) {
                cpt_errf(err, "out of memory");
                goto done;
            }
        for (int c = 0; c < n; c++)
            for (int p = 0; p < res[c].n_parts && p < CPT_REWARD_MAX_PARTS; p++) {
                int j = part_index(names, n_parts, res[c].parts[p].name);
                double v = res[c].parts[p].value;
                if (j < 0) continue;
                if (!isfinite(v) || (s->max_abs > 0 && fabs(v) > s->max_abs)) {
                    cpt_errf(err, "reward part %s: completions[%d]: %g is not finite or exceeds reward.max_abs = %g",
                             names[j], c, v, s->max_abs);
                    goto done;
                }
                pv[(size_t)j * (size_t)n + (size_t)c] = v;
            }
    }
    if (s->teacher) {
        tlp = calloc((size_t)n + 1, sizeof *tlp);
        const int32_t **toks = calloc((size_t)n + 1, sizeof *toks);
        int *nt = calloc((size_t)n + 1, sizeof *nt);
        int trc = -1;
        if (tlp && toks && nt) {
            trc = 0;
            for (int c = 0; c < n && !trc; c++) {
                toks[c] = g->completions[c].tokens;
                nt[c] = (int)g->completions[c].n_tokens;
                tlp[c] = malloc(((size_t)nt[c] + 1) * sizeof(float));
                if (!tlp[c]) trc = cpt_errf(err, "out of memory");
            }
            if (!trc)
                trc = cpt_teacher_logprobs(s->teacher, g->prompt, (int)g->n_prompt, n, toks, nt, tlp, err);
            if (trc) cpt_err_prefix(err, "teacher");
        } else {
            cpt_errf(err, "out of memory");
        }
        free(toks);
        free(nt);
        if (trc) goto done;
    }
    /* Success: hand everything to g. */
    free(g->rewards);
    if (g->part_names)
        for (uint32_t p = 0; p < g->n_parts; p++) free(g->part_names[p]);
    free(g->part_names);
    free(g->part_values);
    g->has_rewards = 1;
    g->rewards = rewards;
    g->n_parts = (uint32_t)n_parts;
    g->part_names = pn;
    g->part_values = pv;
    rewards = NULL;
    pn = NULL;
    pv = NULL;
    if (tlp)
        for (int c = 0; c < n; c++) {
            free(g->completions[c].teacher_logprobs);
            g->completions[c].teacher_logprobs = tlp[c];
            tlp[c] = NULL;
        }
    rc = 0;
done:
    free(prompt);
    for (int c = 0; c < n; c++) {
        if (texts) free(texts[c]);
        if (extras) free(extras[c]);
        if (tlp) free(tlp[c]);
    }
    if (pn)
        for (int p = 0; p < n_parts; p++) free(pn[p]);
    free(pn);
    free(pv);
    free(tlp);
    free(texts);
    free(extras);
    free(items);
    free(res);
    free(rewards);
    return rc;
}

/* ---------------- the loop ---------------- */

static int open_queue(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_queue_conn *conn, cpt_queue **q,
                      cpt_err *err) {
    *q = cpt_queue_open_for_worker(cfg, stop, conn, err);
    if (!*q) return -1;
    return cpt_queue_create_group(*q, CPT_STREAM_ROLLOUTS, "reward", err);
}

static int heartbeat(cpt_queue *q, const char *run, const char *me, uint64_t version, double tok_s, double busy,
                     cpt_err *err) {
    cpt_heartbeat_msg h;
    memset(&h, 0, sizeof h);
    snprintf(h.run, sizeof h.run, "%s", run);
    snprintf(h.worker, sizeof h.worker, "%s", me);
    snprintf(h.role, sizeof h.role, "reward");
    if (gethostname(h.host, sizeof h.host - 1)) snprintf(h.host, sizeof h.host, "unknown");
    h.version = version;
    h.tokens_per_s = tok_s >= 0 && isfinite(tok_s) ? tok_s : 0;
    h.occupancy = busy < 0 ? 0 : busy > 1 ? 1 : busy;
    return cpt_queue_heartbeat(q, &h, err);
}

/* A rollout group the run cannot have made goes to the dead stream: more completions than rollout.group_size, or a
 * weight_version never announced. Token ids are checked by the decoding. Returns 1 if refused, with the reason. */
static int refuse_rollout(const cpt_config *cfg, cpt_queue *q, const cpt_rollout_group *g, int64_t *announced,
                          char *why, size_t cap) {
    if (*announced < 0 || g->weight_version > (uint64_t)*announced) { /* it may be newer than the last look */
        cpt_weights_msg wm;
        cpt_err werr;
        if (cpt_queue_get_weights(q, &wm, &werr) == 1) *announced = (int64_t)wm.version;
    }
    /* no announcement at all (a queue without a trainer, as in tests): the version is not checked */
    cpt_group_bounds b = {.max_samples = (uint32_t)cpt_cfg_int(cfg, "rollout.group_size"),
                          .has_max_version = *announced >= 0,
                          .max_version = *announced >= 0 ? (uint64_t)*announced : 0};
    cpt_err err;
    if (!cpt_rollout_group_check_bounds(g, &b, &err)) return 0;
    snprintf(why, cap, "%s", err.msg);
    return 1;
}

int cpt_reward_worker_run(const cpt_config *cfg, const char *worker_id, volatile sig_atomic_t *stop,
                          cpt_reward_worker_stats *stats, cpt_err *err) {
    cpt_reward_worker_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    cpt_reward *reward = NULL;
    cpt_tokenizer *tok = NULL;
    cpt_model *teacher = NULL;
    const char *teacher_on = "cpu";
    cpt_queue *q = NULL;
    cpt_queue_conn conn;
    int rc = -1;

    const char *tp = cpt_cfg_str(cfg, "tokenizer.path");
    if (!*tp) tp = cpt_cfg_str(cfg, "model.path");
    if (!*tp) {
        cpt_errf(err, "tokenizer.path is empty and there is no model.path to take it from");
        goto done;
    }
    if (!(tok = cpt_tokenizer_load(tp, err))) {
        cpt_err_prefix(err, "tokenizer %s", tp);
        goto done;
    }
    if (!(reward = cpt_reward_with_model_from_config(cfg, err))) goto done;
    if (!strcmp(cpt_cfg_str(cfg, "algo.type"), "opd")) {
        const char *t = cpt_cfg_str(cfg, "teacher.path");
        if (!*t) {
            cpt_errf(err, "algo.type = \"opd\" needs teacher.path (the frozen teacher model)");
            goto done;
        }
        if (!(teacher = cpt_frozen_model_load(t, err))) {
            cpt_err_prefix(err, "teacher.path");
            goto done;
        }
        if (cpt_frozen_model_place(teacher, "teacher.device", cpt_cfg_str(cfg, "teacher.device"),
                                   (int)cpt_cfg_int(cfg, "train.cuda_device"), &teacher_on, err))
            goto done;
    }
    if (open_queue(cfg, stop, &conn, &q, err)) goto done;
    cpt_info("cpt-reward %s: run %s, reward %s%s%s", worker_id, conn.run, cpt_reward_name(reward),
             teacher ? ", with the OPD teacher on the " : "",
             !teacher ? "" : strcmp(teacher_on, "cuda") ? "CPU" : "GPU");

    cpt_reward_scorer sc = {.reward = reward, .tok = tok, .teacher = teacher,
                            .max_abs = cpt_cfg_float(cfg, "reward.max_abs")};
    const double hb_every = cpt_cfg_float(cfg, "reward.heartbeat_s");
    double t_hb = 0, t_win = cpt_now(), busy_s = 0;
    long win_tokens = 0;
    uint64_t version = 0;
    int64_t announced = -1; /* the newest weight version announced; -1: none seen */
    while (!*stop) {
        double now = cpt_now();
        if (now - t_hb >= hb_every) {
            double dt = now - t_win > 1e-9 ? now - t_win : 1e-9;
            cpt_err herr;
            if (heartbeat(q, conn.run, worker_id, version, win_tokens / dt, busy_s / dt, &herr))
                cpt_warn("cpt-reward %s: heartbeat: %s", worker_id, herr.msg);
            t_hb = now;
            t_win = now;
            win_tokens = 0;
            busy_s = 0;
        }
        cpt_queue_item it;
        int got = cpt_queue_next(q, CPT_STREAM_ROLLOUTS, "reward", worker_id, &it, err);
        if (got < 0) {
            if (*stop) break;
            cpt_warn("cpt-reward %s: reading rollouts: %s (retrying)", worker_id, err->msg);
            sleep(1);
            continue;
        }
        if (got == 0) continue;
        double t0 = cpt_now();
        cpt_err serr;
        char why[CPT_ERR_MAX];
        int refused = refuse_rollout(cfg, q, &it.rollout, &announced, why, sizeof why), failed = refused;
        if (refused) snprintf(serr.msg, sizeof serr.msg, "%s", why);
        else failed = cpt_reward_score_group(&sc, &it.rollout, &serr) != 0;
        if (failed && *stop) {
            /* A stop signal sent to the whole process group also reaches a plugin's child process: a failure now
             * says nothing about the group, so it stays pending and another worker takes it. */
            cpt_warn("cpt-reward %s: stopping with group (%llu, %llu) unscored: %s", worker_id,
                     (unsigned long long)it.rollout.id.epoch, (unsigned long long)it.rollout.id.index, serr.msg);
            cpt_queue_item_free(&it);
            break;
        }
        if (failed) {
            char reason[CPT_ERR_MAX + 64];
            snprintf(reason, sizeof reason, "cpt-reward %s: %s: %s", worker_id, refused ? "refused" : "scoring failed",
                     serr.msg);
            cpt_warn("group (%llu, %llu) -> dead: %s", (unsigned long long)it.rollout.id.epoch,
                     (unsigned long long)it.rollout.id.index, reason);
            cpt_err derr;
            if (cpt_queue_dead_letter(q, CPT_STREAM_ROLLOUTS, "reward", &it.msg, reason, &derr))
                cpt_warn("cpt-reward %s: dead-lettering: %s", worker_id, derr.msg);
            else
                stats->dead++;
            cpt_queue_item_free(&it);
            continue;
        }
        cpt_buf buf = {0};
        cpt_err ferr;
        if (cpt_rollout_group_encode(&it.rollout, &buf, &ferr)) {
            char reason[CPT_ERR_MAX + 64];
            snprintf(reason, sizeof reason, "cpt-reward %s: encoding the scored group: %s", worker_id, ferr.msg);
            if (cpt_queue_dead_letter(q, CPT_STREAM_ROLLOUTS, "reward", &it.msg, reason, &ferr) == 0) stats->dead++;
        } else if (cpt_queue_forward(q, &it, CPT_STREAM_SCORED, buf.data, buf.len, NULL, &ferr)) {
            /* Not acked: the group is delivered again (here or to another worker). */
            cpt_warn("cpt-reward %s: forwarding the scored group: %s", worker_id, ferr.msg);
        } else {
            stats->groups++;
            stats->completions += it.rollout.n_completions;
            for (uint32_t c = 0; c < it.rollout.n_completions; c++) {
                stats->tokens += it.rollout.completions[c].n_tokens;
                win_tokens += it.rollout.completions[c].n_tokens;
            }
            version = it.rollout.weight_version;
        }
        cpt_buf_free(&buf);
        cpt_queue_item_free(&it);
        busy_s += cpt_now() - t0;
    }
    cpt_info("cpt-reward %s: stopping: %ld groups scored (%ld completions), %ld dead", worker_id, stats->groups,
             stats->completions, stats->dead);
    cpt_err gerr;
    if (cpt_queue_worker_gone(q, worker_id, &gerr)) /* drained: off cpt-queue stats' list */
        cpt_warn("cpt-reward %s: removing its heartbeat: %s", worker_id, gerr.msg);
    rc = 0;
done:
    cpt_queue_close(q);
    cpt_model_free(teacher);
    cpt_reward_free(reward);
    cpt_tokenizer_free(tok);
    return rc;
}
