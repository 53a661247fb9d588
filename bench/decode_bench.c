/* GPU decode throughput of the engine (rollout/engine.h) on the CUDA decoder (model/cuda_decoder.c), Qwen2.5-shaped
 * random models.
 *
 *   decode_bench [--shapes 0.5b,1.5b] [--batches 1,64,256] [--prompt 256] [--new 512] [--no-graphs] [--defaults]
 *                [--bw 4.3e12] [--cpu] [--grpo P,G [--mean-new M] [--slots S]]
 *
 * Shapes: 0.5b, 1.5b, 3b (Qwen2.5-3B: hidden 2048, 36 layers, 16/2 heads, intermediate 11008, tied), 7b (Qwen2.5-7B:
 * hidden 3584, 28 layers, 28/4 heads, intermediate 18944, untied, vocabulary 152064), and tiny (hidden 64, 2 layers,
 * vocabulary 1024: the --cpu smoke that CI runs, tests/e2e/test_decode_bench_cpu.sh).
 * --cpu: the model and engine on the CPU decoder (fp32), no roofline figure (it is the GPU's HBM).
 *
 * --grpo P,G: the rollout shape of GRPO instead of the batches: P prompts of --prompt random tokens, G samples each,
 * temperature 1, at most --new new tokens, in an engine of S slots (default min(P x G, 256)) that refills a finished
 * sample's slot at once. Random weights never choose to stop, so the length spread comes from stop ids: about
 * V / M of the vocabulary's ids (M = --mean-new, default --new / 4) stop a sample, which on near-uniform logits ends
 * completions geometrically with mean about M, and some run to --new. Timed twice after an untimed run: shared (P
 * requests of G samples: each prompt prefilled once, its KV blocks shared copy-on-write) and unshared (P x G requests
 * of one sample: every sample prefills its prompt). One line "GRPO ..." each: samples/s, completion tok/s, prefills,
 * prefill tokens, mean completion length, the share stopped early, slot occupancy, preemptions. It fails (exit 1)
 * when a count is off: shared prefills P, unshared P x G, P x G samples back, every KV block free at the end.
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

/* A Qwen2.5 shape by name; 0 when the name is not one. */
static int shape(const char *name, cpt_model_config *out) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.vocab_size = 151936;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 1000000.0f, c.qkv_bias = 1, c.tie_word_embeddings = 1;
    c.max_position_embeddings = 32768, c.bos_token_id = -1, c.eos_token_id = -1;
    if (!strcmp(name, "0.5b")) {
        c.hidden_size = 896, c.num_layers = 24, c.num_heads = 14, c.num_kv_heads = 2, c.intermediate_size = 4864;
    } else if (!strcmp(name, "1.5b")) {
        c.hidden_size = 1536, c.num_layers = 28, c.num_heads = 12, c.num_kv_heads = 2, c.intermediate_size = 8960;
    } else if (!strcmp(name, "3b")) {
        c.hidden_size = 2048, c.num_layers = 36, c.num_heads = 16, c.num_kv_heads = 2, c.intermediate_size = 11008;
    } else if (!strcmp(name, "7b")) {
        c.hidden_size = 3584, c.num_layers = 28, c.num_heads = 28, c.num_kv_heads = 4, c.intermediate_size = 18944;
        c.vocab_size = 152064, c.tie_word_embeddings = 0;
    } else if (!strcmp(name, "tiny")) {
        c.hidden_size = 64, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2, c.intermediate_size = 128;
        c.vocab_size = 1024, c.max_position_embeddings = 4096;
    } else {
        return 0;
    }
    c.head_dim = c.hidden_size / c.num_heads;
    *out = c;
    return 1;
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

typedef struct grpo_out {
    double wall_s;
    long tokens, prefills, shared_prefills, prefill_tokens, preemptions, recomputed, slot_steps, steps;
    int samples, stopped;
} grpo_out;

