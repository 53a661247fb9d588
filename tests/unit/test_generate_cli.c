/* `cpt generate` end to end: --json output of a greedy run equals the transformers fixture; --prompts FILE.jsonl
 * with ids; a checkpoint (run folder -> newest step -> model/) generates the same as the HF folder it came from;
 * stop strings through --tokenizer; bad input exits non-zero with a message naming the problem. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core/fs.h"
#include "model/model.h"
#include "trainer/checkpoint.h"

static char BUILD[512], TMP[64];

/* Runs `cpt generate ARGS` with stdout to OUT and stderr to ERR; returns the exit status. */
static int gen(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/cpt generate %s > %s/out 2> %s/err", BUILD, args, TMP, TMP);
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

static char *slurp(const char *name) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", TMP, name);
    cpt_err err;
    char *s = cpt_read_file(p, NULL, &err);
    return s ? s : strdup("");
}

/* The ids array of JSON line `line` of the output (0-based), as a malloc'd json array. */
static json_t *line_ids(const char *out, int line, const char *field) {
    const char *p = out;
    for (int i = 0; i < line && p; i++) p = strchr(p, '\n'), p = p ? p + 1 : NULL;
    if (!p) return NULL;
    const char *e = strchr(p, '\n');
    json_error_t je;
    json_t *j = json_loadb(p, e ? (size_t)(e - p) : strlen(p), 0, &je);
    if (!j) return NULL;
    json_t *v = json_incref(json_object_get(j, field));
    json_decref(j);
    return v;
}

