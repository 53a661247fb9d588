#include "queue/schema.h"

#include "queue/msg_codec.h"

#include <jansson.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *type_names[] = {"none", "prompt_group", "rollout_group", "scored_group",
                                   "weights", "control", "heartbeat", "env_request", "env_reply"};

const char *cpt_msg_type_name(cpt_msg_type t) {
    return (unsigned)t < sizeof type_names / sizeof *type_names ? type_names[t] : "unknown";
}

static const char *finish_names[] = {"stop", "length", "abort"};
const char *cpt_finish_name(cpt_finish f) { return (unsigned)f < 3 ? finish_names[f] : "unknown"; }

void cpt_buf_free(cpt_buf *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
}

int cpt_run_id_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= CPT_RUN_ID_MAX) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '.' ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

int cpt_name_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= CPT_NAME_MAX) return 0;
    for (; *s; s++)
        if (*s < '!' || *s > '~') return 0;
    return 1;
}

static int json_valid(const char *s, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, &je);
    if (!j) return 0;
    json_decref(j);
    return 1;
}

/* ---- checks shared by encoders and decoders ---- */

static int check_sampling(const cpt_sampling *s, cpt_err *err) {
    if (!(s->temperature >= 0 && s->temperature <= 100))
        return cpt_errf(err, "sampling.temperature = %g: expected 0..100", s->temperature);
    if (!(s->top_p > 0 && s->top_p <= 1)) return cpt_errf(err, "sampling.top_p = %g: expected (0, 1]", s->top_p);
    if (s->top_k < 0) return cpt_errf(err, "sampling.top_k = %d: expected >= 0 (0 = off)", s->top_k);
    if (!(s->min_p >= 0 && s->min_p < 1)) return cpt_errf(err, "sampling.min_p = %g: expected [0, 1)", s->min_p);
    if (s->max_new_tokens < 1 || s->max_new_tokens > CPT_MAX_COMPLETION_TOKENS)
        return cpt_errf(err, "sampling.max_new_tokens = %u: expected 1..%u", s->max_new_tokens,
                        CPT_MAX_COMPLETION_TOKENS);
    if (s->n_stop_ids > CPT_MAX_STOP) return cpt_errf(err, "sampling.stop_ids: %u ids, max %d", s->n_stop_ids, CPT_MAX_STOP);
    for (uint32_t i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] < 0) return cpt_errf(err, "sampling.stop_ids[%u] = %d: negative token id", i, s->stop_ids[i]);
    if (s->n_stop_strs > CPT_MAX_STOP)
        return cpt_errf(err, "sampling.stop: %u strings, max %d", s->n_stop_strs, CPT_MAX_STOP);
    for (uint32_t i = 0; i < s->n_stop_strs; i++) {
        size_t n = strlen(s->stop_strs[i]);
        if (n == 0 || n > CPT_MAX_STOP_STR)
            return cpt_errf(err, "sampling.stop[%u]: length %zu, expected 1..%d bytes", i, n, CPT_MAX_STOP_STR);
    }
    return 0;
}

static int check_tokens(const int32_t *t, uint32_t n, uint32_t max, const char *what, cpt_err *err) {
    if (n > max) return cpt_errf(err, "%s: %u tokens, max %u", what, n, max);
    for (uint32_t i = 0; i < n; i++)
        if (t[i] < 0) return cpt_errf(err, "%s[%u] = %d: negative token id", what, i, t[i]);
    return 0;
}

static int check_extra(const char *extra, cpt_err *err) {
    if (!extra) return 0;
    size_t n = strlen(extra);
    if (n > CPT_MAX_EXTRA) return cpt_errf(err, "extra: %zu bytes, max %u", n, CPT_MAX_EXTRA);
    if (!json_valid(extra, n)) return cpt_errf(err, "extra: not valid JSON");
    return 0;
}

