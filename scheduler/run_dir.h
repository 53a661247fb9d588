/* Finding a run from the outside (cpt-scale, cpt-queue): RUN_DIR from --run or $CPT_RUN, its resolved
 * config.toml, and the queue URL from RUN_DIR/queue.json (written by the launcher) or queue.url. */
#ifndef CPT_SCHEDULER_RUN_DIR_H
#define CPT_SCHEDULER_RUN_DIR_H

#include "core/config.h"
#include "queue/redis.h"

/* run_dir NULL: $CPT_RUN. Loads RUN_DIR/config.toml (against keys) and connects to the run's Redis. */
int cpt_run_dir_open(const char *run_dir, const cpt_key_table *keys, cpt_config **cfg, cpt_redis **redis, cpt_err *err);

/* The folder of the cpt programs the launcher starts: $CPT_BIN when set (the sbatch scripts set it too), else the
 * folder holding this program. */
int cpt_find_bin_dir(char *out, size_t cap, cpt_err *err);

#endif
