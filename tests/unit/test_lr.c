/* LR schedule: warmup, then cosine / linear / constant decay to min_lr_ratio; values at chosen steps against the
 * formulas worked by hand. */
#include <math.h>

#include "tests/check.h"
#include "trainer/optim.h"

int main(void) {
    cpt_lr_schedule s = {.kind = CPT_LR_COSINE, .base_lr = 1e-3, .warmup_steps = 4, .total_steps = 14,
                         .min_lr_ratio = 0.1};
    /* warmup: (s+1)/4 */
    CHECK_NEAR(cpt_lr_at(&s, 0), 0.25e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 1), 0.50e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 3), 1.00e-3, 1e-12);
    /* cosine over 10 steps after warmup: step 4 is the peak, step 9 halfway: 0.1 + 0.9 * 0.5 = 0.55 */
    CHECK_NEAR(cpt_lr_at(&s, 4), 1e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 9), 0.55e-3, 1e-12);
    /* step 6: p = 0.2, 0.1 + 0.9 * (1 + cos(0.2 pi)) / 2 */
    CHECK_NEAR(cpt_lr_at(&s, 6), 1e-3 * (0.1 + 0.45 * (1 + cos(0.2 * M_PI))), 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 14), 0.1e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 100), 0.1e-3, 1e-12); /* clamped past the end */

    s.kind = CPT_LR_LINEAR;
    CHECK_NEAR(cpt_lr_at(&s, 9), 0.55e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 6), 1e-3 * (0.1 + 0.9 * 0.8), 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 14), 0.1e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 2), 0.75e-3, 1e-12);

    s.kind = CPT_LR_CONSTANT;
    CHECK_NEAR(cpt_lr_at(&s, 0), 0.25e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 9), 1e-3, 1e-12);
    CHECK_NEAR(cpt_lr_at(&s, 1000), 1e-3, 1e-12);

    /* no warmup, min ratio 0: cosine reaches 0 at total */
    cpt_lr_schedule z = {.kind = CPT_LR_COSINE, .base_lr = 2.0, .warmup_steps = 0, .total_steps = 4, .min_lr_ratio = 0};
    CHECK_NEAR(cpt_lr_at(&z, 0), 2.0, 1e-12);
    CHECK_NEAR(cpt_lr_at(&z, 2), 1.0, 1e-12);
    CHECK_NEAR(cpt_lr_at(&z, 4), 0.0, 1e-12);

    cpt_lr_kind k;
    cpt_err err;
    CHECK(cpt_lr_kind_parse("linear", &k, &err) == 0 && k == CPT_LR_LINEAR);
    CHECK(cpt_lr_kind_parse("cosine", &k, &err) == 0 && k == CPT_LR_COSINE);
    CHECK(cpt_lr_kind_parse("exp", &k, &err) == -1);
    CHECK(strstr(err.msg, "exp") != NULL);
    return check_summary("test_lr");
}
