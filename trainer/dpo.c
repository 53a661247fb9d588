#include "trainer/dpo.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/dataset.h"
#include "core/fs.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#include "trainer/checkpoint.h"
#include "trainer/dpo_data.h"
#include "trainer/objective.h"
#include "trainer/offline_loop.h"
#include "trainer/optim.h"
#include "trainer/sft.h"

typedef struct dpo_ctx {
    cpt_offline o; /* tokenizer, model, optimizer, state, checkpoints, metrics */
    volatile sig_atomic_t *stop;
    cpt_objective_config oc;
    cpt_dpo_data train, eval;
    cpt_data_order order;
    int have_order;
    int pairs_per_step, budget;
    cpt_dpo_batch mb;
    float *lp, *dlp;
    int cap;
    int *mb_start; /* [pairs_per_step + 1]: the step's micro-batches as ranges of its pairs */
} dpo_ctx;

/* Weighted sums of the objective's per-call metrics (each call's means weighted by its pair count). */
typedef struct dpo_sums {
    double pairs, loss, margin, acc, chosen, rejected, logp_margin;
    long tokens;
} dpo_sums;

static int setup(dpo_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->o.cfg;
    if (cpt_objective_from_config(cfg, &c->oc, err)) return -1;
    if (c->oc.type != CPT_OBJ_DPO) return cpt_errf(err, "cpt_dpo_run: algo.type is \"%s\", not dpo", cpt_obj_type_name(c->oc.type));
    if (cpt_offline_tokenizer(&c->o, err)) return -1;
    int32_t eos = cpt_tokenizer_eos_id(c->o.tok);
    if (eos < 0) eos = cpt_tokenizer_token_id(c->o.tok, "<|endoftext|>");
    cpt_dpo_data_opts o = {.tok = c->o.tok, .tpl = c->o.have_tpl ? &c->o.tpl : NULL, .eos_id = eos,
                           .max_seq_len = (int)cpt_cfg_int(cfg, "train.max_seq_len"),
                           .max_pairs = (size_t)cpt_cfg_int(cfg, "data.max_records")};
    const char *train = cpt_cfg_str(cfg, "data.train");
    if (!*train) return cpt_errf(err, "data.train is empty (preference JSONL)");
    if (cpt_dpo_data_load(train, cfg, &o, &c->train, err)) return -1;
    const char *ev = cpt_cfg_str(cfg, "data.eval");
    if (*ev) {
        o.max_pairs = (size_t)cpt_cfg_int(cfg, "dpo.eval_max_pairs");
        if (cpt_dpo_data_load(ev, cfg, &o, &c->eval, err)) return -1;
    }
    cpt_info("dpo: %zu train pairs (%zu truncated, %zu skipped), %zu eval pairs", c->train.n, c->train.n_truncated,
             c->train.n_skipped, c->eval.n);
    for (size_t i = 0; i < c->train.n; i++)
        if (cpt_dpo_pair_tokens(&c->train.pairs[i]) > c->budget)
            return cpt_errf(err, "%s:%d: the pair has %d tokens, more than train.tokens_per_micro_batch (%d)", train,
                            c->train.pairs[i].line, cpt_dpo_pair_tokens(&c->train.pairs[i]), c->budget);
    return 0;
}

/* The initial model (model.path or the random init of run.seed): the policy's start (train: its gradients are the
 * ones data parallel averages) and the frozen reference. */
static cpt_model *initial_model(dpo_ctx *c, int train, cpt_err *err) {
    cpt_model *m = cpt_offline_new_model(&c->o, err);
    if (m && cpt_offline_place(&c->o, m, train ? "dpo model" : "dpo reference model", train, err)) {
        cpt_model_free(m);
        return NULL;
    }
    return m;
}

