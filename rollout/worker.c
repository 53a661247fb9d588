/* The rollout worker loop (rollout/worker.h). */
#include "rollout/worker.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/fs.h"
#include "queue/conn.h"
#include "queue/env_msg.h"
#include "queue/stream.h"
#include "rollout/engine.h"
#include "rollout/model_source.h"
#include "rollout/turns.h"
#include "weights/devices.h"
#include "weights/model_init.h"
#include "weights/weights_rx.h"

/* A prompt group taken from the queue: generating (req >= 0: the engine's request, or with tools the turn driver's
 * group) or waiting for a newer weight version (req < 0). */
typedef struct flight {
    cpt_queue_item it;
    int64_t req;
    double t_taken, t_touch;
    uint64_t version;
} flight;

typedef struct worker {
    const cpt_config *cfg;
    const char *me;
    volatile sig_atomic_t *stop;
    cpt_rollout_worker_stats *st;
    char run_dir[2048];
    cpt_queue_conn conn;
    cpt_queue *q;
    cpt_model *m;
    cpt_tokenizer *tok;
    cpt_engine *eng;     /* on the model's placement: the CPU, or the GPU with rollout.device = cuda */
    int on_gpu;          /* rollout.device = cuda: the model is placed for inference before its engine is made */
    cpt_weights_rx *rx;  /* cuda_ipc / nccl versions (weights/weights_rx.h) */
    uint64_t version;
    char held_checksum[sizeof(((cpt_weights_msg *)0)->checksum)]; /* of the weights loaded last; "": the start's */
    cpt_weights_msg want; /* a newer version to load once nothing is generating */
    int has_want;
    cpt_weights_msg bad;  /* the announcement that last failed to load (has_bad): retried only after a pause */
    int has_bad, bad_tries; /* failures of that same announcement in a row */
    double bad_at, bad_warned_at;
    uint64_t announced;   /* the newest version announced (the weights hash), once has_announced */
    int has_announced;
    flight *fl;
    int n_fl, cap_fl;
    int32_t eos[2];
    int n_eos;
    int block_ms;
    /* multi-turn rollouts with tools (env.type not none): groups go through the turn driver, tool calls out to
     * the env stream, replies in from this worker's own reply stream */
    int tools;
    cpt_turn_opts topts;
    cpt_turns *turns;
    char env_key[CPT_ENV_KEY_MAX], reply_key[CPT_ENV_KEY_MAX];
    char reply_last[CPT_STREAM_ID_MAX];
} worker;

static int n_generating(const worker *w) {
    int n = 0;
    for (int i = 0; i < w->n_fl; i++) n += w->fl[i].req >= 0;
    return n;
}

static void drop_flight(worker *w, int i) {
    cpt_queue_item_free(&w->fl[i].it);
    w->fl[i] = w->fl[--w->n_fl];
}

/* The env request stream's consumer group (from its start, so no request added before an env worker's first read
 * is missed), and this worker's reply stream emptied: replies left there by an earlier worker of the same id
 * answer calls this one never made. */
static int open_env_streams(worker *w, cpt_err *err) {
    if (!cpt_env_stream(w->conn.run, w->env_key) || !cpt_env_reply_stream(w->conn.run, w->me, w->reply_key))
        return cpt_errf(err, "worker id \"%s\": not a valid name for its env reply stream (visible ASCII, 1..127)",
                        w->me);
    const char *mk[] = {"XGROUP", "CREATE", w->env_key, CPT_ENV_GROUP, "0", "MKSTREAM"};
    cpt_err gerr;
    redisReply *r = cpt_redis_command(w->q->redis, 6, mk, NULL, w->env_key, 0, &gerr);
    if (r) freeReplyObject(r);
    else if (!strstr(gerr.msg, "BUSYGROUP")) return cpt_errf(err, "%s", gerr.msg);
    const char *del[] = {"DEL", w->reply_key};
    r = cpt_redis_command(w->q->redis, 2, del, NULL, w->reply_key, 0, err);
    if (!r) return -1;
    freeReplyObject(r);
    snprintf(w->reply_last, sizeof w->reply_last, "0-0");
    return 0;
}

static int open_queue(worker *w, cpt_err *err) {
    if (*cpt_cfg_str(w->cfg, "queue.url")) {
        if (cpt_queue_conn_from_config(w->cfg, &w->conn, err)) return -1;
    } else if (cpt_queue_conn_from_run_dir(w->run_dir, &w->conn, err)) {
        return cpt_err_prefix(err, "finding the run's queue (queue.url is empty)");
    }
    if (!w->conn.run[0]) snprintf(w->conn.run, sizeof w->conn.run, "%s", cpt_cfg_str(w->cfg, "run.name"));
    cpt_queue_opts o;
    cpt_queue_opts_from_config(w->cfg, &w->conn, &o);
    o.run = w->conn.run;
    o.stop = w->stop;
    o.read_count = 1;
    w->q = cpt_queue_open(&o, err);
    if (!w->q) return -1;
    w->block_ms = w->q->block_ms;
    if (cpt_queue_create_group(w->q, CPT_STREAM_PROMPTS, "rollout", err)) return -1;
    return w->tools ? open_env_streams(w, err) : 0;
}

