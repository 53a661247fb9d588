/* Deterministic epoch order over a dataset and its cursor (see core/dataset.h). */
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "core/rng.h"

int cpt_data_order_init(cpt_data_order *o, size_t n, uint64_t seed, int shuffle, cpt_err *err) {
    memset(o, 0, sizeof *o);
    if (n == 0) return cpt_errf(err, "data order: the dataset is empty");
    o->n = n;
    o->seed = seed;
    o->shuffle = shuffle;
    o->perm_epoch = UINT64_MAX;
    if (shuffle && !(o->perm = malloc(n * sizeof *o->perm)))
        return cpt_errf(err, "data order: out of memory for %zu records", n);
    return 0;
}

void cpt_data_order_free(cpt_data_order *o) {
    free(o->perm);
    memset(o, 0, sizeof *o);
}

size_t cpt_data_order_at(cpt_data_order *o, uint64_t epoch, uint64_t index) {
    if (!o->shuffle) return (size_t)(index % o->n);
    if (o->perm_epoch != epoch) {
        /* Each epoch's permutation depends only on (seed, epoch), so any epoch can be rebuilt after a restore. */
        cpt_rng rng;
        cpt_rng_seed(&rng, o->seed, CPT_DATA_RNG_STREAM + epoch);
        cpt_rng_permutation(&rng, o->perm, o->n);
        o->perm_epoch = epoch;
    }
    return (size_t)o->perm[index % o->n];
}

size_t cpt_data_order_next(cpt_data_order *o) {
    size_t r = cpt_data_order_at(o, o->cursor.epoch, o->cursor.index);
    if (++o->cursor.index == o->n) {
        o->cursor.index = 0;
        o->cursor.epoch++;
    }
    return r;
}

cpt_data_cursor cpt_data_order_tell(const cpt_data_order *o) { return o->cursor; }

int cpt_data_order_seek(cpt_data_order *o, cpt_data_cursor c, cpt_err *err) {
    if (c.index == o->n && c.epoch < UINT64_MAX) {
        /* The end of an epoch (what a cursor that does not wrap says) is the start of the next. */
        c.epoch++;
        c.index = 0;
    }
    if (c.index >= o->n)
        return cpt_errf(err, "data cursor (epoch %llu, index %llu) does not fit a dataset of %zu records",
                        (unsigned long long)c.epoch, (unsigned long long)c.index, o->n);
    o->cursor = c;
    return 0;
}
