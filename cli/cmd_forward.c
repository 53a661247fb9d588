/* cpt forward --model HF_DIR --input INPUT.safetensors --out OUT.safetensors [--grads] [--device cpu|cuda[:N]]
 *
 * INPUT holds input_ids (int32 or int64, B x T) and optionally attention_mask (B x T, 1 = real token; left or
 * right padding). OUT gets logits [B, T, V], logprobs [B, T-1] (of the next token), entropy [B, T], loss (scalar:
 * mean next-token cross entropy over real targets), values [B, T] when the model has a value head, and with
 * --grads grad.<HF name> of the loss for every parameter. Padding positions hold zeros. --device cuda runs the model
 * on GPU N (default 0) in bf16: the same outputs within bf16 tolerance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/safetensors.h"
#include "model/model.h"

static int usage(void) {
    fprintf(stderr, "usage: cpt forward --model HF_DIR --input INPUT.safetensors --out OUT.safetensors [--grads] "
                    "[--device cpu|cuda[:N]]\n");
    return 2;
}

/* Reads an integer B x T tensor into int32, checking the range. */
static int32_t *read_ids(const cpt_st_file *f, const char *path, const char *name, int *B, int *T, cpt_err *err) {
    const cpt_st_tensor *t = cpt_st_find(f, name);
    if (!t) {
        cpt_errf(err, "%s: no tensor \"%s\"", path, name);
        return NULL;
    }
    if (t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[0] * t->shape[1] > (1 << 26)) {
        cpt_errf(err, "%s: \"%s\" must be 2-d B x T with 1 <= B*T <= 2^26", path, name);
        return NULL;
    }
    if (t->dtype != CPT_DT_I32 && t->dtype != CPT_DT_I64) {
        cpt_errf(err, "%s: \"%s\" must be int32 or int64, not %s", path, name, cpt_dtype_name(t->dtype));
        return NULL;
    }
    size_t n = (size_t)(t->shape[0] * t->shape[1]);
    int32_t *out = malloc(n * sizeof(int32_t));
    if (!out) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (t->dtype == CPT_DT_I32) {
            int32_t x;
            memcpy(&x, (const char *)t->data + i * 4, 4);
            v = x;
        } else {
            memcpy(&v, (const char *)t->data + i * 8, 8);
        }
        if (v < -2147483647 || v > 2147483647) {
            free(out);
            cpt_errf(err, "%s: \"%s\" value %lld at %zu does not fit in int32", path, name, (long long)v, i);
            return NULL;
        }
        out[i] = (int32_t)v;
    }
    *B = (int)t->shape[0];
    *T = (int)t->shape[1];
    return out;
}

typedef struct fwd_job {
    const char *model_dir, *input, *out;
    int grads;
    int cuda_device; /* -1: cpu */
} fwd_job;