static void heartbeat(worker *w, double tok_s, double occ) {
    cpt_heartbeat_msg h;
    memset(&h, 0, sizeof h);
    snprintf(h.run, sizeof h.run, "%s", w->conn.run);
    snprintf(h.worker, sizeof h.worker, "%s", w->me);
    snprintf(h.role, sizeof h.role, "rollout");
    if (gethostname(h.host, sizeof h.host - 1)) snprintf(h.host, sizeof h.host, "unknown");
    h.version = w->version;
    h.tokens_per_s = tok_s >= 0 && isfinite(tok_s) ? tok_s : 0;
    h.occupancy = occ < 0 || !isfinite(occ) ? 0 : occ > 1 ? 1 : occ;
    cpt_err err;
    if (cpt_queue_heartbeat(w->q, &h, &err)) cpt_warn("cpt-rollout %s: heartbeat: %s", w->me, err.msg);
}

/* "xxh64:HEX" is checked; another algorithm is reported and skipped. */
static int verify_checksum(const cpt_weights_msg *wm, cpt_err *err) {
    if (!wm->checksum[0]) return 0;
    if (strncmp(wm->checksum, "xxh64:", 6)) {
        cpt_warn("weights v%llu: checksum %s not verified (only xxh64 is known)", (unsigned long long)wm->version,
                 wm->checksum);
        return 0;
    }
    uint64_t h, bytes;
    if (cpt_checksum_file(wm->location, &h, &bytes, err)) return -1;
    char hex[CPT_CHECKSUM_HEX_LEN + 1];
    cpt_checksum_hex(h, hex);
    if (strcmp(wm->checksum + 6, hex))
        return cpt_errf(err, "%s: checksum xxh64:%s, announced %s", wm->location, hex, wm->checksum);
    if (wm->bytes && bytes != wm->bytes)
        return cpt_errf(err, "%s: %llu bytes, announced %llu", wm->location, (unsigned long long)bytes,
                        (unsigned long long)wm->bytes);
    return 0;
}

/* model.init = random: the shape from a config.json beside the weights file, else from the model.* keys. */
static cpt_model *model_for_weights(worker *w, const char *location, cpt_err *err) {
    char dir[CPT_MAX_LOCATION + 16], p[CPT_MAX_LOCATION + 32];
    snprintf(dir, sizeof dir, "%s", location);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (cpt_path_exists(p)) {
        cpt_model_config mc;
        if (cpt_model_config_load(dir, &mc, err)) return NULL;
        return cpt_model_new_random(&mc, 0, err);
    }
    int V = w->tok ? cpt_tokenizer_vocab_size(w->tok) : 0;
    if (!V && !cpt_cfg_int(w->cfg, "model.vocab_size")) {
        cpt_errf(err, "model.init = random needs a tokenizer (tokenizer.path) or model.vocab_size for the shape");
        return NULL;
    }
    int32_t bos = w->tok ? cpt_tokenizer_bos_id(w->tok) : -1, eos = w->tok ? cpt_tokenizer_eos_id(w->tok) : -1;
    return cpt_model_from_config(w->cfg, V, bos, eos, err);
}

static int make_engine(worker *w, cpt_err *err) {
    cpt_engine_opts o = {.slots = (int)cpt_cfg_int(w->cfg, "rollout.slots"),
                         .max_len = (int)cpt_cfg_int(w->cfg, "rollout.max_len"),
                         .prefill_chunk = (int)cpt_cfg_int(w->cfg, "rollout.prefill_chunk"),
                         .kv_blocks = (int)cpt_cfg_int(w->cfg, "rollout.kv_blocks"),
                         .kv_admission = strcmp(cpt_cfg_str(w->cfg, "rollout.kv_admission"), "reserve_full")
                                             ? CPT_KV_ADMIT_OPTIMISTIC : CPT_KV_ADMIT_RESERVE_FULL,
                         .kv_reserve_blocks = (int)cpt_cfg_int(w->cfg, "rollout.kv_reserve_blocks"),
                         .gpu_memory_fraction = (float)cpt_cfg_float(w->cfg, "rollout.gpu_memory_fraction"),
                         .tok = w->tok};
    if (w->on_gpu && cpt_model_use_cuda_infer(w->m, 0, err)) return -1;
    if (!(w->eng = cpt_engine_new(w->m, &o, err))) return -1;
    if (w->tools && !(w->turns = cpt_turns_new(w->eng, w->tok, &w->topts, err))) {
        cpt_engine_free(w->eng);
        w->eng = NULL;
        return -1;
    }
    w->n_eos = cpt_cfg_bool(w->cfg, "rollout.stop_on_eos") ? cpt_rollout_eos_ids(w->m, w->tok, w->eos) : 0;
    return 0;
}

/* Seconds before an announcement that failed to load is tried again, doubling with each failure up to a minute (a
 * file is read whole to check it: a corrupt one of a large model is not read again every few seconds). */
#define WEIGHTS_RETRY_S 2.0
#define WEIGHTS_RETRY_MAX_S 60.0

/* Two announcements of the same weights from the same publisher: version, location (a file, or a trainer's cuda_ipc
 * or nccl line), checksum and membership epoch. */
static int same_announcement(const cpt_weights_msg *a, const cpt_weights_msg *b) {
    return a->version == b->version && a->membership_epoch == b->membership_epoch &&
           !strcmp(a->transport, b->transport) && !strcmp(a->location, b->location) &&
           !strcmp(a->checksum, b->checksum);
}

