/* algo.* keys (trainer/objective_keys.def) to cpt_objective_config, with the checks on combinations. Uses a key
 * table of its own (algo.type + objective_keys.def), so it holds whether or not the main table includes the file. */
#include <string.h>

#include "core/config.h"
#include "tests/check.h"
#include "trainer/objective.h"

#define CPT_KEY_MODULE "trainer"
static const cpt_key_decl keys[] = {
    CPT_KEY_STR(algo.type, "sft", "sft|dpo|grpo|ppo|opd", "Training method")
#include "trainer/objective_keys.def"
};
static const size_t n_keys = sizeof keys / sizeof keys[0];

static cpt_config *load(const char *text, cpt_err *err) {
    return cpt_config_load_table(keys, n_keys, text, strlen(text), "test.toml", 0, NULL, err);
}

int main(void) {
    cpt_err err;
    CHECK_MSG(cpt_config_check_keys(keys, n_keys, &err) == 0, "%s", err.msg);

    /* defaults of the table equal cpt_objective_defaults */
    cpt_config *cfg = load("[algo]\ntype = \"grpo\"\n", &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    cpt_objective_config oc, def;
    if (cfg) {
        CHECK(cpt_objective_from_config(cfg, &oc, &err) == 0);
        cpt_objective_defaults(&def, CPT_OBJ_GRPO);
        CHECK(memcmp(&oc, &def, sizeof oc) == 0);
        cpt_config_free(cfg);
    }

    cfg = load("[algo]\ntype = \"grpo\"\nvariant = \"dr_grpo\"\nloss_agg = \"token-mean\"\nloss_agg_norm = 4096\n"
               "clip_eps_high = 0.28\ndual_clip_c = 3\nkl_beta = 0.01\nkl_estimator = \"k2\"\ntis_cap = 5\n",
               &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (cfg) {
        CHECK(cpt_objective_from_config(cfg, &oc, &err) == 0);
        CHECK_EQ_INT(oc.type, CPT_OBJ_GRPO);
        CHECK_EQ_INT(oc.variant, CPT_GRPO_DR);
        CHECK_EQ_INT(oc.loss_agg, CPT_AGG_SEQ_MEAN_TOKEN_SUM_NORM); /* dr_grpo forces it */
        CHECK_EQ_INT(oc.adv_std_norm, 0);
        CHECK_NEAR(oc.loss_agg_norm, 4096, 0);
        CHECK_NEAR(oc.clip_eps_high, 0.28, 0);
        CHECK_NEAR(oc.dual_clip_c, 3, 0);
        CHECK_EQ_INT(oc.kl_estimator, CPT_KL_K2);
        CHECK_NEAR(oc.tis_cap, 5, 0);
        CHECK(cpt_objective_needs_ref(&oc));
        cpt_config_free(cfg);
    }

    cfg = load("[algo]\ntype = \"grpo\"\ndual_clip_c = 0.5\n", &err);
    if (cfg) {
        CHECK(cpt_objective_from_config(cfg, &oc, &err) == -1);
        CHECK(strstr(err.msg, "algo.dual_clip_c") != NULL);
        cpt_config_free(cfg);
    }
    cfg = load("[algo]\ntype = \"grpo\"\noverlong_max_len = 100\noverlong_buffer_len = 200\n", &err);
    if (cfg) {
        CHECK(cpt_objective_from_config(cfg, &oc, &err) == -1);
        CHECK(strstr(err.msg, "overlong_buffer_len") != NULL);
        cpt_config_free(cfg);
    }
    cfg = load("[algo]\ntype = \"dpo\"\ndpo_loss = \"ipo\"\ndpo_beta = 0.5\n", &err);
    if (cfg) {
        CHECK(cpt_objective_from_config(cfg, &oc, &err) == 0);
        CHECK_EQ_INT(oc.type, CPT_OBJ_DPO);
        CHECK_EQ_INT(oc.dpo_ipo, 1);
        CHECK_NEAR(oc.dpo_beta, 0.5, 0);
        cpt_config_free(cfg);
    }
    /* a bad choice is refused by the table with the choices named */
    cfg = load("[algo]\nloss_agg = \"mean\"\n", &err);
    CHECK(cfg == NULL);
    if (cfg) cpt_config_free(cfg);

    /* the metrics view names what applies */
    cpt_objective_defaults(&oc, CPT_OBJ_PPO);
    cpt_obj_metrics m;
    memset(&m, 0, sizeof m);
    m.clip_frac = 0.25;
    m.value_loss = 1.5;
    const char *names[64];
    double vals[64];
    int n = cpt_obj_metrics_list(&oc, &m, names, vals, 64);
    int saw_clip = 0, saw_value = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "clip_frac")) saw_clip = vals[i] == 0.25;
        if (!strcmp(names[i], "loss/value")) saw_value = vals[i] == 1.5;
    }
    CHECK(saw_clip && saw_value);
    return check_summary("test_objective_config");
}
