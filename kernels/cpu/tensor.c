/* Tensor views and the operand checks every CPU op runs before touching memory. */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

cpt_tensor cpt_tensor_none(void) {
    cpt_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

cpt_tensor cpt_tensor_f32_1d(float *p, int64_t a) {
    cpt_tensor t = cpt_tensor_none();
    t.data = p;
    t.dtype = CPT_DT_F32;
    t.ndim = 1;
    t.shape[0] = a;
    return t;
}

cpt_tensor cpt_tensor_f32_2d(float *p, int64_t a, int64_t b) {
    cpt_tensor t = cpt_tensor_f32_1d(p, a);
    t.ndim = 2;
    t.shape[1] = b;
    return t;
}

cpt_tensor cpt_tensor_i32_1d(int32_t *p, int64_t a) {
    cpt_tensor t = cpt_tensor_none();
    t.data = p;
    t.dtype = CPT_DT_I32;
    t.ndim = 1;
    t.shape[0] = a;
    return t;
}

int64_t cpt_tensor_numel(cpt_tensor t) {
    int64_t n = 1;
    for (int i = 0; i < t.ndim; i++) n *= t.shape[i];
    return n;
}

static void check(const char *op, const char *what, cpt_tensor t, int ndim, cpt_dtype dt) {
    KCHECK(t.data != NULL, op, "%s is absent", what);
    KCHECK(t.device == CPT_DEVICE_CPU, op, "%s is on device %d, but this op runs on the CPU backend", what,
           (int)t.device);
    KCHECK(t.dtype == dt, op, "%s has dtype %s, want %s", what, cpt_dtype_name(t.dtype), cpt_dtype_name(dt));
    KCHECK(t.ndim == ndim, op, "%s has %d dims, want %d", what, t.ndim, ndim);
}

void cpt_kcheck_f32(const char *op, const char *what, cpt_tensor t, int ndim) { check(op, what, t, ndim, CPT_DT_F32); }
void cpt_kcheck_i32(const char *op, const char *what, cpt_tensor t, int ndim) { check(op, what, t, ndim, CPT_DT_I32); }
