/* cpt train CONFIG [section.key=value ...]   (also the program cpt-train) */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/trainer_rank.h"
#include "core/config.h"
#include "trainer/checkpoint.h"
#include "trainer/dpo.h"
#include "trainer/online.h"
#include "trainer/sft.h"

/* SIGTERM / SIGUSR1 (Slurm's warning, the launcher's stop): the dpo and online loops finish the step, checkpoint
 * and return; the sft loop installs its own handler. */
static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { stop_requested = sig; }

static void usage(FILE *f) {
    fprintf(f,
            "usage: cpt train CONFIG [section.key=value ...]\n"
            "  Runs the training job of CONFIG (TOML); overrides apply in order. algo.type sft and dpo train\n"
            "  here; grpo, ppo and opd expect rollout and reward workers (start them with `cpt run`). Resumes from RUN_DIR/checkpoints/latest when present.\n"
            "  Exit status: 0 done, 1 error, 2 usage, %d stopped by SIGUSR1/SIGTERM after a checkpoint, %d checkpoints\n"
            "  cannot be written (a restart would not help).\n",
            CPT_EXIT_STOPPED, CPT_EXIT_NO_RESTART);
}

int cmd_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    umask(077); /* cpt-train and `cpt train`: what the trainer writes into the run directory is its owner's only */
    cpt_cli_trainer_rank_setup();
    cpt_err err;
    cpt_config *cfg = cpt_config_load(argv[1], argc - 2, argv + 2, &err);
    if (!cfg) {
        fprintf(stderr, "cpt train: %s\n", err.msg);
        return 1;
    }
    const char *algo = cpt_cfg_str(cfg, "algo.type");
    int rc = 0;
    uint64_t shard_bytes;
    if (cpt_ckpt_check_writable(cpt_cfg_str(cfg, "run.dir"), &err) ||
        cpt_ckpt_max_shard_bytes(cfg, &shard_bytes, &err)) {
        fprintf(stderr, "cpt train: %s\n", err.msg);
        cpt_config_free(cfg);
        return CPT_EXIT_NO_RESTART;
    }
    if (!strcmp(algo, "sft")) {
        cpt_sft_result res;
        if (cpt_sft_run(cfg, &res, &err)) {
            fprintf(stderr, "cpt train: %s\n", err.msg);
            rc = 1;
        } else if (res.interrupted) {
            rc = CPT_EXIT_STOPPED;
        }
    } else {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGUSR1, &sa, NULL);
        if (!strcmp(algo, "dpo")) {
            int r = cpt_dpo_train(cfg, &stop_requested, &err);
            rc = r < 0 ? 1 : r == 1 ? CPT_EXIT_STOPPED : 0;
        } else if (cpt_online_is_online(algo)) {
            rc = cpt_online_train(cfg, argv[1], &stop_requested, &err);
        } else {
            cpt_errf(&err, "algo.type \"%s\" has no training loop", algo);
            rc = 1;
        }
        if (rc == 1 && err.msg[0]) fprintf(stderr, "cpt train: %s\n", err.msg); /* empty: logged already */
    }
    cpt_config_free(cfg);
    return rc;
}
