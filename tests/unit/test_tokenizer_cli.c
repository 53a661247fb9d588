/* `cpt tokenize` end to end on the tiny tokenizer: JSONL encode and decode with hand-worked ids, the round trip,
 * and bad input (a line number in the error, exit status 1). Runs $CPT_BUILD/cpt. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "tests/check.h"

static char dir[256];
static char cpt[4096], tiny[4096];

static void write_text(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cpt_err err;
    char *s = cpt_read_file(path, NULL, &err);
    return s ? s : strdup("");
}

/* Runs cpt tokenize with args, stdin from in, stdout to out, stderr to err; returns the exit status. */
static int run(const char *args, const char *in, const char *out) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' tokenize --tokenizer '%s' %s < '%s/%s' > '%s/%s' 2> '%s/err'", cpt, tiny, args, dir,
             in, dir, out, dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
    const char *build = getenv("CPT_BUILD"), *src = getenv("CPT_SRC");
    snprintf(cpt, sizeof cpt, "%s/cpt", build && *build ? build : "build");
    snprintf(tiny, sizeof tiny, "%s/tests/fixtures/tokenizer/tiny_tokenizer.json", src && *src ? src : ".");
    snprintf(dir, sizeof dir, "/tmp/cpt-test-tokenize-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    /* ids 0-255 are bytes; "hello the" -> he ll o Ġthe; "<|endoftext|>" is 300 */
    write_text("in.jsonl", "{\"text\": \"hello the\"}\n"
                           "\n"
                           "{\"text\": \"a<|endoftext|>b\", \"extra\": 1}\n"
                           "{\"text\": \"\"}\n"
                           "{\"text\": \"caf\\u00e9\\n\\u0000\"}\n");
    CHECK_EQ_INT(run("", "in.jsonl", "ids.jsonl"), 0);
    char *ids = read_text("ids.jsonl");
    CHECK_EQ_STR(ids, "{\"ids\":[257,262,111,258]}\n"
                      "{\"ids\":[97,300,98]}\n"
                      "{\"ids\":[]}\n"
                      "{\"ids\":[99,97,102,195,169,10,0]}\n");
    free(ids);

    /* the same on 3 threads */
    CHECK_EQ_INT(run("--threads 3", "in.jsonl", "ids3.jsonl"), 0);
    char *a = read_text("ids.jsonl"), *b = read_text("ids3.jsonl");
    CHECK_EQ_STR(a, b);
    free(a);
    free(b);

    CHECK_EQ_INT(run("--decode", "ids.jsonl", "text.jsonl"), 0);
    char *text = read_text("text.jsonl");
    CHECK_EQ_STR(text, "{\"text\":\"hello the\"}\n"
                       "{\"text\":\"a<|endoftext|>b\"}\n"
                       "{\"text\":\"\"}\n"
                       "{\"text\":\"caf\xc3\xa9\\n\\u0000\"}\n");
    free(text);
    CHECK_EQ_INT(run("--decode --skip-special", "ids.jsonl", "text2.jsonl"), 0);
    text = read_text("text2.jsonl");
    CHECK(strstr(text, "{\"text\":\"ab\"}\n") != NULL);
    free(text);

    /* bad lines: the error names stdin:LINE, the status is 1 */
    struct {
        const char *input, *args, *want;
    } bad[] = {
        {"{\"text\": \"ok\"}\n{\"text\": 5}\n", "", "stdin:2: expected an object with a \"text\" string"},
        {"{\"text\": \"ok\"}\n\n{\"text\": \"x\"\n", "", "stdin:3:"},
        {"{\"ids\": [1, 2]}\n{\"ids\": [1, \"x\"]}\n", "--decode", "stdin:2: ids[1] is not"},
        {"{\"ids\": [1, 400]}\n", "--decode", "stdin:1: decode: id 400"},
        {"{\"ids\": [-1]}\n", "--decode", "stdin:1: ids[0] is not"},
        {"[1, 2]\n", "--decode", "stdin:1: expected an object with an \"ids\" array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text("bad.jsonl", bad[i].input);
        CHECK_EQ_INT(run(bad[i].args, "bad.jsonl", "bad_out.jsonl"), 1);
        char *e = read_text("err");
        CHECK_MSG(strstr(e, bad[i].want) != NULL, "case %zu: stderr \"%s\"", i, e);
        free(e);
    }
    /* the good line before a bad one is still written */
    write_text("bad.jsonl", "{\"text\": \"ab\"}\n{\"text\": 5}\n");
    CHECK_EQ_INT(run("", "bad.jsonl", "bad_out.jsonl"), 1);
    char *partial = read_text("bad_out.jsonl");
    CHECK_EQ_STR(partial, "{\"ids\":[266]}\n");
    free(partial);

    /* usage errors: status 2 */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' tokenize < /dev/null > /dev/null 2>&1", cpt);
    int st = system(cmd);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 2);
    snprintf(cmd, sizeof cmd, "'%s' tokenize --tokenizer /nonexistent < /dev/null > /dev/null 2>&1", cpt);
    st = system(cmd);
    CHECK_EQ_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 1);

    cpt_err err;
    cpt_remove_tree(dir, &err);
    return check_summary("test_tokenizer_cli");
}
