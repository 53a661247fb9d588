/* core/synth: every instance checked independently (arithmetic recomputed from its prompt, countdown solutions
 * evaluated with the numbers they may use), the expression evaluator's rules, byte-identical output per seed,
 * disjoint train/eval splits, records that the dataset reader accepts, and the committed examples/data files
 * equal to what the commands in examples/data/README.md produce. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/dataset.h"
#include "core/fs.h"
#include "core/synth.h"
#include "tests/check.h"

static void test_arithmetic(void) {
    cpt_rng rng;
    cpt_rng_seed(&rng, 5, 0);
    int ops[3] = {0}, failures = 0;
    cpt_err err;
    for (int i = 0; i < 3000; i++) {
        cpt_synth_item it;
        if (cpt_synth_arithmetic(&rng, &it, &err)) { failures++; continue; }
        int a, b;
        char op;
        if (sscanf(it.prompt, "What is %d %c %d?", &a, &op, &b) != 3) { failures++; continue; }
        long long want = op == '+' ? a + b : op == '-' ? a - b : (long long)a * b;
        ops[op == '+' ? 0 : op == '-' ? 1 : 2]++;
        char reply[128];
        snprintf(reply, sizeof reply, "%d %c %d = %lld\n#### %lld", a, op, b, want, want);
        if (atoll(it.answer) != want || it.target != want || strcmp(it.reply, reply) || want < 0 || a < 1 ||
            a > 99 || b < 0 || b > 99)
            failures++;
    }
    CHECK_EQ_INT(failures, 0);
    for (int k = 0; k < 3; k++) CHECK_MSG(ops[k] > 800, "op %d drawn %d times", k, ops[k]);
}

static char *gen(cpt_synth_task t, cpt_synth_format f, cpt_synth_split s, long n, uint64_t seed, size_t *len);

/* multiply-2digit: a * b of 10-99; tool-sft transcripts call the tool on about half of the prompts, with the
 * observation as an untrained segment in the rollout's raw observation format, and copy its answer. */
static void test_multiply_tool_sft(void) {
    cpt_rng rng;
    cpt_rng_seed(&rng, 9, 0);
    int failures = 0;
    cpt_err err;
    for (int i = 0; i < 2000; i++) {
        cpt_synth_item it;
        int a, b;
        if (cpt_synth_multiply_2digit(&rng, &it, &err) || sscanf(it.prompt, "What is %d * %d?", &a, &b) != 2 ||
            a < 10 || a > 99 || b < 10 || b > 99 || it.target != a * b || atoll(it.answer) != a * b)
            failures++;
    }
    CHECK_EQ_INT(failures, 0);
    size_t len;
    char *text = gen(CPT_SYNTH_MULTIPLY_2DIGIT, CPT_SYNTH_TOOL_SFT, CPT_SYNTH_SFT_PART, 1000, 1, &len);
    cpt_dataset *ds = cpt_dataset_load_text(text, len, "tool.jsonl", NULL, &err);
    CHECK_MSG(ds && cpt_dataset_count(ds) == 1000 && cpt_dataset_format(ds) == CPT_DATA_RL_PROMPT, "%s", err.msg);
    int tool = 0;
    for (size_t i = 0; ds && i < cpt_dataset_count(ds); i++) {
        const cpt_record *r = cpt_dataset_get(ds, i);
        int a = 0, b = 0;
        sscanf(r->prompt, "What is %d * %d?", &a, &b);
        char want[512];
        if (cpt_synth_uses_tool(r->prompt)) {
            tool++;
            snprintf(want, sizeof want,
                     "{\"segments\":[{\"text\":\"<tool_call>%d*%d</tool_call>\",\"train\":true},"
                     "{\"text\":\"\\n<tool_response>%d</tool_response>\\n\",\"train\":false},"
                     "{\"text\":\"#### %d\",\"train\":true}]}", a, b, a * b, a * b);
        } else {
            snprintf(want, sizeof want, "{\"segments\":[{\"text\":\"#### %d\",\"train\":true}]}", a * b);
        }
        if (strcmp(r->extra, want) || atoll(r->answer) != a * b) {
            if (!failures++) fprintf(stderr, "got %s\nwant %s\n", r->extra, want);
        }
    }
    CHECK_EQ_INT(failures, 0);
    CHECK_MSG(tool > 420 && tool < 580, "%d of 1000 transcripts call the tool", tool);
    cpt_dataset_free(ds);
    free(text);
    CHECK(cpt_synth_write(stdout, CPT_SYNTH_COUNTDOWN, CPT_SYNTH_TOOL_SFT, CPT_SYNTH_ALL, 1, 1, &err) == -1 &&
          strstr(err.msg, "tool-sft"));
    cpt_synth_task task;
    cpt_synth_format format;
    CHECK(cpt_synth_task_parse("multiply-2digit", &task) == 0 && task == CPT_SYNTH_MULTIPLY_2DIGIT);
    CHECK(cpt_synth_format_parse("tool-sft", &format) == 0 && format == CPT_SYNTH_TOOL_SFT);
}

