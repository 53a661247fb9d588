#include "trainer/sft.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/fs.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#include "trainer/checkpoint.h"
#include "trainer/dp.h"
#include "trainer/greedy.h"
#include "trainer/offline_loop.h"
#include "trainer/optim.h"
#include "trainer/sft_data.h"

/* Set by SIGUSR1 / SIGTERM (Slurm's preemption warning): finish the step, checkpoint, stop. A signal handler can
 * only reach a static flag. */
static volatile sig_atomic_t stop_requested;
static void on_stop_signal(int sig) { stop_requested = sig; }

typedef struct sft_ctx {
    cpt_offline o; /* tokenizer, model, optimizer, state, checkpoints, metrics (rank 0) */
    int32_t stop_ids[4];
    int n_stop;
    /* data parallel (c->o.dp, rank, world): every rank packs the step's world * accum micro-batches and trains on
     * its share */
    cpt_sft_dataset train, eval;
    cpt_sft_cursor cur;
    int accum, budget;
    cpt_sft_batch *mbs;
    cpt_sft_batch eval_mb;
    float *logprobs, *d_logprobs;
} sft_ctx;

/* ---------------- setup ---------------- */


static int32_t find_token(const cpt_tokenizer *tok, const char *s) { return cpt_tokenizer_token_id(tok, s); }

static void add_stop(sft_ctx *c, int32_t id) {
    if (id < 0 || c->n_stop == (int)(sizeof c->stop_ids / sizeof c->stop_ids[0])) return;
    for (int i = 0; i < c->n_stop; i++)
        if (c->stop_ids[i] == id) return;
    c->stop_ids[c->n_stop++] = id;
}

static int setup_tokenizer(sft_ctx *c, cpt_err *err) {
    if (cpt_offline_tokenizer(&c->o, err)) return -1;
    add_stop(c, cpt_tokenizer_eos_id(c->o.tok));
    add_stop(c, find_token(c->o.tok, "<|im_end|>"));
    add_stop(c, find_token(c->o.tok, "<|eot_id|>"));
    add_stop(c, find_token(c->o.tok, "<|endoftext|>"));
    return 0;
}

static int setup_data(sft_ctx *c, cpt_err *err) {
    const cpt_config *cfg = c->o.cfg;
    int32_t eos = cpt_tokenizer_eos_id(c->o.tok);
    if (eos < 0) eos = find_token(c->o.tok, "<|endoftext|>");
    cpt_sft_data_opts o = {
        .format = cpt_cfg_str(cfg, "data.format"),
        .tok = c->o.tok,
        .tpl = c->o.have_tpl ? &c->o.tpl : NULL,
        .max_seq_len = (int)cpt_cfg_int(cfg, "train.max_seq_len"),
        .skip_bad_lines = cpt_cfg_bool(cfg, "data.skip_bad_lines"),
        .eos_id = eos,
        .max_examples = (size_t)cpt_cfg_int(cfg, "data.max_records"), /* 0: all */
    };
    const size_t max_records = o.max_examples;
    const char *train = cpt_cfg_str(cfg, "data.train");
    if (!*train) return cpt_errf(err, "data.train is empty");
    if (cpt_sft_dataset_load(train, &o, &c->train, err)) return -1;
    const char *ev = cpt_cfg_str(cfg, "data.eval");
    if (*ev) {
        o.max_examples = (size_t)cpt_cfg_int(cfg, "train.eval_max_examples");
        if (max_records && max_records < o.max_examples) o.max_examples = max_records;
        if (cpt_sft_dataset_load(ev, &o, &c->eval, err)) return -1;
        /* the examples greedy decoding will start from (train.eval_generate, after training): checked now */
        size_t ng = (size_t)cpt_cfg_int(cfg, "train.eval_generate");
        for (size_t i = 0; i < ng && i < c->eval.n; i++)
            if (c->eval.ex[i].n_prompt < 1)
                return cpt_errf(err, "data.eval %s: example %zu (of those kept) has an empty prompt: "
                                "train.eval_generate = %zu decodes from it; give it a prompt or lower "
                                "train.eval_generate", ev, i + 1, ng);
    }
    cpt_info("sft: %zu train examples (%zu truncated, %zu skipped), %zu eval examples", c->train.n,
             c->train.n_truncated, c->train.n_skipped, c->eval.n);
    return 0;
}

