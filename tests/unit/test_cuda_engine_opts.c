/* cpt_cuda_engine_new refuses options out of range with a message naming the option, before it touches a device:
 * so this runs on CI (CUDA built, no GPU) as well as on the GPU machine. Built without CUDA, every call fails with
 * "built without CUDA" instead. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rollout/cuda_engine.h"
#include "tests/tiny_model.h"

typedef struct bad_case {
    const char *what; /* the text the error must contain */
    cpt_cuda_engine_opts o;
} bad_case;

int main(void) {
    cpt_model *m = tiny_model_new(64, 1, 3);
    cpt_engine_opts base = {0};
    base.slots = 2;
    cpt_cuda_engine_opts ok = cpt_cuda_engine_defaults(base);
    bad_case cases[12];
    int n = 0;
    for (int k = 0; k < 12; k++) cases[k].o = ok;
    cases[n].what = "gemv_rows 9", cases[n++].o.gemv_rows = 9;
    cases[n].what = "attn_v2 5", cases[n++].o.attn_v2 = 5;
    cases[n].what = "attn_v2 -1", cases[n++].o.attn_v2 = -1;
    cases[n].what = "persistent 3", cases[n++].o.persistent = 3;
    cases[n].what = "persistent 1 needs fused", cases[n].o.persistent = 1, cases[n++].o.fused = 0;
    cases[n].what = "fused 5", cases[n++].o.fused = 5;
    cases[n].what = "ring_blocks 9", cases[n].o.fused = 4, cases[n++].o.ring_blocks = 9;
    cases[n].what = "stage_kb 228", cases[n].o.fused = 3, cases[n++].o.stage_kb = 228;
    cases[n].what = "persistent 2 needs fused = 1", cases[n].o.persistent = 2, cases[n++].o.fused = 2;
    cases[n].what = "split_few 70000", cases[n++].o.split_few = 70000;
    cases[n].what = "at most 1024 slots", cases[n++].o.base.slots = 2000;
#ifdef CPT_HAVE_CUDA
    const int built = 1;
#else
    const int built = 0;
#endif
    for (int k = 0; k < n; k++) {
        cpt_err err;
        cpt_err_clear(&err);
        cpt_cuda_engine *e = cpt_cuda_engine_new(m, &cases[k].o, &err);
        CHECK_MSG(e == NULL, "options with %s were accepted", cases[k].what);
        cpt_cuda_engine_free(e);
        const char *want = built ? cases[k].what : "built without CUDA";
        CHECK_MSG(strstr(err.msg, want) != NULL, "%s: the error does not say \"%s\": %s", cases[k].what, want,
                  err.msg);
        printf("%-20s -> %s\n", cases[k].what, err.msg);
    }
    cpt_model_free(m);
    return check_summary("test_cuda_engine_opts");
}