/* Loads w->want (nothing is generating). A version that fails is logged and kept as w->bad, which poll_weights tries
 * again after a growing pause; -1 only for errors that leave the worker without a model. */
static int load_wanted(worker *w, cpt_err *err) {
    cpt_weights_msg *wm = &w->want;
    /* the announcement as it came: wm's location is resolved below, and poll_weights compares raw announcements */
    const cpt_weights_msg announced = *wm;
    w->has_want = 0;
    cpt_err lerr;
    const int gpu_tr = cpt_weights_rx_handles(w->rx, wm); /* cuda_ipc / nccl: device to device */
    int ok = strcmp(wm->transport, "file") == 0 || gpu_tr;
    if (!ok) cpt_errf(&lerr, "transport '%s' is not supported by the CPU worker (only file)", wm->transport);
    /* only a file of the run's weights folder: from here on the resolved path is read */
    if (ok && !gpu_tr && cpt_weights_rx_file_path(w->run_dir, wm->location, wm->location, sizeof wm->location, &lerr))
        ok = 0;
    if (ok && !gpu_tr && verify_checksum(wm, &lerr)) ok = 0;
    if (ok && !w->m) {
        w->m = model_for_weights(w, wm->location, &lerr);
        if (!w->m || make_engine(w, &lerr)) {
            cpt_model_free(w->m); /* a model without its engine would be taken for a working one */
            w->m = NULL;
            ok = 0;
        }
    }
    double t0 = cpt_now();
    if (ok && gpu_tr) {
        int lrc = cpt_weights_rx_load(w->rx, w->m, wm, &lerr);
        if (lrc == 0) return 0; /* superseded or not received in our epoch: wait for the next announcement */
        if (lrc < 0) ok = 0;
    }
    if (ok && !gpu_tr && cpt_model_load_weights(w->m, wm->location, &lerr)) {
        /* on the GPU the load also uploads the device copy, which a failure may leave half old, half new: fatal */
        if (w->on_gpu) {
            *err = lerr;
            return cpt_err_prefix(err, "weights v%llu", (unsigned long long)wm->version);
        }
        ok = 0;
    }
    if (ok) cpt_engine_clear(w->eng); /* nothing is generating: no request is dropped */
    if (ok && w->turns) cpt_turns_clear(w->turns);
    if (!ok) {
        const double now = cpt_now();
        const int again = w->has_bad && same_announcement(&announced, &w->bad);
        if (!again || now - w->bad_warned_at >= 60) { /* a retried failure: once a minute */
            cpt_warn("cpt-rollout %s: weights v%llu not loaded%s: %s", w->me, (unsigned long long)wm->version,
                     again ? " (still; tried again at growing pauses, a minute at most)" : "", lerr.msg);
            w->bad_warned_at = now;
        }
        w->bad_tries = again ? w->bad_tries + 1 : 1;
        w->bad = announced, w->has_bad = 1, w->bad_at = now;
        (void)err;
        return 0;
    }
    w->version = wm->version;
    snprintf(w->held_checksum, sizeof w->held_checksum, "%s", wm->checksum);
    w->has_bad = 0, w->bad_tries = 0; /* a failure after a success starts its pauses over */
    w->st->weight_loads++;
    w->st->version = w->version;
    cpt_info("cpt-rollout %s: weights v%llu loaded (%.3f s)", w->me, (unsigned long long)w->version, cpt_now() - t0);
    return 0;
}

static void poll_weights(worker *w) {
    cpt_weights_msg wm;
    cpt_err err;
    int rc = cpt_queue_get_weights(w->q, &wm, &err);
    if (rc < 0) {
        cpt_warn("cpt-rollout %s: reading weights: %s", w->me, err.msg);
        return;
    }
    if (w->rx && cpt_weights_rx_poll(w->rx, w->m, rc == 1 ? &wm : NULL, &err))
        cpt_warn("cpt-rollout %s: weight group: %s", w->me, err.msg);
    if (rc == 0) return;
    w->announced = wm.version;
    w->has_announced = 1;
    /* Any version other than the one held is the trainer's current one: after a trainer resume from a checkpoint
     * the announced version can go down, and the weights of the lost steps must not be kept. Nor when it comes back
     * up to the number held: the same version with other weights (another checksum) is loaded too. */
    int other = !w->m || wm.version != w->version ||
                (wm.checksum[0] && w->held_checksum[0] && strcmp(wm.checksum, w->held_checksum));
    /* A failed announcement is tried again after a pause (a file that was being replaced), and at once when the
     * same version is announced anew: a trainer restarted by a requeue announces its resumed version again, with
     * its own cuda_ipc handle, while the one its predecessor left behind can no longer be opened. */
    double pause = WEIGHTS_RETRY_S;
    for (int i = 1; i < w->bad_tries && pause < WEIGHTS_RETRY_MAX_S; i++) pause *= 2;
    if (pause > WEIGHTS_RETRY_MAX_S) pause = WEIGHTS_RETRY_MAX_S;
    int failed = w->has_bad && same_announcement(&wm, &w->bad) && cpt_now() - w->bad_at < pause;
    if (other && !failed && (!w->has_want || !same_announcement(&wm, &w->want))) {
        w->want = wm;
        w->has_want = 1;
    }
}