static int compute_reference(dpo_ctx *c, cpt_err *err) {
    double t0 = cpt_now();
    cpt_model *ref = initial_model(c, 0, err); /* every rank computes every pair's: no exchange */
    if (!ref) return cpt_err_prefix(err, "reference model");
    int rc = cpt_dpo_data_reference(&c->train, ref, c->budget, err);
    if (!rc && c->eval.n) rc = cpt_dpo_data_reference(&c->eval, ref, c->budget, err);
    cpt_model_free(ref);
    if (!rc) cpt_info("dpo: reference logprobs of %zu pairs in %.1f s", c->train.n + c->eval.n, cpt_now() - t0);
    return rc;
}

static int ensure_bufs(dpo_ctx *c, int n, cpt_err *err) {
    if (n <= c->cap) return 0;
    free(c->lp);
    free(c->dlp);
    c->lp = malloc((size_t)n * sizeof *c->lp);
    c->dlp = malloc((size_t)n * sizeof *c->dlp);
    c->cap = n;
    return c->lp && c->dlp ? 0 : cpt_errf(err, "out of memory");
}

/* Forward (and with train, backward with the loss scaled by weight) of the micro-batch in c->mb. */
static int run_mb(dpo_ctx *c, int train, double weight, dpo_sums *s, cpt_err *err) {
    cpt_dpo_batch *b = &c->mb;
    if (ensure_bufs(c, b->n_tokens, err)) return -1;
    cpt_batch mb = {.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .tokens = b->tokens, .seq_start = b->seq_start,
                    .targets = b->targets};
    cpt_forward_out fo = {.logprobs = c->lp};
    if (cpt_model_forward(c->o.model, &mb, &fo, train, err)) return -1;
    cpt_obj_inputs in = {.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .seq_start = b->seq_start, .mask = b->mask,
                         .logprobs = c->lp, .ref_logprobs = b->ref};
    cpt_obj_grads g = {.d_logprobs = c->dlp};
    cpt_obj_metrics m;
    memset(&m, 0, sizeof m);
    if (cpt_objective_compute(&c->oc, &in, &g, &m, err)) return -1;
    double np = b->n_seqs / 2;
    s->pairs += np;
    s->loss += m.loss * np;
    s->margin += m.reward_margin * np;
    s->acc += m.reward_accuracy * np;
    s->chosen += m.reward_chosen * np;
    s->rejected += m.reward_rejected * np;
    s->tokens += b->n_tokens;
    for (int k = 0; k < b->n_seqs; k += 2) {
        double d = 0;
        for (int t = b->seq_start[k]; t < b->seq_start[k + 1]; t++) d += b->mask[t] * c->lp[t];
        for (int t = b->seq_start[k + 1]; t < b->seq_start[k + 2]; t++) d -= b->mask[t] * c->lp[t];
        s->logp_margin += d;
    }
    if (!train) return 0;
    for (int t = 0; t < b->n_tokens; t++) c->dlp[t] = (float)(c->dlp[t] * weight);
    return cpt_model_backward(c->o.model, &mb, c->dlp, NULL, NULL, err);
}

typedef struct step_stats {
    dpo_sums s;
    double grad_norm, lr;
} step_stats;

/* The step's sums over every rank, and whether any rank was asked to stop (cpt_offline_agree). */
static int agree(dpo_ctx *c, dpo_sums *s, cpt_err *err) {
    float v[8] = {(float)s->pairs, (float)s->loss, (float)s->margin, (float)s->acc, (float)s->chosen,
                  (float)s->rejected, (float)s->logp_margin, (float)s->tokens};
    if (cpt_offline_agree(&c->o, v, 8, *c->stop, err)) return -1;
    if (c->o.world > 1) {
        s->pairs = v[0], s->loss = v[1], s->margin = v[2], s->acc = v[3], s->chosen = v[4], s->rejected = v[5];
        s->logp_margin = v[6], s->tokens = (long)v[7];
    }
    return 0;
}

/* One optimizer step over pairs_per_step pairs, packed into micro-batches of at most train.tokens_per_micro_batch
 * tokens in data order. Every rank draws and splits the same pairs (the data cursor stays identical everywhere) and
 * trains micro-batches rank, rank + world, ...; each loss is weighted by its share of the step's pairs, times world
 * because the all-reduce averages over the ranks. */
