#include "queue/lease.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"

/* KEYS: lease, fence. ARGV: holder, ttl_ms. Takes a free lease with a new token; else says who holds it. */
static const char ACQUIRE_SCRIPT[] =
    "local cur = redis.call('GET', KEYS[1])\n"
    "if cur then return {0, cur, redis.call('PTTL', KEYS[1])} end\n"
    "local t = redis.call('INCR', KEYS[2])\n"
    "redis.call('SET', KEYS[1], t .. ' ' .. ARGV[1], 'PX', ARGV[2])\n"
    "return {t, '', tonumber(ARGV[2])}\n";

/* KEYS: lease, fence. ARGV: the value seen, holder, ttl_ms. Takes over a lease whose holder is known to be dead,
 * only if nobody changed it since it was seen. */
static const char TAKE_OVER_SCRIPT[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
    "local t = redis.call('INCR', KEYS[2])\n"
    "redis.call('SET', KEYS[1], t .. ' ' .. ARGV[2], 'PX', ARGV[3])\n"
    "return t\n";

/* KEYS: lease, fence. ARGV: token, holder, ttl_ms. */
static const char RENEW_SCRIPT[] =
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'PX', ARGV[3])\n"
    "return 1\n";

/* KEYS: lease, fence. ARGV: token. */
static const char GIVE_BACK_SCRIPT[] =
    "if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end\n"
    "return redis.call('DEL', KEYS[1])\n";

void cpt_lease_keys(const char *run, char lease_key[CPT_LEASE_KEY_MAX], char fence_key[CPT_LEASE_KEY_MAX]) {
    snprintf(lease_key, CPT_LEASE_KEY_MAX, "cpt:%s:trainer_lease", run);
    snprintf(fence_key, CPT_LEASE_KEY_MAX, "cpt:%s:trainer_fence", run);
}

void cpt_lease_default_holder(char *out, size_t cap) {
    char host[64];
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    snprintf(out, cap, "%s:%ld", host, (long)getpid());
}

int cpt_lease_is_fenced_reply(const cpt_redis *r) { return r && !strncmp(r->server_error, "FENCED", 6); }

int cpt_lease_try(cpt_redis *r, const char *run, const char *holder, int ttl_ms, int64_t *token, char *other,
                  size_t other_cap, long long *other_ttl_ms, cpt_err *err) {
    char lk[CPT_LEASE_KEY_MAX], fk[CPT_LEASE_KEY_MAX], ttl[24];
    cpt_lease_keys(run, lk, fk);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *argv[] = {"EVAL", ACQUIRE_SCRIPT, "2", lk, fk, holder, ttl};
    redisReply *rep = cpt_redis_command(r, 7, argv, NULL, lk, 0, err);
    if (!rep) return -1;
    int rc;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 || rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_STRING || rep->element[2]->type != REDIS_REPLY_INTEGER) {
        rc = cpt_errf(err, "EVAL %s: unexpected reply to the lease script", lk);
    } else if (rep->element[0]->integer > 0) {
        *token = rep->element[0]->integer;
        rc = 1;
    } else {
        if (other) snprintf(other, other_cap, "%s", rep->element[1]->str);
        if (other_ttl_ms) *other_ttl_ms = rep->element[2]->integer;
        rc = 0;
    }
    freeReplyObject(rep);
    return rc;
}

static int token_script(cpt_redis *r, const char *script, const char *run, int64_t token, const char *holder,
                        int ttl_ms, long long *out, cpt_err *err) {
    char lk[CPT_LEASE_KEY_MAX], fk[CPT_LEASE_KEY_MAX], tok[24], ttl[24];
    cpt_lease_keys(run, lk, fk);
    snprintf(tok, sizeof tok, "%" PRId64, token);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *argv[] = {"EVAL", script, "2", lk, fk, tok, holder, ttl};
    return cpt_redis_integer(r, holder ? 8 : 6, argv, lk, out, err);
}

