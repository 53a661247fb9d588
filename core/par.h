/* When a loop goes to the OpenMP thread pool. A parallel region that runs on one thread (its if() false, one thread
 * configured, or nested in another region) still enters libgomp, and libgomp ends each region and each worksharing
 * barrier with a futex wake: one system call, whether or not a thread waits. A one-thread trainer made thousands a
 * second, and where system calls are dear (a VM) they were a tenth of its time. So a loop that would run on one
 * thread runs as a plain loop: cpt_par says whether a region would get more than one thread, and CPT_PAR_FOR takes
 * the loop both ways. Results do not change: every parallel loop here gives the same result on any thread count. */
#ifndef CPT_CORE_PAR_H
#define CPT_CORE_PAR_H

#include <omp.h>
#include <stdint.h>

/* A region over work items (at least min_work of them to be worth a fork) would get more than one thread. */
static inline int cpt_par(int64_t work, int64_t min_work) {
    return work >= min_work && omp_get_max_threads() > 1 && !omp_in_parallel();
}

/* CPT_PAR_FOR(par, for (...) body): the loop as `omp parallel for` when par, else as written. */
#define CPT_PAR_FOR(par, ...)                              \
    do {                                                   \
        if (par) {                                         \
            _Pragma("omp parallel for") __VA_ARGS__        \
        } else {                                           \
            __VA_ARGS__                                    \
        }                                                  \
    } while (0)

/* The same with the whole pragma given, e.g. "omp parallel for schedule(dynamic, 4)". */
#define CPT_PAR_FOR_WITH(par, pragma, ...) \
    do {                                   \
        if (par) {                         \
            _Pragma(pragma) __VA_ARGS__    \
        } else {                           \
            __VA_ARGS__                    \
        }                                  \
    } while (0)

#endif
