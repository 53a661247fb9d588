/* The online trainer's data and step (trainer/rl_data.h, trainer/online_step.h): prompts and extra JSON from
 * rl_prompt records, packed batches from scored groups (alignment of targets, mask and behaviour logprobs,
 * truncation, bad input), group advantages, and that a step raises the logprob of rewarded completions for grpo and
 * ppo, with micro-batching giving exactly the whole batch's update. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/dataset.h"
#include "tests/check.h"
#include "trainer/online_step.h"
#include "trainer/rl_data.h"

static void test_prompt_and_extra(void) {
    cpt_err err;
    const char *text = "{\"prompt\":\"What is 5 * 5?\",\"answer\":\"25\"}\n"
                       "{\"prompt\":[{\"role\":\"user\",\"content\":\"hi\"}],\"answer\":7,\"numbers\":[1,2]}\n";
    cpt_dataset_opts o = {.format = CPT_DATA_RL_PROMPT};
    cpt_dataset *ds = cpt_dataset_load_text(text, strlen(text), "mem.jsonl", &o, &err);
    CHECK(ds != NULL);
    if (!ds) return;
    char *x0 = cpt_rl_extra_json(cpt_dataset_get(ds, 0), &err);
    char *x1 = cpt_rl_extra_json(cpt_dataset_get(ds, 1), &err);
    CHECK_EQ_STR(x0, "{\"answer\":\"25\"}");
    CHECK_EQ_STR(x1, "{\"answer\":\"7\",\"numbers\":[1,2]}");
    free(x0);
    free(x1);

    cpt_tokenizer *tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    CHECK(tok != NULL);
    cpt_chat_template tpl;
    CHECK_EQ_INT(cpt_chat_template_by_name("chatml", &tpl, &err), 0);
    if (tok) {
        int32_t *ids;
        size_t n;
        for (int r = 0; r < 2; r++) {
            CHECK_EQ_INT(cpt_rl_prompt_ids(&tpl, tok, cpt_dataset_get(ds, (size_t)r), &ids, &n, &err), 0);
            size_t len;
            char *s = cpt_tokenizer_decode(tok, ids, n, 0, &len, &err);
            CHECK_EQ_STR(s, r == 0 ? "<|im_start|>user\nWhat is 5 * 5?<|im_end|>\n<|im_start|>assistant\n"
                                   : "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
            free(s);
            free(ids);
        }
        /* raw text without a template; messages without one are refused */
        CHECK_EQ_INT(cpt_rl_prompt_ids(NULL, tok, cpt_dataset_get(ds, 0), &ids, &n, &err), 0);
        size_t len;
        char *s = cpt_tokenizer_decode(tok, ids, n, 0, &len, &err);
        CHECK_EQ_STR(s, "What is 5 * 5?");
        free(s);
        free(ids);
        CHECK_EQ_INT(cpt_rl_prompt_ids(NULL, tok, cpt_dataset_get(ds, 1), &ids, &n, &err), -1);
        CHECK(strstr(err.msg, "line 2") != NULL);
    }
    cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
    cpt_dataset_free(ds);
}

/* A scored group over prompt p[np] with completions c[k] (lengths len[k]), behaviour logprobs -0.1 * (j + 1). */
typedef struct fake_group {
    cpt_rollout_group g;
    cpt_completion comp[8];
    double rewards[8];
    float lp[8][16];
    int32_t tok[8][16];
} fake_group;

static void make_group(fake_group *f, uint64_t idx, const int32_t *prompt, int np, int k, const int *len,
                       const int32_t (*toks)[16], const double *rewards) {
    memset(f, 0, sizeof *f);
    f->g.id.index = idx;
    f->g.n_prompt = (uint32_t)np;
    f->g.prompt = (int32_t *)prompt;
    f->g.n_completions = (uint32_t)k;
    f->g.completions = f->comp;
    f->g.has_rewards = 1;
    f->g.rewards = f->rewards;
    for (int i = 0; i < k; i++) {
        f->comp[i].n_tokens = (uint32_t)len[i];
        f->comp[i].tokens = f->tok[i];
        f->comp[i].logprobs = f->lp[i];
        for (int j = 0; j < len[i]; j++) {
            f->tok[i][j] = toks[i][j];
            f->lp[i][j] = -0.1f * (float)(j + 1);
        }
        f->rewards[i] = rewards[i];
    }
}