static uint64_t mix_seed(uint64_t seed, cpt_group_id id) {
    /* The group id joins the seed so groups that share a sampling seed still sample independently. The epoch's
     * top 16 bits are the trainer's attempt number (docs/architecture.md), not part of the group's identity: an
     * attempt issued again samples the same tokens, so a requeued sync run repeats an uninterrupted one. */
    uint64_t epoch = id.epoch & ((1ull << 48) - 1);
    uint64_t z = seed ^ (epoch * 0x9E3779B97F4A7C15ull) ^ (id.index * 0xBF58476D1CE4E5B9ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void dead_letter(worker *w, int i, const char *why) {
    char reason[CPT_ERR_MAX + 128];
    snprintf(reason, sizeof reason, "cpt-rollout %s: %s", w->me, why);
    cpt_warn("group (%llu, %llu) -> dead: %s", (unsigned long long)w->fl[i].it.prompt.id.epoch,
             (unsigned long long)w->fl[i].it.prompt.id.index, reason);
    cpt_err err;
    if (cpt_queue_dead_letter(w->q, CPT_STREAM_PROMPTS, "rollout", &w->fl[i].it.msg, reason, &err))
        cpt_warn("cpt-rollout %s: dead-lettering: %s", w->me, err.msg);
    else
        w->st->dead++;
    drop_flight(w, i);
}

/* Starts flight i on the engine; a group the engine refuses goes to the dead stream. */
static void start_flight(worker *w, int i) {
    flight *f = &w->fl[i];
    const cpt_prompt_group *pg = &f->it.prompt;
    const cpt_sampling *s = &pg->sampling;
    int32_t stop_ids[CPT_MAX_STOP + 2];
    int n_stop = 0;
    for (uint32_t k = 0; k < s->n_stop_ids && n_stop < CPT_MAX_STOP; k++) stop_ids[n_stop++] = s->stop_ids[k];
    for (int k = 0; k < w->n_eos; k++) stop_ids[n_stop++] = w->eos[k];
    /* the group's stop strings, then rollout.stop */
    size_t n_extra = cpt_cfg_array_len(w->cfg, "rollout.stop");
    const char **strs = calloc(s->n_stop_strs + n_extra + 1, sizeof *strs);
    if (!strs) {
        cpt_warn("cpt-rollout %s: out of memory; the group stays pending", w->me);
        drop_flight(w, i);
        return;
    }
    int n_strs = 0;
    for (uint32_t k = 0; k < s->n_stop_strs; k++) strs[n_strs++] = s->stop_strs[k];
    for (size_t k = 0; k < n_extra; k++) strs[n_strs++] = cpt_cfg_array_str(w->cfg, "rollout.stop", k);
    cpt_gen_request r = {.prompt = pg->prompt, .n_prompt = (int)pg->n_prompt, .n_samples = (int)pg->n_samples,
                         .sp = {s->temperature, s->top_k, s->top_p, s->min_p}, .seed = mix_seed(s->seed, pg->id),
                         .max_new_tokens = (int)s->max_new_tokens, .stop_ids = stop_ids, .n_stop_ids = n_stop,
                         .stop_strs = strs, .n_stop_strs = n_strs};
    cpt_err err;
    int64_t id = w->turns ? cpt_turns_submit(w->turns, &r, pg->extra, &err) : cpt_engine_submit(w->eng, &r, &err);
    free(strs); /* the engine and the turn driver keep copies */
    if (id < 0) {
        dead_letter(w, i, err.msg);
        return;
    }
    f->req = id;
    f->version = w->version;
}

/* A prompt the run cannot have issued goes to the dead stream: more samples than rollout.group_size, or a
 * min_version never announced (the worker would hold it, and stop taking work, waiting for that version). Token
 * ids and the context are the engine's to check (start_flight). Returns 1 if flight i was refused (and dropped). */
static int refuse_prompt(worker *w, int i) {
    const cpt_prompt_group *pg = &w->fl[i].it.prompt;
    if (pg->min_version > w->version && (!w->has_announced || pg->min_version > w->announced))
        poll_weights(w); /* the announcement may be newer than the last poll */
    cpt_group_bounds b = {.max_samples = (uint32_t)cpt_cfg_int(w->cfg, "rollout.group_size"),
                          .has_max_version = w->has_announced,
                          .max_version = w->announced};
    cpt_err err;
    if (!cpt_prompt_group_check_bounds(pg, &b, &err)) return 0;
    dead_letter(w, i, err.msg);
    return 1;
}

static void take_group(worker *w) {
    cpt_err err;
    cpt_queue_item it;
    /* 0: no BLOCK, answer at once (a group waiting for tool replies is work in progress too) */
    int idle = !w->eng || (cpt_engine_idle(w->eng) && !(w->turns && cpt_turns_groups(w->turns)));
    w->q->block_ms = idle ? w->block_ms : 0;
    int got = cpt_queue_next(w->q, CPT_STREAM_PROMPTS, "rollout", w->me, &it, &err);
    w->q->block_ms = w->block_ms;
    if (got < 0) {
        if (!*w->stop) {
            cpt_warn("cpt-rollout %s: reading prompts: %s (retrying)", w->me, err.msg);
            sleep(1);
        }
        return;
    }
    if (got == 0) return;
    if (w->n_fl == w->cap_fl) {
        int cap = w->cap_fl ? 2 * w->cap_fl : 16;
        flight *p = realloc(w->fl, sizeof *p * (size_t)cap);
        if (!p) {
            cpt_warn("cpt-rollout %s: out of memory; the group stays pending", w->me);
            cpt_queue_item_free(&it);
            return;
        }
        w->fl = p;
        w->cap_fl = cap;
    }
    double now = cpt_now();
    w->fl[w->n_fl++] = (flight){.it = it, .req = -1, .t_taken = now, .t_touch = now};
    if (refuse_prompt(w, w->n_fl - 1)) return;
    if (w->fl[w->n_fl - 1].it.prompt.min_version <= w->version) start_flight(w, w->n_fl - 1);
}

/* Forwards flight i's completions c[0..n) (borrowed) as its rollout group; toks: the tokens the model generated. */
static void forward_group(worker *w, int i, cpt_completion *c, int n, long toks) {
    flight *f = &w->fl[i];
    const cpt_prompt_group *pg = &f->it.prompt;
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, "%s", pg->run);
    g.id = pg->id;
    g.n_prompt = pg->n_prompt;
    g.prompt = pg->prompt;
    g.n_completions = (uint32_t)n;
    g.completions = c;
    g.weight_version = f->version;
    snprintf(g.worker, sizeof g.worker, "%s", w->me);
    double now = cpt_now();
    uint64_t ms = 0, seq = 0;
    g.timings.started = f->t_taken;
    g.timings.gen_s = now - f->t_taken;
    if (!cpt_stream_id_parse(f->it.msg.id, &ms, &seq) && f->t_taken > ms / 1000.0)
        g.timings.queue_s = f->t_taken - ms / 1000.0;
    g.extra = pg->extra;
    cpt_buf buf = {0};
    cpt_err err;
    if (cpt_rollout_group_encode(&g, &buf, &err)) {
        char why[CPT_ERR_MAX + 64];
        snprintf(why, sizeof why, "encoding the rollout group: %s", err.msg);
        dead_letter(w, i, why);
        return;
    }
    if (cpt_queue_forward(w->q, &f->it, CPT_STREAM_ROLLOUTS, buf.data, buf.len, NULL, &err)) {
        cpt_warn("cpt-rollout %s: forwarding group (%llu, %llu): %s (it stays pending and is delivered again)", w->me,
                 (unsigned long long)g.id.epoch, (unsigned long long)g.id.index, err.msg);
    } else {
        w->st->groups++;
        w->st->completions += n;
        w->st->tokens += toks;
    }
    cpt_buf_free(&buf);
    drop_flight(w, i);
}

static int flight_of(const worker *w, int64_t req) {
    int i = 0;
    while (i < w->n_fl && w->fl[i].req != req) i++;
    return i < w->n_fl ? i : -1;
}

static void finish_group(worker *w, const cpt_gen_result *res) {
    int i = flight_of(w, res->id);
    if (i < 0) return;
    cpt_completion *c = calloc((size_t)res->n_samples, sizeof *c);
    if (!c) {
        cpt_warn("cpt-rollout %s: out of memory; the group stays pending", w->me);
        drop_flight(w, i);
        return;
    }
    long toks = 0;
    for (int k = 0; k < res->n_samples; k++) {
        c[k].n_tokens = (uint32_t)res->samples[k].n_tokens;
        c[k].tokens = res->samples[k].tokens;
        c[k].logprobs = res->samples[k].logprobs;
        c[k].finish = res->samples[k].finish;
        toks += res->samples[k].n_tokens;
    }
    forward_group(w, i, c, res->n_samples, toks);
    free(c);
}

/* A group of the turn driver: observation tokens travel with mask 0 and do not count as generated. */
static void finish_turn_group(worker *w, const cpt_turn_result *res) {
    int i = flight_of(w, res->handle);
    if (i < 0) return;
    cpt_completion *c = calloc((size_t)res->n_samples, sizeof *c);
    if (!c) {
        cpt_warn("cpt-rollout %s: out of memory; the group stays pending", w->me);
        drop_flight(w, i);
        return;
    }
    long toks = 0;
    for (int k = 0; k < res->n_samples; k++) {
        const cpt_turn_sample *s = &res->samples[k];
        c[k].n_tokens = (uint32_t)s->n_tokens;
        c[k].tokens = s->tokens;
        c[k].logprobs = s->logprobs;
        c[k].mask = s->mask;
        c[k].finish = s->finish;
        toks += s->n_model;
    }
    forward_group(w, i, c, res->n_samples, toks);
    free(c);
}

/* Tool calls out: one env request per call, to the run's env stream. A request that cannot be sent is logged;
 * its call then ends in the timeout observation. */
static void send_calls(worker *w) {
    cpt_turn_call c;
    while (cpt_turns_next_call(w->turns, &c)) {
        int i = flight_of(w, c.handle);
        if (i < 0) continue;
        const cpt_prompt_group *pg = &w->fl[i].it.prompt;
        cpt_env_request rq;
        memset(&rq, 0, sizeof rq);
        snprintf(rq.run, sizeof rq.run, "%s", w->conn.run);
        snprintf(rq.worker, sizeof rq.worker, "%s", w->me);
        rq.id = pg->id;
        rq.sample = (uint32_t)c.sample;
        rq.turn = (uint32_t)c.turn;
        rq.call = (char *)c.call;
        rq.extra = (char *)c.extra;
        cpt_buf b = {0};
        cpt_err err;
        if (cpt_env_request_encode(&rq, &b, &err)) {
            cpt_warn("cpt-rollout %s: group (%llu, %llu) sample %d call %d: %s", w->me,
                     (unsigned long long)pg->id.epoch, (unsigned long long)pg->id.index, c.sample, c.turn, err.msg);
            continue;
        }
        const char *argv[] = {"XADD", w->env_key, "*", "m", b.data};
        size_t lens[] = {4, strlen(w->env_key), 1, 1, b.len};
        redisReply *r = cpt_redis_command(w->q->redis, 5, argv, lens, w->env_key, 0, &err);
        if (r) freeReplyObject(r);
        else cpt_warn("cpt-rollout %s: sending a tool call: %s (it will time out)", w->me, err.msg);
        cpt_buf_free(&b);
    }
}

/* One reply from the reply stream: to its group's waiting sample, or dropped (another run's, a group this worker
 * does not hold, a call answered already: an env request may be delivered twice). */
static void take_reply(worker *w, const char *data, size_t len) {
    cpt_env_reply rp;
    cpt_err err;
    if (cpt_env_reply_decode(data, len, &rp, &err)) {
        cpt_warn("cpt-rollout %s: a malformed env reply dropped: %s", w->me, err.msg);
        w->st->env_dropped++;
        return;
    }
    int i = 0;
    while (i < w->n_fl && !(w->fl[i].req >= 0 && w->fl[i].it.prompt.id.epoch == rp.id.epoch &&
                            w->fl[i].it.prompt.id.index == rp.id.index))
        i++;
    int rc = 1;
    if (i < w->n_fl && !strcmp(rp.run, w->conn.run))
        rc = cpt_turns_answer(w->turns, w->fl[i].req, (int)rp.sample, (int)rp.turn, rp.observation, rp.ok, &err);
    if (rc < 0) cpt_warn("cpt-rollout %s: %s", w->me, err.msg);
    if (rc == 1) {
        w->st->env_dropped++;
        cpt_debug("cpt-rollout %s: env reply for group (%llu, %llu) sample %u call %u dropped (unknown or answered)",
                  w->me, (unsigned long long)rp.id.epoch, (unsigned long long)rp.id.index, rp.sample, rp.turn);
    } else if (rc == 0) {
        w->st->env_replies++;
    }
    cpt_env_reply_free(&rp);
}

/* Replies in: XREAD of this worker's reply stream after the last entry read (block_ms > 0: wait that long). */
static void read_replies(worker *w, int block_ms) {
    char bms[16];
    snprintf(bms, sizeof bms, "%d", block_ms);
    const char *argv[] = {"XREAD", "COUNT", "64", "BLOCK", bms, "STREAMS", w->reply_key, w->reply_last};
    const char *nb[] = {"XREAD", "COUNT", "64", "STREAMS", w->reply_key, w->reply_last};
    cpt_err err;
    redisReply *r = block_ms > 0 ? cpt_redis_command(w->q->redis, 8, argv, NULL, w->reply_key, block_ms, &err)
                                 : cpt_redis_command(w->q->redis, 6, nb, NULL, w->reply_key, 0, &err);
    if (!r) {
        cpt_warn("cpt-rollout %s: reading env replies: %s", w->me, err.msg);
        return;
    }
    /* [[key, [[id, [field, value, ...]], ...]]] */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->type == REDIS_REPLY_ARRAY &&
        r->element[0]->elements == 2 && r->element[0]->element[1]->type == REDIS_REPLY_ARRAY) {
        redisReply *es = r->element[0]->element[1];
        for (size_t j = 0; j < es->elements; j++) {
            redisReply *e = es->element[j];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 || e->element[0]->type != REDIS_REPLY_STRING) continue;
            snprintf(w->reply_last, sizeof w->reply_last, "%s", e->element[0]->str);
            redisReply *kv = e->element[1];
            for (size_t k = 0; kv->type == REDIS_REPLY_ARRAY && k + 1 < kv->elements; k += 2)
                if (kv->element[k]->type == REDIS_REPLY_STRING && !strcmp(kv->element[k]->str, "m") &&
                    kv->element[k + 1]->type == REDIS_REPLY_STRING)
                    take_reply(w, kv->element[k + 1]->str, kv->element[k + 1]->len);
        }
    }
    freeReplyObject(r);
}

