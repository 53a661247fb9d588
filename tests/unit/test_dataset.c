/* core/dataset: the four JSONL formats, auto detection, every bad-line error with FILE:LINE and the field,
 * skip_bad_lines counting, max_records, and the deterministic order with an exact cursor save/restore. */
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/dataset.h"
#include "core/fs.h"
#include "tests/check.h"

static cpt_dataset *load(const char *text, cpt_data_format f, int skip, cpt_err *err) {
    cpt_dataset_opts o = {.format = f, .skip_bad_lines = skip};
    return cpt_dataset_load_text(text, strlen(text), "d.jsonl", &o, err);
}

static void test_formats(void) {
    cpt_err err = {{0}};
    /* prompt/completion, with CRLF, a blank line and an ignored extra field. */
    cpt_dataset *ds = load("{\"prompt\": \"2+2=\", \"completion\": \"4\"}\r\n\n  \n"
                           "{\"prompt\": \"caf\\u00e9\", \"completion\": \"ok\", \"id\": 7}\n",
                           CPT_DATA_AUTO, 0, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK_EQ_INT(cpt_dataset_count(ds), 2);
        CHECK_EQ_INT(cpt_dataset_format(ds), CPT_DATA_PROMPT_COMPLETION);
        const cpt_record *r = cpt_dataset_get(ds, 1);
        CHECK_EQ_STR(r->prompt, "caf\xc3\xa9");
        CHECK_EQ_STR(r->completion, "ok");
        CHECK_EQ_INT(r->line, 4);
        CHECK(r->messages == NULL && r->answer == NULL);
        CHECK(cpt_dataset_get(ds, 2) == NULL);
        CHECK_EQ_INT(cpt_dataset_bad_lines(ds), 0);
        cpt_dataset_free(ds);
    }
    /* messages */
    ds = load("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
              "\"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\\nthere\"}]}\n",
              CPT_DATA_AUTO, 0, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK_EQ_INT(cpt_dataset_format(ds), CPT_DATA_MESSAGES);
        const cpt_record *r = cpt_dataset_get(ds, 0);
        CHECK_EQ_INT(r->n_messages, 3);
        CHECK_EQ_STR(r->messages[0].role, "system");
        CHECK_EQ_STR(r->messages[2].content, "Hello\nthere");
        CHECK(r->prompt == NULL);
        cpt_dataset_free(ds);
    }
    /* preference: string prompt and messages prompt */
    ds = load("{\"prompt\": \"Q\", \"chosen\": \"good\", \"rejected\": \"bad\"}\n"
              "{\"prompt\": [{\"role\": \"user\", \"content\": \"Q2\"}], \"chosen\": \"g2\", \"rejected\": \"b2\"}\n",
              CPT_DATA_AUTO, 0, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK_EQ_INT(cpt_dataset_format(ds), CPT_DATA_PREFERENCE);
        CHECK_EQ_STR(cpt_dataset_get(ds, 0)->prompt, "Q");
        CHECK_EQ_STR(cpt_dataset_get(ds, 0)->rejected, "bad");
        const cpt_record *r = cpt_dataset_get(ds, 1);
        CHECK(r->prompt == NULL && r->n_messages == 1);
        CHECK_EQ_STR(r->messages[0].content, "Q2");
        CHECK_EQ_STR(r->chosen, "g2");
        cpt_dataset_free(ds);
    }
    /* rl_prompt: extra fields kept as JSON in file order; numeric answers kept as text */
    ds = load("{\"prompt\": \"Make 24\", \"answer\": \"24\", \"numbers\": [3, 8], \"target\": 24, \"note\": \"x\"}\n"
              "{\"prompt\": \"What is 1/2?\", \"answer\": 0.5}\n"
              "{\"prompt\": \"n\", \"answer\": -17}\n"
              "{\"prompt\": \"0.3 - 0.2?\", \"answer\": 0.1}\n"
              "{\"prompt\": \"1.1?\", \"answer\": 1.10}\n",
              CPT_DATA_AUTO, 0, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    if (ds) {
        /* decimals as the file wrote them, not a 17-digit dump (0.10000000000000001) */
        CHECK_EQ_STR(cpt_dataset_get(ds, 3)->answer, "0.1");
        CHECK_EQ_STR(cpt_dataset_get(ds, 4)->answer, "1.1");
        CHECK_EQ_INT(cpt_dataset_format(ds), CPT_DATA_RL_PROMPT);
        CHECK_EQ_STR(cpt_dataset_get(ds, 0)->answer, "24");
        CHECK_EQ_STR(cpt_dataset_get(ds, 0)->extra, "{\"numbers\":[3,8],\"target\":24,\"note\":\"x\"}");
        CHECK_EQ_STR(cpt_dataset_get(ds, 1)->answer, "0.5");
        CHECK_EQ_STR(cpt_dataset_get(ds, 1)->extra, "{}");
        CHECK_EQ_STR(cpt_dataset_get(ds, 2)->answer, "-17");
        cpt_dataset_free(ds);
    }
    /* An explicit format reads a record that auto would classify differently. */
    ds = load("{\"prompt\": \"p\", \"completion\": \"c\", \"answer\": \"a\"}\n", CPT_DATA_PROMPT_COMPLETION, 0, &err);
    CHECK(ds && cpt_dataset_format(ds) == CPT_DATA_PROMPT_COMPLETION && !strcmp(cpt_dataset_get(ds, 0)->completion, "c"));
    cpt_dataset_free(ds);
}

static void expect_bad(const char *text, cpt_data_format f, const char *want) {
    cpt_err err = {{0}};
    cpt_dataset *ds = load(text, f, 0, &err);
    CHECK_MSG(ds == NULL, "accepted: %s", text);
    CHECK_MSG(strstr(err.msg, want) != NULL, "got '%s', want '%s'", err.msg, want);
    cpt_dataset_free(ds);
}

static void test_errors(void) {
    const char *good = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s{\"prompt\": \"a\", \"completion\": 5}\n", good, good);
    expect_bad(buf, CPT_DATA_AUTO, "d.jsonl:3: field 'completion': expected a string, got a number");
    snprintf(buf, sizeof buf, "%s\n{\"prompt\": \"a\"}\n", good);
    expect_bad(buf, CPT_DATA_AUTO, "d.jsonl:3: field 'completion': missing");
    snprintf(buf, sizeof buf, "%s{\"prompt\": \"a\", \"completion\": \"b\"\n", good);
    expect_bad(buf, CPT_DATA_AUTO, "d.jsonl:2: not valid JSON: ");
    expect_bad("[1, 2]\n", CPT_DATA_AUTO, "d.jsonl:1: expected a JSON object, got an array");
    expect_bad("{\"text\": \"x\"}\n", CPT_DATA_AUTO, "d.jsonl:1: cannot tell the record format");
    expect_bad("{\"prompt\": \"a\", \"prompt\": \"b\", \"completion\": \"c\"}\n", CPT_DATA_AUTO, "d.jsonl:1: not valid JSON");
    expect_bad("{\"prompt\": \"a\\u0000b\", \"completion\": \"c\"}\n", CPT_DATA_AUTO, "d.jsonl:1: not valid JSON");
    expect_bad("{\"prompt\": \"\xff\", \"completion\": \"c\"}\n", CPT_DATA_AUTO, "d.jsonl:1: not valid JSON");
    expect_bad("{\"messages\": []}\n", CPT_DATA_AUTO, "d.jsonl:1: field 'messages': empty list of messages");
    expect_bad("{\"messages\": \"hi\"}\n", CPT_DATA_AUTO, "field 'messages': expected a list of messages, got a string");
    expect_bad("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"asistant\", \"content\": \"a\"}]}",
               CPT_DATA_AUTO, "d.jsonl:1: field 'messages[1].role': unknown role 'asistant'");
    expect_bad("{\"messages\": [{\"role\": \"user\"}]}", CPT_DATA_AUTO, "field 'messages[0].content': missing");
    expect_bad("{\"messages\": [{\"role\": \"user\", \"content\": null}]}", CPT_DATA_AUTO,
               "field 'messages[0].content': expected a string, got null");
    expect_bad("{\"messages\": [\"user: hi\"]}", CPT_DATA_AUTO, "field 'messages[0]': expected an object");
    expect_bad("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", CPT_DATA_AUTO,
               "field 'messages': no assistant message");
    expect_bad("{\"prompt\": 3, \"chosen\": \"a\", \"rejected\": \"b\"}", CPT_DATA_AUTO,
               "field 'prompt': expected a string or a list of messages, got a number");
    expect_bad("{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": [\"b\"]}", CPT_DATA_AUTO,
               "field 'rejected': expected a string, got an array");
    expect_bad("{\"prompt\": [{\"role\": \"user\", \"content\": 1}], \"answer\": \"1\"}", CPT_DATA_AUTO,
               "field 'prompt[0].content': expected a string, got a number");
    expect_bad("{\"prompt\": \"p\", \"answer\": true}", CPT_DATA_AUTO,
               "field 'answer': expected a string or a number, got a boolean");
    expect_bad("{\"prompt\": \"p\", \"answer\": \"1\"}\n", CPT_DATA_MESSAGES, "d.jsonl:1: field 'messages': missing");
    expect_bad("{\"prompt\": \"p\", \"completion\": \"c\"}\n", CPT_DATA_RL_PROMPT, "field 'answer': missing");
    expect_bad("", CPT_DATA_AUTO, "d.jsonl: no records");
    expect_bad("\n  \n\r\n", CPT_DATA_AUTO, "d.jsonl: no records");
    /* After the first record fixes the format, a record of another format is a bad line. */
    expect_bad("{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"p\", \"answer\": \"1\"}\n", CPT_DATA_AUTO,
               "d.jsonl:2: field 'completion': missing");

    cpt_err err;
    cpt_dataset_opts o = {0};
    CHECK(cpt_dataset_load("/nonexistent/x.jsonl", &o, &err) == NULL && strstr(err.msg, "/nonexistent/x.jsonl"));
}

static void test_skip_bad(void) {
    const char *text = "not json\n"
                       "{\"prompt\": \"a\", \"completion\": \"b\"}\n"
                       "{\"prompt\": \"a\"}\n"
                       "{\"prompt\": \"c\", \"completion\": \"d\"}\n"
                       "[]\n"
                       "{\"prompt\": \"e\", \"completion\": \"f\"}";
    cpt_err err = {{0}};
    cpt_dataset *ds = load(text, CPT_DATA_AUTO, 1, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK_EQ_INT(cpt_dataset_count(ds), 3);
        CHECK_EQ_INT(cpt_dataset_bad_lines(ds), 3);
        CHECK(strstr(cpt_dataset_first_bad(ds), "d.jsonl:1: not valid JSON") != NULL);
        CHECK_EQ_STR(cpt_dataset_get(ds, 2)->prompt, "e");
        CHECK_EQ_INT(cpt_dataset_get(ds, 2)->line, 6);
        cpt_dataset_free(ds);
    }
    ds = load(text, CPT_DATA_AUTO, 0, &err);
    CHECK(ds == NULL && strstr(err.msg, "d.jsonl:1: not valid JSON"));
    ds = load("x\ny\n", CPT_DATA_AUTO, 1, &err);
    CHECK(ds == NULL && strstr(err.msg, "d.jsonl: no valid records (2 bad lines; first: d.jsonl:1:"));

    cpt_dataset_opts o = {.format = CPT_DATA_AUTO, .max_records = 2};
    ds = cpt_dataset_load_text(text + 9, strlen(text + 9), "m.jsonl", &o, &err);
    CHECK(ds == NULL && strstr(err.msg, "m.jsonl:2: field 'completion': missing")); /* a bad line before the limit fails */
    o.skip_bad_lines = 1;
    ds = cpt_dataset_load_text(text, strlen(text), "m.jsonl", &o, &err);
    CHECK(ds && cpt_dataset_count(ds) == 2 && cpt_dataset_bad_lines(ds) == 2);
    cpt_dataset_free(ds);
}

static void test_config_and_file(void) {
    const char *path = "/tmp/cpt_test_dataset.jsonl";
    const char *text = "{\"prompt\": \"a\", \"completion\": \"b\"}\nbad\n{\"prompt\": \"c\", \"completion\": \"d\"}\n";
    cpt_err err = {{0}};
    CHECK(cpt_write_file_atomic(path, text, strlen(text), &err) == 0);
    char *ov[] = {"data.skip_bad_lines=true", "data.format=prompt_completion"};
    cpt_config *cfg = cpt_config_load(NULL, 2, ov, &err);
    CHECK(cfg != NULL);
    cpt_dataset *ds = cfg ? cpt_dataset_load_config(path, cfg, &err) : NULL;
    CHECK_MSG(ds && cpt_dataset_count(ds) == 2 && cpt_dataset_bad_lines(ds) == 1, "%s", err.msg);
    CHECK(ds && !strcmp(cpt_dataset_path(ds), path));
    cpt_dataset_free(ds);
    cpt_config_free(cfg);
    cfg = cpt_config_load(NULL, 0, NULL, &err);
    ds = cpt_dataset_load_config(path, cfg, &err);
    CHECK(ds == NULL && strstr(err.msg, "/tmp/cpt_test_dataset.jsonl:2: not valid JSON"));
    cpt_config_free(cfg);
    remove(path);
    cpt_data_format f;
    CHECK(cpt_data_format_parse("rl_prompt", &f) == 0 && f == CPT_DATA_RL_PROMPT);
    CHECK(cpt_data_format_parse("jsonl", &f) == -1);
    CHECK_EQ_STR(cpt_data_format_name(CPT_DATA_PREFERENCE), "preference");
}

static void test_order(void) {
    enum { N = 37 };
    cpt_err err;
    cpt_data_order a, b;
    CHECK(cpt_data_order_init(&a, N, 1234, 1, &err) == 0);
    CHECK(cpt_data_order_init(&b, N, 1234, 1, &err) == 0);
    /* Each epoch is a permutation; epochs differ; the same seed gives the same order. */
    size_t e0[N], e1[N];
    int seen0[N] = {0}, seen1[N] = {0}, same_epochs = 1, fixed = 0;
    for (int i = 0; i < N; i++) {
        e0[i] = cpt_data_order_next(&a);
        CHECK(e0[i] < N);
        if (e0[i] < N) seen0[e0[i]]++;
        if (e0[i] == (size_t)i) fixed++;
    }
    CHECK(cpt_data_order_tell(&a).epoch == 1 && cpt_data_order_tell(&a).index == 0);
    for (int i = 0; i < N; i++) {
        e1[i] = cpt_data_order_next(&a);
        if (e1[i] < N) seen1[e1[i]]++;
        if (e1[i] != e0[i]) same_epochs = 0;
    }
    int perm_ok = 1;
    for (int i = 0; i < N; i++)
        if (seen0[i] != 1 || seen1[i] != 1) perm_ok = 0;
    CHECK(perm_ok);
    CHECK(!same_epochs);
    CHECK(fixed < N / 2);
    int same_seed = 1;
    for (int i = 0; i < N; i++)
        if (cpt_data_order_next(&b) != e0[i]) same_seed = 0;
    CHECK(same_seed);
    CHECK(cpt_data_order_at(&b, 0, 5) == e0[5] && cpt_data_order_at(&b, 1, 5) == e1[5]);

    /* A different seed gives a different order. */
    cpt_data_order c;
    cpt_data_order_init(&c, N, 1235, 1, &err);
    int diff = 0;
    for (int i = 0; i < N; i++) diff += cpt_data_order_next(&c) != e0[i];
    CHECK(diff > N / 2);
    cpt_data_order_free(&c);

    /* Save and restore at every point of 3 epochs: the continuation equals the uninterrupted sequence. */
    enum { TOTAL = 3 * N };
    size_t ref[TOTAL];
    cpt_data_order r;
    cpt_data_order_init(&r, N, 99, 1, &err);
    for (int i = 0; i < TOTAL; i++) ref[i] = cpt_data_order_next(&r);
    cpt_data_order_free(&r);
    int all_match = 1;
    for (int cut = 0; cut < TOTAL; cut += 5) {
        cpt_data_order x, y;
        cpt_data_order_init(&x, N, 99, 1, &err);
        for (int i = 0; i < cut; i++) cpt_data_order_next(&x);
        cpt_data_cursor saved = cpt_data_order_tell(&x);
        cpt_data_order_free(&x);
        /* As a checkpoint would: two plain integers. */
        uint64_t ep = saved.epoch, ix = saved.index;
        cpt_data_order_init(&y, N, 99, 1, &err);
        if (cpt_data_order_seek(&y, (cpt_data_cursor){ep, ix}, &err)) all_match = 0;
        for (int i = cut; i < TOTAL; i++)
            if (cpt_data_order_next(&y) != ref[i]) all_match = 0;
        cpt_data_order_free(&y);
    }
    CHECK(all_match);

    /* No shuffle: file order every epoch. */
    cpt_data_order s;
    cpt_data_order_init(&s, 4, 1, 0, &err);
    size_t want[] = {0, 1, 2, 3, 0, 1};
    int in_order = 1;
    for (int i = 0; i < 6; i++)
        if (cpt_data_order_next(&s) != want[i]) in_order = 0;
    CHECK(in_order);
    /* The end of epoch 2 is the start of epoch 3; one past it does not fit. */
    CHECK(cpt_data_order_seek(&s, (cpt_data_cursor){2, 4}, &err) == 0);
    CHECK(cpt_data_order_tell(&s).epoch == 3 && cpt_data_order_tell(&s).index == 0);
    CHECK(cpt_data_order_next(&s) == 0 && cpt_data_order_tell(&s).index == 1);
    CHECK(cpt_data_order_seek(&s, (cpt_data_cursor){2, 5}, &err) == -1 && strstr(err.msg, "does not fit"));
    cpt_data_order_free(&s);
    cpt_data_order z;
    CHECK(cpt_data_order_init(&z, 0, 1, 1, &err) == -1 && strstr(err.msg, "empty"));
    cpt_data_order_free(&a);
    cpt_data_order_free(&b);
}

/* A 10 MB line, bad or good, and a record's place: every message names the file and the line. */
static void test_big_lines(void) {
    const size_t big = 10u << 20;
    char *text = malloc(big + 200);
    CHECK(text != NULL);
    if (!text) return;
    int n = snprintf(text, 200, "{\"prompt\": \"1+1\", \"answer\": \"2\"}\n{\"prompt\": \"");
    memset(text + n, 'x', big);
    size_t len = (size_t)n + big;
    cpt_err err = {{0}};
    cpt_dataset_opts o = {.format = CPT_DATA_AUTO};
    cpt_dataset *ds = cpt_dataset_load_text(text, len, "data/big.jsonl", &o, &err); /* unterminated string */
    CHECK(ds == NULL);
    CHECK_MSG(strstr(err.msg, "data/big.jsonl:2: not valid JSON") != NULL, "%s", err.msg);
    cpt_dataset_free(ds);
    const char *tail = "\", \"answer\": \"4\"}\n";
    memcpy(text + len, tail, strlen(tail));
    len += strlen(tail);
    ds = cpt_dataset_load_text(text, len, "data/big.jsonl", &o, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);
    if (ds) {
        CHECK_EQ_INT(cpt_dataset_count(ds), 2);
        char where[32];
        cpt_dataset_where(ds, cpt_dataset_get(ds, 1), where, sizeof where);
        CHECK_EQ_STR(where, "data/big.jsonl:2");
        cpt_dataset_where(ds, cpt_dataset_get(ds, 1), where, 10); /* the path is cut, the line kept */
        CHECK_EQ_STR(where, "data/bi:2");
        cpt_dataset_free(ds);
    }
    free(text);
}

int main(void) {
    test_big_lines();
    test_formats();
    test_errors();
    test_skip_bad();
    test_config_and_file();
    test_order();
    return check_summary("test_dataset");
}