int cpt_lease_renew(cpt_redis *r, const char *run, int64_t token, const char *holder, int ttl_ms, cpt_err *err) {
    long long v = 0;
    if (token_script(r, RENEW_SCRIPT, run, token, holder, ttl_ms, &v, err)) return -1;
    return v == 1;
}

int cpt_lease_give_back(cpt_redis *r, const char *run, int64_t token, cpt_err *err) {
    long long v = 0;
    if (token_script(r, GIVE_BACK_SCRIPT, run, token, NULL, 0, &v, err)) return -1;
    return v == 1;
}

int cpt_lease_check(cpt_redis *r, const char *run, int64_t token, cpt_err *err) {
    char lk[CPT_LEASE_KEY_MAX], fk[CPT_LEASE_KEY_MAX];
    cpt_lease_keys(run, lk, fk);
    const char *argv[] = {"GET", fk};
    redisReply *rep = cpt_redis_command(r, 2, argv, NULL, fk, 0, err);
    if (!rep) return -1;
    long long newest = rep->type == REDIS_REPLY_STRING ? strtoll(rep->str, NULL, 10) : 0;
    freeReplyObject(rep);
    if (newest == (long long)token) return 0;
    return cpt_errf(err, "fenced off: this trainer's lease token %" PRId64 " was superseded by token %lld (%s): "
                    "another trainer runs on this queue",
                    token, newest, fk);
}