static void test_countdown(void) {
    cpt_rng rng;
    cpt_rng_seed(&rng, 6, 0);
    int sizes[5] = {0}, failures = 0, divisions = 0;
    cpt_err err;
    for (int i = 0; i < 1500; i++) {
        cpt_synth_item it;
        if (cpt_synth_countdown(&rng, &it, &err)) { failures++; continue; }
        if (it.n_numbers < 2 || it.n_numbers > 4) { failures++; continue; }
        sizes[it.n_numbers]++;
        int64_t num, den;
        if (cpt_synth_eval(it.solution, it.numbers, it.n_numbers, &num, &den, &err) || den != 1 ||
            num != it.target || it.target < 10 || it.target > 999 || atoll(it.answer) != it.target)
            failures++;
        for (int k = 0; k < it.n_numbers; k++)
            if (it.numbers[k] == it.target) failures++;
        /* The reference uses every number: dropping the last number from the allowed list must fail. */
        if (cpt_synth_eval(it.solution, it.numbers, it.n_numbers - 1, &num, &den, &err) == 0) failures++;
        char want[256];
        snprintf(want, sizeof want, "%s = %lld\n#### %s", it.solution, (long long)it.target, it.solution);
        if (strcmp(it.reply, want) || !strstr(it.prompt, it.answer)) failures++;
        divisions += strchr(it.solution, '/') != NULL;
    }
    CHECK_EQ_INT(failures, 0);
    for (int k = 2; k <= 4; k++) CHECK_MSG(sizes[k] > 300, "%d numbers: %d", k, sizes[k]);
    CHECK(divisions > 20);
}

static void test_eval(void) {
    int64_t n, d;
    cpt_err err;
    CHECK(cpt_synth_eval("1 + 2 * 3", NULL, 0, &n, &d, &err) == 0 && n == 7 && d == 1);
    CHECK(cpt_synth_eval("(1 + 2) * 3", NULL, 0, &n, &d, &err) == 0 && n == 9);
    CHECK(cpt_synth_eval("10 - 4 - 3", NULL, 0, &n, &d, &err) == 0 && n == 3);
    CHECK(cpt_synth_eval("7 / 2", NULL, 0, &n, &d, &err) == 0 && n == 7 && d == 2);
    CHECK(cpt_synth_eval("6 / 4 * 2", NULL, 0, &n, &d, &err) == 0 && n == 3 && d == 1);
    CHECK(cpt_synth_eval("3 - 10", NULL, 0, &n, &d, &err) == 0 && n == -7);
    CHECK(cpt_synth_eval("((((5))))", NULL, 0, &n, &d, &err) == 0 && n == 5);
    int nums[] = {3, 8, 8};
    CHECK(cpt_synth_eval("8 / (3 - 8 / 3)", NULL, 0, &n, &d, &err) == 0 && n == 24 && d == 1);
    CHECK(cpt_synth_eval("8 * 3", nums, 3, &n, &d, &err) == 0 && n == 24);
    CHECK(cpt_synth_eval("8 * 8 + 3", nums, 3, &n, &d, &err) == 0 && n == 67);
    CHECK(cpt_synth_eval("3 * 3", nums, 3, &n, &d, &err) == -1 && strstr(err.msg, "3 is used more often than given"));
    CHECK(cpt_synth_eval("4 * 6", nums, 3, &n, &d, &err) == -1 && strstr(err.msg, "4 is not one of the given numbers"));
    CHECK(cpt_synth_eval("8 / (3 - 3)", NULL, 0, &n, &d, &err) == -1 && strstr(err.msg, "division by zero"));
    CHECK(cpt_synth_eval("1 +", NULL, 0, &n, &d, &err) == -1 && strstr(err.msg, "expected a number"));
    CHECK(cpt_synth_eval("(1 + 2", NULL, 0, &n, &d, &err) == -1 && strstr(err.msg, "expected ')'"));
    CHECK(cpt_synth_eval("1 + 2)", NULL, 0, &n, &d, &err) == -1 && strstr(err.msg, "unexpected ')'"));
    CHECK(cpt_synth_eval("-1 + 2", NULL, 0, &n, &d, &err) == -1);
    CHECK(cpt_synth_eval("", NULL, 0, &n, &d, &err) == -1);
    CHECK(cpt_synth_eval("99999999999", NULL, 0, &n, &d, &err) == -1 && strstr(err.msg, "too large"));
    CHECK(cpt_synth_eval("1000000000 * 1000000000 * 1000000000", NULL, 0, &n, &d, &err) == -1 &&
          strstr(err.msg, "too large"));
    char deep[400];
    memset(deep, '(', 200);
    strcpy(deep + 200, "1");
    CHECK(cpt_synth_eval(deep, NULL, 0, &n, &d, &err) == -1 && strstr(err.msg, "too deeply nested"));
}

