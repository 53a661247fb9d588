/* Env message codec (queue/env_msg.h): round trips of requests and replies, and strict decoding whose every
 * rejection names the field. With CPT_WRITE_CORPUS=DIR it also writes the fuzz seed corpus (DIR/schema_env/). */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "queue/env_msg.h"
#include "tests/check.h"

static const char *corpus_dir;

static void save_seed(const char *name, const void *data, size_t len) {
    if (!corpus_dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/schema_env", corpus_dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/schema_env/%s", corpus_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    fwrite(data, 1, len, f);
    fclose(f);
}

/* Re-encodes a message with key `key` replaced by what `put` packs (removed if put is NULL; added if absent). */
typedef void (*put_fn)(msgpack_packer *pk);
static cpt_buf mutate(const cpt_buf *in, const char *key, put_fn put) {
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_next(&up, in->data, in->len, &off);
    msgpack_object_map *m = &up.data.via.map;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    size_t kn = strlen(key);
    int found = 0;
    for (uint32_t i = 0; i < m->size; i++)
        if (m->ptr[i].key.via.str.size == kn && !memcmp(m->ptr[i].key.via.str.ptr, key, kn)) found = 1;
    msgpack_pack_map(&pk, m->size - (found && !put ? 1 : 0) + (!found && put ? 1 : 0));
    for (uint32_t i = 0; i < m->size; i++) {
        int is = m->ptr[i].key.via.str.size == kn && !memcmp(m->ptr[i].key.via.str.ptr, key, kn);
        if (is && !put) continue;
        msgpack_pack_object(&pk, m->ptr[i].key);
        if (is) put(&pk);
        else msgpack_pack_object(&pk, m->ptr[i].val);
    }
    if (!found && put) {
        msgpack_pack_str_with_body(&pk, key, kn);
        put(&pk);
    }
    msgpack_unpacked_destroy(&up);
    cpt_buf out = {sb.data, sb.size};
    return out;
}

static void put_schema2(msgpack_packer *pk) { msgpack_pack_int(pk, 2); }
static void put_str_x(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "x", 1); }
static void put_empty_str(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "", 0); }
static void put_neg(msgpack_packer *pk) { msgpack_pack_int(pk, -1); }
static void put_int0(msgpack_packer *pk) { msgpack_pack_int(pk, 0); }
static void put_int65(msgpack_packer *pk) { msgpack_pack_int(pk, 65); }
static void put_int4096(msgpack_packer *pk) { msgpack_pack_int(pk, 4096); }
static void put_true(msgpack_packer *pk) { msgpack_pack_true(pk); }
static void put_nil(msgpack_packer *pk) { msgpack_pack_nil(pk); }
static void put_badrun(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "bad run!", 8); }
static void put_badname(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "has space", 9); }
static void put_bad_json(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "{\"a\":", 5); }
static void put_nul(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "a\0b", 3); }
static void put_type_reply(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "env_reply", 9); }
static void put_long_text(msgpack_packer *pk) {
    size_t n = CPT_ENV_MAX_TEXT + 1;
    char *s = malloc(n);
    memset(s, 'x', n);
    msgpack_pack_str_with_body(pk, s, n);
    free(s);
}
static void put_id_array(msgpack_packer *pk) {
    msgpack_pack_array(pk, 2);
    msgpack_pack_int(pk, 1);
    msgpack_pack_int(pk, 2);
}
static void put_id_no_index(msgpack_packer *pk) {
    msgpack_pack_map(pk, 1);
    msgpack_pack_str_with_body(pk, "epoch", 5);
    msgpack_pack_int(pk, 1);
}
static void put_id_neg_epoch(msgpack_packer *pk) {
    msgpack_pack_map(pk, 2);
    msgpack_pack_str_with_body(pk, "epoch", 5);
    msgpack_pack_int(pk, -3);
    msgpack_pack_str_with_body(pk, "index", 5);
    msgpack_pack_int(pk, 2);
}