/* One GRPO-shaped generation: P prompts x G samples, shared (P requests of G) or not (P x G requests of one). */
static int run_grpo(cpt_engine *e, int P, int G, int shared, int prompt, int n_new, const int32_t *stops, int n_stops,
                    int V, uint64_t seed, grpo_out *o) {
    cpt_rng rng;
    cpt_rng_seed(&rng, seed, 0);
    int32_t *p = malloc(sizeof(int32_t) * (size_t)prompt * P);
    if (!p) return -1;
    for (long i = 0; i < (long)prompt * P; i++) p[i] = (int32_t)cpt_rng_below(&rng, (uint64_t)V);
    cpt_err err = {0};
    const cpt_engine_stats s0 = *cpt_engine_get_stats(e);
    memset(o, 0, sizeof *o);
    double t0 = now();
    for (int r = 0; r < (shared ? P : P * G); r++) {
        cpt_gen_request q;
        memset(&q, 0, sizeof q);
        q.prompt = p + (size_t)(shared ? r : r / G) * prompt;
        q.n_prompt = prompt;
        q.n_samples = shared ? G : 1;
        q.sp = (cpt_sample_params){1.0f, 0, 1.0f, 0.0f};
        q.seed = seed + (uint64_t)r;
        q.max_new_tokens = n_new;
        q.stop_ids = stops, q.n_stop_ids = n_stops;
        if (cpt_engine_submit(e, &q, &err) < 0) {
            fprintf(stderr, "submit: %s\n", err.msg);
            free(p);
            return -1;
        }
    }
    cpt_gen_result res;
    while (!cpt_engine_idle(e)) {
        if (cpt_engine_step(e, &err) < 0) {
            fprintf(stderr, "step: %s\n", err.msg);
            free(p);
            return -1;
        }
        while (cpt_engine_take(e, &res)) { /* as the rollout worker does: finished groups leave at once */
            for (int k = 0; k < res.n_samples; k++) {
                o->samples++;
                o->stopped += res.samples[k].finish == CPT_FINISH_STOP;
            }
            cpt_gen_result_free(&res);
        }
    }
    o->wall_s = now() - t0; /* every finished request was taken after the step that finished it */
    const cpt_engine_stats *s1 = cpt_engine_get_stats(e);
    o->tokens = s1->generated_tokens - s0.generated_tokens;
    o->prefills = s1->prefills - s0.prefills;
    o->shared_prefills = s1->shared_prefills - s0.shared_prefills;
    o->prefill_tokens = s1->prefill_tokens - s0.prefill_tokens;
    o->preemptions = s1->preemptions - s0.preemptions;
    o->recomputed = s1->recomputed_tokens - s0.recomputed_tokens;
    o->slot_steps = s1->slot_steps - s0.slot_steps;
    o->steps = s1->decode_steps - s0.decode_steps;
    free(p);
    return 0;
}

/* The GRPO shape on one engine: an untimed run, then shared and unshared timed; 1 when a count is off. */
static int bench_grpo(cpt_engine *e, const char *name, int V, int P, int G, int S, int prompt, int n_new,
                      int mean_new) {
    int n_stops = mean_new > 0 ? V / mean_new : 0;
    if (n_stops < 1) n_stops = 1;
    if (n_stops > V / 2) n_stops = V / 2;
    int32_t *stops = malloc(sizeof(int32_t) * (size_t)n_stops);
    if (!stops) return 1;
    for (int i = 0; i < n_stops; i++) stops[i] = (int32_t)((long)i * V / n_stops); /* spread over the vocabulary */
    grpo_out o;
    int bad = run_grpo(e, P, G, 1, prompt, n_new, stops, n_stops, V, 7, &o) != 0; /* warm: graphs, heuristics */
    double rate[2] = {0, 0};
    for (int shared = 1; shared >= 0 && !bad; shared--) {
        if (run_grpo(e, P, G, shared, prompt, n_new, stops, n_stops, V, 1000, &o)) {
            bad = 1;
            break;
        }
        rate[shared] = o.samples / o.wall_s;
        printf("GRPO shape=%s prompts=%d group=%d slots=%d prompt=%d max_new=%d mean_new_target=%d mode=%s "
               "wall_s=%.3f samples_s=%.2f tok_s=%.1f samples=%d mean_len=%.1f stopped_frac=%.3f prefills=%ld "
               "shared_prefills=%ld prefill_tokens=%ld occupancy=%.3f preemptions=%ld recomputed_tokens=%ld "
               "kv_free=%d/%d\n",
               name, P, G, S, prompt, n_new, mean_new, shared ? "shared" : "unshared", o.wall_s, o.samples / o.wall_s,
               o.tokens / o.wall_s, o.samples, o.samples ? (double)o.tokens / o.samples : 0.0,
               o.samples ? (double)o.stopped / o.samples : 0.0, o.prefills, o.shared_prefills, o.prefill_tokens,
               o.steps ? (double)o.slot_steps / ((double)o.steps * S) : 0.0, o.preemptions, o.recomputed,
               cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));
        fflush(stdout);
        long want = shared ? P : (long)P * G;
        if (o.samples != P * G || o.prefills != want || cpt_engine_kv_free_blocks(e) != cpt_engine_kv_blocks(e)) {
            fprintf(stderr, "decode_bench: GRPO %s: %d samples (want %d), %ld prefills (want %ld), %d of %d KV blocks "
                            "free\n", shared ? "shared" : "unshared", o.samples, P * G, o.prefills, want,
                    cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));
            bad = 1;
        }
    }
    if (!bad) printf("GRPO shape=%s shared/unshared samples/s %.2fx\n", name, rate[1] / rate[0]);
    free(stops);
    return bad;
}

