/* The CPU decoder (model/decoder.h, model/decoder_cpu.c) against the packed forward on the committed fixture
 * models: two sequences prefilled in one call into blocks of 4 positions (several saved logits rows, one from the
 * middle of a prompt), then decoded a row at a time with uneven interleaving, and a third table sharing the second's
 * first blocks (its partly filled block copied on write) continued alongside it. Every draw is checked against the
 * forward's logits at that position: the greedy token is the argmax and its logprob log_softmax; a temperature-1
 * draw's logprob is log_softmax at the drawn token. Also: misuse is refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "model/decoder.h"

static const char *FIXTURES[] = {"qwen2_tied", "qwen2_untied", "qwen3", "llama3"};

enum { LA = 9, LB = 14, BS = 4, MAXB = 16 };

typedef struct ref {
    const float *logits; /* [LA + LB, V] of the packed forward */
    int V;
    double worst;
    int wrong_tokens;
} ref;

static double log_softmax_at(const float *l, int V, int t) {
    double mx = l[0], s = 0;
    for (int i = 1; i < V; i++) mx = fmax(mx, l[i]);
    for (int i = 0; i < V; i++) s += exp(l[i] - mx);
    return l[t] - mx - log(s);
}

static int argmax(const float *l, int V) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Draw k of the last call was at packed position at; greedy: temperature 0, else 1. */
static void check_draw(ref *r, const cpt_decoder_io *io, int k, int at, int greedy) {
    const float *l = r->logits + (size_t)at * r->V;
    int t = io->out_tok[k];
    if (greedy && t != argmax(l, r->V)) r->wrong_tokens++;
    if (t < 0 || t >= r->V) {
        r->wrong_tokens++;
        return;
    }
    r->worst = fmax(r->worst, fabs(io->out_lp[k] - log_softmax_at(l, r->V, t)));
}

static void draw_row(cpt_sample_row *row, int logits_row, int greedy, uint32_t step) {
    memset(row, 0, sizeof *row);
    row->seed = 11;
    row->logits_row = logits_row;
    row->temperature = greedy ? 0.0f : 1.0f;
    row->top_p = 1.0f;
    row->step = step;
}