/* Whether the holder named in a lease value ("TOKEN HOST:PID") is a process of this host that no longer exists. */
static int holder_is_dead_here(const char *value) {
    const char *who = strchr(value, ' ');
    if (!who) return 0;
    who++;
    const char *colon = strrchr(who, ':');
    char host[64];
    if (!colon || gethostname(host, sizeof host - 1)) return 0;
    host[sizeof host - 1] = '\0';
    if ((size_t)(colon - who) != strlen(host) || strncmp(who, host, strlen(host))) return 0;
    char *end;
    long pid = strtol(colon + 1, &end, 10);
    if (*end || pid <= 0 || pid == (long)getpid()) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int cpt_lease_take_over(cpt_redis *r, const char *run, const char *seen, const char *holder, int ttl_ms,
                        int64_t *token, cpt_err *err) {
    char lk[CPT_LEASE_KEY_MAX], fk[CPT_LEASE_KEY_MAX], ttl[24];
    cpt_lease_keys(run, lk, fk);
    snprintf(ttl, sizeof ttl, "%d", ttl_ms);
    const char *argv[] = {"EVAL", TAKE_OVER_SCRIPT, "2", lk, fk, seen, holder, ttl};
    long long t = 0;
    if (cpt_redis_integer(r, 8, argv, lk, &t, err)) return -1;
    if (t > 0) *token = t;
    return t > 0;
}

/* ---- a held lease ---- */

struct cpt_lease {
    cpt_redis *redis; /* the renewal thread's own connection */
    char run[128], holder[CPT_LEASE_HOLDER_MAX];
    int64_t token;
    int ttl_ms;
    pthread_t thread;
    int thread_started;
    atomic_int quit, lost;
};

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void *renew_loop(void *arg) {
    cpt_lease *l = arg;
    int every = l->ttl_ms / 3 > 1 ? l->ttl_ms / 3 : 1;
    double last = cpt_now();
    while (!atomic_load(&l->quit)) {
        sleep_ms(every < 100 ? every : 100);
        if ((cpt_now() - last) * 1000.0 < every) continue;
        cpt_err err;
        int rc = cpt_lease_renew(l->redis, l->run, l->token, l->holder, l->ttl_ms, &err);
        if (rc == 0) {
            cpt_error("trainer lease: token %" PRId64 " was superseded: another trainer took this run's queue",
                      l->token);
            atomic_store(&l->lost, 1);
            break;
        }
        /* A failed renewal is tried again; the fence refuses our writes if the lease is lost meanwhile. */
        if (rc < 0) cpt_warn("trainer lease: renewing token %" PRId64 ": %s", l->token, err.msg);
        else last = cpt_now();
    }
    return NULL;
}

cpt_lease *cpt_lease_acquire(const cpt_lease_opts *o, cpt_err *err) {
    if (o->ttl_ms <= 0) { cpt_errf(err, "trainer lease: ttl must be positive"); return NULL; }
    cpt_lease *l = calloc(1, sizeof *l);
    if (!l) { cpt_errf(err, "out of memory"); return NULL; }
    snprintf(l->run, sizeof l->run, "%s", o->run);
    if (o->holder && *o->holder) snprintf(l->holder, sizeof l->holder, "%s", o->holder);
    else cpt_lease_default_holder(l->holder, sizeof l->holder);
    l->ttl_ms = o->ttl_ms;
    cpt_redis_opts ro = {.url = o->url, .password_file = o->password_file, .tls_ca = o->tls_ca};
    l->redis = cpt_redis_open(&ro, err);
    if (!l->redis) { free(l); return NULL; }
    double start = cpt_now();
    int announced = 0;
    for (;;) {
        char other[256] = "";
        long long left = 0;
        int rc = cpt_lease_try(l->redis, l->run, l->holder, l->ttl_ms, &l->token, other, sizeof other, &left, err);
        if (rc < 0) goto fail;
        if (rc == 1) break;
        /* A trainer of this host killed with -9 (restarted by its launcher): no need to wait out its ttl. */
        if (holder_is_dead_here(other)) {
            rc = cpt_lease_take_over(l->redis, l->run, other, l->holder, l->ttl_ms, &l->token, err);
            if (rc < 0) goto fail;
            if (rc == 1) {
                cpt_info("trainer lease: its holder (%s) no longer runs on this host: taken over", other);
                break;
            }
            continue;
        }
        double waited = cpt_now() - start;
        /* the value is "TOKEN HOLDER" */
        const char *who = strchr(other, ' ') ? strchr(other, ' ') + 1 : other;
        int toklen = (int)strcspn(other, " ");
        if (waited >= o->wait_s || (o->stop && *o->stop)) {
            cpt_errf(err, "another trainer holds this run's queue: lease cpt:%s:trainer_lease is held by %s (token "
                     "%.*s, expires in %.1f s unless renewed); waited %.0f s. Stop that trainer (an orphan of an "
                     "earlier launch?) or give this run a run.name of its own",
                     l->run, who, toklen, other, (double)left / 1000.0, waited);
            goto fail;
        }
        if (!announced) {
            cpt_warn("trainer lease: held by %s (token %.*s, expires in %.1f s unless renewed); waiting up to %.0f s",
                     who, toklen, other, (double)left / 1000.0, o->wait_s);
            announced = 1;
        }
        sleep_ms(200);
    }
    /* The renewal thread blocks every signal (it inherits the mask), so SIGTERM and friends still reach the main
     * thread and interrupt what it waits on, as before the thread existed. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&l->thread, NULL, renew_loop, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc) {
        cpt_errf(err, "trainer lease: cannot start the renewal thread");
        cpt_err e2;
        cpt_lease_give_back(l->redis, l->run, l->token, &e2);
        goto fail;
    }
    l->thread_started = 1;
    cpt_info("trainer lease: token %" PRId64 " taken by %s (ttl %d ms)", l->token, l->holder, l->ttl_ms);
    return l;
fail:
    cpt_redis_close(l->redis);
    free(l);
    return NULL;
}

int64_t cpt_lease_token(const cpt_lease *l) { return l ? l->token : 0; }

int cpt_lease_lost(const cpt_lease *l) { return l && atomic_load(&((cpt_lease *)l)->lost); }

void cpt_lease_release(cpt_lease *l) {
    if (!l) return;
    atomic_store(&l->quit, 1);
    if (l->thread_started) pthread_join(l->thread, NULL);
    cpt_err err;
    if (!atomic_load(&l->lost) && cpt_lease_give_back(l->redis, l->run, l->token, &err) < 0)
        cpt_warn("trainer lease: giving back token %" PRId64 ": %s", l->token, err.msg);
    cpt_redis_close(l->redis);
    free(l);
}