/* Runs cpt_synth_write into memory. */
static char *gen(cpt_synth_task t, cpt_synth_format f, cpt_synth_split s, long n, uint64_t seed, size_t *len) {
    char *buf = NULL;
    size_t sz = 0;
    FILE *m = open_memstream(&buf, &sz);
    cpt_err err;
    int rc = cpt_synth_write(m, t, f, s, n, seed, &err);
    fclose(m);
    CHECK_MSG(rc == 0, "%s", err.msg);
    *len = sz;
    return buf;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_write(void) {
    size_t l1, l2, l3;
    char *a = gen(CPT_SYNTH_COUNTDOWN, CPT_SYNTH_RL, CPT_SYNTH_ALL, 200, 42, &l1);
    char *b = gen(CPT_SYNTH_COUNTDOWN, CPT_SYNTH_RL, CPT_SYNTH_ALL, 200, 42, &l2);
    char *c = gen(CPT_SYNTH_COUNTDOWN, CPT_SYNTH_RL, CPT_SYNTH_ALL, 200, 43, &l3);
    CHECK(l1 == l2 && !memcmp(a, b, l1));
    CHECK(strcmp(a, c) != 0);
    CHECK_EQ_INT(count_lines(a), 200);
    cpt_err err = {{0}};
    cpt_dataset *ds = cpt_dataset_load_text(a, l1, "countdown.jsonl", NULL, &err);
    CHECK_MSG(ds && cpt_dataset_count(ds) == 200 && cpt_dataset_format(ds) == CPT_DATA_RL_PROMPT, "%s", err.msg);
    if (ds) {
        const cpt_record *r = cpt_dataset_get(ds, 0);
        CHECK(strstr(r->extra, "\"numbers\":[") && strstr(r->extra, "\"solution\":\"") &&
              strstr(r->extra, "\"target\":"));
        cpt_dataset_free(ds);
    }
    free(a), free(b), free(c);

    /* sft arithmetic reads back as messages, the assistant turn ending in "#### ANSWER". */
    a = gen(CPT_SYNTH_ARITHMETIC, CPT_SYNTH_SFT, CPT_SYNTH_ALL, 50, 1, &l1);
    ds = cpt_dataset_load_text(a, l1, "a.jsonl", NULL, &err);
    CHECK(ds && cpt_dataset_format(ds) == CPT_DATA_MESSAGES && cpt_dataset_count(ds) == 50);
    if (ds) {
        const cpt_record *r = cpt_dataset_get(ds, 7);
        CHECK(r->n_messages == 2 && !strcmp(r->messages[1].role, "assistant") && strstr(r->messages[1].content, "\n#### "));
        cpt_dataset_free(ds);
    }
    free(a);

    /* Train and eval splits share no prompt, and eval is about a tenth of the stream. */
    a = gen(CPT_SYNTH_ARITHMETIC, CPT_SYNTH_RL, CPT_SYNTH_TRAIN, 2000, 7, &l1);
    b = gen(CPT_SYNTH_ARITHMETIC, CPT_SYNTH_RL, CPT_SYNTH_EVAL, 300, 8, &l2);
    cpt_dataset *tr = cpt_dataset_load_text(a, l1, "train", NULL, &err);
    cpt_dataset *ev = cpt_dataset_load_text(b, l2, "eval", NULL, &err);
    CHECK(tr && ev && cpt_dataset_count(tr) == 2000 && cpt_dataset_count(ev) == 300);
    int shared = 0;
    for (size_t i = 0; tr && ev && i < cpt_dataset_count(ev); i++)
        for (size_t j = 0; j < cpt_dataset_count(tr); j++)
            if (!strcmp(cpt_dataset_get(ev, i)->prompt, cpt_dataset_get(tr, j)->prompt)) shared++;
    CHECK_EQ_INT(shared, 0);
    cpt_dataset_free(tr);
    cpt_dataset_free(ev);
    free(a), free(b);
    /* sft, rl and eval are pairwise disjoint (the rl prompts are new to a model SFT'd on sft). */
    {
        cpt_synth_split sp[3] = {CPT_SYNTH_SFT_PART, CPT_SYNTH_RL_PART, CPT_SYNTH_EVAL};
        cpt_dataset *d[3] = {0};
        for (int k = 0; k < 3; k++) {
            size_t len;
            char *text = gen(CPT_SYNTH_ARITHMETIC_1DIGIT, CPT_SYNTH_RL, sp[k], 600, 20 + (uint64_t)k, &len);
            d[k] = cpt_dataset_load_text(text, len, "split", NULL, &err);
            free(text);
            CHECK(d[k] && cpt_dataset_count(d[k]) == 600);
        }
        int cross = 0;
        for (int x = 0; x < 3; x++)
            for (int y = x + 1; y < 3; y++)
                for (size_t i = 0; d[x] && d[y] && i < cpt_dataset_count(d[x]); i++)
                    for (size_t j = 0; j < cpt_dataset_count(d[y]); j++)
                        cross += !strcmp(cpt_dataset_get(d[x], i)->prompt, cpt_dataset_get(d[y], j)->prompt);
        CHECK_EQ_INT(cross, 0);
        for (int k = 0; k < 3; k++) cpt_dataset_free(d[k]);
        cpt_synth_split out;
        CHECK(cpt_synth_split_parse("rl", &out) == 0 && out == CPT_SYNTH_RL_PART);
        CHECK(cpt_synth_split_parse("sft", &out) == 0 && out == CPT_SYNTH_SFT_PART);
        cpt_synth_task task;
        CHECK(cpt_synth_task_parse("arithmetic-1digit", &task) == 0 && task == CPT_SYNTH_ARITHMETIC_1DIGIT);
    }
    c = gen(CPT_SYNTH_ARITHMETIC, CPT_SYNTH_RL, CPT_SYNTH_ALL, 0, 7, &l3);
    CHECK(l3 == 0);
    free(c);
}

/* The committed examples must be exactly what their commands in examples/data/README.md produce. */
static void test_examples(void) {
    struct { const char *file; cpt_synth_task t; cpt_synth_format f; cpt_synth_split s; long n; uint64_t seed; } ex[] = {
        {"examples/data/arithmetic_train.jsonl", CPT_SYNTH_ARITHMETIC, CPT_SYNTH_SFT, CPT_SYNTH_SFT_PART, 1000, 1},
        {"examples/data/arithmetic_eval.jsonl", CPT_SYNTH_ARITHMETIC, CPT_SYNTH_SFT, CPT_SYNTH_EVAL, 100, 2},
        {"examples/data/arithmetic_rl_train.jsonl", CPT_SYNTH_ARITHMETIC, CPT_SYNTH_RL, CPT_SYNTH_RL_PART, 1000, 3},
        {"examples/data/arithmetic_rl_eval.jsonl", CPT_SYNTH_ARITHMETIC, CPT_SYNTH_RL, CPT_SYNTH_EVAL, 100, 4},
        {"examples/data/arithmetic1_rl_train.jsonl", CPT_SYNTH_ARITHMETIC_1DIGIT, CPT_SYNTH_RL, CPT_SYNTH_RL_PART, 3000, 3},
        {"examples/data/arithmetic1_rl_eval.jsonl", CPT_SYNTH_ARITHMETIC_1DIGIT, CPT_SYNTH_RL, CPT_SYNTH_EVAL, 100, 4},
        {"examples/data/countdown_rl_train.jsonl", CPT_SYNTH_COUNTDOWN, CPT_SYNTH_RL, CPT_SYNTH_TRAIN, 200, 5},
        {"examples/data/multiply2_rl_train.jsonl", CPT_SYNTH_MULTIPLY_2DIGIT, CPT_SYNTH_RL, CPT_SYNTH_RL_PART, 1500, 3},
        {"examples/data/multiply2_rl_eval.jsonl", CPT_SYNTH_MULTIPLY_2DIGIT, CPT_SYNTH_RL, CPT_SYNTH_EVAL, 200, 4},
    };
    size_t total = 0;
    char *readme = cpt_read_file("examples/data/README.md", NULL, NULL);
    CHECK(readme != NULL);
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        cpt_err err = {{0}};
        size_t flen = 0, glen;
        char *file = cpt_read_file(ex[i].file, &flen, &err);
        char *want = gen(ex[i].t, ex[i].f, ex[i].s, ex[i].n, ex[i].seed, &glen);
        CHECK_MSG(file && flen == glen && !memcmp(file, want, glen),
                  "%s differs from its generator output: regenerate with the commands in examples/data/README.md",
                  ex[i].file);
        const char *base = strrchr(ex[i].file, '/') + 1;
        CHECK_MSG(readme && strstr(readme, base), "README does not mention %s", base);
        total += flen;
        free(file);
        free(want);
    }
    CHECK_MSG(total < 512 * 1024, "examples/data holds %zu bytes", total);
    free(readme);
}

