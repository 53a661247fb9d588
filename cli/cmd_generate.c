/* cpt generate: sample a model from the command line (see docs/rollout.md).
 *
 *   cpt generate --model HF_DIR|CHECKPOINT [--tokenizer PATH] (--prompt TEXT | --prompt-ids 1,2,3 |
 *       --prompts FILE.jsonl) [--max-new-tokens N] [--greedy | --temperature T --top-p P --top-k K --min-p M]
 *       [--seed S] [--n N] [--slots N] [--stop TEXT]... [--stop-id ID]... [--no-eos] [--json] [--device auto|cpu|cuda]
 *   cpt generate --bench [--bench-config hidden=256,layers=4,vocab=1024,heads=4,kv_heads=4,inter=688]
 *       [--batch B] [--prompt-len 64] [--max-new-tokens 128] [--threads N]
 *
 * FILE.jsonl holds one prompt per line: {"prompt": "text"} or {"prompt_ids": [1, 2, 3]}. --json prints one line
 * per sample with the prompt and completion ids, behaviour logprobs, the finish reason and the text. --device cuda
 * places the model on GPU 0 for inference (bf16 weights, cpt_model_use_cuda_infer) before the same engine runs;
 * auto (the default) does when this process sees a GPU (weights/devices.h). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "core/fs.h"
#include "core/json_util.h"
#include "core/rng.h"
#include "rollout/engine.h"
#include "rollout/model_source.h"
#include "rollout/prompts.h"
#include "weights/devices.h"

typedef struct gen_args {
    const char *model, *tokenizer, *prompt, *prompt_ids, *prompts_file, *bench_config;
    int max_new, n, slots, json, no_eos, bench, batch, prompt_len, threads, cuda;
    cpt_sample_params sp;
    uint64_t seed;
    const char *stops[CPT_MAX_STOP];
    int n_stops;
    int32_t stop_ids[CPT_MAX_STOP + 2];
    int n_stop_ids;
} gen_args;

static void usage(void) {
    fprintf(stderr,
            "usage: cpt generate --model HF_DIR|CHECKPOINT [--tokenizer PATH]\n"
            "           (--prompt TEXT | --prompt-ids 1,2,3 | --prompts FILE.jsonl) [--max-new-tokens N]\n"
            "           [--greedy | --temperature T --top-p P --top-k K --min-p M] [--seed S] [--n N]\n"
            "           [--slots N] [--stop TEXT]... [--stop-id ID]... [--no-eos] [--json] [--device auto|cpu|cuda]\n"
            "       cpt generate --bench [--bench-config hidden=256,layers=4,vocab=1024,heads=4,kv_heads=4,inter=688]\n"
            "           [--batch B] [--prompt-len 64] [--max-new-tokens 128] [--threads N]\n");
}

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "cpt generate: %s %s: expected an integer in [%ld, %ld]\n", flag, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "cpt generate: %s %s: expected a number\n", flag, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_args(int argc, char **argv, gen_args *a) {
    memset(a, 0, sizeof *a);
    a->max_new = -1, a->n = 1, a->slots = 0, a->batch = 1, a->prompt_len = 64;
    a->cuda = !strcmp(cpt_device_pick("auto", cpt_gpus_visible()), "cuda");
    a->sp = (cpt_sample_params){1.0f, 0, 1.0f, 0.0f};
    int greedy = 0, sampling_flag = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        long v;
        int has = i + 1 < argc;
#define NEED()                                                              \
    do {                                                                    \
        if (!has) {                                                         \
            fprintf(stderr, "cpt generate: %s needs a value\n", f);         \
            return -1;                                                      \
        }                                                                   \
    } while (0)
        if (!strcmp(f, "--json")) a->json = 1;
        else if (!strcmp(f, "--greedy")) greedy = 1;
        else if (!strcmp(f, "--no-eos")) a->no_eos = 1;
        else if (!strcmp(f, "--bench")) a->bench = 1;
        else if (!strcmp(f, "-h") || !strcmp(f, "--help")) { usage(); return 1; }
        else {
            static const char *value_flags[] = {"--model", "--tokenizer", "--prompt", "--prompt-ids", "--prompts",
                                                "--bench-config", "--max-new-tokens", "--n", "--slots", "--batch",
                                                "--prompt-len", "--threads", "--top-k", "--seed", "--temperature",
                                                "--top-p", "--min-p", "--stop", "--stop-id", "--device", NULL};
            int known = 0;
            for (int k = 0; value_flags[k] && !known; k++) known = !strcmp(f, value_flags[k]);
            if (!known) {
                fprintf(stderr, "cpt generate: unknown option %s\n", f);
                usage();
                return -1;
            }
            NEED();
            const char *s = argv[++i];
            if (!strcmp(f, "--model")) a->model = s;
            else if (!strcmp(f, "--tokenizer")) a->tokenizer = s;
            else if (!strcmp(f, "--device")) {
                const char *d = cpt_device_pick(s, cpt_gpus_visible());
                if (!d) { fprintf(stderr, "cpt generate: --device %s: expected auto, cpu or cuda\n", s); return -1; }
                a->cuda = !strcmp(d, "cuda");
            }
            else if (!strcmp(f, "--prompt")) a->prompt = s;
            else if (!strcmp(f, "--prompt-ids")) a->prompt_ids = s;
            else if (!strcmp(f, "--prompts")) a->prompts_file = s;
            else if (!strcmp(f, "--bench-config")) a->bench_config = s;
            else if (!strcmp(f, "--max-new-tokens")) { if (parse_long(f, s, 1, CPT_MAX_COMPLETION_TOKENS, &v)) return -1; a->max_new = (int)v; }
            else if (!strcmp(f, "--n")) { if (parse_long(f, s, 1, CPT_MAX_SAMPLES, &v)) return -1; a->n = (int)v; }
            else if (!strcmp(f, "--slots")) { if (parse_long(f, s, 1, 65536, &v)) return -1; a->slots = (int)v; }
            else if (!strcmp(f, "--batch")) { if (parse_long(f, s, 1, 65536, &v)) return -1; a->batch = (int)v; }
            else if (!strcmp(f, "--prompt-len")) { if (parse_long(f, s, 1, 1 << 20, &v)) return -1; a->prompt_len = (int)v; }
            else if (!strcmp(f, "--threads")) { if (parse_long(f, s, 1, 4096, &v)) return -1; a->threads = (int)v; }
            else if (!strcmp(f, "--top-k")) { if (parse_long(f, s, 0, INT32_MAX, &v)) return -1; a->sp.top_k = (int)v; sampling_flag = 1; }
            else if (!strcmp(f, "--seed")) { if (parse_long(f, s, 0, LONG_MAX, &v)) return -1; a->seed = (uint64_t)v; }
            else if (!strcmp(f, "--temperature")) { if (parse_float(f, s, &a->sp.temperature)) return -1; sampling_flag = 1; }
            else if (!strcmp(f, "--top-p")) { if (parse_float(f, s, &a->sp.top_p)) return -1; sampling_flag = 1; }
            else if (!strcmp(f, "--min-p")) { if (parse_float(f, s, &a->sp.min_p)) return -1; sampling_flag = 1; }
            else if (!strcmp(f, "--stop")) {
                if (a->n_stops == CPT_MAX_STOP || !s[0]) { fprintf(stderr, "cpt generate: --stop: empty or more than %d\n", CPT_MAX_STOP); return -1; }
                a->stops[a->n_stops++] = s;
            } else if (!strcmp(f, "--stop-id")) {
                if (parse_long(f, s, 0, INT32_MAX, &v)) return -1;
                if (a->n_stop_ids == CPT_MAX_STOP) { fprintf(stderr, "cpt generate: more than %d --stop-id\n", CPT_MAX_STOP); return -1; }
                a->stop_ids[a->n_stop_ids++] = (int32_t)v;
            } else {
                fprintf(stderr, "cpt generate: unknown option %s\n", f);
                usage();
                return -1;
            }
        }
#undef NEED
    }
    if (greedy && sampling_flag) {
        fprintf(stderr, "cpt generate: --greedy excludes --temperature, --top-p, --top-k and --min-p\n");
        return -1;
    }
    if (greedy) a->sp = (cpt_sample_params){0.0f, 0, 1.0f, 0.0f};
    cpt_err err;
    if (cpt_sample_params_check(&a->sp, &err)) {
        fprintf(stderr, "cpt generate: %s\n", err.msg);
        return -1;
    }
    if (a->bench) return 0;
    if (!a->model) {
        fprintf(stderr, "cpt generate: --model is required\n");
        usage();
        return -1;
    }
    if (!!a->prompt + !!a->prompt_ids + !!a->prompts_file != 1) {
        fprintf(stderr, "cpt generate: give exactly one of --prompt, --prompt-ids, --prompts\n");
        return -1;
    }
    if (a->max_new < 0) a->max_new = 64;
    return 0;
}

static void print_ids(cpt_json_buf *b, const int32_t *ids, int n) {
    cpt_json_buf_puts(b, "[");
    for (int i = 0; i < n; i++) cpt_json_buf_printf(b, "%s%d", i ? ", " : "", ids[i]);
    cpt_json_buf_puts(b, "]");
}

static void print_result(const gen_args *a, const cpt_tokenizer *tok, int p, const cpt_prompt_list *pl,
                         const cpt_gen_result *r) {
    for (int k = 0; k < r->n_samples; k++) {
        const cpt_gen_sample *s = &r->samples[k];
        cpt_err err;
        char *text = tok ? cpt_tokenizer_decode(tok, s->tokens, (size_t)s->n_tokens, 0, NULL, &err) : NULL;
        if (a->json) {
            cpt_json_buf b;
            cpt_json_buf_init(&b);
            cpt_json_buf_printf(&b, "{\"prompt\": %d, \"sample\": %d, \"prompt_ids\": ", p, k);
            print_ids(&b, pl->ids[p], pl->len[p]);
            cpt_json_buf_puts(&b, ", \"ids\": ");
            print_ids(&b, s->tokens, s->n_tokens);
            cpt_json_buf_puts(&b, ", \"logprobs\": [");
            for (int i = 0; i < s->n_tokens; i++) {
                if (i) cpt_json_buf_puts(&b, ", ");
                cpt_json_buf_number(&b, s->logprobs[i]);
            }
            cpt_json_buf_printf(&b, "], \"finish\": \"%s\"", cpt_finish_name(s->finish));
            if (text) {
                cpt_json_buf_puts(&b, ", \"text\": ");
                cpt_json_buf_string(&b, text);
            }
            cpt_json_buf_puts(&b, "}\n");
            fputs(b.s, stdout);
            cpt_json_buf_free(&b);
        } else {
            double sum = 0;
            for (int i = 0; i < s->n_tokens; i++) sum += s->logprobs[i];
            printf("--- prompt %d sample %d (%d tokens, finish %s, logprob %.4f)\n", p, k, s->n_tokens,
                   cpt_finish_name(s->finish), sum);
            if (text) {
                printf("%s\n", text);
            } else {
                for (int i = 0; i < s->n_tokens; i++) printf("%s%d", i ? " " : "", s->tokens[i]);
                printf("\n");
            }
        }
        free(text);
    }
}

/* "hidden=256,layers=4,..." into a qwen2-shaped config. */
static int bench_config(const char *spec, cpt_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = CPT_ARCH_QWEN2;
    c->vocab_size = 1024, c->hidden_size = 256, c->num_layers = 4, c->num_heads = 4, c->num_kv_heads = 4;
    c->intermediate_size = 688;
    c->rms_norm_eps = 1e-6f, c->rope_theta = 10000.0f, c->tie_word_embeddings = 1, c->qkv_bias = 1;
    c->max_position_embeddings = 4096, c->bos_token_id = -1, c->eos_token_id = -1;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        long v;
        if (!eq || parse_long(kv, eq + 1, 1, 1 << 24, &v)) {
            fprintf(stderr, "cpt generate: --bench-config: bad item '%s'\n", kv);
            return -1;
        }
        *eq = 0;
        if (!strcmp(kv, "hidden")) c->hidden_size = (int)v;
        else if (!strcmp(kv, "layers")) c->num_layers = (int)v;
        else if (!strcmp(kv, "vocab")) c->vocab_size = (int)v;
        else if (!strcmp(kv, "heads")) c->num_heads = (int)v;
        else if (!strcmp(kv, "kv_heads")) c->num_kv_heads = (int)v;
        else if (!strcmp(kv, "inter")) c->intermediate_size = (int)v;
        else {
            fprintf(stderr, "cpt generate: --bench-config: unknown key '%s'\n", kv);
            return -1;
        }
    }
    c->head_dim = c->hidden_size / c->num_heads;
    return 0;
}