static int train_step(dpo_ctx *c, step_stats *ss, cpt_err *err) {
    memset(ss, 0, sizeof *ss);
    cpt_model_zero_grad(c->o.model);
    int P = c->pairs_per_step, n_mb = 0;
    size_t *idx = malloc((size_t)P * sizeof *idx);
    if (!idx) return cpt_errf(err, "out of memory");
    for (int k = 0; k < P; k++) idx[k] = cpt_data_order_next(&c->order);
    for (int taken = 0, tokens = 0; taken < P; taken++) { /* the split, from token counts alone */
        int t = cpt_dpo_pair_tokens(&c->train.pairs[idx[taken]]);
        if (taken == 0 || tokens + t > c->budget) c->mb_start[n_mb++] = taken, tokens = 0;
        tokens += t;
    }
    c->mb_start[n_mb] = P;
    int rc = 0, world = c->o.world, zero = c->o.zero != NULL;
    /* a rank without a micro-batch still joins the all-reduce; ZeRO-1 reduce-scatters in its own step instead */
    cpt_dp_set_sync(c->o.dp, !zero && c->o.rank >= n_mb);
    for (int k = c->o.rank; k < n_mb && !rc; k += world) {
        cpt_dpo_batch_reset(&c->mb);
        for (int i = c->mb_start[k]; i < c->mb_start[k + 1] && !rc; i++)
            rc = cpt_dpo_batch_add(&c->mb, &c->train.pairs[idx[i]], err);
        cpt_dp_set_sync(c->o.dp, !zero && k + world >= n_mb); /* all-reduce during the last backward only */
        if (!rc) rc = run_mb(c, 1, (double)world * (c->mb_start[k + 1] - c->mb_start[k]) / P, &ss->s, err);
    }
    free(idx);
    if (rc || (!zero && cpt_dp_finish(c->o.dp, err)) || agree(c, &ss->s, err)) return -1;
    double loss = ss->s.loss / ss->s.pairs;
    if (!isfinite(loss))
        return cpt_errf(err, "step %" PRId64 ": the loss is not finite (%g); lower optim.lr?", c->o.st.step, loss);
    double clip = cpt_cfg_float(c->o.cfg, "optim.grad_clip");
    ss->lr = cpt_lr_at(&c->o.sched, c->o.st.step);
    if (zero) {
        if (cpt_zero_step(c->o.zero, ss->lr, clip, &ss->grad_norm, err)) return -1;
    } else {
        ss->grad_norm = cpt_clip_grad_norm(c->o.params, c->o.n_params, clip);
        cpt_adamw_step(c->o.opt, ss->lr);
    }
    c->o.st.step++;
    c->o.st.weight_version = c->o.st.step;
    cpt_data_cursor cur = cpt_data_order_tell(&c->order);
    c->o.st.data_epoch = (int64_t)cur.epoch;
    c->o.st.data_index = (int64_t)cur.index;
    return 0;
}

static int eval_pairs(dpo_ctx *c, dpo_sums *s, cpt_err *err) {
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < c->eval.n;) {
        cpt_dpo_batch_reset(&c->mb);
        size_t first = i;
        while (i < c->eval.n && (i == first || c->mb.n_tokens + cpt_dpo_pair_tokens(&c->eval.pairs[i]) <= c->budget))
            if (cpt_dpo_batch_add(&c->mb, &c->eval.pairs[i++], err)) return -1;
        if (run_mb(c, 0, 0, s, err)) return -1;
    }
    return 0;
}