static int check_prompt_group(const cpt_prompt_group *m, cpt_err *err) {
    if (!cpt_run_id_valid(m->run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id ([A-Za-z0-9._-]{1,127})", m->run);
    if (m->n_prompt == 0) return cpt_errf(err, "prompt: empty");
    if (check_tokens(m->prompt, m->n_prompt, CPT_MAX_PROMPT_TOKENS, "prompt", err)) return -1;
    if (m->n_samples < 1 || m->n_samples > CPT_MAX_SAMPLES)
        return cpt_errf(err, "n = %u: expected 1..%d samples", m->n_samples, CPT_MAX_SAMPLES);
    if (check_sampling(&m->sampling, err)) return -1;
    return check_extra(m->extra, err);
}

static int check_rollout_group(const cpt_rollout_group *m, cpt_err *err) {
    if (!cpt_run_id_valid(m->run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id ([A-Za-z0-9._-]{1,127})", m->run);
    if (m->n_prompt == 0) return cpt_errf(err, "prompt: empty");
    if (check_tokens(m->prompt, m->n_prompt, CPT_MAX_PROMPT_TOKENS, "prompt", err)) return -1;
    if (m->n_completions < 1 || m->n_completions > CPT_MAX_SAMPLES)
        return cpt_errf(err, "completions: %u, expected 1..%d", m->n_completions, CPT_MAX_SAMPLES);
    if (!cpt_name_valid(m->worker)) return cpt_errf(err, "worker: \"%.64s\" is not a valid name (visible ASCII, 1..127)", m->worker);
    const cpt_timings *t = &m->timings;
    if (!(isfinite(t->started) && t->started >= 0 && isfinite(t->gen_s) && t->gen_s >= 0 && isfinite(t->queue_s) &&
          t->queue_s >= 0))
        return cpt_errf(err, "timings: every value must be finite and >= 0");
    for (uint32_t c = 0; c < m->n_completions; c++) {
        const cpt_completion *k = &m->completions[c];
        char what[64];
        snprintf(what, sizeof what, "completions[%u].tokens", c);
        if (check_tokens(k->tokens, k->n_tokens, CPT_MAX_COMPLETION_TOKENS, what, err)) return -1;
        if ((unsigned)k->finish > CPT_FINISH_ABORT) return cpt_errf(err, "completions[%u].finish: unknown value %d", c, k->finish);
        for (uint32_t i = 0; i < k->n_tokens; i++)
            if (!(isfinite(k->logprobs[i]) && k->logprobs[i] <= 1e-3f))
                return cpt_errf(err, "completions[%u].logprobs[%u] = %g: expected a finite value <= 0", c, i, k->logprobs[i]);
        if (k->mask)
            for (uint32_t i = 0; i < k->n_tokens; i++)
                if (k->mask[i] > 1) return cpt_errf(err, "completions[%u].mask[%u] = %u: expected 0 or 1", c, i, k->mask[i]);
        if (k->teacher_logprobs && !m->has_rewards)
            return cpt_errf(err, "completions[%u].teacher_logprobs: only scored groups carry them", c);
        if (k->teacher_logprobs)
            for (uint32_t i = 0; i < k->n_tokens; i++)
                if (!(isfinite(k->teacher_logprobs[i]) && k->teacher_logprobs[i] <= 1e-3f))
                    return cpt_errf(err, "completions[%u].teacher_logprobs[%u] = %g: expected a finite value <= 0", c,
                                    i, k->teacher_logprobs[i]);
    }
    if (m->has_rewards) {
        for (uint32_t c = 0; c < m->n_completions; c++)
            if (!isfinite(m->rewards[c])) return cpt_errf(err, "rewards[%u]: not finite", c);
        if (m->n_parts > CPT_MAX_REWARD_PARTS)
            return cpt_errf(err, "reward_parts: %u parts, max %d", m->n_parts, CPT_MAX_REWARD_PARTS);
        for (uint32_t p = 0; p < m->n_parts; p++) {
            if (!cpt_name_valid(m->part_names[p])) return cpt_errf(err, "reward_parts: part %u has an invalid name", p);
            for (uint32_t q = 0; q < p; q++)
                if (!strcmp(m->part_names[p], m->part_names[q]))
                    return cpt_errf(err, "reward_parts: \"%s\" appears twice", m->part_names[p]);
            for (uint32_t c = 0; c < m->n_completions; c++)
                if (!isfinite(m->part_values[(size_t)p * m->n_completions + c]))
                    return cpt_errf(err, "reward_parts.%s[%u]: not finite", m->part_names[p], c);
        }
    } else if (m->n_parts) {
        return cpt_errf(err, "reward_parts: only scored groups carry them");
    }
    return check_extra(m->extra, err);
}

static int check_weights(const cpt_weights_msg *m, cpt_err *err) {
    if (!cpt_run_id_valid(m->run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id", m->run);
    if (strcmp(m->transport, "file") && strcmp(m->transport, "nccl") && strcmp(m->transport, "cuda_ipc"))
        return cpt_errf(err, "transport = \"%s\": expected file, nccl or cuda_ipc", m->transport);
    if (!m->location[0]) return cpt_errf(err, "location: empty");
    if (!m->checksum[0]) return cpt_errf(err, "checksum: empty");
    return 0;
}

static int check_control(const cpt_control_msg *m, cpt_err *err) {
    if (!cpt_run_id_valid(m->run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id", m->run);
    static const char *states[] = {"running", "draining", "stopping", "stopped"};
    int ok = 0;
    for (int i = 0; i < 4; i++) ok |= !strcmp(m->state, states[i]);
    if (!ok) return cpt_errf(err, "state = \"%s\": expected running, draining, stopping or stopped", m->state);
    if (m->n_roles > CPT_MAX_ROLES) return cpt_errf(err, "desired: %u roles, max %d", m->n_roles, CPT_MAX_ROLES);
    for (uint32_t i = 0; i < m->n_roles; i++) {
        if (!cpt_name_valid(m->roles[i].role)) return cpt_errf(err, "desired: role %u has an invalid name", i);
        if (m->roles[i].count > 100000) return cpt_errf(err, "desired.%s = %u: max 100000", m->roles[i].role, m->roles[i].count);
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(m->roles[i].role, m->roles[j].role))
                return cpt_errf(err, "desired: role \"%s\" appears twice", m->roles[i].role);
    }
    return 0;
}

static int check_heartbeat(const cpt_heartbeat_msg *m, cpt_err *err) {
    if (!cpt_run_id_valid(m->run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id", m->run);
    if (!cpt_name_valid(m->worker)) return cpt_errf(err, "worker: invalid name");
    if (!cpt_name_valid(m->role)) return cpt_errf(err, "role: invalid name");
    if (!cpt_name_valid(m->host)) return cpt_errf(err, "host: invalid name");
    if (!(isfinite(m->tokens_per_s) && m->tokens_per_s >= 0))
        return cpt_errf(err, "tokens_per_s = %g: expected finite and >= 0", m->tokens_per_s);
    if (!(m->occupancy >= 0 && m->occupancy <= 1)) return cpt_errf(err, "occupancy = %g: expected 0..1", m->occupancy);
    if (!(isfinite(m->time) && m->time >= 0)) return cpt_errf(err, "time = %g: expected finite and >= 0", m->time);
    return 0;
}

/* ---- envelope and buffers (queue/msg_codec.h) ---- */

static void pack_envelope(msgpack_packer *pk, cpt_msg_type t, const char *run) {
    cpt_mp_pack_envelope(pk, CPT_SCHEMA_VERSION, cpt_msg_type_name(t), run);
}

static int finish_buf(msgpack_sbuffer *sb, cpt_buf *out, cpt_err *err) {
    return cpt_mp_finish_buf(sb, CPT_MSG_MAX_BYTES, &out->data, &out->len, err);
}

/* The envelope: schema, type and run, checked against the expected type. */
static int dec_envelope(const msgpack_object *root, cpt_msg_type want, char *run, cpt_err *err) {
    if (cpt_mp_dec_envelope(root, CPT_SCHEMA_VERSION, cpt_msg_type_name(want), run, CPT_RUN_ID_MAX, err)) return -1;
    if (!cpt_run_id_valid(run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id", run);
    return 0;
}

/* ---- encoding ---- */

static int is_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* 4-byte values as a little-endian bin. */
static void pack_bin32(msgpack_packer *pk, const void *v, uint32_t n) {
    msgpack_pack_bin(pk, (size_t)n * 4);
    if (is_little_endian()) {
        if (n) msgpack_pack_bin_body(pk, v, (size_t)n * 4);
        return;
    }
    const uint8_t *p = v;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t b[4] = {p[4 * i + 3], p[4 * i + 2], p[4 * i + 1], p[4 * i]};
        msgpack_pack_bin_body(pk, b, 4);
    }
}


static void pack_group_id(msgpack_packer *pk, cpt_group_id id) {
    cpt_mp_pack_key(pk, "group");
    msgpack_pack_array(pk, 2);
    msgpack_pack_uint64(pk, id.epoch);
    msgpack_pack_uint64(pk, id.index);
}

int cpt_prompt_group_encode(const cpt_prompt_group *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    if (check_prompt_group(m, err)) return cpt_err_prefix(err, "encoding prompt group");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 8 + (m->extra ? 1 : 0));
    pack_envelope(&pk, CPT_MSG_PROMPT_GROUP, m->run);
    pack_group_id(&pk, m->id);
    cpt_mp_pack_key(&pk, "prompt");
    pack_bin32(&pk, m->prompt, m->n_prompt);
    cpt_mp_pack_key(&pk, "n");
    msgpack_pack_uint32(&pk, m->n_samples);
    cpt_mp_pack_key(&pk, "sampling");
    const cpt_sampling *s = &m->sampling;
    msgpack_pack_map(&pk, 8);
    cpt_mp_pack_key(&pk, "temperature");
    msgpack_pack_float(&pk, s->temperature);
    cpt_mp_pack_key(&pk, "top_p");
    msgpack_pack_float(&pk, s->top_p);
    cpt_mp_pack_key(&pk, "top_k");
    msgpack_pack_int32(&pk, s->top_k);
    cpt_mp_pack_key(&pk, "min_p");
    msgpack_pack_float(&pk, s->min_p);
    cpt_mp_pack_key(&pk, "max_new_tokens");
    msgpack_pack_uint32(&pk, s->max_new_tokens);
    cpt_mp_pack_key(&pk, "seed");
    msgpack_pack_uint64(&pk, s->seed);
    cpt_mp_pack_key(&pk, "stop_ids");
    pack_bin32(&pk, s->stop_ids, s->n_stop_ids);
    cpt_mp_pack_key(&pk, "stop");
    msgpack_pack_array(&pk, s->n_stop_strs);
    for (uint32_t i = 0; i < s->n_stop_strs; i++) cpt_mp_pack_cstr(&pk, s->stop_strs[i]);
    cpt_mp_pack_key(&pk, "min_version");
    msgpack_pack_uint64(&pk, m->min_version);
    if (m->extra) {
        cpt_mp_pack_key(&pk, "extra");
        cpt_mp_pack_cstr(&pk, m->extra);
    }
    if (finish_buf(&sb, out, err)) return cpt_err_prefix(err, "encoding prompt group");
    return 0;
}

/* The mask travels only when it says something: some token is not the model's. */
static int mask_needed(const cpt_completion *k) {
    if (!k->mask) return 0;
    for (uint32_t i = 0; i < k->n_tokens; i++)
        if (!k->mask[i]) return 1;
    return 0;
}

int cpt_rollout_group_encode(const cpt_rollout_group *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    const char *what = m->has_rewards ? "scored group" : "rollout group";
    if (check_rollout_group(m, err)) return cpt_err_prefix(err, "encoding %s", what);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9 + (m->extra ? 1 : 0) + (m->has_rewards ? 2 : 0));
    pack_envelope(&pk, m->has_rewards ? CPT_MSG_SCORED_GROUP : CPT_MSG_ROLLOUT_GROUP, m->run);
    pack_group_id(&pk, m->id);
    cpt_mp_pack_key(&pk, "prompt");
    pack_bin32(&pk, m->prompt, m->n_prompt);
    cpt_mp_pack_key(&pk, "completions");
    msgpack_pack_array(&pk, m->n_completions);
    for (uint32_t c = 0; c < m->n_completions; c++) {
        const cpt_completion *k = &m->completions[c];
        int with_mask = mask_needed(k);
        msgpack_pack_map(&pk, 3 + (k->teacher_logprobs ? 1 : 0) + with_mask);
        cpt_mp_pack_key(&pk, "tokens");
        pack_bin32(&pk, k->tokens, k->n_tokens);
        cpt_mp_pack_key(&pk, "logprobs");
        pack_bin32(&pk, k->logprobs, k->n_tokens);
        cpt_mp_pack_key(&pk, "finish");
        cpt_mp_pack_cstr(&pk, cpt_finish_name(k->finish));
        if (with_mask) {
            cpt_mp_pack_key(&pk, "mask");
            msgpack_pack_bin(&pk, k->n_tokens);
            msgpack_pack_bin_body(&pk, k->mask, k->n_tokens);
        }
        if (k->teacher_logprobs) {
            cpt_mp_pack_key(&pk, "teacher_logprobs");
            pack_bin32(&pk, k->teacher_logprobs, k->n_tokens);
        }
    }
    cpt_mp_pack_key(&pk, "weight_version");
    msgpack_pack_uint64(&pk, m->weight_version);
    cpt_mp_pack_key(&pk, "worker");
    cpt_mp_pack_cstr(&pk, m->worker);
    cpt_mp_pack_key(&pk, "timings");
    msgpack_pack_map(&pk, 3);
    cpt_mp_pack_key(&pk, "started");
    msgpack_pack_double(&pk, m->timings.started);
    cpt_mp_pack_key(&pk, "gen_s");
    msgpack_pack_double(&pk, m->timings.gen_s);
    cpt_mp_pack_key(&pk, "queue_s");
    msgpack_pack_double(&pk, m->timings.queue_s);
    if (m->extra) {
        cpt_mp_pack_key(&pk, "extra");
        cpt_mp_pack_cstr(&pk, m->extra);
    }
    if (m->has_rewards) {
        cpt_mp_pack_key(&pk, "rewards");
        msgpack_pack_array(&pk, m->n_completions);
        for (uint32_t c = 0; c < m->n_completions; c++) msgpack_pack_double(&pk, m->rewards[c]);
        cpt_mp_pack_key(&pk, "reward_parts");
        msgpack_pack_map(&pk, m->n_parts);
        for (uint32_t p = 0; p < m->n_parts; p++) {
            cpt_mp_pack_cstr(&pk, m->part_names[p]);
            msgpack_pack_array(&pk, m->n_completions);
            for (uint32_t c = 0; c < m->n_completions; c++)
                msgpack_pack_double(&pk, m->part_values[(size_t)p * m->n_completions + c]);
        }
    }
    if (finish_buf(&sb, out, err)) return cpt_err_prefix(err, "encoding %s", what);
    return 0;
}

int cpt_weights_encode(const cpt_weights_msg *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    if (check_weights(m, err)) return cpt_err_prefix(err, "encoding weights announcement");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    pack_envelope(&pk, CPT_MSG_WEIGHTS, m->run);
    cpt_mp_pack_key(&pk, "version");
    msgpack_pack_uint64(&pk, m->version);
    cpt_mp_pack_key(&pk, "transport");
    cpt_mp_pack_cstr(&pk, m->transport);
    cpt_mp_pack_key(&pk, "location");
    cpt_mp_pack_cstr(&pk, m->location);
    cpt_mp_pack_key(&pk, "bytes");
    msgpack_pack_uint64(&pk, m->bytes);
    cpt_mp_pack_key(&pk, "checksum");
    cpt_mp_pack_cstr(&pk, m->checksum);
    cpt_mp_pack_key(&pk, "membership_epoch");
    msgpack_pack_uint64(&pk, m->membership_epoch);
    return finish_buf(&sb, out, err);
}

int cpt_control_encode(const cpt_control_msg *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    if (check_control(m, err)) return cpt_err_prefix(err, "encoding control");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    pack_envelope(&pk, CPT_MSG_CONTROL, m->run);
    cpt_mp_pack_key(&pk, "state");
    cpt_mp_pack_cstr(&pk, m->state);
    cpt_mp_pack_key(&pk, "desired");
    msgpack_pack_map(&pk, m->n_roles);
    for (uint32_t i = 0; i < m->n_roles; i++) {
        cpt_mp_pack_cstr(&pk, m->roles[i].role);
        msgpack_pack_uint32(&pk, m->roles[i].count);
    }
    return finish_buf(&sb, out, err);
}

int cpt_heartbeat_encode(const cpt_heartbeat_msg *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    if (check_heartbeat(m, err)) return cpt_err_prefix(err, "encoding heartbeat");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 10);
    pack_envelope(&pk, CPT_MSG_HEARTBEAT, m->run);
    cpt_mp_pack_key(&pk, "worker");
    cpt_mp_pack_cstr(&pk, m->worker);
    cpt_mp_pack_key(&pk, "role");
    cpt_mp_pack_cstr(&pk, m->role);
    cpt_mp_pack_key(&pk, "host");
    cpt_mp_pack_cstr(&pk, m->host);
    cpt_mp_pack_key(&pk, "version");
    msgpack_pack_uint64(&pk, m->version);
    cpt_mp_pack_key(&pk, "tokens_per_s");
    msgpack_pack_double(&pk, m->tokens_per_s);
    cpt_mp_pack_key(&pk, "occupancy");
    msgpack_pack_double(&pk, m->occupancy);
    cpt_mp_pack_key(&pk, "time");
    msgpack_pack_double(&pk, m->time);
    return finish_buf(&sb, out, err);
}

/* ---- decoding ---- */

/* A number within [lo, hi] as a float (checked before the conversion, which is undefined out of range). */
static int get_f32(const msgpack_object *o, const char *what, double lo, double hi, float *out, cpt_err *err) {
    double v = 0;
    if (cpt_mp_get_f64(o, what, &v, err)) return -1;
    if (v < lo || v > hi) return cpt_errf(err, "%s = %g: expected %g..%g", what, v, lo, hi);
    *out = (float)v;
    return 0;
}

/* A bin of 4-byte little-endian values: checks the length is a multiple of 4 and at most max values, copies them
 * into a malloc'd array (empty: a 1-element allocation so the pointer is never NULL). */
static void *get_bin32(const msgpack_object *o, const char *what, uint32_t max, uint32_t *n, cpt_err *err) {
    if (o->type != MSGPACK_OBJECT_BIN) { cpt_errf(err, "%s: expected a bin of 4-byte values", what); return NULL; }
    uint32_t size = o->via.bin.size;
    if (size % 4) { cpt_errf(err, "%s: %u bytes is not a whole number of 4-byte values", what, size); return NULL; }
    if (size / 4 > max) { cpt_errf(err, "%s: %u values, max %u", what, size / 4, max); return NULL; }
    uint8_t *v = malloc(size ? size : 4);
    if (!v) { cpt_errf(err, "%s: out of memory", what); return NULL; }
    if (size) memcpy(v, o->via.bin.ptr, size);
    if (!is_little_endian())
        for (uint32_t i = 0; i < size; i += 4) {
            uint8_t t0 = v[i], t1 = v[i + 1];
            v[i] = v[i + 3]; v[i + 1] = v[i + 2]; v[i + 2] = t1; v[i + 3] = t0;
        }
    *n = size / 4;
    return v;
}

static int get_group_id(const msgpack_object *o, cpt_group_id *id, cpt_err *err) {
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2) return cpt_errf(err, "group: expected [epoch, index]");
    if (cpt_mp_get_u64(&o->via.array.ptr[0], "group.epoch", UINT64_MAX, &id->epoch, err)) return -1;
    return cpt_mp_get_u64(&o->via.array.ptr[1], "group.index", UINT64_MAX, &id->index, err);
}

void cpt_prompt_group_free(cpt_prompt_group *m) {
    if (!m) return;
    free(m->prompt);
    free(m->sampling.stop_ids);
    if (m->sampling.stop_strs)
        for (uint32_t i = 0; i < m->sampling.n_stop_strs; i++) free(m->sampling.stop_strs[i]);
    free(m->sampling.stop_strs);
    free(m->extra);
    memset(m, 0, sizeof *m);
}

static int dec_sampling(const msgpack_object *o, cpt_sampling *s, cpt_err *err) {
    static const char *const keys[] = {"temperature", "top_p", "top_k", "min_p", "max_new_tokens", "seed",
                                       "stop_ids", "stop", NULL};
    static const int req[] = {1, 1, 1, 1, 1, 1, 1, 1};
    if (o->type != MSGPACK_OBJECT_MAP) return cpt_errf(err, "sampling: expected a map");
    if (cpt_mp_check_keys(o, keys, req, "sampling", err)) return -1;
    if (get_f32(cpt_mp_get(o, "temperature"), "sampling.temperature", 0, 100, &s->temperature, err)) return -1;
    if (get_f32(cpt_mp_get(o, "top_p"), "sampling.top_p", 0, 1, &s->top_p, err)) return -1;
    if (get_f32(cpt_mp_get(o, "min_p"), "sampling.min_p", 0, 1, &s->min_p, err)) return -1;
    int64_t k = 0;
    if (cpt_mp_get_i64(cpt_mp_get(o, "top_k"), "sampling.top_k", 0, INT32_MAX, &k, err)) return -1;
    s->top_k = (int32_t)k;
    uint64_t u = 0;
    if (cpt_mp_get_u64(cpt_mp_get(o, "max_new_tokens"), "sampling.max_new_tokens", CPT_MAX_COMPLETION_TOKENS, &u, err)) return -1;
    s->max_new_tokens = (uint32_t)u;
    if (cpt_mp_get_u64(cpt_mp_get(o, "seed"), "sampling.seed", UINT64_MAX, &s->seed, err)) return -1;
    s->stop_ids = get_bin32(cpt_mp_get(o, "stop_ids"), "sampling.stop_ids", CPT_MAX_STOP, &s->n_stop_ids, err);
    if (!s->stop_ids) return -1;
    const msgpack_object *st = cpt_mp_get(o, "stop");
    if (st->type != MSGPACK_OBJECT_ARRAY) return cpt_errf(err, "sampling.stop: expected an array of strings");
    if (st->via.array.size > CPT_MAX_STOP)
        return cpt_errf(err, "sampling.stop: %u strings, max %d", st->via.array.size, CPT_MAX_STOP);
    s->stop_strs = calloc(st->via.array.size ? st->via.array.size : 1, sizeof(char *));
    if (!s->stop_strs) return cpt_errf(err, "out of memory");
    for (uint32_t i = 0; i < st->via.array.size; i++) {
        char what[32];
        snprintf(what, sizeof what, "sampling.stop[%u]", i);
        s->stop_strs[i] = cpt_mp_dup_str(&st->via.array.ptr[i], what, CPT_MAX_STOP_STR, err);
        if (!s->stop_strs[i]) return -1;
        s->n_stop_strs = i + 1;
    }
    return 0;
}

int cpt_prompt_group_decode(const void *data, size_t len, cpt_prompt_group *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    cpt_mp_dec d;
    int rc = -1;
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err)) goto out;
    static const char *const keys[] = {"schema", "type", "run", "group", "prompt", "n", "sampling", "min_version",
                                       "extra", NULL};
    static const int req[] = {1, 1, 1, 1, 1, 1, 1, 1, 0};
    if (dec_envelope(d.root, CPT_MSG_PROMPT_GROUP, m->run, err)) goto out;
    if (cpt_mp_check_keys(d.root, keys, req, "", err)) goto out;
    if (get_group_id(cpt_mp_get(d.root, "group"), &m->id, err)) goto out;
    m->prompt = get_bin32(cpt_mp_get(d.root, "prompt"), "prompt", CPT_MAX_PROMPT_TOKENS, &m->n_prompt, err);
    if (!m->prompt) goto out;
    uint64_t u = 0;
    if (cpt_mp_get_u64(cpt_mp_get(d.root, "n"), "n", CPT_MAX_SAMPLES, &u, err)) goto out;
    m->n_samples = (uint32_t)u;
    if (dec_sampling(cpt_mp_get(d.root, "sampling"), &m->sampling, err)) goto out;
    if (cpt_mp_get_u64(cpt_mp_get(d.root, "min_version"), "min_version", UINT64_MAX, &m->min_version, err)) goto out;
    const msgpack_object *x = cpt_mp_get(d.root, "extra");
    if (x && !(m->extra = cpt_mp_dup_str(x, "extra", CPT_MAX_EXTRA, err))) goto out;
    rc = check_prompt_group(m, err);
out:
    cpt_mp_dec_close(&d);
    if (rc) {
        cpt_prompt_group_free(m);
        cpt_err_prefix(err, "prompt group");
    }
    return rc;
}

void cpt_rollout_group_free(cpt_rollout_group *m) {
    if (!m) return;
    free(m->prompt);
    if (m->completions)
        for (uint32_t c = 0; c < m->n_completions; c++) {
            free(m->completions[c].tokens);
            free(m->completions[c].logprobs);
            free(m->completions[c].teacher_logprobs);
            free(m->completions[c].mask);
        }
    free(m->completions);
    free(m->extra);
    free(m->rewards);
    if (m->part_names)
        for (uint32_t p = 0; p < m->n_parts; p++) free(m->part_names[p]);
    free(m->part_names);
    free(m->part_values);
    memset(m, 0, sizeof *m);
}

static int dec_completion(const msgpack_object *o, uint32_t c, int scored, cpt_completion *k, cpt_err *err) {
    static const char *const keys[] = {"tokens", "logprobs", "finish", "teacher_logprobs", "mask", NULL};
    static const int req[] = {1, 1, 1, 0, 0};
    char ctx[48], what[80];
    snprintf(ctx, sizeof ctx, "completions[%u]", c);
    if (o->type != MSGPACK_OBJECT_MAP) return cpt_errf(err, "%s: expected a map", ctx);
    if (cpt_mp_check_keys(o, keys, req, ctx, err)) return -1;
    snprintf(what, sizeof what, "%s.tokens", ctx);
    k->tokens = get_bin32(cpt_mp_get(o, "tokens"), what, CPT_MAX_COMPLETION_TOKENS, &k->n_tokens, err);
    if (!k->tokens) return -1;
    uint32_t n;
    snprintf(what, sizeof what, "%s.logprobs", ctx);
    k->logprobs = get_bin32(cpt_mp_get(o, "logprobs"), what, CPT_MAX_COMPLETION_TOKENS, &n, err);
    if (!k->logprobs) return -1;
    if (n != k->n_tokens) return cpt_errf(err, "%s: %u values for %u tokens", what, n, k->n_tokens);
    const msgpack_object *f = cpt_mp_get(o, "finish");
    int fi = -1;
    for (int i = 0; i < 3; i++)
        if (cpt_mp_key_is(f, finish_names[i])) fi = i;
    if (fi < 0) return cpt_errf(err, "%s.finish: expected \"stop\", \"length\" or \"abort\"", ctx);
    k->finish = (cpt_finish)fi;
    const msgpack_object *mk = cpt_mp_get(o, "mask");
    if (mk) {
        snprintf(what, sizeof what, "%s.mask", ctx);
        if (mk->type != MSGPACK_OBJECT_BIN) return cpt_errf(err, "%s: expected a bin of one byte per token", what);
        if (mk->via.bin.size != k->n_tokens)
            return cpt_errf(err, "%s: %u values for %u tokens", what, mk->via.bin.size, k->n_tokens);
        k->mask = malloc(k->n_tokens ? k->n_tokens : 1);
        if (!k->mask) return cpt_errf(err, "%s: out of memory", what);
        if (k->n_tokens) memcpy(k->mask, mk->via.bin.ptr, k->n_tokens);
        for (uint32_t i = 0; i < k->n_tokens; i++)
            if (k->mask[i] > 1) return cpt_errf(err, "%s[%u] = %u: expected 0 or 1", what, i, k->mask[i]);
    }
    const msgpack_object *t = cpt_mp_get(o, "teacher_logprobs");
    if (t) {
        snprintf(what, sizeof what, "%s.teacher_logprobs", ctx);
        if (!scored) return cpt_errf(err, "%s: only scored groups carry them", what);
        k->teacher_logprobs = get_bin32(t, what, CPT_MAX_COMPLETION_TOKENS, &n, err);
        if (!k->teacher_logprobs) return -1;
        if (n != k->n_tokens) return cpt_errf(err, "%s: %u values for %u tokens", what, n, k->n_tokens);
    }
    return 0;
}

/* An array of exactly n numbers into out. */
static int get_f64_array(const msgpack_object *o, const char *what, uint32_t n, double *out, cpt_err *err) {
    if (o->type != MSGPACK_OBJECT_ARRAY) return cpt_errf(err, "%s: expected an array of numbers", what);
    if (o->via.array.size != n) return cpt_errf(err, "%s: %u values for %u completions", what, o->via.array.size, n);
    for (uint32_t i = 0; i < n; i++) {
        char w[160];
        snprintf(w, sizeof w, "%s[%u]", what, i);
        if (cpt_mp_get_f64(&o->via.array.ptr[i], w, &out[i], err)) return -1;
    }
    return 0;
}

int cpt_rollout_group_decode(const void *data, size_t len, cpt_msg_type want, cpt_rollout_group *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    int scored = want == CPT_MSG_SCORED_GROUP;
    cpt_mp_dec d;
    int rc = -1;
    if (want != CPT_MSG_ROLLOUT_GROUP && want != CPT_MSG_SCORED_GROUP) {
        cpt_errf(err, "internal: decode of %s as a rollout group", cpt_msg_type_name(want));
        goto out_nodec;
    }
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err)) goto out;
    static const char *const keys[] = {"schema", "type", "run", "group", "prompt", "completions", "weight_version",
                                       "worker", "timings", "extra", "rewards", "reward_parts", NULL};
    const int req[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, scored, scored};
    if (dec_envelope(d.root, want, m->run, err)) goto out;
    if (cpt_mp_check_keys(d.root, keys, req, "", err)) goto out;
    if (!scored && (cpt_mp_get(d.root, "rewards") || cpt_mp_get(d.root, "reward_parts"))) {
        cpt_errf(err, "rewards: only scored groups carry them");
        goto out;
    }
    if (get_group_id(cpt_mp_get(d.root, "group"), &m->id, err)) goto out;
    m->prompt = get_bin32(cpt_mp_get(d.root, "prompt"), "prompt", CPT_MAX_PROMPT_TOKENS, &m->n_prompt, err);
    if (!m->prompt) goto out;
    const msgpack_object *cs = cpt_mp_get(d.root, "completions");
    if (cs->type != MSGPACK_OBJECT_ARRAY) { cpt_errf(err, "completions: expected an array"); goto out; }
    if (cs->via.array.size < 1 || cs->via.array.size > CPT_MAX_SAMPLES) {
        cpt_errf(err, "completions: %u, expected 1..%d", cs->via.array.size, CPT_MAX_SAMPLES);
        goto out;
    }
    m->completions = calloc(cs->via.array.size, sizeof *m->completions);
    if (!m->completions) { cpt_errf(err, "out of memory"); goto out; }
    m->n_completions = cs->via.array.size;
    for (uint32_t c = 0; c < m->n_completions; c++)
        if (dec_completion(&cs->via.array.ptr[c], c, scored, &m->completions[c], err)) goto out;
    if (cpt_mp_get_u64(cpt_mp_get(d.root, "weight_version"), "weight_version", UINT64_MAX, &m->weight_version, err)) goto out;
    if (cpt_mp_get_str(cpt_mp_get(d.root, "worker"), "worker", m->worker, sizeof m->worker, err)) goto out;
    const msgpack_object *t = cpt_mp_get(d.root, "timings");
    static const char *const tkeys[] = {"started", "gen_s", "queue_s", NULL};
    static const int treq[] = {1, 1, 1};
    if (t->type != MSGPACK_OBJECT_MAP) { cpt_errf(err, "timings: expected a map"); goto out; }
    if (cpt_mp_check_keys(t, tkeys, treq, "timings", err)) goto out;
    if (cpt_mp_get_f64(cpt_mp_get(t, "started"), "timings.started", &m->timings.started, err) ||
        cpt_mp_get_f64(cpt_mp_get(t, "gen_s"), "timings.gen_s", &m->timings.gen_s, err) ||
        cpt_mp_get_f64(cpt_mp_get(t, "queue_s"), "timings.queue_s", &m->timings.queue_s, err))
        goto out;
    const msgpack_object *x = cpt_mp_get(d.root, "extra");
    if (x && !(m->extra = cpt_mp_dup_str(x, "extra", CPT_MAX_EXTRA, err))) goto out;
    if (scored) {
        m->has_rewards = 1;
        m->rewards = calloc(m->n_completions, sizeof *m->rewards);
        if (!m->rewards) { cpt_errf(err, "out of memory"); goto out; }
        if (get_f64_array(cpt_mp_get(d.root, "rewards"), "rewards", m->n_completions, m->rewards, err)) goto out;
        const msgpack_object *p = cpt_mp_get(d.root, "reward_parts");
        if (p->type != MSGPACK_OBJECT_MAP) { cpt_errf(err, "reward_parts: expected a map of name -> values"); goto out; }
        uint32_t np = p->via.map.size;
        if (np > CPT_MAX_REWARD_PARTS) { cpt_errf(err, "reward_parts: %u parts, max %d", np, CPT_MAX_REWARD_PARTS); goto out; }
        m->part_names = calloc(np ? np : 1, sizeof(char *));
        m->part_values = calloc((size_t)(np ? np : 1) * m->n_completions, sizeof(double));
        if (!m->part_names || !m->part_values) { cpt_errf(err, "out of memory"); goto out; }
        for (uint32_t i = 0; i < np; i++) {
            m->part_names[i] = cpt_mp_dup_str(&p->via.map.ptr[i].key, "reward_parts: a name", CPT_NAME_MAX - 1, err);
            if (!m->part_names[i]) goto out;
            m->n_parts = i + 1;
            char what[CPT_NAME_MAX + 16];
            snprintf(what, sizeof what, "reward_parts.%s", m->part_names[i]);
            if (get_f64_array(&p->via.map.ptr[i].val, what, m->n_completions,
                              &m->part_values[(size_t)i * m->n_completions], err))
                goto out;
        }
    }
    rc = check_rollout_group(m, err);
out:
    cpt_mp_dec_close(&d);
out_nodec:
    if (rc) {
        cpt_rollout_group_free(m);
        cpt_err_prefix(err, "%s", cpt_msg_type_name(want));
    }
    return rc;
}

int cpt_weights_decode(const void *data, size_t len, cpt_weights_msg *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    cpt_mp_dec d;
    int rc = -1;
    static const char *const keys[] = {"schema", "type", "run", "version", "transport", "location", "bytes",
                                       "checksum", "membership_epoch", NULL};
    static const int req[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err) || dec_envelope(d.root, CPT_MSG_WEIGHTS, m->run, err) ||
        cpt_mp_check_keys(d.root, keys, req, "", err) ||
        cpt_mp_get_u64(cpt_mp_get(d.root, "version"), "version", UINT64_MAX, &m->version, err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "transport"), "transport", m->transport, sizeof m->transport, err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "location"), "location", m->location, sizeof m->location, err) ||
        cpt_mp_get_u64(cpt_mp_get(d.root, "bytes"), "bytes", UINT64_MAX, &m->bytes, err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "checksum"), "checksum", m->checksum, sizeof m->checksum, err) ||
        cpt_mp_get_u64(cpt_mp_get(d.root, "membership_epoch"), "membership_epoch", UINT64_MAX, &m->membership_epoch, err))
        goto out;
    rc = check_weights(m, err);
