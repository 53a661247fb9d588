/* Weight versions over the file transport (docs/architecture.md "Weight versions"): the trainer writes
 * RUN_DIR/weights/vN.safetensors atomically (cpt_model_save_hf's tensor names and layout, F32, so a worker's
 * cpt_model_load_weights reads it), then announces it in the run's weights hash with its size and XXH64 checksum,
 * and deletes all but the newest `keep` version files. RUN_DIR/weights/config.json (the model's shape) sits beside
 * them for workers that build the model from the weights alone. */
#ifndef CPT_WEIGHTS_WEIGHTS_PUB_H
#define CPT_WEIGHTS_WEIGHTS_PUB_H

#include <stdint.h>

#include "core/error.h"
#include "model/model.h"
#include "queue/schema.h"

/* RUN_DIR/weights/vN.safetensors */
void cpt_weights_path(const char *run_dir, uint64_t version, char *out, size_t cap);

/* Writes version `version` of m and fills w (run, version, transport "file", location, bytes, checksum,
 * membership epoch 0). A crash leaves either no vN file or a complete one. */
int cpt_weights_write(const cpt_model *m, const char *run_dir, const char *run, uint64_t version, cpt_weights_msg *w,
                      cpt_err *err);

/* Deletes RUN_DIR/weights/vK.safetensors for every K <= newest - keep (and leftover temp folders). Returns the
 * number deleted, or -1. */
int cpt_weights_prune(const char *run_dir, uint64_t newest, int keep, cpt_err *err);

#endif
