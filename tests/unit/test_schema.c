/* Queue message codecs: round trips of every type, and strict decoding that rejects with a reason naming the
 * field. With CPT_WRITE_CORPUS=DIR it also writes the fuzz seed corpora (DIR/schema_NAME/). */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "queue/schema.h"
#include "queue/seen.h"
#include "tests/check.h"
#include "tests/unit/test_schema_samples.h"

static const char *corpus_dir;

static void save_seed(const char *harness, const char *name, const void *data, size_t len) {
    if (!corpus_dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/schema_%s", corpus_dir, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/schema_%s/%s", corpus_dir, harness, name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    fwrite(data, 1, len, f);
    fclose(f);
}

/* A valid message of one type is a useful seed for every decoder (the wrong-type path). */
static void save_seed_all(const char *name, const void *data, size_t len) {
    static const char *all[] = {"prompt", "rollout", "scored", "weights", "control", "heartbeat"};
    for (int i = 0; i < 6; i++) save_seed(all[i], name, data, len);
}

/* Re-encodes a message with one top-level change: key `key` replaced by the packed value written by `put`
 * (or removed if put is NULL; or added if absent). */
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
    int found = 0;
    for (uint32_t i = 0; i < m->size; i++)
        if (m->ptr[i].key.via.str.size == strlen(key) && !memcmp(m->ptr[i].key.via.str.ptr, key, strlen(key))) found = 1;
    msgpack_pack_map(&pk, m->size - (found && !put ? 1 : 0) + (!found && put ? 1 : 0));
    for (uint32_t i = 0; i < m->size; i++) {
        int is = m->ptr[i].key.via.str.size == strlen(key) && !memcmp(m->ptr[i].key.via.str.ptr, key, strlen(key));
        if (is && !put) continue;
        msgpack_pack_object(&pk, m->ptr[i].key);
        if (is) put(&pk);
        else msgpack_pack_object(&pk, m->ptr[i].val);
    }
    if (!found && put) {
        msgpack_pack_str_with_body(&pk, key, strlen(key));
        put(&pk);
    }
    msgpack_unpacked_destroy(&up);
    cpt_buf out = {sb.data, sb.size};
    return out;
}

static void put_schema2(msgpack_packer *pk) { msgpack_pack_int(pk, 2); }
static void put_str_x(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "x", 1); }
static void put_neg(msgpack_packer *pk) { msgpack_pack_int(pk, -1); }
static void put_bin7(msgpack_packer *pk) { msgpack_pack_bin(pk, 7); msgpack_pack_bin_body(pk, "abcdefg", 7); }
static void put_badrun(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "bad run!", 8); }
static void put_bad_json(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "{\"a\":", 5); }
static void put_group3(msgpack_packer *pk) {
    msgpack_pack_array(pk, 3);
    msgpack_pack_int(pk, 1);
    msgpack_pack_int(pk, 2);
    msgpack_pack_int(pk, 3);
}
static void put_neg_token(msgpack_packer *pk) {
    int32_t t[3] = {5, -2, 9};
    msgpack_pack_bin(pk, 12);
    msgpack_pack_bin_body(pk, t, 12);
}
static void put_n0(msgpack_packer *pk) { msgpack_pack_int(pk, 0); }

