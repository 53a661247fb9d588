/* One interface over the two generation engines, the CPU one (rollout/engine.h) and the GPU one
 * (rollout/cuda_engine.h), which share their request / step / take contract: what the rollout worker and
 * `cpt generate` call, and the one generate loop both engines' *_generate use. At most one of cpu, gpu is set;
 * with neither, the queries answer "nothing" and submit / step fail. */
#ifndef CPT_ROLLOUT_GEN_ENGINE_H
#define CPT_ROLLOUT_GEN_ENGINE_H

#include "rollout/cuda_engine.h"
#include "rollout/engine.h"

typedef struct cpt_gen_engine {
    cpt_engine *cpu;
    cpt_cuda_engine *gpu;
} cpt_gen_engine;

int64_t cpt_gen_engine_submit(const cpt_gen_engine *g, const cpt_gen_request *r, cpt_err *err);
int cpt_gen_engine_step(const cpt_gen_engine *g, cpt_err *err);
int cpt_gen_engine_take(const cpt_gen_engine *g, cpt_gen_result *out);
int cpt_gen_engine_idle(const cpt_gen_engine *g);
int cpt_gen_engine_pending(const cpt_gen_engine *g);
int cpt_gen_engine_waiting(const cpt_gen_engine *g);
int cpt_gen_engine_active(const cpt_gen_engine *g);
int cpt_gen_engine_slots(const cpt_gen_engine *g);
const cpt_engine_stats *cpt_gen_engine_stats(const cpt_gen_engine *g); /* zeros with no engine */
/* Submits the n requests, steps until all are done and returns their results in order (results[i] for reqs[i]);
 * results of requests submitted before this call are freed, not returned. */
int cpt_gen_engine_generate(const cpt_gen_engine *g, const cpt_gen_request *reqs, int n, cpt_gen_result *results,
                            cpt_err *err);
void cpt_gen_engine_free(cpt_gen_engine *g); /* frees the engine it holds and clears g */

#endif
