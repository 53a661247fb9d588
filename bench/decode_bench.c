/* GPU decode throughput of the engine (rollout/engine.h) on the CUDA decoder (model/cuda_decoder.c), Qwen2.5-shaped
 * random models.
 *
 *   decode_bench [--shapes 0.5b,1.5b] [--batches 1,64,256] [--prompt 256] [--new 512] [--no-graphs] [--defaults]
 *                [--bw 4.3e12]
 *
 * --defaults: accepted for the command lines of earlier binaries (the kernels are the decoder's own choice now).
 * The RESULT line keeps the fields of earlier binaries, the engine options' values filled with the product's
 * (gemv 4, attn_v2 4, fused 4, pdl 1, the rest 0), so old and new logs compare line by line.
 *
 * For each shape and batch B: B requests of random prompts, greedy, exactly --new tokens each (no stop ids), in an
 * engine with B slots; one untimed run first (graph capture, cuBLASLt heuristics), then a timed one. Reports the
 * prefill time (the first step: admission, prefill of all prompts, first tokens, one decode step), decode tokens/s
 * (tokens of the later steps over their time), end-to-end tokens/s, and at every batch the HBM roofline of one decode
 * step: (bf16 weights + the KV cache read at the mean context) / bandwidth. One line "RESULT ..." per run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "model/decoder.h"
#include "rollout/engine.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static cpt_model_config shape(const char *name) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 151936;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 1000000.0f, c.qkv_bias = 1, c.tie_word_embeddings = 1;
    c.max_position_embeddings = 32768, c.bos_token_id = -1, c.eos_token_id = -1;
    if (!strcmp(name, "1.5b")) {
        c.hidden_size = 1536, c.num_layers = 28, c.num_heads = 12, c.num_kv_heads = 2, c.intermediate_size = 8960;
    } else {
        c.hidden_size = 896, c.num_layers = 24, c.num_heads = 14, c.num_kv_heads = 2, c.intermediate_size = 4864;
    }
    c.head_dim = c.hidden_size / c.num_heads;
    return c;
}

static double weight_bytes(const cpt_model_config *c) {
    double C = c->hidden_size, D = c->head_dim, H = c->num_heads, KV = c->num_kv_heads, I = c->intermediate_size;
    double per = C * (H + 2 * KV) * D + (H + 2 * KV) * D + C * H * D + 3 * C * I + 2 * C;
    return 2.0 * (c->num_layers * per + (double)c->vocab_size * C + C); /* LM head read once per step */
}

static double kv_bytes_per_pos(const cpt_model_config *c) {
    return 2.0 * c->num_layers * 2.0 * c->num_kv_heads * c->head_dim; /* K and V, bf16 */
}

/* One generation of B requests; returns 0 and fills the times. */
static int run(cpt_engine *e, int B, int prompt, int n_new, int V, uint64_t seed, double *t_first, double *t_total,
               long *tok_first, long *tok_total) {
    cpt_rng rng;
    cpt_rng_seed(&rng, seed, 0);
    int32_t *p = malloc(sizeof(int32_t) * (size_t)prompt * B);
    for (long i = 0; i < (long)prompt * B; i++) p[i] = (int32_t)cpt_rng_below(&rng, (uint64_t)V);
    cpt_err err = {0};
    long gen0 = cpt_engine_get_stats(e)->generated_tokens;
    double t0 = now();
    for (int b = 0; b < B; b++) {
        cpt_gen_request r;
        memset(&r, 0, sizeof r);
        r.prompt = p + (size_t)b * prompt;
        r.n_prompt = prompt;
        r.n_samples = 1;
        r.sp = (cpt_sample_params){0.0f, 0, 1.0f, 0.0f};
        r.seed = (uint64_t)b;
        r.max_new_tokens = n_new;
        if (cpt_engine_submit(e, &r, &err) < 0) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return -1;
        }
    }
    int first = 1;
    while (!cpt_engine_idle(e)) {
        if (cpt_engine_step(e, &err) < 0) {
            fprintf(stderr, "step: %s\n", err.msg);
            return -1;
        }
        if (first) {
            *t_first = now() - t0;
            *tok_first = cpt_engine_get_stats(e)->generated_tokens - gen0;
            first = 0;
        }
    }
    *t_total = now() - t0;
    *tok_total = cpt_engine_get_stats(e)->generated_tokens - gen0;
    cpt_gen_result res;
    while (cpt_engine_take(e, &res)) cpt_gen_result_free(&res);
    free(p);
    return 0;
}

