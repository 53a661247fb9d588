/* The KL default of online runs (trainer/online_defaults.h): with algo.kl_beta at its default -1, 0.001 for GRPO
 * proper, 0 for Dr. GRPO, GSPO, DAPO-style runs (any of dynamic sampling, clip-higher, overlong shaping), ppo and
 * opd; a value of 0 or more kept. A config dumped and loaded again (what `cpt run` hands the trainer) keeps the
 * default. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "tests/check.h"
#include "trainer/online_defaults.h"

static double beta_of(const char *a, const char *b) {
    char *ov[2] = {(char *)a, (char *)b};
    cpt_err err;
    cpt_config *cfg = cpt_config_load(NULL, b ? 2 : 1, ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return NAN;
    double v = cpt_online_kl_beta(cfg);
    cpt_config_free(cfg);
    return v;
}

int main(void) {
    static const struct {
        const char *a, *b;
        double want;
    } cases[] = {
        {"algo.type=grpo", NULL, CPT_ONLINE_GRPO_KL_BETA},
        {"algo.type=grpo", "algo.kl_estimator=k3", 0.001},
        {"algo.type=grpo", "algo.kl_beta=0", 0},
        {"algo.type=grpo", "algo.kl_beta=-1", 0.001},
        {"algo.type=grpo", "algo.kl_beta=0.04", 0.04},
        {"algo.type=grpo", "algo.variant=dr_grpo", 0},
        {"algo.type=grpo", "algo.variant=gspo", 0},
        {"algo.type=grpo", "algo.dynamic_sampling=true", 0},
        {"algo.type=grpo", "algo.clip_eps_high=0.28", 0},
        {"algo.type=grpo", "algo.overlong_buffer_len=64", 0},
        {"algo.type=ppo", NULL, 0},
        {"algo.type=ppo", "algo.kl_beta=0.01", 0.01},
        {"algo.type=opd", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = beta_of(cases[i].a, cases[i].b);
        CHECK_MSG(got == cases[i].want, "%s %s: kl_beta %g, expected %g", cases[i].a, cases[i].b ? cases[i].b : "",
                  got, cases[i].want);
    }
    /* the resolved config `cpt run` writes to RUN_DIR/config.toml sets every key */
    cpt_err err;
    char *ov[1] = {"algo.type=grpo"};
    cpt_config *cfg = cpt_config_load(NULL, 1, ov, &err);
    char *text = cfg ? cpt_config_dump(cfg) : NULL;
    char path[] = "/tmp/cpt-test-online-defaults-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && text && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    if (fd >= 0) close(fd);
    cpt_config *again = cpt_config_load(path, 0, NULL, &err);
    unlink(path);
    CHECK_MSG(again != NULL, "%s", err.msg);
    if (again) CHECK(cpt_online_kl_beta(again) == CPT_ONLINE_GRPO_KL_BETA);
    cpt_config_free(again);
    free(text);
    cpt_config_free(cfg);
    return check_summary("test_online_defaults");
}
