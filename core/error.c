#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

int cpt_errf(cpt_err *err, const char *fmt, ...) {
    if (!err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int cpt_err_prefix(cpt_err *err, const char *fmt, ...) {
    if (!err) return -1;
    char prefix[CPT_ERR_MAX], old[CPT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return -1;
}

int cpt_errno(cpt_err *err, const char *fmt, ...) {
    int saved = errno;
    if (!err) return -1;
    char head[CPT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    snprintf(err->msg, sizeof err->msg, "%s: %s", head, strerror(saved));
    return -1;
}

void cpt_err_clear(cpt_err *err) {
    if (err) err->msg[0] = '\0';
}

static cpt_log_level min_level(void) {
    const char *s = getenv("CPT_LOG");
    if (!s) return CPT_LOG_INFO;
    if (!strcasecmp(s, "debug")) return CPT_LOG_DEBUG;
    if (!strcasecmp(s, "warn")) return CPT_LOG_WARN;
    if (!strcasecmp(s, "error")) return CPT_LOG_ERROR;
    return CPT_LOG_INFO;
}

void cpt_log(cpt_log_level level, const char *fmt, ...) {
    if (level < min_level()) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char stamp[32];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    const char *role = getenv("CPT_ROLE");
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per line so lines from concurrent processes sharing a log do not interleave mid-line. */
    fprintf(stderr, "%s.%03ld %s%s%s %s: %s\n", stamp, ts.tv_nsec / 1000000, role ? "[" : "", role ? role : "",
            role ? "]" : "", names[level], line);
}

void cpt_die(const cpt_err *err) {
    const char *prog = program_invocation_short_name;
    fprintf(stderr, "%s: %s\n", prog ? prog : "cpt", err && err->msg[0] ? err->msg : "failed");
    exit(1);
}