static void test_batch(void) {
    cpt_err err;
    int32_t prompt[3] = {5, 6, 7};
    int32_t toks[3][16] = {{10, 11}, {12}, {0}};
    int len[3] = {2, 1, 0};
    double rw[3] = {1, 0, 0.5};
    fake_group f;
    make_group(&f, 4, prompt, 3, 3, len, toks, rw);
    cpt_rl_batch b;
    memset(&b, 0, sizeof b);
    cpt_rl_batch_reset(&b);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&b, &f.g, 64, 32, &err), 0);
    CHECK_EQ_INT(b.n_seqs, 3);
    CHECK_EQ_INT(b.n_groups, 1);
    CHECK_EQ_INT(b.n_tokens, 5 + 4 + 3);
    int32_t want_tok[12] = {5, 6, 7, 10, 11, 5, 6, 7, 12, 5, 6, 7};
    int32_t want_tgt[12] = {6, 7, 10, 11, -1, 6, 7, 12, -1, 6, 7, -1};
    float want_mask[12] = {0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0};
    float want_lp[12] = {0, 0, -0.1f, -0.2f, 0, 0, 0, -0.1f, 0, 0, 0, 0};
    for (int t = 0; t < 12; t++) {
        CHECK_EQ_INT(b.tokens[t], want_tok[t]);
        CHECK_EQ_INT(b.targets[t], want_tgt[t]);
        CHECK(b.mask[t] == want_mask[t]);
        CHECK(b.behav_logprobs[t] == want_lp[t]);
    }
    CHECK_EQ_INT(b.seq_start[1], 5);
    CHECK_EQ_INT(b.seq_start[3], 12);
    CHECK_EQ_INT(b.seq_resp_len[0], 2);
    CHECK(b.seq_reward[2] == 0.5);
    CHECK_EQ_INT(b.has_teacher, 0);

    /* a second group, truncated at max_seq_len 4: keeps the prompt and 1 completion token */
    fake_group f2;
    make_group(&f2, 5, prompt, 3, 3, len, toks, rw);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&b, &f2.g, 4, 32, &err), 0);
    CHECK_EQ_INT(b.n_groups, 2);
    CHECK_EQ_INT(b.group_seq0[1], 3);
    CHECK_EQ_INT(b.n_truncated, 1);
    CHECK_EQ_INT(b.seq_resp_len[3], 1);
    CHECK_EQ_INT(b.seq_start[4] - b.seq_start[3], 4);
    CHECK_EQ_INT(b.targets[b.seq_start[4] - 1], -1);

    /* bad input */
    CHECK_EQ_INT(cpt_rl_batch_add_group(&b, &f2.g, 3, 32, &err), -1);
    CHECK(strstr(err.msg, "max_seq_len") != NULL);
    toks[1][0] = 40;
    fake_group f3;
    make_group(&f3, 6, prompt, 3, 3, len, toks, rw);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&b, &f3.g, 64, 32, &err), -1);
    CHECK(strstr(err.msg, "completion 1: token 40 outside the vocabulary") != NULL);
    f3.g.has_rewards = 0;
    CHECK_EQ_INT(cpt_rl_batch_add_group(&b, &f3.g, 64, 32, &err), -1);

    /* grpo advantages per group: rewards {1, 0, .5}: mean .5, unbiased std .5 */
    cpt_objective_config oc;
    cpt_objective_defaults(&oc, CPT_OBJ_GRPO);
    oc.adv_eps = 0;
    float adv[32], seq[8], tokscr[32];
    cpt_rl_batch one;
    memset(&one, 0, sizeof one);
    cpt_rl_batch_reset(&one);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&one, &f.g, 64, 32, &err), 0);
    CHECK_EQ_INT(cpt_online_advantages(&oc, &one, one.seq_reward, NULL, adv, NULL, seq, tokscr, &err), 0);
    CHECK_NEAR(adv[2], 1.0, 1e-6);
    CHECK_NEAR(adv[3], 1.0, 1e-6);
    CHECK_NEAR(adv[7], -1.0, 1e-6);
    CHECK_NEAR(adv[0], 0.0, 1e-9);
    /* finite rewards beyond float range (1e39) stay doubles through the batch: the same advantages as {1, 0, .5} */
    double huge[3] = {2e39, 0, 1e39};
    fake_group fh;
    toks[1][0] = 12;
    make_group(&fh, 7, prompt, 3, 3, len, toks, huge);
    cpt_rl_batch_reset(&one);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&one, &fh.g, 64, 32, &err), 0);
    CHECK(one.seq_reward[0] == 2e39);
    CHECK_EQ_INT(cpt_online_advantages(&oc, &one, one.seq_reward, NULL, adv, NULL, seq, tokscr, &err), 0);
    CHECK_NEAR(adv[2], 1.0, 1e-6);
    CHECK_NEAR(adv[7], -1.0, 1e-6);
    cpt_rl_batch_reset(&one);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&one, &f.g, 64, 32, &err), 0);
    /* opd without teacher logprobs is refused with the reason */
    cpt_objective_defaults(&oc, CPT_OBJ_OPD);
    CHECK_EQ_INT(cpt_online_advantages(&oc, &one, one.seq_reward, NULL, adv, NULL, seq, tokscr, &err), -1);
    CHECK(strstr(err.msg, "teacher_logprobs") != NULL);
    /* with a teacher: adv = -(behav - teacher) */
    float tl[3][16] = {{-0.5f, -0.5f}, {-1.0f}, {0}};
    for (int i = 0; i < 3; i++) f.comp[i].teacher_logprobs = tl[i];
    cpt_rl_batch_reset(&one);
    CHECK_EQ_INT(cpt_rl_batch_add_group(&one, &f.g, 64, 32, &err), 0);
    CHECK_EQ_INT(one.has_teacher, 1);
    CHECK_EQ_INT(cpt_online_advantages(&oc, &one, one.seq_reward, NULL, adv, NULL, seq, tokscr, &err), 0);
    CHECK_NEAR(adv[2], -(-0.1 - -0.5), 1e-6);
    CHECK_NEAR(adv[3], -(-0.2 - -0.5), 1e-6);
    CHECK_NEAR(adv[7], -(-0.1 - -1.0), 1e-6);
    cpt_rl_batch_free(&one);
    cpt_rl_batch_free(&b);
}