int main(int argc, char **argv) {
    const char *shapes = "0.5b,1.5b", *batches = "1,64,256";
    int prompt = 256, n_new = 512, no_graphs = 0;
    double bw = 4.3e12;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--new") && i + 1 < argc) n_new = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bw") && i + 1 < argc) bw = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-graphs")) no_graphs = 1;
        else if (!strcmp(argv[i], "--defaults")) continue;
        else {
            fprintf(stderr, "usage: decode_bench [--shapes 0.5b,1.5b] [--batches 1,64,256] [--prompt 256] [--new 512] "
                            "[--no-graphs] [--defaults] [--bw 4.3e12]\n");
            return 2;
        }
    }
    int bl[16], nb = 0, maxb = 1;
    for (const char *s = batches; *s && nb < 16;) {
        bl[nb] = atoi(s);
        if (bl[nb] > maxb) maxb = bl[nb];
        nb++;
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    char sh[64];
    snprintf(sh, sizeof sh, "%s", shapes);
    for (char *name = strtok(sh, ","); name; name = strtok(NULL, ",")) {
        cpt_model_config c = shape(name);
        cpt_err err = {0};
        double t0 = now();
        cpt_model *m = cpt_model_new_cuda_random(&c, 0, 42, 0.02f, &err);
        cpt_engine_opts o = {0};
        o.slots = maxb;
        o.max_len = prompt + n_new;
        cpt_decoder_tuning t = {.no_graphs = no_graphs};
        cpt_engine *e = m ? cpt_engine_new_tuned(m, &o, &t, &err) : NULL;
        if (!e) {
            fprintf(stderr, "engine: %s\n", err.msg);
            return 1;
        }
        cpt_decoder *dc = cpt_engine_decoder(e);
        printf("shape %s: engine with %d slots ready in %.1f s (KV pool %d blocks)\n", name, maxb, now() - t0,
               cpt_engine_kv_blocks(e));
        double W = weight_bytes(&c), kvp = kv_bytes_per_pos(&c);
        for (int k = 0; k < nb; k++) {
            int B = bl[k];
            double tf, tt;
            long nf, nt;
            if (run(e, B, prompt, n_new, c.vocab_size, 1000 + (uint64_t)B, &tf, &tt, &nf, &nt)) return 1; /* warm */
            if (run(e, B, prompt, n_new, c.vocab_size, 2000 + (uint64_t)B, &tf, &tt, &nf, &nt)) return 1;
            double dec = (nt - nf) / (tt - tf), e2e = nt / tt;
            /* the device's share of a step: the last step's graph replayed (no host work between) */
            double gpu_s = no_graphs ? -1.0 : cpt_decoder_replay_s(dc, 50, &err);
            /* the decode steps read contexts prompt+1 .. prompt+n_new-1: mean prompt + n_new / 2 */
            double step_bytes = W + B * kvp * (prompt + n_new / 2.0);
            double roof = B * bw / step_bytes;
            /* the engine options of earlier binaries, at the product's values (see the top) */
            const int gemv = 4, attn_v2 = 4, fused = 4, pdl = 1, persistent = 0, step_forwards = 0, split_few = 0,
                      skip = 0, stage_kb = 0, ring_blocks = 0;
            printf("RESULT shape=%s batch=%d prompt=%d new=%d graphs=%d gemv=%d attn_v2=%d fused=%d pdl=%d prefill_s=%.4f decode_tok_s=%.1f "
                   "e2e_tok_s=%.1f step_ms=%.3f roofline_tok_s=%.1f roofline_pct=%.1f graphs_captured=%d gpu_step_ms=%.3f "
                   "persistent=%d step_kernel_forwards=%d split_few=%d skip=%d stage_kb=%d ring_blocks=%d\n",
                   name, B, prompt, n_new, !no_graphs, gemv, attn_v2, fused, pdl, tf, dec, e2e, 1000.0 * B / dec, roof,
                   100.0 * dec / roof, cpt_decoder_graphs(dc), 1000.0 * gpu_s, persistent, step_forwards, split_few,
                   skip, stage_kb, ring_blocks);
            fflush(stdout);
        }
        cpt_engine_free(e);
        cpt_model_free(m);
    }
    return 0;
}
