/* cpt train CONFIG [section.key=value ...]   (also the program cpt-train) */
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "scheduler/commands.h"
#include "trainer/sft.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: cpt train CONFIG [section.key=value ...]\n"
            "  Runs the training job of CONFIG (TOML); overrides apply in order. algo.type = \"sft\" trains here;\n"
            "  online methods run through `cpt run`. Resumes from RUN_DIR/checkpoints/latest when present.\n"
            "  Exit status: 0 done, 1 error, 2 usage, %d stopped by SIGUSR1/SIGTERM after a checkpoint.\n",
            CPT_TRAIN_EXIT_INTERRUPTED);
}

int cmd_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    cpt_err err;
    cpt_config *cfg = cpt_config_load(argv[1], argc - 2, argv + 2, &err);
    if (!cfg) {
        fprintf(stderr, "cpt train: %s\n", err.msg);
        return 1;
    }
    const char *algo = cpt_cfg_str(cfg, "algo.type");
    int rc = 0;
    if (!strcmp(algo, "sft")) {
        cpt_sft_result res;
        if (cpt_sft_run(cfg, &res, &err)) {
            fprintf(stderr, "cpt train: %s\n", err.msg);
            rc = 1;
        } else if (res.interrupted) {
            rc = CPT_TRAIN_EXIT_INTERRUPTED;
        }
    } else {
        fprintf(stderr, "cpt train: algo.type \"%s\" is not trained by this command in this build (sft is)\n", algo);
        rc = 1;
    }
    cpt_config_free(cfg);
    return rc;
}