/* ---- learning ---- */

static cpt_model *tiny_model(int value_head) {
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 24, .hidden_size = 16, .intermediate_size = 32,
                           .num_layers = 1, .num_heads = 2, .num_kv_heads = 1, .head_dim = 8, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000, .tie_word_embeddings = 1, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&mc, 7, &err);
    if (m && value_head && cpt_model_add_value_head(m, 8, &err)) {
        cpt_model_free(m);
        return NULL;
    }
    return m;
}

/* Mean logprob per token of completion `c` after prompt under m. */
static double seq_logprob(cpt_model *m, const int32_t *prompt, int np, const int32_t *c, int nc) {
    int32_t tok[32], tgt[32], ss[2] = {0, np + nc};
    float lp[32];
    for (int i = 0; i < np; i++) tok[i] = prompt[i];
    for (int i = 0; i < nc; i++) tok[np + i] = c[i];
    for (int i = 0; i < np + nc; i++) tgt[i] = i + 1 < np + nc ? tok[i + 1] : -1;
    cpt_batch b = {.n_tokens = np + nc, .n_seqs = 1, .tokens = tok, .seq_start = ss, .targets = tgt};
    cpt_forward_out fo = {.logprobs = lp};
    cpt_err err;
    if (cpt_model_forward(m, &b, &fo, 0, &err)) return NAN;
    double s = 0;
    for (int i = np - 1; i < np + nc - 1; i++) s += lp[i];
    return s / nc;
}

