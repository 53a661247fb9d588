#include "rollout/gen_engine.h"

#include <string.h>

static int no_engine(cpt_err *err) { return cpt_errf(err, "generation engine: none created"); }

int64_t cpt_gen_engine_submit(const cpt_gen_engine *g, const cpt_gen_request *r, cpt_err *err) {
    if (g->gpu) return cpt_cuda_engine_submit(g->gpu, r, err);
    return g->cpu ? cpt_engine_submit(g->cpu, r, err) : no_engine(err);
}
int cpt_gen_engine_step(const cpt_gen_engine *g, cpt_err *err) {
    if (g->gpu) return cpt_cuda_engine_step(g->gpu, err);
    return g->cpu ? cpt_engine_step(g->cpu, err) : no_engine(err);
}
int cpt_gen_engine_take(const cpt_gen_engine *g, cpt_gen_result *out) {
    if (g->gpu) return cpt_cuda_engine_take(g->gpu, out);
    return g->cpu ? cpt_engine_take(g->cpu, out) : 0;
}
int cpt_gen_engine_idle(const cpt_gen_engine *g) {
    if (g->gpu) return cpt_cuda_engine_idle(g->gpu);
    return g->cpu ? cpt_engine_idle(g->cpu) : 1;
}
int cpt_gen_engine_pending(const cpt_gen_engine *g) {
    if (g->gpu) return cpt_cuda_engine_pending(g->gpu);
    return g->cpu ? cpt_engine_pending(g->cpu) : 0;
}
int cpt_gen_engine_waiting(const cpt_gen_engine *g) {
    if (g->gpu) return cpt_cuda_engine_waiting(g->gpu);
    return g->cpu ? cpt_engine_waiting(g->cpu) : 0;
}
int cpt_gen_engine_active(const cpt_gen_engine *g) {
    if (g->gpu) return cpt_cuda_engine_active(g->gpu);
    return g->cpu ? cpt_engine_active(g->cpu) : 0;
}
int cpt_gen_engine_slots(const cpt_gen_engine *g) {
    if (g->gpu) return cpt_cuda_engine_slots(g->gpu);
    return g->cpu ? cpt_engine_slots(g->cpu) : 0;
}
const cpt_engine_stats *cpt_gen_engine_stats(const cpt_gen_engine *g) {
    static const cpt_engine_stats none;
    if (g->gpu) return cpt_cuda_engine_get_stats(g->gpu);
    return g->cpu ? cpt_engine_get_stats(g->cpu) : &none;
}

int cpt_gen_engine_generate(const cpt_gen_engine *g, const cpt_gen_request *reqs, int n, cpt_gen_result *results,
                            cpt_err *err) {
    int64_t first = -1;
    for (int i = 0; i < n; i++) {
        int64_t id = cpt_gen_engine_submit(g, &reqs[i], err);
        if (id < 0) return -1;
        if (i == 0) first = id;
        memset(&results[i], 0, sizeof results[i]);
    }
    int got = 0;
    while (got < n) {
        if (cpt_gen_engine_idle(g) && !cpt_gen_engine_pending(g)) return cpt_errf(err, "engine: requests lost");
        if (cpt_gen_engine_step(g, err) < 0) return -1;
        cpt_gen_result r;
        while (cpt_gen_engine_take(g, &r)) {
            int64_t k = r.id - first;
            if (k < 0 || k >= n) {
                cpt_gen_result_free(&r); /* a request submitted before this call: not ours to return */
                continue;
            }
            results[k] = r;
            got++;
        }
    }
    return 0;
}

void cpt_gen_engine_free(cpt_gen_engine *g) {
    cpt_engine_free(g->cpu);
    cpt_cuda_engine_free(g->gpu);
    memset(g, 0, sizeof *g);
}
