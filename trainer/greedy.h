/* Greedy decoding by repeated full forward passes: the simplest correct generator, used by the trainer's
 * exact-match eval while no KV-cache engine is wired in. Cost is quadratic in the length, fine for short answers. */
#ifndef CPT_TRAINER_GREEDY_H
#define CPT_TRAINER_GREEDY_H

#include <stdint.h>

#include "core/error.h"
#include "model/model.h"

/* Appends up to max_new tokens to prompt[0..n_prompt) into out (capacity max_new), stopping after a token in
 * stop[0..n_stop). Returns the number of generated tokens (the stop token included), -1 on error. */
int cpt_greedy_generate(cpt_model *m, const int32_t *prompt, int n_prompt, int max_new, const int32_t *stop,
                        int n_stop, int32_t *out, cpt_err *err);

#endif