out:
    cpt_mp_dec_close(&d);
    if (rc) cpt_err_prefix(err, "weights announcement");
    return rc;
}

int cpt_control_decode(const void *data, size_t len, cpt_control_msg *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    cpt_mp_dec d;
    int rc = -1;
    static const char *const keys[] = {"schema", "type", "run", "state", "desired", NULL};
    static const int req[] = {1, 1, 1, 1, 1};
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err) || dec_envelope(d.root, CPT_MSG_CONTROL, m->run, err) ||
        cpt_mp_check_keys(d.root, keys, req, "", err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "state"), "state", m->state, sizeof m->state, err))
        goto out;
    const msgpack_object *ds = cpt_mp_get(d.root, "desired");
    if (ds->type != MSGPACK_OBJECT_MAP) { cpt_errf(err, "desired: expected a map of role -> count"); goto out; }
    if (ds->via.map.size > CPT_MAX_ROLES) { cpt_errf(err, "desired: %u roles, max %d", ds->via.map.size, CPT_MAX_ROLES); goto out; }
    for (uint32_t i = 0; i < ds->via.map.size; i++) {
        if (cpt_mp_get_str(&ds->via.map.ptr[i].key, "desired: a role", m->roles[i].role, CPT_NAME_MAX, err)) goto out;
        char what[CPT_NAME_MAX + 16];
        snprintf(what, sizeof what, "desired.%s", m->roles[i].role);
        uint64_t u = 0;
        if (cpt_mp_get_u64(&ds->via.map.ptr[i].val, what, 100000, &u, err)) goto out;
        m->roles[i].count = (uint32_t)u;
        m->n_roles = i + 1;
    }
    rc = check_control(m, err);