/* Two groups: completions "3 3 3" (reward 1) and "4 4 4" (reward 0), twice each. Behaviour logprobs from m. */
static void learning_batch(cpt_model *m, cpt_rl_batch *b, fake_group *f) {
    static const int32_t prompt[2] = {1, 2};
    int32_t toks[4][16] = {{3, 3, 3}, {4, 4, 4}, {3, 3, 3}, {4, 4, 4}};
    int len[4] = {3, 3, 3, 3};
    double rw[4] = {1, 0, 1, 0};
    cpt_err err;
    cpt_rl_batch_reset(b);
    for (int g = 0; g < 2; g++) {
        make_group(&f[g], (uint64_t)g, prompt, 2, 4, len, toks, rw);
        CHECK_EQ_INT(cpt_rl_batch_add_group(b, &f[g].g, 32, 24, &err), 0);
    }
    float *lp = malloc((size_t)b->n_tokens * sizeof *lp);
    cpt_batch mb = {.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .tokens = b->tokens, .seq_start = b->seq_start,
                    .targets = b->targets};
    cpt_forward_out fo = {.logprobs = lp};
    CHECK_EQ_INT(cpt_model_forward(m, &mb, &fo, 0, &err), 0);
    for (int t = 0; t < b->n_tokens; t++) b->behav_logprobs[t] = b->mask[t] != 0 ? lp[t] : 0;
    free(lp);
}