/* ---------------- steps ---------------- */

static int forward_loss(sft_ctx *c, const cpt_sft_batch *mb, int train, double scale, double *loss_sum,
                        cpt_err *err) {
    cpt_batch b = {.n_tokens = mb->n_tokens, .n_seqs = mb->n_seqs, .tokens = mb->tokens,
                   .seq_start = mb->seq_start, .targets = mb->targets};
    cpt_forward_out fo = {.logprobs = c->logprobs};
    if (cpt_model_forward(c->o.model, &b, &fo, train, err)) return -1;
    double s = 0;
    for (int i = 0; i < mb->n_tokens; i++) {
        if (mb->targets[i] >= 0) s -= c->logprobs[i];
        if (train) c->d_logprobs[i] = mb->targets[i] >= 0 ? (float)-scale : 0.0f;
    }
    *loss_sum += s;
    if (train && cpt_model_backward(c->o.model, &b, c->d_logprobs, NULL, NULL, err)) return -1;
    return 0;
}

typedef struct step_stats {
    double loss, grad_norm, lr;
    long tokens, loss_tokens;
} step_stats;

/* One optimizer step over `accum` packed micro-batches per rank. The loss is the mean CE over every loss token of
 * the step on all ranks, so each token's gradient is scaled by 1 / (loss tokens of the whole step); every rank
 * packs all world * accum micro-batches (cheap: token ids only), so it knows that count and the data cursor stays
 * identical on every rank, and trains on micro-batches rank, rank + world, ... The all-reduce averages over the
 * ranks, hence the factor world in the scale: the summed gradient equals one big batch's. */
static int train_step(sft_ctx *c, step_stats *ss, cpt_err *err) {
    long n_loss = 0, n_tok = 0;
    const int n_mb = c->accum * c->o.world;
    for (int k = 0; k < n_mb; k++) {
        if (cpt_sft_pack_next(&c->cur, c->budget, &c->mbs[k], err)) return -1;
        n_loss += c->mbs[k].n_loss;
        n_tok += c->mbs[k].n_tokens;
    }
    cpt_model_zero_grad(c->o.model);
    double loss_sum = 0;
    for (int k = c->o.rank; k < n_mb; k += c->o.world) {
        /* all-reduce during the last micro-batch's backward only; never with ZeRO, which reduce-scatters after it */
        cpt_dp_set_sync(c->o.dp, !c->o.zero && k + c->o.world >= n_mb);
        if (forward_loss(c, &c->mbs[k], 1, (double)c->o.world / (double)n_loss, &loss_sum, err)) return -1;
    }
    /* ZeRO-1 reduce-scatters the gradients in its own step instead of all-reducing them here */
    if (!c->o.zero && cpt_dp_finish(c->o.dp, err)) return -1;
    /* The step's loss over all ranks, and whether any rank was asked to stop. */
    float loss_all = (float)loss_sum;
    if (cpt_offline_agree(&c->o, &loss_all, 1, stop_requested, err)) return -1;
    if (c->o.world > 1) loss_sum = loss_all;
    ss->loss = loss_sum / (double)n_loss;
    ss->tokens = n_tok;
    ss->loss_tokens = n_loss;
    if (!isfinite(ss->loss))
        return cpt_errf(err, "step %" PRId64 ": the loss is not finite (%g); lower optim.lr?", c->o.st.step, ss->loss);
    ss->lr = cpt_lr_at(&c->o.sched, c->o.st.step);
    double clip = cpt_cfg_float(c->o.cfg, "optim.grad_clip");
    if (c->o.zero) {
        if (cpt_zero_step(c->o.zero, ss->lr, clip, &ss->grad_norm, err)) return -1;
    } else {
        ss->grad_norm = cpt_clip_grad_norm(c->o.params, c->o.n_params, clip);
        cpt_adamw_step(c->o.opt, ss->lr);
    }
    c->o.st.step++;
    c->o.st.weight_version = c->o.st.step;
    cpt_sft_cursor_tell(&c->cur, &c->o.st.data_epoch, &c->o.st.data_index);
    return 0;
}