/* The turn driver's part of the loop: a decode step, calls out, replies in (waiting briefly for them when nothing
 * else is to be done), finished groups forwarded. */
static int step_turns(worker *w, double now, cpt_err *err) {
    if (cpt_turns_step(w->turns, now, err) < 0) return -1;
    send_calls(w);
    if (cpt_turns_waiting(w->turns) > 0) read_replies(w, cpt_engine_idle(w->eng) ? 20 : 0);
    cpt_turn_result res;
    while (cpt_turns_take(w->turns, &res)) {
        finish_turn_group(w, &res);
        cpt_turn_result_free(&res);
    }
    return 0;
}

int cpt_rollout_worker_run(const cpt_config *cfg, const char *worker_id, volatile sig_atomic_t *stop,
                           cpt_rollout_worker_stats *stats, cpt_err *err) {
    cpt_rollout_worker_stats local;
    worker W, *w = &W;
    memset(w, 0, sizeof *w);
    w->cfg = cfg, w->me = worker_id, w->stop = stop, w->st = stats ? stats : &local;
    w->on_gpu = !strcmp(cpt_device_resolve(cfg, "rollout.device"), "cuda");
    memset(w->st, 0, sizeof *w->st);
    const char *rd = getenv("CPT_RUN");
    snprintf(w->run_dir, sizeof w->run_dir, "%s", rd && *rd ? rd : cpt_cfg_str(cfg, "run.dir"));
    if (cpt_cfg_int(cfg, "rollout.threads")) omp_set_num_threads((int)cpt_cfg_int(cfg, "rollout.threads"));
    int rc = -1;
    const int random_init = !strcmp(cpt_cfg_str(cfg, "model.init"), "random");
    const char *tp = cpt_cfg_str(cfg, "tokenizer.path");
    if (!*tp && !random_init) tp = cpt_cfg_str(cfg, "model.path");
    if (*tp && !(w->tok = cpt_rollout_load_tokenizer(tp, 0, err)) && err->msg[0]) {
        cpt_err_prefix(err, "tokenizer %s", tp);
        goto done;
    }
    if (strcmp(cpt_cfg_str(cfg, "env.type"), "none") && !w->tok) {
        cpt_errf(err, "env.type = %s: multi-turn rollouts need a tokenizer (tokenizer.path)", cpt_cfg_str(cfg, "env.type"));
        goto done;
    }
    if (cpt_turn_opts_from_config(cfg, tp, &w->topts, &w->tools, err)) goto done;
    for (size_t k = 0; k < cpt_cfg_array_len(cfg, "rollout.stop"); k++) {
        size_t n = strlen(cpt_cfg_array_str(cfg, "rollout.stop", k));
        if (!w->tok || n == 0 || n > CPT_MAX_STOP_STR) {
            cpt_errf(err, "rollout.stop[%zu]: %s", k, !w->tok ? "stop strings need a tokenizer (tokenizer.path)"
                                                               : "expected 1..1024 bytes");
            goto done;
        }
    }
    if (!random_init) {
        if (!(w->m = cpt_rollout_load_model(cpt_cfg_str(cfg, "model.path"), NULL, 0, err))) {
            cpt_err_prefix(err, "model.path");
            goto done;
        }
        if (make_engine(w, err)) goto done;
    }
    if (open_queue(w, err)) goto done;
    if (!(w->rx = cpt_weights_rx_new(cfg, worker_id, w->q, err))) goto done;
    cpt_info("cpt-rollout %s: run %s, %s, %d slots, on %s, weights over %s", worker_id, w->conn.run,
             random_init ? "model from the first weight version" : cpt_cfg_str(cfg, "model.path"),
             (int)cpt_cfg_int(cfg, "rollout.slots"), w->on_gpu ? "GPU 0" : "the CPU", cpt_transport_resolve(cfg));
    if (w->tools)
        cpt_info("cpt-rollout %s: tools (env.type = %s): up to %d calls per sample ending in \"%s\", requests to %s, "
                 "replies on %s", worker_id, cpt_cfg_str(cfg, "env.type"), w->topts.max_turns, w->topts.call_end,
                 w->env_key, w->reply_key);

    const double poll_s = cpt_cfg_int(cfg, "rollout.weight_poll_ms") / 1000.0;
    const double hb_s = cpt_cfg_float(cfg, "rollout.heartbeat_s"), max_wait = cpt_cfg_float(cfg, "rollout.max_wait_weights_s");
    const double touch_s = w->q->claim_idle_ms / 3000.0;
    double t_poll = 0, t_hb = 0, t_start = cpt_now();
    long hb_tokens = 0, hb_steps = 0, hb_slot_steps = 0, hb_preempt = 0, hb_recomputed = 0;
    for (;;) {
        double now = cpt_now();
        int gen = n_generating(w);
        /* SIGUSR2 (a preempted satellite, cli/worker_args.h): no time to finish; what is held is handed back below */
        if (*stop && (gen == 0 || *stop == SIGUSR2)) break;
        if (now - t_poll >= poll_s) {
            poll_weights(w);
            t_poll = now;
        }
        if (w->has_want && gen == 0 && load_wanted(w, err)) goto done;
        if (now - t_hb >= hb_s) {
            static const cpt_engine_stats none;
            const cpt_engine_stats *es = w->eng ? cpt_engine_get_stats(w->eng) : &none;
            double dt = t_hb > 0 ? now - t_hb : 0;
            long steps = es->decode_steps - hb_steps;
            heartbeat(w, dt > 0 ? (es->generated_tokens - hb_tokens) / dt : 0,
                      steps > 0 ? (double)(es->slot_steps - hb_slot_steps) / ((double)steps * cpt_engine_slots(w->eng)) : 0);
            if (es->preemptions > hb_preempt) /* a full KV cache: worth a line (rollout.kv_blocks, gpu_memory_fraction) */
                cpt_info("cpt-rollout %s: %ld samples preempted (KV cache full), %ld positions recomputed since the "
                         "last heartbeat; %ld and %ld in all", w->me, es->preemptions - hb_preempt,
                         es->recomputed_tokens - hb_recomputed, es->preemptions, es->recomputed_tokens);
            hb_tokens = es->generated_tokens, hb_steps = es->decode_steps, hb_slot_steps = es->slot_steps;
            hb_preempt = es->preemptions, hb_recomputed = es->recomputed_tokens;
            t_hb = now;
        }
        if (!w->m) {
            if (max_wait > 0 && now - t_start > max_wait) {
                cpt_errf(err, "no weight version announced within rollout.max_wait_weights_s = %g s", max_wait);
                goto done;
            }
            usleep(20000);
            continue;
        }
        /* groups waiting for a version: start them once it is here; keep every held group from being reclaimed */
        int waiting = 0;
        for (int i = 0; i < w->n_fl; i++) {
            flight *f = &w->fl[i];
            /* The trainer announces a version before it issues prompts that need it, so a held prompt above the
             * announced version was issued by a trainer that has since resumed from an older checkpoint: that
             * version may never come again, and the resumed trainer issues the group anew. Waiting would stall. */
            if (f->req < 0 && w->has_announced && f->it.prompt.min_version > w->announced) {
                char why[160];
                snprintf(why, sizeof why, "obsolete: min_version %llu is above the announced version %llu (issued by "
                         "a trainer that has since resumed from an older checkpoint)",
                         (unsigned long long)f->it.prompt.min_version, (unsigned long long)w->announced);
                dead_letter(w, i, why);
                i = -1;
                waiting = 0;
                continue;
            }
            if (f->req < 0 && !w->has_want && f->it.prompt.min_version <= w->version) {
                start_flight(w, i);
                i = -1; /* start_flight may have dropped it: rescan */
                waiting = 0;
                continue;
            }
            if (f->req < 0) waiting++;
            if (now - f->t_touch >= touch_s) {
                cpt_err terr;
                if (cpt_queue_touch(w->q, &f->it, &terr)) cpt_warn("cpt-rollout %s: touch: %s", w->me, terr.msg);
                f->t_touch = now;
            }
        }
        if (!*stop && !w->has_want && !waiting && cpt_engine_waiting(w->eng) == 0 &&
            cpt_engine_active(w->eng) < cpt_engine_slots(w->eng))
            take_group(w);
        else if (cpt_engine_idle(w->eng) && !(w->turns && cpt_turns_waiting(w->turns)))
            usleep(20000);
        if (w->turns) {
            if (step_turns(w, cpt_now(), err)) goto done;
            continue;
        }
        if (!cpt_engine_idle(w->eng) && cpt_engine_step(w->eng, err) < 0) goto done;
        cpt_gen_result res;
        while (cpt_engine_take(w->eng, &res)) {
            finish_group(w, &res);
            cpt_gen_result_free(&res);
        }
    }
    cpt_info("cpt-rollout %s: stopping: %ld groups (%ld completions, %ld tokens), %ld dead, weights v%llu", worker_id,
             w->st->groups, w->st->completions, w->st->tokens, w->st->dead, (unsigned long long)w->version);
    if (w->tools)
        cpt_info("cpt-rollout %s: tools: %ld replies taken, %ld dropped", worker_id, w->st->env_replies,
                 w->st->env_dropped);
    rc = 0;
done:
    /* A drain (rc 0) leaves only groups held for a weight version not loaded yet (or, on SIGUSR2, groups half
     * generated too): hand them back at once, or the other workers take them only after queue.claim_idle_ms (a
     * sync-mode trainer waits that long). After an error they stay unacked and are claimed after claim_idle_ms. */
    for (int i = 0; rc == 0 && i < w->n_fl; i++) {
        cpt_err rerr;
        if (cpt_queue_release(w->q, &w->fl[i].it, &rerr))
            cpt_warn("cpt-rollout %s: handing back a held group: %s", worker_id, rerr.msg);
    }
    if (rc == 0 && w->n_fl)
        cpt_info("cpt-rollout %s: handed back %d held group%s", worker_id, w->n_fl, w->n_fl == 1 ? "" : "s");
    cpt_err gerr;
    if (rc == 0 && cpt_queue_worker_gone(w->q, worker_id, &gerr)) /* drained: off cpt-queue stats' list */
        cpt_warn("cpt-rollout %s: removing its heartbeat: %s", worker_id, gerr.msg);
    if (w->q && w->reply_key[0]) { /* its replies have no reader any more */
        const char *del[] = {"DEL", w->reply_key};
        redisReply *r = cpt_redis_command(w->q->redis, 2, del, NULL, w->reply_key, 0, &gerr);
        if (r) freeReplyObject(r);
        else cpt_warn("cpt-rollout %s: deleting its env reply stream: %s", worker_id, gerr.msg);
    }
    while (w->n_fl) drop_flight(w, w->n_fl - 1); /* unacked: reclaimed by another worker */
    free(w->fl);
    cpt_weights_rx_free(w->rx); /* leaves the nccl group: a new epoch without this worker */
    cpt_queue_close(w->q);
    cpt_turns_free(w->turns);
    cpt_turn_opts_free(&w->topts);
    cpt_engine_free(w->eng);
    cpt_model_free(w->m);
    cpt_tokenizer_free(w->tok);
    return rc;
}