static int run(const fwd_job *job, cpt_err *err) {
    int rc = -1, B = 0, T = 0, mB = 0, mT = 0;
    cpt_model *m = NULL;
    int32_t *ids = NULL, *mask = NULL;
    cpt_packed pk = {0};
    float *logits = NULL, *lp = NULL, *ent = NULL, *val = NULL, *pad_lp = NULL, *pad_ent = NULL, *pad_val = NULL,
          *pad_logits = NULL, *dlp = NULL, loss = 0;
    cpt_st_writer *w = NULL;
    cpt_st_file *in = cpt_st_open(job->input, err);
    if (!in) goto done;
    ids = read_ids(in, job->input, "input_ids", &B, &T, err);
    if (!ids) goto done;
    if (T < 2) {
        cpt_errf(err, "%s: input_ids needs at least 2 tokens per row for next-token logprobs", job->input);
        goto done;
    }
    if (cpt_st_find(in, "attention_mask")) {
        mask = read_ids(in, job->input, "attention_mask", &mB, &mT, err);
        if (!mask) goto done;
        if (mB != B || mT != T) {
            cpt_errf(err, "%s: attention_mask is %d x %d but input_ids is %d x %d", job->input, mB, mT, B, T);
            goto done;
        }
    } else {
        mask = malloc(sizeof(int32_t) * (size_t)B * T);
        if (!mask) goto oom;
        for (int i = 0; i < B * T; i++) mask[i] = 1;
    }
    if (cpt_batch_from_padded(ids, mask, B, T, &pk, err)) {
        cpt_err_prefix(err, "%s: ", job->input);
        goto done;
    }
    m = cpt_model_load(job->model_dir, err);
    if (!m) goto done;
    if (job->cuda_device >= 0 && cpt_model_use_cuda(m, job->cuda_device, err)) goto done;
    int V = cpt_model_cfg(m)->vocab_size, N = pk.batch.n_tokens;
    logits = malloc(sizeof(float) * (size_t)N * V);
    lp = malloc(sizeof(float) * N);
    ent = malloc(sizeof(float) * N);
    pad_lp = malloc(sizeof(float) * (size_t)B * T);
    pad_ent = malloc(sizeof(float) * (size_t)B * T);
    pad_logits = calloc((size_t)B * T * V, sizeof(float));
    if (!logits || !lp || !ent || !pad_lp || !pad_ent || !pad_logits) goto oom;
    if (cpt_model_has_value_head(m)) {
        val = malloc(sizeof(float) * N);
        pad_val = malloc(sizeof(float) * (size_t)B * T);
        if (!val || !pad_val) goto oom;
    }
    cpt_forward_out out = {lp, ent, logits, val};
    if (cpt_model_forward(m, &pk.batch, &out, job->grads, err)) goto done;
    int count = 0;
    double total = 0;
    for (int i = 0; i < N; i++)
        if (pk.batch.targets[i] >= 0) total -= lp[i], count++;
    loss = count ? (float)(total / count) : 0.0f;
    if (job->grads) {
        dlp = malloc(sizeof(float) * N);
        if (!dlp) goto oom;
        for (int i = 0; i < N; i++) dlp[i] = pk.batch.targets[i] >= 0 && count ? -1.0f / count : 0.0f;
        cpt_model_zero_grad(m);
        if (cpt_model_backward(m, &pk.batch, dlp, NULL, NULL, err)) goto done;
        if (cpt_model_sync_to_host(m, err)) goto done; /* the gradients, from a GPU */
    }
    /* back to B x T; logprobs keep columns 0 .. T-2 of each row */
    cpt_packed_to_padded(&pk, lp, pad_lp, 0.0f);
    for (int b = 0; b < B; b++) memmove(pad_lp + (size_t)b * (T - 1), pad_lp + (size_t)b * T, sizeof(float) * (T - 1));
    cpt_packed_to_padded(&pk, ent, pad_ent, 0.0f);
    if (val) cpt_packed_to_padded(&pk, val, pad_val, 0.0f);
    for (int i = 0; i < N; i++) memcpy(pad_logits + (size_t)pk.src[i] * V, logits + (size_t)i * V, sizeof(float) * V);

    w = cpt_st_writer_new();
    if (!w) goto oom;
    int64_t s_logits[3] = {B, T, V}, s_lp[2] = {B, T - 1}, s_bt[2] = {B, T};
    if (cpt_st_writer_add(w, "logits", CPT_DT_F32, 3, s_logits, pad_logits, err) ||
        cpt_st_writer_add(w, "logprobs", CPT_DT_F32, 2, s_lp, pad_lp, err) ||
        cpt_st_writer_add(w, "entropy", CPT_DT_F32, 2, s_bt, pad_ent, err) ||
        cpt_st_writer_add(w, "loss", CPT_DT_F32, 0, NULL, &loss, err) ||
        (val && cpt_st_writer_add(w, "values", CPT_DT_F32, 2, s_bt, pad_val, err)))
        goto done;
    if (job->grads)
        for (size_t i = 0; i < cpt_model_num_params(m); i++) {
            cpt_param *p = cpt_model_param(m, i);
            char name[512];
            snprintf(name, sizeof name, "grad.%s", p->name);
            if (cpt_st_writer_add(w, name, CPT_DT_F32, p->ndim, p->shape, p->grad, err)) goto done;
        }
    rc = cpt_st_writer_finish(w, job->out, err);
    w = NULL;
    goto done;
oom:
    cpt_errf(err, "out of memory");
done:
    if (w) cpt_st_writer_free(w);
    cpt_st_close(in);
    cpt_packed_free(&pk);
    cpt_model_free(m);
    free(ids), free(mask), free(logits), free(lp), free(ent), free(val), free(pad_lp), free(pad_ent), free(pad_val);
    free(pad_logits), free(dlp);
    return rc;
}

int cmd_forward(int argc, char **argv) {
    fwd_job job = {NULL, NULL, NULL, 0, -1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--grads")) {
            job.grads = 1;
        } else if (i + 1 < argc && !strcmp(argv[i], "--model")) {
            job.model_dir = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--input")) {
            job.input = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--out")) {
            job.out = argv[++i];
        } else if (i + 1 < argc && !strcmp(argv[i], "--device")) {
            const char *d = argv[++i];
            if (!strcmp(d, "cpu")) {
                job.cuda_device = -1;
            } else if (!strcmp(d, "cuda")) {
                job.cuda_device = 0;
            } else if (!strncmp(d, "cuda:", 5) && d[5] >= '0' && d[5] <= '9' && strspn(d + 5, "0123456789") == strlen(d + 5)) {
                job.cuda_device = atoi(d + 5);
            } else {
                fprintf(stderr, "cpt forward: --device must be cpu, cuda or cuda:N (got '%s')\n", d);
                return usage();
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "cpt forward: unknown or incomplete argument '%s'\n", argv[i]);
            return usage();
        }
    }
    if (!job.model_dir || !job.input || !job.out) return usage();
    cpt_err err;
    cpt_err_clear(&err);
    if (run(&job, &err)) {
        fprintf(stderr, "cpt forward: %s\n", err.msg);
        return 1;
    }
    return 0;
}