static int request_fails(const cpt_buf *b, const char *needle, const char *seed) {
    cpt_env_request m;
    cpt_err err = {{0}};
    if (cpt_env_request_decode(b->data, b->len, &m, &err) == 0) {
        cpt_env_request_free(&m);
        fprintf(stderr, "request decoded but should fail (%s)\n", needle);
        return 0;
    }
    if (!strstr(err.msg, needle)) { fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", err.msg, needle); return 0; }
    if (seed) save_seed(seed, b->data, b->len);
    return 1;
}

static int reply_fails(const cpt_buf *b, const char *needle, const char *seed) {
    cpt_env_reply m;
    cpt_err err = {{0}};
    if (cpt_env_reply_decode(b->data, b->len, &m, &err) == 0) {
        cpt_env_reply_free(&m);
        fprintf(stderr, "reply decoded but should fail (%s)\n", needle);
        return 0;
    }
    if (!strstr(err.msg, needle)) { fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", err.msg, needle); return 0; }
    if (seed) save_seed(seed, b->data, b->len);
    return 1;
}

#define REQ_REJECTS(key, put, needle, seed)                 \
    do {                                                    \
        cpt_buf x_ = mutate(&b, key, put);                  \
        CHECK_MSG(request_fails(&x_, needle, seed), "%s", key); \
        cpt_buf_free(&x_);                                  \
    } while (0)
#define REP_REJECTS(key, put, needle, seed)                 \
    do {                                                    \
        cpt_buf x_ = mutate(&b, key, put);                  \
        CHECK_MSG(reply_fails(&x_, needle, seed), "%s", key); \
        cpt_buf_free(&x_);                                  \
    } while (0)

static void test_request(void) {
    char call[] = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*34\"}}\n</tool_call>";
    char extra[] = "{\"numbers\": [4, 6, 1], \"target\": 24}";
    cpt_env_request r = {.run = "run-1", .worker = "rollout-0", .id = {3, 4711}, .sample = 5, .turn = 2,
                         .call = call, .extra = extra};
    cpt_buf b;
    cpt_err err = {{0}};
    CHECK_MSG(cpt_env_request_encode(&r, &b, &err) == 0, "%s", err.msg);
    save_seed("request_ok", b.data, b.len);
    cpt_env_request d;
    CHECK_MSG(cpt_env_request_decode(b.data, b.len, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_STR(d.run, "run-1");
    CHECK_EQ_STR(d.worker, "rollout-0");
    CHECK_EQ_INT(d.id.epoch, 3);
    CHECK_EQ_INT(d.id.index, 4711);
    CHECK_EQ_INT(d.sample, 5);
    CHECK_EQ_INT(d.turn, 2);
    CHECK_EQ_STR(d.call, call);
    CHECK_EQ_STR(d.extra, extra);
    cpt_env_request_free(&d);
    CHECK(d.call == NULL);

    cpt_msg_header h;
    CHECK_EQ_INT(cpt_msg_peek_header(b.data, b.len, &h, &err), 0);
    CHECK_EQ_INT(h.type, CPT_MSG_ENV_REQUEST);
    CHECK_EQ_STR(cpt_msg_type_name(CPT_MSG_ENV_REQUEST), "env_request");

    /* extra nil: NULL */
    r.extra = NULL;
    cpt_buf bn;
    CHECK_MSG(cpt_env_request_encode(&r, &bn, &err) == 0, "%s", err.msg);
    save_seed("request_nil_extra", bn.data, bn.len);
    CHECK_MSG(cpt_env_request_decode(bn.data, bn.len, &d, &err) == 0, "%s", err.msg);
    CHECK(d.extra == NULL);
    cpt_env_request_free(&d);
    cpt_buf_free(&bn);
    r.extra = extra;

    REQ_REJECTS("schema", put_schema2, "unknown schema version 2", "schema2");
    REQ_REJECTS("type", put_type_reply, "type \"env_reply\" where a env_request was expected", "wrong_type");
    REQ_REJECTS("bogus", put_str_x, "unknown key \"bogus\"", "unknown_key");
    REQ_REJECTS("run", put_badrun, "run: \"bad run!\" is not a valid run id", NULL);
    REQ_REJECTS("worker", NULL, "missing key \"worker\"", "no_worker");
    REQ_REJECTS("worker", put_badname, "worker: \"has space\" is not a valid name", NULL);
    REQ_REJECTS("worker", put_neg, "worker: expected a string", NULL);
    REQ_REJECTS("id", put_id_array, "id: expected a map", "id_array");
    REQ_REJECTS("id", put_id_no_index, "id: missing key \"index\"", NULL);
    REQ_REJECTS("id", put_id_neg_epoch, "id.epoch = -3: must not be negative", NULL);
    REQ_REJECTS("sample", put_int4096, "sample = 4096: max 4095", "sample_big");
    REQ_REJECTS("sample", put_str_x, "sample: expected an unsigned integer", NULL);
    REQ_REJECTS("turn", put_int0, "turn = 0: expected 1..64", "turn0");
    REQ_REJECTS("turn", put_int65, "turn = 65: max 64", NULL);
    REQ_REJECTS("call", put_empty_str, "call: 0 bytes, expected 1..16384", NULL);
    REQ_REJECTS("call", put_long_text, "call: 16385 bytes, max 16384", NULL);
    REQ_REJECTS("call", put_nul, "call: contains a NUL byte", NULL);
    REQ_REJECTS("call", put_nil, "call: expected a string", NULL);
    REQ_REJECTS("extra", NULL, "missing key \"extra\"", NULL);
    REQ_REJECTS("extra", put_bad_json, "extra: not valid JSON", "bad_extra");
    REQ_REJECTS("extra", put_true, "extra: expected a string or nil", NULL);
    /* trailing bytes, truncation, not a map */
    cpt_buf t = {malloc(b.len + 1), b.len + 1};
    memcpy(t.data, b.data, b.len);
    t.data[b.len] = 0;
    CHECK(request_fails(&t, "trailing bytes", NULL));
    t.len = b.len - 3;
    CHECK(request_fails(&t, "malformed msgpack", "truncated"));
    cpt_buf_free(&t);
    char arr = (char)0x90;
    cpt_buf a = {&arr, 1};
    CHECK(request_fails(&a, "not a map", NULL));

    /* The encoder refuses what the decoder would. */
    r.turn = 0;
    CHECK(cpt_env_request_encode(&r, &bn, &err) == -1 && strstr(err.msg, "turn = 0"));
    r.turn = 1;
    r.worker[0] = '\0';
    CHECK(cpt_env_request_encode(&r, &bn, &err) == -1 && strstr(err.msg, "worker"));
    strcpy(r.worker, "w");
    r.call = NULL;
    CHECK(cpt_env_request_encode(&r, &bn, &err) == -1 && strstr(err.msg, "call: missing"));
    cpt_buf_free(&b);
}

static void test_reply(void) {
    cpt_env_reply r = {.run = "run-1", .id = {3, 4711}, .sample = 4095, .turn = 64, .ok = 0,
                       .observation = "error: division by zero", .env = "env-host-1"};
    cpt_buf b;
    cpt_err err = {{0}};
    CHECK_MSG(cpt_env_reply_encode(&r, &b, &err) == 0, "%s", err.msg);
    save_seed("reply_ok", b.data, b.len);
    cpt_env_reply d;
    CHECK_MSG(cpt_env_reply_decode(b.data, b.len, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_STR(d.run, "run-1");
    CHECK_EQ_INT(d.id.epoch, 3);
    CHECK_EQ_INT(d.id.index, 4711);
    CHECK_EQ_INT(d.sample, 4095);
    CHECK_EQ_INT(d.turn, 64);
    CHECK_EQ_INT(d.ok, 0);
    CHECK_EQ_STR(d.observation, "error: division by zero");
    CHECK_EQ_STR(d.env, "env-host-1");
    cpt_env_reply_free(&d);
    /* ok = true, empty observation */
    r.ok = 1;
    r.observation = "";
    cpt_buf b2;
    CHECK_MSG(cpt_env_reply_encode(&r, &b2, &err) == 0, "%s", err.msg);
    save_seed("reply_empty_ok", b2.data, b2.len);
    CHECK_MSG(cpt_env_reply_decode(b2.data, b2.len, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(d.ok, 1);
    CHECK_EQ_STR(d.observation, "");
    cpt_env_reply_free(&d);
    cpt_buf_free(&b2);

    CHECK(request_fails(&b, "type \"env_reply\" where a env_request was expected", NULL));
    REP_REJECTS("schema", NULL, "missing key \"schema\"", NULL);
    REP_REJECTS("run", NULL, "missing key \"run\"", NULL);
    REP_REJECTS("worker", put_str_x, "unknown key \"worker\"", NULL);
    REP_REJECTS("id", NULL, "missing key \"id\"", NULL);
    REP_REJECTS("sample", put_neg, "sample = -1: must not be negative", "sample_neg");
    REP_REJECTS("turn", put_int65, "turn = 65: max 64", NULL);
    REP_REJECTS("ok", put_int0, "ok: expected true or false", "ok_int");
    REP_REJECTS("ok", NULL, "missing key \"ok\"", NULL);
    REP_REJECTS("observation", put_long_text, "observation: 16385 bytes, max 16384", NULL);
    REP_REJECTS("observation", put_nil, "observation: expected a string", NULL);
    REP_REJECTS("env", put_badname, "env: \"has space\" is not a valid name", "bad_env");
    REP_REJECTS("env", put_empty_str, "env: \"\" is not a valid name", NULL);

    r.observation = NULL;
    CHECK(cpt_env_reply_encode(&r, &b2, &err) == -1 && strstr(err.msg, "observation: missing"));
    cpt_buf_free(&b);
}

static void test_streams(void) {
    char buf[CPT_ENV_KEY_MAX];
    CHECK_EQ_STR(cpt_env_stream("run-1", buf), "cpt:run-1:env");
    CHECK_EQ_STR(cpt_env_reply_stream("run-1", "rollout-0", buf), "cpt:run-1:env:rollout-0");
    CHECK(cpt_env_stream("bad run", buf) == NULL);
    CHECK(cpt_env_reply_stream("run-1", "", buf) == NULL);
    CHECK(cpt_env_reply_stream("run-1", "a b", buf) == NULL);
}

int main(void) {
    corpus_dir = getenv("CPT_WRITE_CORPUS");
    test_request();
    test_reply();
    test_streams();
    return check_summary("test_env_msg");
}
