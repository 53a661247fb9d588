#include "trainer/online_defaults.h"

#include <string.h>

double cpt_online_kl_beta(const cpt_config *cfg) {
    double set = cpt_cfg_float(cfg, "algo.kl_beta");
    if (set >= 0) return set;
    int dapo = cpt_cfg_bool(cfg, "algo.dynamic_sampling") ||
               cpt_cfg_float(cfg, "algo.clip_eps_high") > cpt_cfg_float(cfg, "algo.clip_eps_low") ||
               cpt_cfg_int(cfg, "algo.overlong_buffer_len") > 0;
    int grpo = !strcmp(cpt_cfg_str(cfg, "algo.type"), "grpo") && !strcmp(cpt_cfg_str(cfg, "algo.variant"), "grpo");
    return grpo && !dapo ? CPT_ONLINE_GRPO_KL_BETA : 0.0;
}