/* The command line writes exactly what the library writes; bad arguments exit 2 with a message. */
static void test_cli(void) {
    const char *build = getenv("CPT_BUILD");
    CHECK_MSG(build != NULL, "CPT_BUILD is not set (run through ctest)");
    if (!build) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s/cpt data gen countdown --n 30 --seed 11 --format rl --split eval", build);
    FILE *p = popen(cmd, "r");
    char *out = calloc(1, 1 << 16);
    size_t n = p && out ? fread(out, 1, (1 << 16) - 1, p) : 0;
    int st = p ? pclose(p) : -1;
    size_t glen;
    char *want = gen(CPT_SYNTH_COUNTDOWN, CPT_SYNTH_RL, CPT_SYNTH_EVAL, 30, 11, &glen);
    CHECK(st == 0 && n == glen && !memcmp(out, want, glen));
    free(out);
    free(want);

    const char *path = "/tmp/cpt_test_synth_out.jsonl";
    remove(path);
    snprintf(cmd, sizeof cmd, "%s/cpt data gen arithmetic --n 20 --seed 3 --out %s && %s/cpt data check %s", build,
             path, build, path);
    p = popen(cmd, "r");
    char line[512] = {0};
    if (p && !fgets(line, sizeof line, p)) line[0] = '\0';
    st = p ? pclose(p) : -1;
    CHECK_MSG(st == 0 && strstr(line, ": 20 records, format messages, 0 bad lines"), "%s", line);
    remove(path);

    const char *bad[] = {"data gen arithmetic --n 5", "data gen sums --n 5 --seed 1", "data gen arithmetic --n -1 --seed 1",
                         "data gen arithmetic --n 5 --seed 1 --format xml", "data gen arithmetic --n 5 --seed x",
                         "data frobnicate"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/cpt %s >/dev/null 2>&1", build, bad[i]);
        int rc = system(cmd);
        CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "cpt %s: status %d", bad[i], rc);
    }
    snprintf(cmd, sizeof cmd, "printf 'oops\\n' > %s && %s/cpt data check %s 2>&1", path, build, path);
    p = popen(cmd, "r");
    line[0] = '\0';
    if (p && !fgets(line, sizeof line, p)) line[0] = '\0';
    st = p ? pclose(p) : -1;
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(line, "cpt_test_synth_out.jsonl:1: not valid JSON"), "%s", line);
    remove(path);
}

int main(void) {
    test_cli();
    test_arithmetic();
    test_countdown();
    test_multiply_tool_sft();
    test_eval();
    test_write();
    test_examples();
    return check_summary("test_synth");
}