out:
    cpt_mp_dec_close(&d);
    if (rc) cpt_err_prefix(err, "control");
    return rc;
}

int cpt_heartbeat_decode(const void *data, size_t len, cpt_heartbeat_msg *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    cpt_mp_dec d;
    int rc = -1;
    static const char *const keys[] = {"schema", "type", "run", "worker", "role", "host", "version",
                                       "tokens_per_s", "occupancy", "time", NULL};
    static const int req[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err) || dec_envelope(d.root, CPT_MSG_HEARTBEAT, m->run, err) ||
        cpt_mp_check_keys(d.root, keys, req, "", err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "worker"), "worker", m->worker, sizeof m->worker, err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "role"), "role", m->role, sizeof m->role, err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "host"), "host", m->host, sizeof m->host, err) ||
        cpt_mp_get_u64(cpt_mp_get(d.root, "version"), "version", UINT64_MAX, &m->version, err) ||
        cpt_mp_get_f64(cpt_mp_get(d.root, "tokens_per_s"), "tokens_per_s", &m->tokens_per_s, err) ||
        cpt_mp_get_f64(cpt_mp_get(d.root, "occupancy"), "occupancy", &m->occupancy, err) ||
        cpt_mp_get_f64(cpt_mp_get(d.root, "time"), "time", &m->time, err))
        goto out;
    rc = check_heartbeat(m, err);
