#include "trainer/greedy.h"

#include <stdlib.h>
#include <string.h>

int cpt_greedy_generate(cpt_model *m, const int32_t *prompt, int n_prompt, int max_new, const int32_t *stop,
                        int n_stop, int32_t *out, cpt_err *err) {
    if (n_prompt < 1) return cpt_errf(err, "greedy: empty prompt");
    const int vocab = cpt_model_cfg(m)->vocab_size;
    int cap = n_prompt + max_new;
    int32_t *toks = malloc((size_t)cap * sizeof *toks), *targets = malloc((size_t)cap * sizeof *targets);
    float *logits = malloc((size_t)cap * (size_t)vocab * sizeof *logits);
    if (!toks || !targets || !logits) {
        free(toks); free(targets); free(logits);
        return cpt_errf(err, "greedy: out of memory");
    }
    memcpy(toks, prompt, (size_t)n_prompt * sizeof *toks);
    int n = n_prompt, gen = 0, rc = 0;
    while (gen < max_new) {
        for (int i = 0; i < n; i++) targets[i] = -1;
        int32_t seq_start[2] = {0, n};
        cpt_batch b = {.n_tokens = n, .n_seqs = 1, .tokens = toks, .seq_start = seq_start, .targets = targets};
        cpt_forward_out fo = {.logits = logits};
        if (cpt_model_forward(m, &b, &fo, 0, err)) { rc = -1; break; }
        const float *last = logits + (size_t)(n - 1) * (size_t)vocab;
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (last[v] > last[best]) best = v; /* ties: the lowest id, as torch.argmax */
        toks[n++] = best;
        out[gen++] = best;
        int stopped = 0;
        for (int s = 0; s < n_stop; s++) stopped |= stop[s] == best;
        if (stopped) break;
    }
    free(toks);
    free(targets);
    free(logits);
    return rc ? -1 : gen;
}