static int eval_loss(sft_ctx *c, double *out, cpt_err *err) {
    double sum = 0;
    long n_loss = 0;
    size_t i = 0;
    while (i < c->eval.n) {
        int took = cpt_sft_pack_range(&c->eval, i, c->eval.n - i, c->budget, &c->eval_mb, err);
        if (took <= 0) return took < 0 ? -1 : cpt_errf(err, "eval: packing made no progress");
        if (forward_loss(c, &c->eval_mb, 0, 0, &sum, err)) return -1;
        n_loss += c->eval_mb.n_loss;
        i += (size_t)took;
    }
    *out = n_loss ? sum / (double)n_loss : NAN;
    return 0;
}

static char *trimmed_decode(const cpt_tokenizer *tok, const int32_t *ids, int n, cpt_err *err) {
    size_t len;
    char *s = cpt_tokenizer_decode(tok, ids, (size_t)n, 1, &len, err);
    if (!s) return NULL;
    size_t a = 0;
    while (a < len && (s[a] == ' ' || s[a] == '\n' || s[a] == '\t' || s[a] == '\r')) a++;
    while (len > a && (s[len - 1] == ' ' || s[len - 1] == '\n' || s[len - 1] == '\t' || s[len - 1] == '\r')) len--;
    memmove(s, s + a, len - a);
    s[len - a] = '\0';
    return s;
}

/* Greedy exact match over the first n eval examples: the decoded generation (special tokens dropped, trimmed)
 * equals the decoded reference completion. */
static int eval_exact_match(sft_ctx *c, int n, double *out, cpt_err *err) {
    if ((size_t)n > c->eval.n) n = (int)c->eval.n;
    int max_new = (int)cpt_cfg_int(c->o.cfg, "train.eval_max_new_tokens"), hits = 0;
    if (cpt_model_sync_to_host(c->o.model, err)) return -1; /* greedy decoding runs on the host weights */
    int32_t *gen = malloc((size_t)max_new * sizeof *gen);
    if (!gen) return cpt_errf(err, "out of memory");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const cpt_sft_example *e = &c->eval.ex[i];
        int g = cpt_greedy_generate(c->o.model, e->ids, e->n_prompt, max_new, c->stop_ids, c->n_stop, gen, err);
        if (g < 0) { rc = -1; break; }
        char *got = trimmed_decode(c->o.tok, gen, g, err);
        char *want = got ? trimmed_decode(c->o.tok, e->ids + e->n_prompt, e->n_answer, err) : NULL;
        if (!got || !want) rc = -1;
        else hits += !strcmp(got, want);
        if (i < 3 && got && want) cpt_info("sft eval: example %d: want \"%s\", got \"%s\"", i, want, got);
        free(got);
        free(want);
    }
    free(gen);
    *out = n ? (double)hits / n : NAN;
    return rc;
}

static void fmt_duration(double s, char *buf, size_t cap) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

/* ---------------- the run ---------------- */

static void ctx_free(sft_ctx *c) {
    if (c->mbs)
        for (int k = 0; k < c->accum * c->o.world; k++) cpt_sft_batch_free(&c->mbs[k]);
    free(c->mbs);
    cpt_sft_batch_free(&c->eval_mb);
    free(c->logprobs);
    free(c->d_logprobs);
    cpt_sft_cursor_free(&c->cur);
    cpt_sft_dataset_free(&c->train);
    cpt_sft_dataset_free(&c->eval);
    cpt_offline_free(&c->o); /* the model, then its data-parallel group */
}