static void one(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/model/%s", name);
    cpt_err err;
    cpt_model *m = cpt_model_load(dir, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    int V = cpt_model_cfg(m)->vocab_size;
    int32_t tok[LA + LB], start[3] = {0, LA, LA + LB};
    cpt_rng rng;
    cpt_rng_seed(&rng, 7, 0);
    for (int i = 0; i < LA + LB; i++) tok[i] = (int32_t)cpt_rng_below(&rng, (uint64_t)V);
    float *lg = malloc(sizeof(float) * (LA + LB) * V);
    cpt_batch b = {LA + LB, 2, tok, start, NULL};
    cpt_forward_out out = {.logits = lg};
    CHECK_MSG(cpt_model_forward(m, &b, &out, 0, &err) == 0, "%s", err.msg);
    ref r = {lg, V, 0, 0};

    cpt_decoder_opts o = {.n_tables = 3, .max_len = 64, .block_size = BS, .n_blocks = 64, .max_rows = 12,
                          .saved_rows = 3};
    cpt_decoder *d = cpt_decoder_new(m, &o, NULL, &err);
    CHECK_MSG(d != NULL, "%s", err.msg);
    if (!d) {
        free(lg);
        cpt_model_free(m);
        return;
    }
    cpt_decoder_io *io = cpt_decoder_io_of(d);
    CHECK_EQ_INT(cpt_decoder_block_size(d), BS);
    CHECK_EQ_INT(cpt_decoder_max_blocks(d), MAXB);
    CHECK_EQ_INT(cpt_decoder_blocks(d), 64);
    /* table 0: blocks 0, 1, 2, ...; table 1: blocks 20, 21, ...; table 2 shares table 1's first two later */
    for (int i = 0; i < MAXB; i++) io->tables[0 * MAXB + i] = i, io->tables[1 * MAXB + i] = 20 + i;
    cpt_decoder_tables_changed(d);
    /* prefill A[0..4) into table 0 and B[0..6) into table 1 in one call; logits of A's last, B's last and B[1] */
    int n = 0;
    for (int i = 0; i < 4; i++) io->tok[n] = tok[i], io->pos[n] = i, io->tab[n++] = 0;
    for (int i = 0; i < 6; i++) io->tok[n] = tok[LA + i], io->pos[n] = i, io->tab[n++] = 1;
    io->out[0] = 3, io->save_to[0] = 0;
    io->out[1] = 9, io->save_to[1] = 1;
    io->out[2] = 5, io->save_to[2] = 2;
    CHECK_MSG(cpt_decoder_prefill(d, n, 3, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 3; k++) draw_row(&io->rows[k], k, 1, 0);
    CHECK_MSG(cpt_decoder_sample_saved(d, 3, &err) == 0, "%s", err.msg);
    check_draw(&r, io, 0, 3, 1);
    check_draw(&r, io, 1, LA + 5, 1);
    check_draw(&r, io, 2, LA + 1, 1);
    /* table 2 = B's first 6 positions: block 20 shared, block 21 (positions 4, 5) copied before table 2 writes */
    io->tables[2 * MAXB + 0] = 20;
    CHECK_MSG(cpt_decoder_copy_block(d, 21, 40, &err) == 0, "%s", err.msg);
    io->tables[2 * MAXB + 1] = 40;
    for (int i = 2; i < MAXB; i++) io->tables[2 * MAXB + i] = 40 + i;
    cpt_decoder_tables_changed(d);
    int pa = 4, pb = 6, pc = 6;
    for (int step = 0; pa < LA || pb < LB || pc < LB; step++) {
        int at[3];
        n = 0;
        if (pa < LA && step % 3 != 1) io->tok[n] = tok[pa], io->pos[n] = pa, io->tab[n] = 0, at[n++] = pa++;
        if (pb < LB) io->tok[n] = tok[LA + pb], io->pos[n] = pb, io->tab[n] = 1, at[n++] = LA + pb++;
        if (pc < LB && (step % 2 == 0 || n == 0)) io->tok[n] = tok[LA + pc], io->pos[n] = pc, io->tab[n] = 2, at[n++] = LA + pc++;
        for (int k = 0; k < n; k++) draw_row(&io->rows[k], k, (step + k) % 2, (uint32_t)step);
        CHECK_MSG(cpt_decoder_step(d, n, &err) == 0, "%s", err.msg);
        for (int k = 0; k < n; k++) check_draw(&r, io, k, at[k], (step + k) % 2);
    }
    printf("%s: decoder vs forward, worst logprob error %.3g, %d wrong greedy tokens\n", name, r.worst, r.wrong_tokens);
    CHECK_MSG(r.worst < 1e-5, "%s: %g", name, r.worst);
    CHECK_EQ_INT(r.wrong_tokens, 0);

    /* misuse */
    io->tok[0] = V, io->pos[0] = 0, io->tab[0] = 0;
    draw_row(&io->rows[0], 0, 1, 0);
    CHECK(cpt_decoder_step(d, 1, &err) == -1 && strstr(err.msg, "vocabulary"));
    io->tok[0] = 1, io->tab[0] = 3;
    CHECK(cpt_decoder_step(d, 1, &err) == -1 && strstr(err.msg, "table 3 of 3"));
    io->tab[0] = 0, io->pos[0] = 64;
    CHECK(cpt_decoder_prefill(d, 1, 0, &err) == -1 && strstr(err.msg, "context"));
    io->pos[0] = 0, io->tables[0] = 64;
    CHECK(cpt_decoder_prefill(d, 1, 0, &err) == -1 && strstr(err.msg, "the pool has 64"));
    io->tables[0] = 0, io->out[0] = 1, io->save_to[0] = 0;
    CHECK(cpt_decoder_prefill(d, 1, 1, &err) == -1 && strstr(err.msg, "output 0"));
    CHECK(cpt_decoder_prefill(d, 13, 0, &err) == -1 && strstr(err.msg, "13 rows"));
    CHECK(cpt_decoder_step(d, 4, &err) == -1 && strstr(err.msg, "4 rows for 3 tables"));
    io->rows[0].logits_row = 3;
    CHECK(cpt_decoder_sample_saved(d, 1, &err) == -1 && strstr(err.msg, "logits row 3"));
    CHECK(cpt_decoder_copy_block(d, 5, 5, &err) == -1);
    CHECK(cpt_decoder_copy_block(d, 0, 64, &err) == -1);
    CHECK(cpt_decoder_graphs(d) == 0);
    CHECK(cpt_decoder_replay_s(d, 1, &err) < 0 && strstr(err.msg, "cpu"));

    cpt_decoder_free(d);
    free(lg);
    cpt_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) one(FIXTURES[i]);
    return check_summary("test_decode");
}