int main(void) {
    snprintf(BUILD, sizeof BUILD, "%s", getenv("CPT_BUILD") ? getenv("CPT_BUILD") : "build");
    snprintf(TMP, sizeof TMP, "/tmp/cpt-gen-XXXXXX");
    if (!mkdtemp(TMP)) return 1;
    json_error_t je;
    json_t *fx = json_load_file("tests/fixtures/generate/generate.json", 0, &je);
    CHECK(fx != NULL);
    json_t *c0 = json_array_get(json_object_get(json_object_get(fx, "models"), "qwen2_tied"), 0);
    json_t *c1 = json_array_get(json_object_get(json_object_get(fx, "models"), "qwen2_tied"), 1);

    /* --prompt-ids, greedy, --json: ids equal the fixture's, logprobs present */
    CHECK_EQ_INT(gen("--model tests/fixtures/model/qwen2_tied --prompt-ids 1,17,42,200,9 --greedy --max-new-tokens 20 "
                     "--no-eos --json"), 0);
    char *out = slurp("out");
    json_t *ids = line_ids(out, 0, "ids"), *lps = line_ids(out, 0, "logprobs");
    CHECK(ids && json_equal(ids, json_object_get(c0, "tokens")));
    CHECK(lps && json_array_size(lps) == 20);
    json_decref(ids), json_decref(lps), free(out);

    /* --prompts FILE.jsonl: two prompts, printed in order */
    char p[256];
    snprintf(p, sizeof p, "%s/prompts.jsonl", TMP);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"prompt_ids\": [1, 17, 42, 200, 9]}\n\n{\"prompt_ids\": [1, 250, 3, 3, 77, 128, 64, 5, 33]}\n");
    fclose(f);
    char args[1024];
    snprintf(args, sizeof args, "--model tests/fixtures/model/qwen2_tied --prompts %s --greedy --max-new-tokens 20 --no-eos --json --slots 1", p);
    CHECK_EQ_INT(gen(args), 0);
    out = slurp("out");
    ids = line_ids(out, 1, "ids");
    CHECK(ids && json_equal(ids, json_object_get(c1, "tokens")));
    json_decref(ids), free(out);

    /* a checkpoint of the same weights generates the same */
    cpt_err err;
    cpt_model *m = cpt_model_load("tests/fixtures/model/qwen2_tied", &err);
    cpt_train_state st;
    memset(&st, 0, sizeof st);
    st.step = 3;
    char run[128];
    snprintf(run, sizeof run, "%s/run", TMP);
    cpt_ckpt_save_args sa = {.run_dir = run, .model = m, .state = &st, .keep_last = 2};
    CHECK_MSG(m && cpt_ckpt_save(&sa, NULL, 0, &err) == 0, "%s", err.msg);
    cpt_model_free(m);
    snprintf(args, sizeof args, "--model %s --prompt-ids 1,17,42,200,9 --greedy --max-new-tokens 20 --no-eos --json", run);
    CHECK_EQ_INT(gen(args), 0);
    out = slurp("out");
    ids = line_ids(out, 0, "ids");
    CHECK(ids && json_equal(ids, json_object_get(c0, "tokens")));
    json_decref(ids), free(out);

    /* sampling with a seed is reproducible; --n gives n lines */
    const char *samp = "--model tests/fixtures/model/qwen3 --prompt-ids 5,6,7 --temperature 0.9 --top-k 50 --min-p 0.01 "
                       "--seed 11 --n 3 --max-new-tokens 12 --json";
    CHECK_EQ_INT(gen(samp), 0);
    char *a = slurp("out");
    CHECK_EQ_INT(gen(samp), 0);
    char *b = slurp("out");
    CHECK(!strcmp(a, b));
    int lines = 0;
    for (char *q = a; *q; q++) lines += *q == '\n';
    CHECK_EQ_INT(lines, 3);
    free(a), free(b);

    /* stop string through the tokenizer (ids 0..255 are single bytes): the first adjacent pair of printable ids of
     * the free run becomes the stop string; the stopped run ends right after it, finish stop */
    CHECK_EQ_INT(gen("--model tests/fixtures/model/qwen2_untied --tokenizer tests/fixtures/tokenizer/tiny_tokenizer.json "
                     "--prompt-ids 10,20,30,40 --greedy --max-new-tokens 20 --no-eos --json"), 0);
    out = slurp("out");
    json_t *free_ids = line_ids(out, 0, "ids");
    int at = -1;
    for (size_t i = 1; free_ids && i < json_array_size(free_ids) && at < 0; i++) {
        long x = (long)json_integer_value(json_array_get(free_ids, i - 1)), y = (long)json_integer_value(json_array_get(free_ids, i));
        if (x >= 0x21 && x < 0x7f && y >= 0x21 && y < 0x7f && x != '\'' && y != '\'' && x != '\\' && y != '\\') at = (int)i;
    }
    CHECK_MSG(at > 0, "no printable pair in the free run");
    if (at > 0) {
        char stop[3] = {(char)json_integer_value(json_array_get(free_ids, (size_t)at - 1)),
                        (char)json_integer_value(json_array_get(free_ids, (size_t)at)), 0};
        snprintf(args, sizeof args, "--model tests/fixtures/model/qwen2_untied --tokenizer "
                 "tests/fixtures/tokenizer/tiny_tokenizer.json --prompt-ids 10,20,30,40 --greedy "
                 "--max-new-tokens 20 --no-eos --json --stop '%s'", stop);
        CHECK_EQ_INT(gen(args), 0);
        char *o2 = slurp("out");
        json_t *i2 = line_ids(o2, 0, "ids"), *fin = line_ids(o2, 0, "finish");
        CHECK(i2 && (int)json_array_size(i2) == at + 1);
        for (int i = 0; i <= at && i2; i++)
            CHECK_EQ_INT(json_integer_value(json_array_get(i2, (size_t)i)), json_integer_value(json_array_get(free_ids, (size_t)i)));
        CHECK(json_is_string(fin) && !strcmp(json_string_value(fin), "stop"));
        json_decref(i2), json_decref(fin), free(o2);
    }
    json_decref(free_ids), free(out);

    /* errors */
    struct { const char *args, *msg; } bad[] = {
        {"--model tests/fixtures/model/qwen2_tied --prompt-ids 1,999", "outside the vocabulary"},
        {"--model tests/fixtures/model/qwen2_tied --prompt-ids 1,-2", "not a non-negative integer"},
        {"--model /nonexistent/x --prompt-ids 1", "/nonexistent/x"},
        {"--model tests/fixtures/model/qwen2_tied --prompt hello", "needs a tokenizer"},
        {"--model tests/fixtures/model/qwen2_tied --prompt-ids 1 --greedy --top-p 0.5", "--greedy excludes"},
        {"--model tests/fixtures/model/qwen2_tied --prompt-ids 1 --top-p 1.5", "top_p"},
        {"--model tests/fixtures/model/qwen2_tied --prompt-ids 1 --max-new-tokens 0", "--max-new-tokens"},
        {"--model tests/fixtures/model/qwen2_tied --prompts /nonexistent.jsonl", "/nonexistent.jsonl"},
        {"--model tests/fixtures/model/qwen2_tied", "exactly one of"},
        {"--model tests/fixtures/model/qwen2_tied --prompt-ids 1 --frobnicate", "unknown option"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = gen(bad[i].args);
        char *e = slurp("err");
        CHECK_MSG(rc != 0 && strstr(e, bad[i].msg), "%s: rc %d, stderr: %s", bad[i].args, rc, e);
        free(e);
    }
    f = fopen(p, "w");
    fprintf(f, "{\"prompt_ids\": [1, 2]}\n{\"prompt_ids\": [1, \"x\"]}\n");
    fclose(f);
    snprintf(args, sizeof args, "--model tests/fixtures/model/qwen2_tied --prompts %s", p);
    CHECK(gen(args) != 0);
    char *e = slurp("err");
    CHECK_MSG(strstr(e, "prompts.jsonl:2") && strstr(e, "prompt_ids[1]"), "%s", e);
    free(e);

    json_decref(fx);
    cpt_remove_tree(TMP, &err);
    return check_summary("test_generate_cli");
}