/* CPU time of this process (all threads): on a shared machine wall time alone says little. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Decode throughput: batch requests of prompt_len random tokens, max_new tokens each, no stop, one slot each. */
static int bench(const gen_args *a) {
    cpt_model_config c;
    cpt_err err;
    if (bench_config(a->bench_config, &c)) return 2;
    if (a->threads) omp_set_num_threads(a->threads);
    cpt_model *m = cpt_model_new_random(&c, 1, &err);
    if (!m) {
        fprintf(stderr, "cpt generate: %s\n", err.msg);
        return 1;
    }
    int max_new = a->max_new > 0 ? a->max_new : 128;
    cpt_engine_opts o = {.slots = a->batch, .max_len = a->prompt_len + max_new};
    cpt_engine *e = cpt_engine_new(m, &o, &err);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)a->prompt_len);
    cpt_rng rng;
    cpt_rng_seed(&rng, 3, 0);
    int rc = e && prompt ? 0 : 1;
    for (int b = 0; !rc && b < a->batch; b++) {
        for (int i = 0; i < a->prompt_len; i++) prompt[i] = (int32_t)cpt_rng_below(&rng, (uint64_t)c.vocab_size);
        cpt_gen_request r = {.prompt = prompt, .n_prompt = a->prompt_len, .n_samples = 1, .sp = a->sp,
                             .seed = (uint64_t)b, .max_new_tokens = max_new};
        if (cpt_engine_submit(e, &r, &err) < 0) rc = 1;
    }
    double t0 = cpt_now(), t_first = 0, c_first = 0;
    long steps = 0;
    while (!rc && !cpt_engine_idle(e)) {
        if (cpt_engine_step(e, &err) < 0) rc = 1;
        if (steps++ == 0) t_first = cpt_now(), c_first = cpu_seconds();
    }
    double t1 = cpt_now(), c1 = cpu_seconds();
    if (!rc) {
        const cpt_engine_stats *st = cpt_engine_get_stats(e);
        /* the first step holds the prefill (and the first decode); decode throughput is measured after it */
        long dec_tokens = st->generated_tokens - 2L * a->batch;
        double dec_s = t1 - t_first;
        printf("bench: hidden %d layers %d heads %d/%d inter %d vocab %d | batch %d prompt %d new %d | threads %d\n",
               c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.intermediate_size, c.vocab_size, a->batch,
               a->prompt_len, max_new, omp_get_max_threads());
        printf("bench: prefill+first step %.3f s (%.0f prompt tok/s), decode %.0f tok/s (%ld tokens in %.3f s; "
               "%.3f s of CPU time: %.0f tok per CPU-second), total %.3f s\n",
               t_first - t0, st->prefill_tokens / (t_first - t0), dec_tokens / dec_s, dec_tokens, dec_s, c1 - c_first,
               dec_tokens / (c1 - c_first), t1 - t0);
    } else {
        fprintf(stderr, "cpt generate: %s\n", err.msg);
    }
    free(prompt);
    cpt_engine_free(e);
    cpt_model_free(m);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc > 0 ? 0 : 2;
    if (a.bench) return bench(&a);
    cpt_err err;
    err.msg[0] = 0;
    char hf[4200];
    cpt_model *m = cpt_rollout_load_model(a.model, hf, sizeof hf, &err);
    if (!m) {
        fprintf(stderr, "cpt generate: %s\n", err.msg);
        return 1;
    }
    cpt_tokenizer *tok = cpt_rollout_load_tokenizer(a.tokenizer ? a.tokenizer : hf, a.tokenizer != NULL, &err);
    if (!tok && err.msg[0]) {
        fprintf(stderr, "cpt generate: %s\n", err.msg);
        cpt_model_free(m);
        return 1;
    }
    cpt_prompt_list pl = {0};
    int rc = 0;
    if (a.prompt) {
        rc = cpt_prompt_list_add_text(&pl, tok, a.prompt, strlen(a.prompt), "--prompt", &err);
    } else if (a.prompt_ids) {
        rc = cpt_prompt_list_add_ids(&pl, a.prompt_ids, "--prompt-ids", &err);
    } else {
        size_t len;
        char *text = cpt_read_file(a.prompts_file, &len, &err);
        rc = text ? cpt_prompt_list_parse_jsonl(&pl, text, len, a.prompts_file, tok, &err) : -1;
        free(text);
    }
    if (!a.no_eos) a.n_stop_ids += cpt_rollout_eos_ids(m, tok, a.stop_ids + a.n_stop_ids);
    if (!rc && a.n_stops && !tok) rc = cpt_errf(&err, "--stop needs a tokenizer");
    cpt_engine *e = NULL;
    if (!rc) {
        cpt_engine_opts o = {.slots = a.slots ? a.slots : (pl.n * a.n < 16 ? pl.n * a.n : 16), .tok = tok};
        if ((a.cuda && cpt_model_use_cuda_infer(m, 0, &err)) || !(e = cpt_engine_new(m, &o, &err))) rc = -1;
    }
    for (int p = 0; !rc && p < pl.n; p++) {
        cpt_gen_request r = {.prompt = pl.ids[p], .n_prompt = pl.len[p], .n_samples = a.n, .sp = a.sp,
                             .seed = a.seed + (uint64_t)p, .max_new_tokens = a.max_new, .stop_ids = a.stop_ids,
                             .n_stop_ids = a.n_stop_ids, .stop_strs = a.stops, .n_stop_strs = a.n_stops,
                             .tag = (uint64_t)p};
        if (cpt_engine_submit(e, &r, &err) < 0) {
            cpt_err_prefix(&err, "prompt %d", p);
            rc = -1;
        }
    }
    /* results in prompt order: hold early finishers until their turn */
    cpt_gen_result *done = rc ? NULL : calloc((size_t)pl.n, sizeof *done);
    char *have = rc ? NULL : calloc((size_t)pl.n, 1);
    int next = 0;
    while (!rc && next < pl.n) {
        if (cpt_engine_step(e, &err) < 0) {
            rc = -1;
            break;
        }
        cpt_gen_result r;
        while (cpt_engine_take(e, &r)) done[r.tag] = r, have[r.tag] = 1;
        while (next < pl.n && have[next]) {
            print_result(&a, tok, next, &pl, &done[next]);
            cpt_gen_result_free(&done[next]);
            next++;
        }
        fflush(stdout);
    }
    if (rc && err.msg[0]) fprintf(stderr, "cpt generate: %s\n", err.msg);
    for (int p = 0; done && p < pl.n; p++) cpt_gen_result_free(&done[p]);
    free(done);
    free(have);
    cpt_engine_free(e);
    cpt_prompt_list_free(&pl);
    cpt_tokenizer_free(tok);
    cpt_model_free(m);
    return rc ? 1 : 0;
}