out:
    cpt_mp_dec_close(&d);
    if (rc) cpt_err_prefix(err, "heartbeat");
    return rc;
}

int cpt_msg_peek_header(const void *data, size_t len, cpt_msg_header *h, cpt_err *err) {
    memset(h, 0, sizeof *h);
    cpt_mp_dec d;
    int rc = -1;
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err)) goto out;
    const msgpack_object *o = cpt_mp_get(d.root, "schema");
    if (!o) { cpt_errf(err, "missing key \"schema\""); goto out; }
    if (cpt_mp_get_i64(o, "schema", INT64_MIN, INT64_MAX, &h->schema, err)) goto out;
    o = cpt_mp_get(d.root, "type");
    if (!o || o->type != MSGPACK_OBJECT_STR) { cpt_errf(err, "missing or non-string \"type\""); goto out; }
    for (int t = CPT_MSG_PROMPT_GROUP; t <= CPT_MSG_ENV_REPLY; t++)
        if (cpt_mp_key_is(o, type_names[t])) h->type = (cpt_msg_type)t;
    o = cpt_mp_get(d.root, "run");
    if (!o || cpt_mp_get_str(o, "run", h->run, sizeof h->run, err)) { if (!o) cpt_errf(err, "missing key \"run\""); goto out; }
    o = cpt_mp_get(d.root, "group");
    if (o && get_group_id(o, &h->id, err) == 0) h->has_id = 1;
    const char *vkey = h->type == CPT_MSG_PROMPT_GROUP ? "min_version"
                       : h->type == CPT_MSG_WEIGHTS || h->type == CPT_MSG_HEARTBEAT ? "version"
                                                                                     : "weight_version";
    o = cpt_mp_get(d.root, vkey);
    if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        h->has_version = 1;
        h->version = o->via.u64;
    }
    rc = 0;
