#include "queue/env_msg.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue/msg_codec.h"

/* ---- checks shared by encoders and decoders ---- */

static int check_addr(const char *run, uint32_t sample, uint32_t turn, cpt_err *err) {
    if (!cpt_run_id_valid(run)) return cpt_errf(err, "run: \"%.64s\" is not a valid run id ([A-Za-z0-9._-]{1,127})", run);
    if (sample >= CPT_MAX_SAMPLES) return cpt_errf(err, "sample = %u: expected 0..%d", sample, CPT_MAX_SAMPLES - 1);
    if (turn < 1 || turn > CPT_ENV_MAX_TURNS) return cpt_errf(err, "turn = %u: expected 1..%d", turn, CPT_ENV_MAX_TURNS);
    return 0;
}

static int check_text(const char *s, size_t min, const char *what, cpt_err *err) {
    if (!s) return cpt_errf(err, "%s: missing", what);
    size_t n = strlen(s);
    if (n < min || n > CPT_ENV_MAX_TEXT) return cpt_errf(err, "%s: %zu bytes, expected %zu..%u", what, n, min, CPT_ENV_MAX_TEXT);
    return 0;
}

static int check_request(const cpt_env_request *m, cpt_err *err) {
    if (check_addr(m->run, m->sample, m->turn, err)) return -1;
    if (!cpt_name_valid(m->worker))
        return cpt_errf(err, "worker: \"%.64s\" is not a valid name (visible ASCII, 1..127)", m->worker);
    if (check_text(m->call, 1, "call", err)) return -1;
    if (m->extra) {
        size_t n = strlen(m->extra);
        if (n > CPT_MAX_EXTRA) return cpt_errf(err, "extra: %zu bytes, max %u", n, CPT_MAX_EXTRA);
        json_error_t je;
        json_t *j = json_loadb(m->extra, n, JSON_DECODE_ANY, &je);
        if (!j) return cpt_errf(err, "extra: not valid JSON");
        json_decref(j);
    }
    return 0;
}

static int check_reply(const cpt_env_reply *m, cpt_err *err) {
    if (check_addr(m->run, m->sample, m->turn, err)) return -1;
    if (check_text(m->observation, 0, "observation", err)) return -1;
    if (!cpt_name_valid(m->env)) return cpt_errf(err, "env: \"%.64s\" is not a valid name (visible ASCII, 1..127)", m->env);
    return 0;
}

/* ---- encoding ---- */

static void pack_id(msgpack_packer *pk, cpt_group_id id) {
    cpt_mp_pack_key(pk, "id");
    msgpack_pack_map(pk, 2);
    cpt_mp_pack_key(pk, "epoch");
    msgpack_pack_uint64(pk, id.epoch);
    cpt_mp_pack_key(pk, "index");
    msgpack_pack_uint64(pk, id.index);
}

int cpt_env_request_encode(const cpt_env_request *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    if (check_request(m, err)) return cpt_err_prefix(err, "encoding env request");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    cpt_mp_pack_envelope(&pk, CPT_SCHEMA_VERSION, "env_request", m->run);
    cpt_mp_pack_key(&pk, "worker");
    cpt_mp_pack_cstr(&pk, m->worker);
    pack_id(&pk, m->id);
    cpt_mp_pack_key(&pk, "sample");
    msgpack_pack_uint32(&pk, m->sample);
    cpt_mp_pack_key(&pk, "turn");
    msgpack_pack_uint32(&pk, m->turn);
    cpt_mp_pack_key(&pk, "call");
    cpt_mp_pack_cstr(&pk, m->call);
    cpt_mp_pack_key(&pk, "extra");
    if (m->extra)
        cpt_mp_pack_cstr(&pk, m->extra);
    else
        msgpack_pack_nil(&pk);
    if (cpt_mp_finish_buf(&sb, CPT_MSG_MAX_BYTES, &out->data, &out->len, err)) return cpt_err_prefix(err, "encoding env request");
    return 0;
}

int cpt_env_reply_encode(const cpt_env_reply *m, cpt_buf *out, cpt_err *err) {
    out->data = NULL;
    out->len = 0;
    if (check_reply(m, err)) return cpt_err_prefix(err, "encoding env reply");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    cpt_mp_pack_envelope(&pk, CPT_SCHEMA_VERSION, "env_reply", m->run);
    pack_id(&pk, m->id);
    cpt_mp_pack_key(&pk, "sample");
    msgpack_pack_uint32(&pk, m->sample);
    cpt_mp_pack_key(&pk, "turn");
    msgpack_pack_uint32(&pk, m->turn);
    cpt_mp_pack_key(&pk, "ok");
    if (m->ok)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
    cpt_mp_pack_key(&pk, "observation");
    cpt_mp_pack_cstr(&pk, m->observation);
    cpt_mp_pack_key(&pk, "env");
    cpt_mp_pack_cstr(&pk, m->env);
    if (cpt_mp_finish_buf(&sb, CPT_MSG_MAX_BYTES, &out->data, &out->len, err)) return cpt_err_prefix(err, "encoding env reply");
    return 0;
}

/* ---- decoding ---- */