static int run(sft_ctx *c, cpt_sft_result *res, cpt_err *err) {
    const cpt_config *cfg = c->o.cfg;
    const int64_t total = cpt_cfg_int(cfg, "train.steps");
    const int64_t this_run = cpt_cfg_int(cfg, "train.max_steps_this_run");
    c->accum = (int)cpt_cfg_int(cfg, "train.grad_accum");
    c->budget = (int)cpt_cfg_int(cfg, "train.tokens_per_micro_batch");
    if (c->budget < cpt_cfg_int(cfg, "train.max_seq_len"))
        return cpt_errf(err, "train.tokens_per_micro_batch (%d) must be at least train.max_seq_len (%" PRId64 ")",
                        c->budget, cpt_cfg_int(cfg, "train.max_seq_len"));
    if (cpt_cfg_int(cfg, "train.threads") > 0) omp_set_num_threads((int)cpt_cfg_int(cfg, "train.threads"));

    if (setup_tokenizer(c, err) || setup_data(c, err)) return -1;
    if (!(c->o.model = cpt_offline_new_model(&c->o, err))) return -1;
    if (cpt_offline_dp_open(&c->o, err) || cpt_offline_place(&c->o, c->o.model, "sft model", 1, err)) return -1;
    if (cpt_offline_optimizer(&c->o, err)) return -1;
    c->mbs = calloc((size_t)c->accum * (size_t)c->o.world, sizeof *c->mbs);
    c->logprobs = malloc((size_t)c->budget * sizeof *c->logprobs);
    c->d_logprobs = malloc((size_t)c->budget * sizeof *c->d_logprobs);
    c->o.config_text = cpt_config_dump(cfg);
    if (!c->mbs || !c->logprobs || !c->d_logprobs || !c->o.config_text) return cpt_errf(err, "out of memory");

    /* Resume from the newest good checkpoint, or start fresh. */
    char ckpt[CPT_CKPT_PATH_MAX];
    int found = cpt_offline_resume(&c->o, ckpt, sizeof ckpt, err);
    if (found < 0) return -1;
    if (found)
        cpt_info("sft: resumed from %s at step %" PRId64 " (epoch %" PRId64 ", example %" PRId64 ")", ckpt,
                 c->o.st.step, c->o.st.data_epoch, c->o.st.data_index);
    if (found && c->o.rank == 0 && c->o.st.world_size > 0 && c->o.st.world_size != c->o.world)
        cpt_warn("sft: %s was written by %" PRId64 " ranks, this run has %d: a step trains on train.grad_accum x ranks "
                 "micro-batches, now %d x %d = %d; to keep the batch the run had, train.grad_accum x %d must equal its "
                 "train.grad_accum x %" PRId64, ckpt, c->o.st.world_size, c->o.world, c->accum, c->o.world,
                 c->accum * c->o.world, c->o.world, c->o.st.world_size);
    if (cpt_sft_cursor_init(&c->cur, &c->train, (uint64_t)cpt_cfg_int(cfg, "run.seed"), cpt_cfg_bool(cfg, "data.shuffle"),
                            c->o.st.data_epoch, c->o.st.data_index, err))
        return -1;

    if (cpt_offline_open_metrics(&c->o, c->o.rank == 0, err)) return -1;

    const int64_t log_every = cpt_cfg_int(cfg, "train.log_every"), eval_every = cpt_cfg_int(cfg, "train.eval_every");
    const int64_t ck_every = cpt_cfg_int(cfg, "checkpoint.every");
    const int64_t first_step = c->o.st.step;
    double t0 = cpt_now(), t_log = t0;
    long tok_since_log = 0;
    res->last_loss = NAN;
    while (c->o.st.step < total && !cpt_offline_stopping(&c->o, stop_requested) &&
           !(this_run > 0 && c->o.st.step - first_step >= this_run)) {
        step_stats ss = {0};
        if (train_step(c, &ss, err)) return -1;
        res->last_loss = ss.loss;
        tok_since_log += ss.tokens;
        int64_t s = c->o.st.step;
        if (c->o.rank == 0 && (s % log_every == 0 || s == total)) {
            double now = cpt_now(), tok_s = tok_since_log / fmax(now - t_log, 1e-9);
            double eta = (now - t0) / (double)(s - first_step) * (double)(total - s);
            char eta_s[32];
            fmt_duration(eta, eta_s, sizeof eta_s);
            fprintf(stderr, "sft step %" PRId64 "/%" PRId64 " | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | ETA %s\n",
                    s, total, ss.loss, ss.lr, ss.grad_norm, tok_s, eta_s);
            const char *k[] = {"train/loss", "lr", "grad_norm", "perf/train_tok_s", "train/loss_tokens"};
            double v[] = {ss.loss, ss.lr, ss.grad_norm, tok_s, (double)ss.loss_tokens};
            if (cpt_offline_log(&c->o, k, v, 5, err)) return -1;
            t_log = now;
            tok_since_log = 0;
        }
        if (c->o.rank == 0 && c->eval.n && eval_every > 0 && s % eval_every == 0 && s != total) {
            double el;
            if (eval_loss(c, &el, err)) return -1;
            fprintf(stderr, "sft step %" PRId64 "/%" PRId64 " | eval loss %.4f\n", s, total, el);
            const char *k[] = {"eval/loss"};
            if (cpt_offline_log(&c->o, k, &el, 1, err)) return -1;
        }
        if (ck_every > 0 && s % ck_every == 0 && s != total && cpt_offline_save(&c->o, err)) return -1;
    }
    res->steps_done = c->o.st.step;
    res->interrupted = cpt_offline_stopping(&c->o, stop_requested);
    if (res->interrupted)
        cpt_warn("sft: stopping at step %" PRId64 " on signal %d", c->o.st.step, (int)stop_requested);
    if (c->o.last_saved_step != c->o.st.step && cpt_offline_save(&c->o, err)) return -1;

    res->eval_loss = res->exact_match = NAN;
    if (c->o.rank == 0 && c->o.st.step >= total && c->eval.n) {
        if (eval_loss(c, &res->eval_loss, err)) return -1;
        int ng = (int)cpt_cfg_int(cfg, "train.eval_generate");
        if (ng > 0 && eval_exact_match(c, ng, &res->exact_match, err)) return -1;
        const char *k[] = {"eval/loss", "eval/exact_match"};
        double v[] = {res->eval_loss, res->exact_match};
        if (cpt_offline_log(&c->o, k, v, ng > 0 ? 2 : 1, err)) return -1;
        fprintf(stderr, "sft done: step %" PRId64 " | eval loss %.4f", c->o.st.step, res->eval_loss);
        if (ng > 0) fprintf(stderr, " | exact match %.3f (%d examples)", res->exact_match, ng < (int)c->eval.n ? ng : (int)c->eval.n);
        fprintf(stderr, "\n");
    }
    res->seconds = cpt_now() - t0;
    return 0;
}

int cpt_sft_run(const cpt_config *cfg, cpt_sft_result *res, cpt_err *err) {
    memset(res, 0, sizeof *res);
    sft_ctx c;
    memset(&c, 0, sizeof c);
    c.o.cfg = cfg;
    c.o.name = "sft";
    struct sigaction sa, old_usr1, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    stop_requested = 0;
    sigaction(SIGUSR1, &sa, &old_usr1);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = run(&c, res, err);
    if (rc && c.o.dp) cpt_dp_abort(c.o.dp, 1, err); /* other ranks may wait in a collective for this one */
    sigaction(SIGUSR1, &old_usr1, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    ctx_free(&c);
    return rc;
}