out:
    cpt_mp_dec_close(&d);
    return rc;
}

/* ---- bounds of the run ---- */

static int tokens_in_vocab(const int32_t *t, uint32_t n, int32_t vocab, const char *what, cpt_err *err) {
    if (vocab <= 0) return 0;
    for (uint32_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= vocab)
            return cpt_errf(err, "%s[%u]: token %d outside the vocabulary [0, %d)", what, i, t[i], vocab);
    return 0;
}

int cpt_prompt_group_check_bounds(const cpt_prompt_group *m, const cpt_group_bounds *b, cpt_err *err) {
    if (tokens_in_vocab(m->prompt, m->n_prompt, b->vocab_size, "prompt", err)) return -1;
    if (b->max_samples && m->n_samples > b->max_samples)
        return cpt_errf(err, "n_samples: %u, the run samples at most %u (rollout.group_size)", m->n_samples,
                        b->max_samples);
    if (b->has_max_version && m->min_version > b->max_version)
        return cpt_errf(err, "min_version: %llu was never announced (newest %llu)", (unsigned long long)m->min_version,
                        (unsigned long long)b->max_version);
    return 0;
}

int cpt_rollout_group_check_bounds(const cpt_rollout_group *m, const cpt_group_bounds *b, cpt_err *err) {
    if (tokens_in_vocab(m->prompt, m->n_prompt, b->vocab_size, "prompt", err)) return -1;
    if (b->max_samples && m->n_completions > b->max_samples)
        return cpt_errf(err, "completions: %u, the run samples at most %u (rollout.group_size)", m->n_completions,
                        b->max_samples);
    if (b->has_max_version && m->weight_version > b->max_version)
        return cpt_errf(err, "weight_version: %llu was never announced (newest %llu)",
                        (unsigned long long)m->weight_version, (unsigned long long)b->max_version);
    for (uint32_t c = 0; c < m->n_completions; c++) {
        char what[48];
        snprintf(what, sizeof what, "completions[%u].tokens", c);
        if (tokens_in_vocab(m->completions[c].tokens, m->completions[c].n_tokens, b->vocab_size, what, err)) return -1;
    }
    return 0;
}