static int get_id(const msgpack_object *o, cpt_group_id *id, cpt_err *err) {
    static const char *const keys[] = {"epoch", "index", NULL};
    static const int req[] = {1, 1};
    if (o->type != MSGPACK_OBJECT_MAP) return cpt_errf(err, "id: expected a map {\"epoch\", \"index\"}");
    if (cpt_mp_check_keys(o, keys, req, "id", err)) return -1;
    if (cpt_mp_get_u64(cpt_mp_get(o, "epoch"), "id.epoch", UINT64_MAX, &id->epoch, err)) return -1;
    return cpt_mp_get_u64(cpt_mp_get(o, "index"), "id.index", UINT64_MAX, &id->index, err);
}

/* id, sample and turn: the address of a tool call, in requests and replies alike. */
static int get_addr(const msgpack_object *root, cpt_group_id *id, uint32_t *sample, uint32_t *turn, cpt_err *err) {
    uint64_t u = 0;
    if (get_id(cpt_mp_get(root, "id"), id, err)) return -1;
    if (cpt_mp_get_u64(cpt_mp_get(root, "sample"), "sample", CPT_MAX_SAMPLES - 1, &u, err)) return -1;
    *sample = (uint32_t)u;
    if (cpt_mp_get_u64(cpt_mp_get(root, "turn"), "turn", CPT_ENV_MAX_TURNS, &u, err)) return -1;
    *turn = (uint32_t)u;
    return 0;
}

void cpt_env_request_free(cpt_env_request *m) {
    if (!m) return;
    free(m->call);
    free(m->extra);
    memset(m, 0, sizeof *m);
}

void cpt_env_reply_free(cpt_env_reply *m) {
    if (!m) return;
    free(m->observation);
    memset(m, 0, sizeof *m);
}

int cpt_env_request_decode(const void *data, size_t len, cpt_env_request *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    cpt_mp_dec d;
    int rc = -1;
    static const char *const keys[] = {"schema", "type", "run", "worker", "id", "sample", "turn", "call", "extra", NULL};
    static const int req[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err) || cpt_mp_dec_envelope(d.root, CPT_SCHEMA_VERSION, "env_request", m->run, sizeof m->run, err) ||
        cpt_mp_check_keys(d.root, keys, req, "", err) ||
        cpt_mp_get_str(cpt_mp_get(d.root, "worker"), "worker", m->worker, sizeof m->worker, err) ||
        get_addr(d.root, &m->id, &m->sample, &m->turn, err))
        goto out;
    if (!(m->call = cpt_mp_dup_str(cpt_mp_get(d.root, "call"), "call", CPT_ENV_MAX_TEXT, err))) goto out;
    const msgpack_object *x = cpt_mp_get(d.root, "extra");
    if (x->type != MSGPACK_OBJECT_NIL) {
        if (x->type != MSGPACK_OBJECT_STR) {
            cpt_errf(err, "extra: expected a string or nil");
            goto out;
        }
        if (!(m->extra = cpt_mp_dup_str(x, "extra", CPT_MAX_EXTRA, err))) goto out;
    }
    rc = check_request(m, err);
out:
    cpt_mp_dec_close(&d);
    if (rc) {
        cpt_env_request_free(m);
        cpt_err_prefix(err, "env request");
    }
    return rc;
}

int cpt_env_reply_decode(const void *data, size_t len, cpt_env_reply *m, cpt_err *err) {
    memset(m, 0, sizeof *m);
    cpt_mp_dec d;
    int rc = -1;
    static const char *const keys[] = {"schema", "type", "run", "id", "sample", "turn", "ok", "observation", "env", NULL};
    static const int req[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    if (cpt_mp_dec_open(&d, data, len, CPT_MSG_MAX_BYTES, err) || cpt_mp_dec_envelope(d.root, CPT_SCHEMA_VERSION, "env_reply", m->run, sizeof m->run, err) ||
        cpt_mp_check_keys(d.root, keys, req, "", err) || get_addr(d.root, &m->id, &m->sample, &m->turn, err))
        goto out;
    const msgpack_object *ok = cpt_mp_get(d.root, "ok");
    if (ok->type != MSGPACK_OBJECT_BOOLEAN) {
        cpt_errf(err, "ok: expected true or false");
        goto out;
    }
    m->ok = ok->via.boolean ? 1 : 0;
    if (!(m->observation = cpt_mp_dup_str(cpt_mp_get(d.root, "observation"), "observation", CPT_ENV_MAX_TEXT, err)))
        goto out;
    if (cpt_mp_get_str(cpt_mp_get(d.root, "env"), "env", m->env, sizeof m->env, err)) goto out;
    rc = check_reply(m, err);
out:
    cpt_mp_dec_close(&d);
    if (rc) {
        cpt_env_reply_free(m);
        cpt_err_prefix(err, "env reply");
    }
    return rc;
}

/* ---- stream keys ---- */

const char *cpt_env_stream(const char *run, char *buf) {
    if (!cpt_run_id_valid(run)) return NULL;
    snprintf(buf, CPT_ENV_KEY_MAX, "cpt:%s:env", run);
    return buf;
}

const char *cpt_env_reply_stream(const char *run, const char *worker, char *buf) {
    if (!cpt_run_id_valid(run) || !cpt_name_valid(worker)) return NULL;
    snprintf(buf, CPT_ENV_KEY_MAX, "cpt:%s:env:%s", run, worker);
    return buf;
}
