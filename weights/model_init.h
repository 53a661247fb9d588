/* Where a role's first weights come from: the model a config asks for, shared by the trainer and the rollout
 * worker (which builds the same shape before any weights arrive). */
#ifndef CPT_WEIGHTS_MODEL_INIT_H
#define CPT_WEIGHTS_MODEL_INIT_H

#include "core/config.h"
#include "core/error.h"
#include "model/model.h"

/* The model a config asks for: model.init = "load" reads model.path; "random" builds one from the model.* keys
 * (vocab: model.vocab_size, else vocab_size; bos/eos ids from the tokenizer, -1: none), initialised from run.seed. */
cpt_model *cpt_model_from_config(const cpt_config *cfg, int vocab_size, int bos_id, int eos_id, cpt_err *err);

#endif