static int decode_prompt_fails(const cpt_buf *b, const char *needle, const char *seedname) {
    cpt_prompt_group m;
    cpt_err err = {{0}};
    int rc = cpt_prompt_group_decode(b->data, b->len, &m, &err);
    if (rc == 0) { cpt_prompt_group_free(&m); fprintf(stderr, "decoded but should fail (%s)\n", needle); return 0; }
    if (!strstr(err.msg, needle)) { fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", err.msg, needle); return 0; }
    if (seedname) save_seed("prompt", seedname, b->data, b->len);
    return 1;
}

static void test_prompt_round_trip(void) {
    sample_prompt s;
    sample_prompt_init(&s, "run-1", 2, 4711, 17);
    cpt_buf b;
    cpt_err err = {{0}};
    CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &b, &err), 0);
    save_seed_all("prompt_ok", b.data, b.len);
    cpt_prompt_group d;
    CHECK_MSG(cpt_prompt_group_decode(b.data, b.len, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_STR(d.run, "run-1");
    CHECK_EQ_INT(d.id.epoch, 2);
    CHECK_EQ_INT(d.id.index, 4711);
    CHECK_EQ_INT(d.n_prompt, 17);
    CHECK(d.prompt && !memcmp(d.prompt, s.prompt, 17 * sizeof(int32_t)));
    CHECK_EQ_INT(d.n_samples, 4);
    CHECK_NEAR(d.sampling.temperature, 0.75, 1e-7);
    CHECK_NEAR(d.sampling.top_p, 0.9, 1e-7);
    CHECK_EQ_INT(d.sampling.top_k, 50);
    CHECK_NEAR(d.sampling.min_p, 0.05, 1e-7);
    CHECK_EQ_INT(d.sampling.max_new_tokens, 256);
    CHECK(d.sampling.seed == 0xfeedface12345ull + 4711);
    CHECK_EQ_INT(d.sampling.n_stop_ids, 2);
    CHECK_EQ_INT(d.sampling.stop_ids[1], 151645);
    CHECK_EQ_INT(d.sampling.n_stop_strs, 2);
    CHECK_EQ_STR(d.sampling.stop_strs[0], "</s>");
    CHECK_EQ_STR(d.sampling.stop_strs[1], "\n\n");
    CHECK_EQ_INT(d.min_version, 3);
    CHECK_EQ_STR(d.extra, "{\"answer\": \"4711\"}");
    cpt_prompt_group_free(&d);

    cpt_msg_header h;
    CHECK_EQ_INT(cpt_msg_peek_header(b.data, b.len, &h, &err), 0);
    CHECK_EQ_INT(h.schema, 1);
    CHECK_EQ_INT(h.type, CPT_MSG_PROMPT_GROUP);
    CHECK_EQ_STR(h.run, "run-1");
    CHECK(h.has_id && h.id.index == 4711 && h.has_version && h.version == 3);

    /* Strict decoding: each rejection names what is wrong. */
    cpt_buf x;
    x = mutate(&b, "schema", put_schema2);
    CHECK(decode_prompt_fails(&x, "unknown schema version 2", "schema2"));
    cpt_buf_free(&x);
    x = mutate(&b, "bogus", put_str_x);
    CHECK(decode_prompt_fails(&x, "unknown key \"bogus\"", "unknown_key"));
    cpt_buf_free(&x);
    x = mutate(&b, "min_version", NULL);
    CHECK(decode_prompt_fails(&x, "missing key \"min_version\"", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "min_version", put_neg);
    CHECK(decode_prompt_fails(&x, "min_version = -1: must not be negative", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "prompt", put_bin7);
    CHECK(decode_prompt_fails(&x, "prompt: 7 bytes is not a whole number", "prompt7"));
    cpt_buf_free(&x);
    x = mutate(&b, "prompt", put_neg_token);
    CHECK(decode_prompt_fails(&x, "prompt[1] = -2: negative token id", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "run", put_badrun);
    CHECK(decode_prompt_fails(&x, "not a valid run id", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "extra", put_bad_json);
    CHECK(decode_prompt_fails(&x, "extra: not valid JSON", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "group", put_group3);
    CHECK(decode_prompt_fails(&x, "group: expected [epoch, index]", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "n", put_n0);
    CHECK(decode_prompt_fails(&x, "n = 0", NULL));
    cpt_buf_free(&x);
    x = mutate(&b, "type", put_str_x);
    CHECK(decode_prompt_fails(&x, "type \"x\" where a prompt_group was expected", NULL));
    cpt_buf_free(&x);

    /* Truncation at every length fails cleanly; trailing garbage too. */
    int all_fail = 1;
    for (size_t n = 0; n < b.len; n++) {
        cpt_prompt_group m;
        if (cpt_prompt_group_decode(b.data, n, &m, &err) == 0) { all_fail = 0; cpt_prompt_group_free(&m); }
    }
    CHECK(all_fail);
    char *longer = malloc(b.len + 1);
    memcpy(longer, b.data, b.len);
    longer[b.len] = (char)0xc0;
    cpt_buf lb = {longer, b.len + 1};
    CHECK(decode_prompt_fails(&lb, "1 trailing bytes", "trailing"));
    free(longer);

    /* A 5-byte array header claiming 2^32-1 elements must not make msgpack-c allocate 100 GB. */
    const unsigned char huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
    cpt_buf hb = {(char *)huge, sizeof huge};
    CHECK(decode_prompt_fails(&hb, "claims more elements than bytes left", "huge_array"));

    /* The encoder refuses what the decoder would refuse. */
    s.m.sampling.top_p = 0;
    CHECK_EQ_INT(cpt_prompt_group_encode(&s.m, &x, &err), -1);
    CHECK_MSG(strstr(err.msg, "sampling.top_p = 0") != NULL, "%s", err.msg);
    cpt_buf_free(&b);
}

static int decode_group_fails(const cpt_buf *b, cpt_msg_type want, const char *needle, const char *seed) {
    cpt_rollout_group m;
    cpt_err err = {{0}};
    if (cpt_rollout_group_decode(b->data, b->len, want, &m, &err) == 0) {
        cpt_rollout_group_free(&m);
        fprintf(stderr, "decoded but should fail (%s)\n", needle);
        return 0;
    }
    if (!strstr(err.msg, needle)) { fprintf(stderr, "reason \"%s\" lacks \"%s\"\n", err.msg, needle); return 0; }
    if (seed) save_seed(want == CPT_MSG_SCORED_GROUP ? "scored" : "rollout", seed, b->data, b->len);
    return 1;
}

static cpt_rollout_group *mut_target;
static void put_rewards_short(msgpack_packer *pk) {
    msgpack_pack_array(pk, mut_target->n_completions - 1);
    for (uint32_t i = 0; i + 1 < mut_target->n_completions; i++) msgpack_pack_double(pk, 1.0);
}

static void test_group_round_trip(int scored) {
    cpt_rollout_group g = sample_group("run-1", 1, 99, 3, 40, scored);
    cpt_msg_type t = scored ? CPT_MSG_SCORED_GROUP : CPT_MSG_ROLLOUT_GROUP;
    const char *h = scored ? "scored" : "rollout";
    cpt_buf b;
    cpt_err err = {{0}};
    CHECK_MSG(cpt_rollout_group_encode(&g, &b, &err) == 0, "%s", err.msg);
    save_seed_all(scored ? "scored_ok" : "rollout_ok", b.data, b.len);
    (void)h;
    cpt_rollout_group d;
    CHECK_MSG(cpt_rollout_group_decode(b.data, b.len, t, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(d.id.index, 99);
    CHECK_EQ_INT(d.n_completions, 3);
    CHECK_EQ_INT(d.n_prompt, 5);
    CHECK_EQ_INT(d.prompt[4], 104 + 99);
    for (uint32_t c = 0; c < 3; c++) {
        CHECK_EQ_INT(d.completions[c].n_tokens, 40 + c);
        CHECK(!memcmp(d.completions[c].tokens, g.completions[c].tokens, (40 + c) * 4));
        CHECK(!memcmp(d.completions[c].logprobs, g.completions[c].logprobs, (40 + c) * 4));
        CHECK_EQ_INT(d.completions[c].finish, c % 3);
    }
    CHECK_EQ_INT(d.weight_version, 7);
    CHECK_EQ_STR(d.worker, "rollout-0@node1");
    CHECK_NEAR(d.timings.started, 1764670000.25, 1e-15);
    CHECK_NEAR(d.timings.gen_s, 1.5, 1e-15);
    CHECK_EQ_STR(d.extra, "{\"answer\": \"42\"}");
    CHECK_EQ_INT(d.has_rewards, scored);
    if (scored) {
        CHECK_NEAR(d.rewards[2], -0.5, 1e-15);
        CHECK_NEAR(d.rewards[1], 1.0, 1e-15);
        CHECK_EQ_INT(d.n_parts, 2);
        CHECK_EQ_STR(d.part_names[1], "format");
        CHECK_NEAR(d.part_values[3 + 2], 1.0, 1e-15);
        CHECK(d.completions[0].teacher_logprobs != NULL);
        CHECK(d.completions[1].teacher_logprobs == NULL);
        CHECK_NEAR(d.completions[0].teacher_logprobs[10], -0.51, 1e-6);
    }
    cpt_rollout_group_free(&d);

    /* Wrong type for the stream. */
    cpt_msg_type other = scored ? CPT_MSG_ROLLOUT_GROUP : CPT_MSG_SCORED_GROUP;
    CHECK_EQ_INT(cpt_rollout_group_decode(b.data, b.len, other, &d, &err), -1);
    CHECK_MSG(strstr(err.msg, "where a") != NULL, "%s", err.msg);

    if (scored) {
        mut_target = &g;
        cpt_buf x = mutate(&b, "rewards", put_rewards_short);
        CHECK(decode_group_fails(&x, t, "rewards: 2 values for 3 completions", "rewards_short"));
        cpt_buf_free(&x);
    }
    /* tokens and logprobs of different lengths, packed by hand (the encoder cannot express it). */
    cpt_buf b2;
    {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 9);
        msgpack_pack_str_with_body(&pk, "schema", 6); msgpack_pack_int(&pk, 1);
        msgpack_pack_str_with_body(&pk, "type", 4); msgpack_pack_str_with_body(&pk, "rollout_group", 13);
        msgpack_pack_str_with_body(&pk, "run", 3); msgpack_pack_str_with_body(&pk, "run-1", 5);
        msgpack_pack_str_with_body(&pk, "group", 5); msgpack_pack_array(&pk, 2); msgpack_pack_int(&pk, 0); msgpack_pack_int(&pk, 1);
        int32_t p[2] = {1, 2};
        msgpack_pack_str_with_body(&pk, "prompt", 6); msgpack_pack_bin(&pk, 8); msgpack_pack_bin_body(&pk, p, 8);
        msgpack_pack_str_with_body(&pk, "completions", 11); msgpack_pack_array(&pk, 1);
        msgpack_pack_map(&pk, 3);
        int32_t tk[3] = {5, 6, 7};
        float lp[2] = {-1, -2};
        msgpack_pack_str_with_body(&pk, "tokens", 6); msgpack_pack_bin(&pk, 12); msgpack_pack_bin_body(&pk, tk, 12);
        msgpack_pack_str_with_body(&pk, "logprobs", 8); msgpack_pack_bin(&pk, 8); msgpack_pack_bin_body(&pk, lp, 8);
        msgpack_pack_str_with_body(&pk, "finish", 6); msgpack_pack_str_with_body(&pk, "stop", 4);
        msgpack_pack_str_with_body(&pk, "weight_version", 14); msgpack_pack_int(&pk, 1);
        msgpack_pack_str_with_body(&pk, "worker", 6); msgpack_pack_str_with_body(&pk, "w", 1);
        msgpack_pack_str_with_body(&pk, "timings", 7); msgpack_pack_map(&pk, 3);
        msgpack_pack_str_with_body(&pk, "started", 7); msgpack_pack_double(&pk, 1);
        msgpack_pack_str_with_body(&pk, "gen_s", 5); msgpack_pack_double(&pk, 1);
        msgpack_pack_str_with_body(&pk, "queue_s", 7); msgpack_pack_double(&pk, 1);
        cpt_buf bad = {sb.data, sb.size};
        if (!scored) CHECK(decode_group_fails(&bad, t, "completions[0].logprobs: 2 values for 3 tokens", "lp_mismatch"));
        msgpack_sbuffer_destroy(&sb);
    }
    /* Positive logprob */
    g.completions[2].logprobs[3] = 0.5f;
    CHECK_EQ_INT(cpt_rollout_group_encode(&g, &b2, &err), -1);
    CHECK_MSG(strstr(err.msg, "completions[2].logprobs[3] = 0.5") != NULL, "%s", err.msg);
    cpt_buf_free(&b);
    sample_group_free(&g);
}

/* Re-encodes b with completions[c].mask changed by edit (the mask object of the decoded map, edited in place). */
typedef void (*mask_edit)(msgpack_object *mask, uint8_t *scratch);
static cpt_buf mutate_mask(const cpt_buf *b, uint32_t c, mask_edit edit) {
    static uint8_t scratch[256];
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    msgpack_unpack_next(&up, b->data, b->len, &off);
    msgpack_object_map *m = &up.data.via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        msgpack_object *k = &m->ptr[i].key;
        if (k->via.str.size != 11 || memcmp(k->via.str.ptr, "completions", 11)) continue;
        msgpack_object_map *cm = &m->ptr[i].val.via.array.ptr[c].via.map;
        for (uint32_t j = 0; j < cm->size; j++)
            if (cm->ptr[j].key.via.str.size == 4 && !memcmp(cm->ptr[j].key.via.str.ptr, "mask", 4))
                edit(&cm->ptr[j].val, scratch);
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_object(&pk, up.data);
    msgpack_unpacked_destroy(&up);
    cpt_buf out = {sb.data, sb.size};
    return out;
}
static void mask_short(msgpack_object *o, uint8_t *s) { (void)s; o->via.bin.size--; }
static void mask_two(msgpack_object *o, uint8_t *s) {
    memcpy(s, o->via.bin.ptr, o->via.bin.size);
    s[3] = 2;
    o->via.bin.ptr = (const char *)s;
}
static void mask_str(msgpack_object *o, uint8_t *s) { (void)s; o->type = MSGPACK_OBJECT_STR; }

/* The completion mask: travels only when some token is not the model's, comes back equal, and is checked. */
static void test_group_mask(int scored) {
    cpt_rollout_group g = sample_group("run-1", 1, 5, 3, 20, scored);
    cpt_msg_type t = scored ? CPT_MSG_SCORED_GROUP : CPT_MSG_ROLLOUT_GROUP;
    g.completions[0].mask = malloc(20);
    memset(g.completions[0].mask, 1, 20); /* all model tokens: not sent */
    g.completions[1].mask = malloc(21);
    for (int i = 0; i < 21; i++) g.completions[1].mask[i] = !(i >= 5 && i < 9);
    cpt_buf b;
    cpt_err err = {{0}};
    CHECK_MSG(cpt_rollout_group_encode(&g, &b, &err) == 0, "%s", err.msg);
    save_seed(scored ? "scored" : "rollout", "mask_ok", b.data, b.len);
    cpt_rollout_group d;
    CHECK_MSG(cpt_rollout_group_decode(b.data, b.len, t, &d, &err) == 0, "%s", err.msg);
    CHECK(d.completions[0].mask == NULL);
    CHECK(d.completions[1].mask != NULL && !memcmp(d.completions[1].mask, g.completions[1].mask, 21));
    CHECK(d.completions[2].mask == NULL);
    cpt_rollout_group_free(&d);
    /* without any mask the bytes are those of a group that never had one */
    cpt_buf plain;
    free(g.completions[1].mask);
    g.completions[1].mask = NULL;
    CHECK_MSG(cpt_rollout_group_encode(&g, &plain, &err) == 0, "%s", err.msg);
    CHECK(plain.len < b.len);
    free(g.completions[0].mask);
    g.completions[0].mask = NULL;
    cpt_buf plain2;
    CHECK_MSG(cpt_rollout_group_encode(&g, &plain2, &err) == 0, "%s", err.msg);
    CHECK(plain.len == plain2.len && !memcmp(plain.data, plain2.data, plain.len));
    cpt_buf_free(&plain);
    cpt_buf_free(&plain2);

    cpt_buf x = mutate_mask(&b, 1, mask_short);
    CHECK(decode_group_fails(&x, t, "completions[1].mask: 20 values for 21 tokens", scored ? NULL : "mask_short"));
    cpt_buf_free(&x);
    x = mutate_mask(&b, 1, mask_two);
    CHECK(decode_group_fails(&x, t, "completions[1].mask[3] = 2: expected 0 or 1", scored ? NULL : "mask_two"));
    cpt_buf_free(&x);
    x = mutate_mask(&b, 1, mask_str);
    CHECK(decode_group_fails(&x, t, "completions[1].mask: expected a bin", NULL));
    cpt_buf_free(&x);
    /* the encoder refuses a value other than 0 or 1 */
    g.completions[2].mask = calloc(22, 1);
    g.completions[2].mask[7] = 3;
    CHECK_EQ_INT(cpt_rollout_group_encode(&g, &x, &err), -1);
    CHECK_MSG(strstr(err.msg, "completions[2].mask[7] = 3: expected 0 or 1") != NULL, "%s", err.msg);
    free(g.completions[2].mask);
    g.completions[2].mask = NULL;
    cpt_buf_free(&b);
    sample_group_free(&g);
}

static void test_small_messages(void) {
    cpt_err err = {{0}};
    cpt_buf b;
    cpt_weights_msg w = {.version = 12, .bytes = 123456789, .membership_epoch = 2};
    snprintf(w.run, sizeof w.run, "r");
    snprintf(w.transport, sizeof w.transport, "file");
    snprintf(w.location, sizeof w.location, "/runs/r/weights/v12.safetensors");
    snprintf(w.checksum, sizeof w.checksum, "xxh64:0123456789abcdef");
    CHECK_EQ_INT(cpt_weights_encode(&w, &b, &err), 0);
    save_seed_all("weights_ok", b.data, b.len);
    cpt_weights_msg w2;
    CHECK_MSG(cpt_weights_decode(b.data, b.len, &w2, &err) == 0, "%s", err.msg);
    CHECK(w2.version == 12 && w2.bytes == 123456789 && w2.membership_epoch == 2);
    CHECK_EQ_STR(w2.location, "/runs/r/weights/v12.safetensors");
    CHECK_EQ_STR(w2.checksum, "xxh64:0123456789abcdef");
    cpt_buf x = mutate(&b, "transport", put_str_x);
    CHECK_EQ_INT(cpt_weights_decode(x.data, x.len, &w2, &err), -1);
    CHECK_MSG(strstr(err.msg, "transport = \"x\"") != NULL, "%s", err.msg);
    save_seed("weights", "bad_transport", x.data, x.len);
    cpt_buf_free(&x);
    cpt_buf_free(&b);

    cpt_control_msg c = {.n_roles = 2};
    snprintf(c.run, sizeof c.run, "r");
    snprintf(c.state, sizeof c.state, "running");
    snprintf(c.roles[0].role, sizeof c.roles[0].role, "rollout");
    c.roles[0].count = 8;
    snprintf(c.roles[1].role, sizeof c.roles[1].role, "reward");
    c.roles[1].count = 2;
    CHECK_EQ_INT(cpt_control_encode(&c, &b, &err), 0);
    save_seed_all("control_ok", b.data, b.len);
    cpt_control_msg c2;
    CHECK_MSG(cpt_control_decode(b.data, b.len, &c2, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c2.n_roles, 2);
    CHECK_EQ_STR(c2.roles[0].role, "rollout");
    CHECK_EQ_INT(c2.roles[0].count, 8);
    CHECK_EQ_STR(c2.state, "running");
    /* weights bytes are not a control message */
    cpt_buf wb;
    cpt_weights_encode(&w, &wb, &err);
    CHECK_EQ_INT(cpt_control_decode(wb.data, wb.len, &c2, &err), -1);
    CHECK_MSG(strstr(err.msg, "type \"weights\" where a control was expected") != NULL, "%s", err.msg);
    cpt_buf_free(&wb);
    cpt_buf_free(&b);
    snprintf(c.roles[1].role, sizeof c.roles[1].role, "rollout");
    CHECK_EQ_INT(cpt_control_encode(&c, &b, &err), -1);
    CHECK_MSG(strstr(err.msg, "appears twice") != NULL, "%s", err.msg);

    cpt_heartbeat_msg h = {.version = 5, .tokens_per_s = 1234.5, .occupancy = 0.75, .time = 1764670000.5};
    snprintf(h.run, sizeof h.run, "r");
    snprintf(h.worker, sizeof h.worker, "rollout-0");
    snprintf(h.role, sizeof h.role, "rollout");
    snprintf(h.host, sizeof h.host, "node1");
    CHECK_EQ_INT(cpt_heartbeat_encode(&h, &b, &err), 0);
    save_seed_all("heartbeat_ok", b.data, b.len);
    cpt_heartbeat_msg h2;
    CHECK_MSG(cpt_heartbeat_decode(b.data, b.len, &h2, &err) == 0, "%s", err.msg);
    CHECK_EQ_STR(h2.host, "node1");
    CHECK_NEAR(h2.tokens_per_s, 1234.5, 1e-15);
    CHECK_NEAR(h2.occupancy, 0.75, 1e-15);
    CHECK_EQ_INT(h2.version, 5);
    cpt_buf_free(&b);
    h.occupancy = 1.5;
    CHECK_EQ_INT(cpt_heartbeat_encode(&h, &b, &err), -1);
    CHECK_MSG(strstr(err.msg, "occupancy = 1.5") != NULL, "%s", err.msg);

    /* Garbage and non-maps. */
    const unsigned char arr[] = {0x92, 0x01, 0x02};
    CHECK_EQ_INT(cpt_heartbeat_decode(arr, sizeof arr, &h2, &err), -1);
    CHECK_MSG(strstr(err.msg, "not a map") != NULL, "%s", err.msg);
    save_seed("heartbeat", "array", arr, sizeof arr);
    const unsigned char rsv[] = {0x81, 0xc1, 0x00};
    CHECK_EQ_INT(cpt_weights_decode(rsv, sizeof rsv, &w2, &err), -1);
    CHECK_MSG(strstr(err.msg, "0xc1") != NULL, "%s", err.msg);
    save_seed("weights", "reserved", rsv, sizeof rsv);
    CHECK_EQ_INT(cpt_control_decode("", 0, &c2, &err), -1);
    CHECK_MSG(strstr(err.msg, "empty message") != NULL, "%s", err.msg);
    save_seed("control", "empty_map", "\x80", 1);
    save_seed("control", "deep", "\x81\xa1k\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x91\x90", 22);
    save_seed("heartbeat", "ext", "\x81\xa4type\xd4\x01\x02", 8);
    save_seed("prompt", "float_top_k", "\x81\xa5top_k\xcb\x7f\xf0\0\0\0\0\0\0", 16);

    /* A map whose one array holds about 2^20 one-byte elements (1 MB): msgpack-c would take 24 bytes each; 2^20 + 1
     * objects with the map, its key and the array are refused before anything is unpacked; 2^20 pass the scan
     * (and fail on the missing keys). */
    for (int k = 0; k < 2; k++) {
        const size_t n = (1u << 20) - 2 - (size_t)k;
        size_t len = 1 + 2 + 5 + n;
        unsigned char *big = malloc(len);
        CHECK(big != NULL);
        if (!big) break;
        big[0] = 0x81, big[1] = 0xa1, big[2] = 'x', big[3] = 0xdd;
        big[4] = (unsigned char)(n >> 24), big[5] = (unsigned char)(n >> 16), big[6] = (unsigned char)(n >> 8);
        big[7] = (unsigned char)n;
        memset(big + 8, 0x01, n);
        CHECK_EQ_INT(cpt_heartbeat_decode(big, len, &h2, &err), -1);
        if (k == 0)
            CHECK_MSG(strstr(err.msg, "more than 1048576 objects") != NULL, "%s", err.msg);
        else
            CHECK_MSG(!strstr(err.msg, "objects") && strstr(err.msg, "missing key"), "%s", err.msg);
        free(big);
    }
}

static void test_seen(void) {
    cpt_seen s;
    cpt_seen_init(&s);
    int added = 0, again = 0;
    for (uint64_t i = 0; i < 5000; i++) added += cpt_seen_add(&s, (cpt_group_id){i % 3, i});
    for (uint64_t i = 0; i < 5000; i += 7) again += cpt_seen_add(&s, (cpt_group_id){i % 3, i});
    CHECK_EQ_INT(added, 5000);
    CHECK_EQ_INT(again, 0);
    CHECK(cpt_seen_has(&s, (cpt_group_id){4999 % 3, 4999}));
    CHECK(!cpt_seen_has(&s, (cpt_group_id){2, 4999})); /* same index, other epoch */
    CHECK(!cpt_seen_has(&s, (cpt_group_id){0, 5000}));
    CHECK_EQ_INT(s.n, 5000);
    cpt_seen_free(&s);
}

/* The bounds a role checks against its run (cpt_*_check_bounds): 0 is unchecked; each failure names the field. */
static void test_bounds(void) {
    cpt_err err;
    sample_prompt s;
    sample_prompt_init(&s, "run-1", 0, 5, 8); /* 4 samples, min_version 3, token ids < 151000 */
    cpt_group_bounds none = {0};
    CHECK_EQ_INT(cpt_prompt_group_check_bounds(&s.m, &none, &err), 0);
    cpt_group_bounds b = {.vocab_size = 151000, .max_samples = 4, .has_max_version = 1, .max_version = 3};
    CHECK_EQ_INT(cpt_prompt_group_check_bounds(&s.m, &b, &err), 0);
    b.max_version = 2;
    CHECK_EQ_INT(cpt_prompt_group_check_bounds(&s.m, &b, &err), -1);
    CHECK(strstr(err.msg, "min_version: 3 was never announced (newest 2)") != NULL);
    b.max_version = 3;
    b.max_samples = 3;
    CHECK_EQ_INT(cpt_prompt_group_check_bounds(&s.m, &b, &err), -1);
    CHECK(strstr(err.msg, "n_samples: 4, the run samples at most 3") != NULL);
    b.max_samples = 4;
    b.vocab_size = 20;
    CHECK_EQ_INT(cpt_prompt_group_check_bounds(&s.m, &b, &err), -1);
    CHECK(strstr(err.msg, "prompt[") && strstr(err.msg, "outside the vocabulary [0, 20)"));

    cpt_rollout_group g = sample_group("run-1", 0, 5, 3, 6, 1);
    cpt_group_bounds r = {.vocab_size = 1 << 30, .max_samples = 3, .has_max_version = 1, .max_version = g.weight_version};
    CHECK_EQ_INT(cpt_rollout_group_check_bounds(&g, &r, &err), 0);
    r.max_samples = 2;
    CHECK_EQ_INT(cpt_rollout_group_check_bounds(&g, &r, &err), -1);
    CHECK(strstr(err.msg, "completions: 3, the run samples at most 2") != NULL);
    r.max_samples = 0;
    r.max_version = g.weight_version - 1;
    CHECK_EQ_INT(cpt_rollout_group_check_bounds(&g, &r, &err), -1);
    CHECK(strstr(err.msg, "weight_version") && strstr(err.msg, "was never announced"));
    r.has_max_version = 0;
    g.completions[2].tokens[4] = 1 << 30;
    CHECK_EQ_INT(cpt_rollout_group_check_bounds(&g, &r, &err), -1);
    CHECK(strstr(err.msg, "completions[2].tokens[4]: token 1073741824 outside the vocabulary") != NULL);
    sample_group_free(&g);
}

int main(void) {
    corpus_dir = getenv("CPT_WRITE_CORPUS");
    test_bounds();
    test_prompt_round_trip();
    test_group_round_trip(0);
    test_group_round_trip(1);
    test_group_mask(0);
    test_group_mask(1);
    test_small_messages();
    test_seen();
    return check_summary("test_schema");
}