int main(int argc, char **argv) {
    const char *shapes = "0.5b,1.5b", *batches = "1,64,256";
    int prompt = 256, n_new = 512, no_graphs = 0, on_cpu = 0, gP = 0, gG = 0, slots = 0, mean_new = 0;
    double bw = 4.3e12;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--new") && i + 1 < argc) n_new = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bw") && i + 1 < argc) bw = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-graphs")) no_graphs = 1;
        else if (!strcmp(argv[i], "--cpu")) on_cpu = 1;
        else if (!strcmp(argv[i], "--grpo") && i + 1 < argc && sscanf(argv[i + 1], "%d,%d", &gP, &gG) == 2 && gP > 0 &&
                 gG > 0)
            i++;
        else if (!strcmp(argv[i], "--mean-new") && i + 1 < argc) mean_new = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--slots") && i + 1 < argc) slots = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--defaults")) continue;
        else {
            fprintf(stderr, "usage: decode_bench [--shapes 0.5b,1.5b,3b,7b,tiny] [--batches 1,64,256] [--prompt 256] "
                            "[--new 512] [--no-graphs] [--defaults] [--bw 4.3e12] [--cpu] [--grpo P,G [--mean-new M] "
                            "[--slots S]]\n");
            return 2;
        }
    }
    if (prompt < 1 || n_new < 1 || mean_new < 0 || slots < 0) {
        fprintf(stderr, "decode_bench: --prompt and --new need at least 1, --mean-new and --slots at least 0\n");
        return 2;
    }
    if (gP && !mean_new) mean_new = n_new / 4 > 0 ? n_new / 4 : 1;
    if (gP && !slots) slots = gP * gG < 256 ? gP * gG : 256;
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
        cpt_model_config c;
        if (!shape(name, &c)) {
            fprintf(stderr, "decode_bench: unknown shape '%s' (0.5b, 1.5b, 3b, 7b, tiny)\n", name);
            return 2;
        }
        cpt_err err = {0};
        double t0 = now();
        cpt_model *m = on_cpu ? cpt_model_new_random(&c, 42, &err) : cpt_model_new_cuda_random(&c, 0, 42, 0.02f, &err);
        cpt_engine_opts o = {0};
        o.slots = gP ? slots : maxb;
        o.max_len = prompt + n_new;
        cpt_decoder_tuning t = {.no_graphs = no_graphs};
        cpt_engine *e = m ? cpt_engine_new_tuned(m, &o, on_cpu ? NULL : &t, &err) : NULL;
        if (!e) {
            fprintf(stderr, "engine: %s\n", err.msg);
            cpt_model_free(m);
            return 1;
        }
        cpt_decoder *dc = cpt_engine_decoder(e);
        printf("shape %s: engine with %d slots on the %s ready in %.1f s (KV pool %d blocks)\n", name, o.slots,
               on_cpu ? "CPU" : "GPU", now() - t0, cpt_engine_kv_blocks(e));
        if (gP) {
            int bad = bench_grpo(e, name, c.vocab_size, gP, gG, o.slots, prompt, n_new, mean_new);
            cpt_engine_free(e);
            cpt_model_free(m);
            if (bad) return 1;
            continue;
        }
        double W = weight_bytes(&c), kvp = kv_bytes_per_pos(&c);
        for (int k = 0; k < nb; k++) {
            int B = bl[k];
            double tf, tt;
            long nf, nt;
            if (run(e, B, prompt, n_new, c.vocab_size, 1000 + (uint64_t)B, &tf, &tt, &nf, &nt)) return 1; /* warm */
            if (run(e, B, prompt, n_new, c.vocab_size, 2000 + (uint64_t)B, &tf, &tt, &nf, &nt)) return 1;
            double dec = (nt - nf) / (tt - tf), e2e = nt / tt;
            /* the device's share of a step: the last step's graph replayed (no host work between) */
            double gpu_s = no_graphs || on_cpu ? -1.0 : cpt_decoder_replay_s(dc, 50, &err);
            /* the decode steps read contexts prompt+1 .. prompt+n_new-1: mean prompt + n_new / 2 */
            double step_bytes = W + B * kvp * (prompt + n_new / 2.0);
            double roof = on_cpu ? 0.0 : B * bw / step_bytes; /* the GPU's HBM: none on the CPU */
            /* the engine options of earlier binaries, at the product's values (see the top) */
            const int gemv = 4, attn_v2 = 4, fused = 4, pdl = 1, persistent = 0, step_forwards = 0, split_few = 0,
                      skip = 0, stage_kb = 0, ring_blocks = 0;
            printf("RESULT shape=%s batch=%d prompt=%d new=%d graphs=%d gemv=%d attn_v2=%d fused=%d pdl=%d prefill_s=%.4f decode_tok_s=%.1f "
                   "e2e_tok_s=%.1f step_ms=%.3f roofline_tok_s=%.1f roofline_pct=%.1f graphs_captured=%d gpu_step_ms=%.3f "
                   "persistent=%d step_kernel_forwards=%d split_few=%d skip=%d stage_kb=%d ring_blocks=%d\n",
                   name, B, prompt, n_new, !no_graphs && !on_cpu, gemv, attn_v2, fused, pdl, tf, dec, e2e,
                   1000.0 * B / dec, roof, roof > 0 ? 100.0 * dec / roof : 0.0, cpt_decoder_graphs(dc), 1000.0 * gpu_s,
                   persistent, step_forwards, split_few, skip, stage_kb, ring_blocks);
            fflush(stdout);
        }
        cpt_engine_free(e);
        cpt_model_free(m);
    }
    return 0;
}