static int log_eval(dpo_ctx *c, const dpo_sums *s, cpt_err *err) {
    double n = s->pairs > 0 ? s->pairs : 1;
    fprintf(stderr, "dpo step %" PRId64 " | eval loss %.4f | eval margin %.4f | eval accuracy %.3f | logp margin %.3f\n",
            c->o.st.step, s->loss / n, s->margin / n, s->acc / n, s->logp_margin / n);
    const char *k[] = {"eval/dpo_loss", "eval/dpo_margin", "eval/dpo_accuracy", "eval/logp_margin"};
    double v[] = {s->loss / n, s->margin / n, s->acc / n, s->logp_margin / n};
    return cpt_offline_log(&c->o, k, v, 4, err);
}

static void ctx_free(dpo_ctx *c) {
    cpt_dpo_batch_free(&c->mb);
    free(c->mb_start);
    free(c->lp);
    free(c->dlp);
    if (c->have_order) cpt_data_order_free(&c->order);
    cpt_dpo_data_free(&c->train);
    cpt_dpo_data_free(&c->eval);
    cpt_offline_free(&c->o);
}

static int run(dpo_ctx *c, cpt_dpo_result *res, cpt_err *err) {
    const cpt_config *cfg = c->o.cfg;
    const int64_t total = cpt_cfg_int(cfg, "train.steps"), this_run = cpt_cfg_int(cfg, "train.max_steps_this_run");
    c->pairs_per_step = (int)cpt_cfg_int(cfg, "dpo.pairs_per_step");
    c->budget = (int)cpt_cfg_int(cfg, "train.tokens_per_micro_batch");
    if (c->budget < 2 * cpt_cfg_int(cfg, "train.max_seq_len"))
        return cpt_errf(err, "train.tokens_per_micro_batch (%d) must hold a pair: at least 2 * train.max_seq_len (%" PRId64 ")",
                        c->budget, 2 * cpt_cfg_int(cfg, "train.max_seq_len"));
    if (cpt_cfg_int(cfg, "train.threads") > 0) omp_set_num_threads((int)cpt_cfg_int(cfg, "train.threads"));
    if (setup(c, err)) return -1;
    if (!(c->mb_start = malloc(sizeof *c->mb_start * (size_t)(c->pairs_per_step + 1)))) return cpt_errf(err, "out of memory");
    if (cpt_offline_dp_open(&c->o, err)) return -1;
    if (compute_reference(c, err)) return -1;
    if (!(c->o.model = initial_model(c, 1, err))) return -1;
    if (cpt_offline_optimizer(&c->o, err)) return -1;
    if (!(c->o.config_text = cpt_config_dump(cfg))) return cpt_errf(err, "out of memory");

    char ckpt[CPT_CKPT_PATH_MAX];
    int found = cpt_offline_resume(&c->o, ckpt, sizeof ckpt, err);
    if (found < 0) return -1;
    if (found) cpt_info("dpo: resumed from %s at step %" PRId64, ckpt, c->o.st.step);
    if (cpt_data_order_init(&c->order, c->train.n, (uint64_t)cpt_cfg_int(cfg, "run.seed"), cpt_cfg_bool(cfg, "data.shuffle"), err))
        return -1;
    c->have_order = 1;
    cpt_data_cursor cur = {.epoch = (uint64_t)c->o.st.data_epoch, .index = (uint64_t)c->o.st.data_index};
    if (cpt_data_order_seek(&c->order, cur, err)) return cpt_err_prefix(err, "resume: data cursor");

    if (cpt_offline_open_metrics(&c->o, c->o.rank == 0, err)) return -1;
    const int evals = c->eval.n && c->o.rank == 0; /* evaluation has no collectives: rank 0 alone */

    res->eval_margin_start = res->eval_margin = res->eval_accuracy = res->eval_loss = res->eval_logp_margin = NAN;
    res->last_loss = NAN;
    dpo_sums es;
    /* Each evaluated step once across resumes: the start at step 0 only (a resumed run does not evaluate its first
     * step again), every eval_every, the end when the run is done. */
    if (evals && c->o.st.step == 0) {
        if (eval_pairs(c, &es, err) || log_eval(c, &es, err)) return -1;
        res->eval_margin_start = es.margin / es.pairs;
    }
    const int64_t log_every = cpt_cfg_int(cfg, "train.log_every"), eval_every = cpt_cfg_int(cfg, "train.eval_every");
    const int64_t ck_every = cpt_cfg_int(cfg, "checkpoint.every"), first_step = c->o.st.step;
    double t0 = cpt_now(), t_log = t0;
    long tok_since = 0;
    while (c->o.st.step < total && !cpt_offline_stopping(&c->o, *c->stop) &&
           !(this_run > 0 && c->o.st.step - first_step >= this_run)) {
        step_stats ss;
        if (train_step(c, &ss, err)) return -1;
        double n = ss.s.pairs;
        res->last_loss = ss.s.loss / n;
        tok_since += ss.s.tokens;
        int64_t s = c->o.st.step;
        if (c->o.rank == 0 && (s % log_every == 0 || s == total)) {
            double now = cpt_now(), tok_s = tok_since / fmax(now - t_log, 1e-9);
            fprintf(stderr, "dpo step %" PRId64 "/%" PRId64 " | loss %.4f | margin %.4f | accuracy %.3f | lr %.3e | grad_norm %.3f | %.0f tok/s\n",
                    s, total, ss.s.loss / n, ss.s.margin / n, ss.s.acc / n, ss.lr, ss.grad_norm, tok_s);
            const char *k[] = {"dpo/loss", "dpo/margin", "dpo/accuracy", "dpo/reward_chosen", "dpo/reward_rejected",
                               "lr", "grad_norm", "perf/train_tok_s"};
            double v[] = {ss.s.loss / n, ss.s.margin / n, ss.s.acc / n, ss.s.chosen / n, ss.s.rejected / n,
                          ss.lr, ss.grad_norm, tok_s};
            if (cpt_offline_log(&c->o, k, v, 8, err)) return -1;
            t_log = now;
            tok_since = 0;
        }
        if (evals && eval_every > 0 && s % eval_every == 0 && s != total)
            if (eval_pairs(c, &es, err) || log_eval(c, &es, err)) return -1;
        if (ck_every > 0 && s % ck_every == 0 && s != total && cpt_offline_save(&c->o, err)) return -1;
    }
    res->steps_done = c->o.st.step;
    res->interrupted = cpt_offline_stopping(&c->o, *c->stop);
    if (res->interrupted) cpt_warn("dpo: stopping at step %" PRId64 " on signal %d", c->o.st.step, (int)*c->stop);
    if (c->o.last_saved_step != c->o.st.step && cpt_offline_save(&c->o, err)) return -1;
    /* the end's evaluation only at the end: a stop (preemption's short warning) or a partial run leaves at once */
    if (evals && c->o.st.step >= total) {
        if (eval_pairs(c, &es, err) || log_eval(c, &es, err)) return -1;
        res->eval_loss = es.loss / es.pairs;
        res->eval_margin = es.margin / es.pairs;
        res->eval_accuracy = es.acc / es.pairs;
        res->eval_logp_margin = es.logp_margin / es.pairs;
    }
    res->seconds = cpt_now() - t0;
    return 0;
}

int cpt_dpo_run(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_dpo_result *res, cpt_err *err) {
    static volatile sig_atomic_t never;
    cpt_dpo_result local;
    if (!res) res = &local;
    memset(res, 0, sizeof *res);
    dpo_ctx c;
    memset(&c, 0, sizeof c);
    c.o.cfg = cfg;
    c.o.name = "dpo";
    c.stop = stop ? stop : &never;
    int rc = run(&c, res, err);
    if (rc && c.o.dp) cpt_dp_abort(c.o.dp, 1, err); /* other ranks may wait in a collective for this one */
    ctx_free(&c);
    if (rc) return -1;
    return res->interrupted ? 1 : 0;
}

int cpt_dpo_train(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_err *err) {
    return cpt_dpo_run(cfg, stop, NULL, err);
}