static void test_learns(const char *algo, int micro_tokens) {
    cpt_err err;
    char o1[64], o2[64];
    snprintf(o1, sizeof o1, "algo.type=%s", algo);
    snprintf(o2, sizeof o2, "train.tokens_per_micro_batch=%d", micro_tokens);
    char *ov[] = {o1, o2, "optim.lr=0.01", "optim.schedule=constant", "critic.lr=0.01", "train.steps=10",
                  "algo.kl_beta=0.01", "train.mini_batches=1"};
    cpt_config *cfg = cpt_config_load(NULL, 8, ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return;
    cpt_objective_config oc;
    CHECK_EQ_INT(cpt_obj_type_parse(algo, &oc.type, &err), 0);
    CHECK_EQ_INT(cpt_objective_from_config(cfg, &oc, &err), 0);
    cpt_model *pol = tiny_model(0), *ref = tiny_model(0), *critic = !strcmp(algo, "ppo") ? tiny_model(1) : NULL;
    cpt_online_learner L;
    CHECK_EQ_INT(cpt_online_learner_init(&L, cfg, &oc, pol, ref, critic, &err), 0);
    static const int32_t prompt[2] = {1, 2}, good[3] = {3, 3, 3}, bad[3] = {4, 4, 4};
    double g0 = seq_logprob(pol, prompt, 2, good, 3), b0 = seq_logprob(pol, prompt, 2, bad, 3);
    cpt_rl_batch b;
    memset(&b, 0, sizeof b);
    fake_group f[2];
    cpt_online_step_stats st;
    for (int step = 0; step < 8; step++) {
        learning_batch(pol, &b, f);
        CHECK_MSG(cpt_online_learner_step(&L, &b, step, &st, &err) == 0, "%s", err.msg);
    }
    double g1 = seq_logprob(pol, prompt, 2, good, 3), b1 = seq_logprob(pol, prompt, 2, bad, 3);
    printf("%s (micro %d): logp(good) %.3f -> %.3f, logp(bad) %.3f -> %.3f, n_micro %d\n", algo, micro_tokens, g0, g1,
           b0, b1, st.n_micro);
    CHECK_MSG(g1 > g0 + 0.5, "%s: rewarded completion logprob %.3f -> %.3f", algo, g0, g1);
    CHECK_MSG(b1 < b0 - 0.5, "%s: unrewarded completion logprob %.3f -> %.3f", algo, b0, b1);
    CHECK_NEAR(st.reward_mean, 0.5, 1e-9);
    CHECK_NEAR(st.resp_len_mean, 3.0, 1e-9);
    CHECK(st.m.kl > 0);
    CHECK(st.grad_norm > 0);
    if (critic) CHECK(st.critic_grad_norm > 0);
    CHECK_EQ_INT(st.n_micro, micro_tokens >= 40 ? 1 : 3);
    cpt_rl_batch_free(&b);
    cpt_online_learner_free(&L);
    cpt_model_free(pol);
    cpt_model_free(ref);
    cpt_model_free(critic);
    cpt_config_free(cfg);
}

/* Micro-batching changes nothing: the same step with budget 16 (three sequences each) and 64 (all at once). */
static void test_micro_exact(void) {
    cpt_err err;
    float *w[2] = {NULL, NULL};
    size_t numel = 0;
    for (int k = 0; k < 2; k++) {
        char o2[64];
        snprintf(o2, sizeof o2, "train.tokens_per_micro_batch=%d", k ? 64 : 16);
        char *ov[] = {"algo.type=grpo", o2, "optim.lr=0.01", "train.ppo_epochs=2", "algo.entropy_coef=0.01",
                      "train.mini_batches=1"};
        cpt_config *cfg = cpt_config_load(NULL, 6, ov, &err);
        cpt_objective_config oc;
        oc.type = CPT_OBJ_GRPO;
        CHECK_EQ_INT(cpt_objective_from_config(cfg, &oc, &err), 0);
        cpt_model *pol = tiny_model(0);
        cpt_online_learner L;
        CHECK_EQ_INT(cpt_online_learner_init(&L, cfg, &oc, pol, NULL, NULL, &err), 0);
        cpt_rl_batch b;
        memset(&b, 0, sizeof b);
        fake_group f[2];
        learning_batch(pol, &b, f);
        cpt_online_step_stats st;
        CHECK_EQ_INT(cpt_online_learner_step(&L, &b, 0, &st, &err), 0);
        CHECK(st.m.clip_frac >= 0);
        numel = cpt_model_numel(pol);
        w[k] = malloc(numel * sizeof(float));
        memcpy(w[k], cpt_model_data(pol), numel * sizeof(float));
        cpt_rl_batch_free(&b);
        cpt_online_learner_free(&L);
        cpt_model_free(pol);
        cpt_config_free(cfg);
    }
    double maxd = 0;
    for (size_t i = 0; i < numel; i++) maxd = fmax(maxd, fabs((double)w[0][i] - w[1][i]));
    CHECK_MSG(maxd < 1e-5, "micro-batched and whole updates differ by %g", maxd);
    free(w[0]);
    free(w[1]);
}

/* Ranks forward contiguous ranges of sequences balanced by tokens, covering the batch exactly once. */
static void test_shard(void) {
    int32_t ss[6] = {0, 10, 12, 30, 31, 40}; /* lengths 10 2 18 1 9 */
    cpt_rl_batch b;
    memset(&b, 0, sizeof b);
    b.n_seqs = 5;
    b.n_tokens = 40;
    b.seq_start = ss;
    int s0, s1;
    cpt_online_shard(&b, 0, 1, &s0, &s1);
    CHECK(s0 == 0 && s1 == 5);
    /* two ranks: half is 20 tokens; the start nearest to it is 12 (30 is farther) */
    cpt_online_shard(&b, 0, 2, &s0, &s1);
    CHECK(s0 == 0 && s1 == 2);
    cpt_online_shard(&b, 1, 2, &s0, &s1);
    CHECK(s0 == 2 && s1 == 5);
    /* four ranks: targets 10, 20, 30 -> starts 10, 12, 30 */
    int want[5] = {0, 1, 2, 3, 5};
    for (int r = 0; r < 4; r++) {
        cpt_online_shard(&b, r, 4, &s0, &s1);
        CHECK_MSG(s0 == want[r] && s1 == want[r + 1], "rank %d of 4: [%d, %d)", r, s0, s1);
    }
    /* more ranks than sequences: every sequence once, some ranks get none */
    int seen = 0, prev = 0;
    for (int r = 0; r < 8; r++) {
        cpt_online_shard(&b, r, 8, &s0, &s1);
        CHECK(s0 == prev && s1 >= s0);
        seen += s1 - s0;
        prev = s1;
    }
    CHECK_EQ_INT(seen, 5);
    CHECK_EQ_INT(prev, 5);
}

int main(void) {
    test_shard();
    test_prompt_and_extra();
    test_batch();
    test_learns("grpo", 64);
    test_learns("grpo", 16);
    test_learns("ppo", 64);
    test_micro_exact();
    return check_summary("test_online_batch");
}
