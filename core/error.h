/* Errors and logging.
 *
 * Functions that can fail return 0 on success and -1 on failure, and write a readable message into a caller-owned
 * cpt_err. Messages name what failed and where (file:line, tensor name, Redis command and key), so a user can act
 * on them without a debugger. The caller decides whether to print, add context, or recover. */
#ifndef CPT_CORE_ERROR_H
#define CPT_CORE_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#define CPT_ERR_MAX 1024

typedef struct cpt_err {
    char msg[CPT_ERR_MAX];
} cpt_err;

/* Sets the message (printf-style) and returns -1, so `return cpt_errf(err, ...)` reads naturally.
 * err may be NULL (the message is dropped). */
int cpt_errf(cpt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefixes context to an existing message: "loading model: " + old message. Returns -1. */
int cpt_err_prefix(cpt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Same as cpt_errf with ": strerror(errno)" appended. */
int cpt_errno(cpt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void cpt_err_clear(cpt_err *err);

typedef enum { CPT_LOG_DEBUG = 0, CPT_LOG_INFO = 1, CPT_LOG_WARN = 2, CPT_LOG_ERROR = 3 } cpt_log_level;

/* Logs one line to stderr with time, level and the process's role tag. The minimum level comes from the
 * environment variable CPT_LOG (debug|info|warn|error), read once per call site cheaply via getenv. */
void cpt_log(cpt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define cpt_debug(...) cpt_log(CPT_LOG_DEBUG, __VA_ARGS__)
#define cpt_info(...) cpt_log(CPT_LOG_INFO, __VA_ARGS__)
#define cpt_warn(...) cpt_log(CPT_LOG_WARN, __VA_ARGS__)
#define cpt_error(...) cpt_log(CPT_LOG_ERROR, __VA_ARGS__)

/* Prints "PROGRAM: message" to stderr and exits with status 1: for command-line front ends only. */
void cpt_die(const cpt_err *err) __attribute__((noreturn));

#endif
