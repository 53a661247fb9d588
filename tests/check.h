/* A small test harness: CHECK-style assertions that report file:line and the values, and keep going so one run
 * shows every failure. A test program returns check_summary() from main. */
#ifndef CPT_TESTS_CHECK_H
#define CPT_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures = 0;
static int check_count = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        check_count++;                                                           \
        if (!(cond)) {                                                           \
            check_failures++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
        }                                                                        \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        check_count++;                                                                             \
        if (va_ != vb_) {                                                                          \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s = %lld, %s = %lld\n", __FILE__, __LINE__, #a, va_, #b, vb_); \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        check_count++;                                                                             \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0) {                                               \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_EQ_STR failed: %s = \"%s\", %s = \"%s\"\n", __FILE__, __LINE__, #a, \
                    sa_ ? sa_ : "(null)", #b, sb_ ? sb_ : "(null)");                               \
        }                                                                                          \
    } while (0)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b), t_ = (double)(tol);                           \
        check_count++;                                                                             \
        if (!(fabs(va_ - vb_) <= t_ * (fabs(vb_) > 1 ? fabs(vb_) : 1))) {                          \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g (tol %g)\n", __FILE__, __LINE__, #a, va_, #b, vb_, t_); \
        }                                                                                          \
    } while (0)

/* ||a - b|| / ||b|| accumulated in double: the error measure of the parity tests against reference tensors. */
static inline double check_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

static inline int check_summary(const char *name) {
    if (check_failures)
        fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
    else
        printf("%s: all %d checks passed\n", name, check_count);
    return check_failures ? 1 : 0;
}

#endif
