/* core/config: typed loading against a declared table (a test table covering every key type, and the real one),
 * overrides, every error kind with its file:line, dump -> reload equality, hash stability, and docs/config.md in
 * step with the declared keys. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "core/fs.h"
#include "tests/check.h"

#define CPT_KEY_MODULE "test"
static const cpt_key_decl TK[] = {
    CPT_KEY_STR(name, "x", "", "A root key")
    CPT_KEY_INT(a.n, 5, -10, 1000000, "An integer")
    CPT_KEY_FLOAT(a.f, 0.5, 0.0, 1e3, "A float")
    CPT_KEY_BOOL(a.flag, false, "A boolean")
    CPT_KEY_STR(a.mode, "fast", "fast|slow|auto", "A choice")
    CPT_KEY_STR(a.b.path, "", "", "A nested string")
    CPT_KEY_STR_ARRAY(a.b.tags, "Strings")
    CPT_KEY_INT_ARRAY(c.ids, "Integers")
    CPT_KEY_INT(c.big, 0, INT64_MIN, INT64_MAX, "Full range")
    CPT_KEY_FLOAT(c.lr, 1e-5, 0.0, 10.0, "A learning rate")
};
#undef CPT_KEY_MODULE
#define NTK (sizeof TK / sizeof TK[0])

static cpt_config *load(const char *text, int n_ov, char *const *ov, cpt_err *err) {
    return cpt_config_load_table(TK, NTK, text, text ? strlen(text) : 0, "t.toml", n_ov, ov, err);
}

static void test_defaults_and_file(void) {
    cpt_err err = {{0}};
    cpt_config *c = load(NULL, 0, NULL, &err);
    CHECK(c != NULL);
    if (!c) return;
    CHECK_EQ_STR(cpt_cfg_str(c, "name"), "x");
    CHECK_EQ_INT(cpt_cfg_int(c, "a.n"), 5);
    CHECK(cpt_cfg_float(c, "a.f") == 0.5);
    CHECK_EQ_INT(cpt_cfg_bool(c, "a.flag"), 0);
    CHECK_EQ_STR(cpt_cfg_str(c, "a.mode"), "fast");
    CHECK_EQ_INT(cpt_cfg_array_len(c, "a.b.tags"), 0);
    CHECK_EQ_INT(cpt_cfg_array_len(c, "c.ids"), 0);
    CHECK_EQ_INT(cpt_cfg_is_set(c, "a.n"), 0);
    cpt_config_free(c);

    const char *text =
        "name = \"run \\\"one\\\"\"  # comment\n"
        "[a]\n"
        "n = -1_0\n"
        "f = 7          # an integer for a float key is fine\n"
        "flag = true\n"
        "mode = 'slow'\n"
        "b.path = \"/data/x.jsonl\"\n"
        "[a.b]\n"
        "tags = [\n"
        "  \"alpha\",   # first\n"
        "  'beta',\n"
        "]\n"
        "[c]\n"
        "ids = [3, 1_000, -2]\n"
        "big = -9223372036854775808\n"
        "lr = 3e-4\n";
    c = load(text, 0, NULL, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (!c) return;
    CHECK_EQ_STR(cpt_cfg_str(c, "name"), "run \"one\"");
    CHECK_EQ_INT(cpt_cfg_int(c, "a.n"), -10);
    CHECK(cpt_cfg_float(c, "a.f") == 7.0);
    CHECK_EQ_INT(cpt_cfg_bool(c, "a.flag"), 1);
    CHECK_EQ_STR(cpt_cfg_str(c, "a.mode"), "slow");
    CHECK_EQ_STR(cpt_cfg_str(c, "a.b.path"), "/data/x.jsonl");
    CHECK_EQ_INT(cpt_cfg_array_len(c, "a.b.tags"), 2);
    CHECK_EQ_STR(cpt_cfg_array_str(c, "a.b.tags", 1), "beta");
    CHECK_EQ_INT(cpt_cfg_array_len(c, "c.ids"), 3);
    CHECK_EQ_INT(cpt_cfg_array_int(c, "c.ids", 1), 1000);
    CHECK_EQ_INT(cpt_cfg_array_int(c, "c.ids", 2), -2);
    CHECK(cpt_cfg_int(c, "c.big") == INT64_MIN);
    CHECK(cpt_cfg_float(c, "c.lr") == 3e-4);
    CHECK_EQ_INT(cpt_cfg_is_set(c, "a.n"), 1);
    CHECK_EQ_INT(cpt_cfg_is_set(c, "name"), 1);

    /* Dump, reload: every value equal, and the same hash. */
    char *dump = cpt_config_dump(c);
    CHECK(dump != NULL);
    cpt_config *c2 = dump ? load(dump, 0, NULL, &err) : NULL;
    CHECK_MSG(c2 != NULL, "reloading the dump: %s\n%s", err.msg, dump ? dump : "");
    if (c2) {
        CHECK_EQ_STR(cpt_cfg_str(c2, "name"), "run \"one\"");
        CHECK_EQ_INT(cpt_cfg_int(c2, "a.n"), -10);
        CHECK(cpt_cfg_float(c2, "a.f") == 7.0);
        CHECK(cpt_cfg_float(c2, "c.lr") == 3e-4);
        CHECK(cpt_cfg_int(c2, "c.big") == INT64_MIN);
        CHECK_EQ_STR(cpt_cfg_array_str(c2, "a.b.tags", 0), "alpha");
        CHECK_EQ_INT(cpt_cfg_array_int(c2, "c.ids", 0), 3);
        CHECK(cpt_config_hash(c2) == cpt_config_hash(c));
        char *dump2 = cpt_config_dump(c2);
        CHECK(dump2 && !strcmp(dump, dump2)); /* a fixed point */
        free(dump2);
        cpt_config_free(c2);
    }
    /* Root keys come before any table, and [a.b] holds the nested keys. */
    CHECK(dump && strstr(dump, "\nname = \"run \\\"one\\\"\"\n") && strstr(dump, "\n[a.b]\npath = ") &&
          strstr(dump, "\n[c]\nids = [3, 1000, -2]\nbig = -9223372036854775808\nlr = 0.0003\n"));
    free(dump);
    cpt_config_free(c);
}

static void test_hash(void) {
    cpt_err err;
    cpt_config *d = load(NULL, 0, NULL, &err);
    /* The hash is FNV-1a 64 of "name=value\n" lines sorted by name; recompute it independently. */
    const char *canon = "a.b.path=\"\"\na.b.tags=[]\na.f=0.5\na.flag=false\na.mode=\"fast\"\na.n=5\n"
                        "c.big=0\nc.ids=[]\nc.lr=1e-05\nname=\"x\"\n";
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = canon; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    CHECK(cpt_config_hash(d) == h);
    /* The same values through a file or through overrides give the same hash; any change gives another. */
    char *ov[] = {"a.n=6"};
    cpt_config *e = load("[a]\nn = 6\n", 0, NULL, &err);
    cpt_config *f = load(NULL, 1, ov, &err);
    CHECK(e && f && cpt_config_hash(e) == cpt_config_hash(f));
    CHECK(e && cpt_config_hash(e) != cpt_config_hash(d));
    char *ov2[] = {"c.lr=1.0000000000000001e-05"}; /* rounds to the default double: same hash */
    cpt_config *g = load(NULL, 1, ov2, &err);
    CHECK(g && cpt_config_hash(g) == cpt_config_hash(d));
    char *ov3[] = {"c.lr=1.0000000000000002e-05"}; /* the next double: another hash */
    cpt_config *k = load(NULL, 1, ov3, &err);
    CHECK(k && cpt_config_hash(k) != cpt_config_hash(d));
    cpt_config_free(d);
    cpt_config_free(e);
    cpt_config_free(f);
    cpt_config_free(g);
    cpt_config_free(k);
}

static void test_overrides(void) {
    cpt_err err = {{0}};
    char *ov[] = {"a.n=7",        "a.mode=auto",          "a.b.path = /tmp/with space", "a.b.tags=[x, y z ,w]",
                  "c.ids=[4,5]",  "a.f=2",                "a.flag=true",                "name=\"quoted # not a comment\"",
                  "a.n=8",        "c.lr=1e-3",            "a.f=0x1p-3"};
    cpt_config *c = load("[a]\nn = 1\n", (int)(sizeof ov / sizeof ov[0]), ov, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (!c) return;
    CHECK_EQ_INT(cpt_cfg_int(c, "a.n"), 8); /* later overrides win over earlier ones and over the file */
    CHECK_EQ_STR(cpt_cfg_str(c, "a.mode"), "auto");
    CHECK_EQ_STR(cpt_cfg_str(c, "a.b.path"), "/tmp/with space");
    CHECK_EQ_INT(cpt_cfg_array_len(c, "a.b.tags"), 3);
    CHECK_EQ_STR(cpt_cfg_array_str(c, "a.b.tags", 1), "y z");
    CHECK_EQ_STR(cpt_cfg_array_str(c, "a.b.tags", 2), "w");
    CHECK_EQ_INT(cpt_cfg_array_int(c, "c.ids", 1), 5);
    CHECK(cpt_cfg_float(c, "a.f") == 0.125); /* a hexadecimal float, the later override */
    CHECK_EQ_INT(cpt_cfg_bool(c, "a.flag"), 1);
    CHECK_EQ_STR(cpt_cfg_str(c, "name"), "quoted # not a comment");
    CHECK(cpt_cfg_float(c, "c.lr") == 1e-3);
    CHECK_EQ_INT(cpt_cfg_is_set(c, "c.lr"), 1);
    cpt_config_free(c);
    char *ov2[] = {"a.b.tags=[\"q,r\", \"s\"]"};
    c = load(NULL, 1, ov2, &err);
    CHECK(c && cpt_cfg_array_len(c, "a.b.tags") == 2 && !strcmp(cpt_cfg_array_str(c, "a.b.tags", 0), "q,r"));
    cpt_config_free(c);
}

static void expect_fail(const char *text, const char *ov, const char *want) {
    cpt_err err = {{0}};
    char *ovs[] = {(char *)ov};
    cpt_config *c = load(text, ov ? 1 : 0, ovs, &err);
    CHECK_MSG(c == NULL, "accepted: %s / %s", text ? text : "", ov ? ov : "");
    CHECK_MSG(strstr(err.msg, want) != NULL, "got '%s', want '%s'", err.msg, want);
    cpt_config_free(c);
}

static void test_errors(void) {
    expect_fail("[a]\nn = 1\nflg = true\n", NULL, "t.toml:3: unknown key 'a.flg' (did you mean 'a.flag'?)");
    expect_fail("nmae = \"z\"\n", NULL, "t.toml:1: unknown key 'nmae' (did you mean 'name'?)");
    expect_fail("[c]\nlrr = 0.1\n", NULL, "did you mean 'c.lr'?");
    expect_fail("\n[a]\nn = \"5\"\n", NULL, "t.toml:3: a.n expects an integer, got a string");
    expect_fail("[a]\nn = 1.5\n", NULL, "t.toml:2: a.n expects an integer, got a float");
    expect_fail("[a]\nflag = 1\n", NULL, "a.flag expects a boolean, got an integer");
    expect_fail("[a]\nf = \"0.1\"\n", NULL, "a.f expects a float, got a string");
    expect_fail("[a.b]\ntags = \"x\"\n", NULL, "t.toml:2: a.b.tags expects an array of strings, got a string");
    expect_fail("[a.b]\ntags = [1]\n", NULL, "a.b.tags expects an array of strings, got an array of integer values");
    expect_fail("[c]\nids = [\"1\"]\n", NULL, "c.ids expects an array of integers, got an array of string");
    expect_fail("[a]\nn = 1000001\n", NULL, "t.toml:2: a.n = 1000001 is out of range [-10, 1000000]");
    expect_fail("[a]\nn = -11\n", NULL, "out of range");
    expect_fail("[a]\nf = 1000.5\n", NULL, "t.toml:2: a.f = 1000.5 is out of range [0, 1000]");
    expect_fail("[a]\nf = nan\n", NULL, "a.f = nan is out of range");
    expect_fail("[a]\nf = -inf\n", NULL, "out of range");
    expect_fail("[a]\nmode = \"medium\"\n", NULL, "t.toml:2: a.mode = \"medium\" is not one of: fast, slow, auto");
    expect_fail("[a]\nn = 1\n\n[a]\nf = 2.0\n", NULL, "t.toml:4: table [a] is defined twice");
    expect_fail("[a]\nn = 1\nn = 2\n", NULL, "t.toml:3: duplicate key 'a.n' (first set at line 2)");
    expect_fail("[a]\nn = \n", NULL, "t.toml:2: missing value");
    expect_fail(NULL, "a.nn=3", "override 'a.nn=3': unknown key 'a.nn' (did you mean 'a.n'?)");
    expect_fail(NULL, "a.n=abc", "override 'a.n=abc': ");
    expect_fail(NULL, "a.f=0x1p-3x", "override 'a.f=0x1p-3x': not a number: '0x1p-3x'");
    expect_fail(NULL, "a.n=0x1p3", "override 'a.n=0x1p3': a.n expects an integer, got a float");
    expect_fail(NULL, "a.n=\"3\"", "override 'a.n=\"3\"': a.n expects an integer, got a string");
    expect_fail(NULL, "a.n=2000000", "override 'a.n=2000000': a.n = 2000000 is out of range");
    expect_fail(NULL, "a.mode=medium", "override 'a.mode=medium': a.mode = \"medium\" is not one of");
    expect_fail(NULL, "a.flag", "override 'a.flag': expected section.key=value");
    expect_fail(NULL, "=3", "expected section.key=value");
    expect_fail(NULL, "a.flag=yes", "override 'a.flag=yes'");
    expect_fail(NULL, "c.ids=[1,", "override 'c.ids=[1,'");
    expect_fail(NULL, "c.ids=[a]", "override 'c.ids=[a]'");
}

static void test_real_table(void) {
    cpt_err err = {{0}};
    CHECK_MSG(cpt_config_check_table(&err) == 0, "%s", err.msg);
    CHECK(cpt_config_n_keys > 5);
    CHECK(cpt_config_has_key("run.seed") && !cpt_config_has_key("run.sead"));
    cpt_config *c = cpt_config_load(NULL, 0, NULL, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (!c) return;
    CHECK_EQ_INT(cpt_cfg_int(c, "run.seed"), 1234);
    CHECK_EQ_STR(cpt_cfg_str(c, "data.format"), "auto");
    /* Defaults dump and reload to the same hash, through a real file. */
    char *dump = cpt_config_dump(c);
    const char *path = "/tmp/cpt_test_config_dump.toml";
    CHECK(dump && cpt_write_file_atomic(path, dump, strlen(dump), &err) == 0);
    cpt_config *r = cpt_config_load(path, 0, NULL, &err);
    CHECK_MSG(r && cpt_config_hash(r) == cpt_config_hash(c), "%s", err.msg);
    cpt_config_free(r);
    remove(path);
    free(dump);

    /* Every declared key rejects a wrong type and out-of-range or bad-choice values, naming itself. */
    for (size_t k = 0; k < cpt_config_n_keys; k++) {
        const cpt_key_decl *d = &cpt_config_keys[k];
        char ov[512];
        if (d->type == CPT_KEY_T_BOOL || d->type == CPT_KEY_T_INT || d->type == CPT_KEY_T_FLOAT)
            snprintf(ov, sizeof ov, "%s=\"text\"", d->name);
        else if (d->type == CPT_KEY_T_STR)
            snprintf(ov, sizeof ov, "%s=[1]", d->name);
        else
            snprintf(ov, sizeof ov, "%s=true", d->name);
        char *ovs[] = {ov};
        cpt_config *bad = cpt_config_load(NULL, 1, ovs, &err);
        if (d->type == CPT_KEY_T_STR && !d->choices[0]) {
            /* Any text is a valid free string, unquoted. */
            CHECK_MSG(bad != NULL, "%s: %s", d->name, err.msg);
        } else {
            CHECK_MSG(bad == NULL && strstr(err.msg, d->name), "%s: %s", d->name, err.msg);
        }
        cpt_config_free(bad);
        if (d->type == CPT_KEY_T_INT && d->imax < INT64_MAX) {
            snprintf(ov, sizeof ov, "%s=%lld", d->name, (long long)d->imax + 1);
            bad = cpt_config_load(NULL, 1, ovs, &err);
            CHECK_MSG(bad == NULL && strstr(err.msg, "out of range"), "%s", d->name);
            cpt_config_free(bad);
            snprintf(ov, sizeof ov, "%s=%lld", d->name, (long long)d->imax);
            bad = cpt_config_load(NULL, 1, ovs, &err);
            CHECK_MSG(bad && cpt_cfg_int(bad, d->name) == d->imax, "%s", d->name);
            cpt_config_free(bad);
        }
        if (d->type == CPT_KEY_T_STR && d->choices[0]) {
            snprintf(ov, sizeof ov, "%s=no_such_choice", d->name);
            bad = cpt_config_load(NULL, 1, ovs, &err);
            CHECK_MSG(bad == NULL && strstr(err.msg, "is not one of"), "%s", d->name);
            cpt_config_free(bad);
        }
    }
    cpt_config_free(c);
}

static void test_fixture_files(void) {
    cpt_err err = {{0}};
    cpt_config *c = cpt_config_load("tests/fixtures/config/example.toml", 0, NULL, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (c) {
        CHECK_EQ_STR(cpt_cfg_str(c, "run.name"), "example");
        CHECK_EQ_INT(cpt_cfg_int(c, "run.seed"), 7);
        CHECK_EQ_STR(cpt_cfg_str(c, "data.format"), "messages");
        CHECK_EQ_INT(cpt_cfg_bool(c, "data.skip_bad_lines"), 1);
        CHECK_EQ_INT(cpt_cfg_is_set(c, "data.shuffle"), 0);
        cpt_config_free(c);
    }
    c = cpt_config_load("tests/fixtures/config/bad_unknown.toml", 0, NULL, &err);
    CHECK(c == NULL);
    CHECK_MSG(strstr(err.msg, "tests/fixtures/config/bad_unknown.toml:6: unknown key 'data.shufle' (did you mean "
                              "'data.shuffle'?)"),
              "%s", err.msg);
    c = cpt_config_load("tests/fixtures/config/no_such_file.toml", 0, NULL, &err);
    CHECK(c == NULL && strstr(err.msg, "no_such_file.toml"));
}

static void test_docs(void) {
    char *md = cpt_config_docs_markdown();
    CHECK(md != NULL);
    if (!md) return;
    /* Each declared key has a row. */
    for (size_t k = 0; k < cpt_config_n_keys; k++) {
        char row[300];
        snprintf(row, sizeof row, "| `%s` |", cpt_config_keys[k].name);
        CHECK_MSG(strstr(md, row) != NULL, "no row for %s", cpt_config_keys[k].name);
    }
    CHECK(strstr(md, "| `data.format` | string | `\"auto\"` | auto, prompt_completion, messages, preference, "
                     "rl_prompt | JSONL record format |"));
    cpt_err err = {{0}};
    char *file = cpt_read_file("docs/config.md", NULL, &err);
    CHECK_MSG(file && !strcmp(file, md),
              "docs/config.md is missing or out of date with the declared keys: run `build/cpt config docs > "
              "docs/config.md`");
    free(file);
    free(md);

    /* The test table's docs: a section per module, '|' escaped inside cells. */
    md = cpt_config_docs_markdown_table(TK, NTK);
    CHECK(md && strstr(md, "\n## test\n") && strstr(md, "| `a.n` | integer | `5` | -10 .. 1000000 | An integer |") &&
          strstr(md, "| `c.lr` | float | `1e-05` | 0.0 .. 10.0 | A learning rate |"));
    free(md);
}

static void test_table_checks(void) {
    cpt_err err = {{0}};
#define CPT_KEY_MODULE "bad"
    const cpt_key_decl dup[] = {CPT_KEY_INT(x.a, 1, 0, 2, "a") CPT_KEY_BOOL(x.a, true, "b")};
    const cpt_key_decl clash[] = {CPT_KEY_INT(x.a, 1, 0, 2, "a") CPT_KEY_BOOL(x.a.b, true, "b")};
    const cpt_key_decl range[] = {CPT_KEY_INT(x.a, 3, 0, 2, "a")};
    const cpt_key_decl choice[] = {CPT_KEY_STR(x.s, "d", "a|b", "a")};
    const cpt_key_decl nodoc[] = {CPT_KEY_STR(x.s, "d", "", "")};
#undef CPT_KEY_MODULE
    CHECK(cpt_config_check_keys(dup, 2, &err) == -1 && strstr(err.msg, "x.a is declared twice"));
    CHECK(cpt_config_check_keys(clash, 2, &err) == -1 && strstr(err.msg, "clash"));
    CHECK(cpt_config_check_keys(range, 1, &err) == -1 && strstr(err.msg, "default 3 outside"));
    CHECK(cpt_config_check_keys(choice, 1, &err) == -1 && strstr(err.msg, "not one of its choices"));
    CHECK(cpt_config_check_keys(nodoc, 1, &err) == -1 && strstr(err.msg, "no doc"));
    CHECK(cpt_config_check_keys(TK, NTK, &err) == 0);
}

/* Runs a shell command, returns its stdout (malloc'd) and exit status. */
static char *run_cmd(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf) buf[n] = '\0';
    return buf;
}

/* The command line: `cpt config show` prints TOML that loads to the same config; errors exit 1 with the
 * file:line; `cpt config docs` prints the reference. */
static void test_cli(void) {
    const char *build = getenv("CPT_BUILD");
    CHECK_MSG(build != NULL, "CPT_BUILD is not set (run through ctest)");
    if (!build) return;
    char cmd[4200];
    int st;
    snprintf(cmd, sizeof cmd, "%s/cpt config show tests/fixtures/config/example.toml run.seed=9 'data.eval=a b'", build);
    char *out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 0);
    cpt_err err = {{0}};
    char *ov[] = {"run.seed=9", "data.eval=a b"};
    cpt_config *want = cpt_config_load("tests/fixtures/config/example.toml", 2, ov, &err);
    cpt_config *got = out ? cpt_config_load_text(out, strlen(out), "show-output", 0, NULL, &err) : NULL;
    CHECK_MSG(want && got && cpt_config_hash(want) == cpt_config_hash(got), "%s", err.msg);
    if (got) {
        CHECK_EQ_INT(cpt_cfg_int(got, "run.seed"), 9);
        CHECK_EQ_STR(cpt_cfg_str(got, "data.eval"), "a b");
    }
    cpt_config_free(want);
    cpt_config_free(got);
    free(out);

    snprintf(cmd, sizeof cmd, "%s/cpt config hash tests/fixtures/config/example.toml 2>&1", build);
    out = run_cmd(cmd, &st);
    want = cpt_config_load("tests/fixtures/config/example.toml", 0, NULL, &err);
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx\n", want ? (unsigned long long)cpt_config_hash(want) : 0ULL);
    CHECK(st == 0 && out && !strcmp(out, hex));
    cpt_config_free(want);
    free(out);

    snprintf(cmd, sizeof cmd, "%s/cpt config show tests/fixtures/config/bad_unknown.toml 2>&1", build);
    out = run_cmd(cmd, &st);
    CHECK_EQ_INT(st, 1);
    CHECK(out && strstr(out, "bad_unknown.toml:6: unknown key 'data.shufle' (did you mean 'data.shuffle'?)"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/cpt config show run.sed=3 2>&1", build);
    out = run_cmd(cmd, &st);
    CHECK(st == 1 && out && strstr(out, "override 'run.sed=3': unknown key 'run.sed' (did you mean 'run.seed'?)"));
    free(out);

    snprintf(cmd, sizeof cmd, "%s/cpt config docs", build);
    out = run_cmd(cmd, &st);
    char *md = cpt_config_docs_markdown();
    CHECK(st == 0 && out && md && !strcmp(out, md));
    free(md);
    free(out);
}

int main(void) {
    test_cli();
    test_defaults_and_file();
    test_hash();
    test_overrides();
    test_errors();
    test_real_table();
    test_fixture_files();
    test_docs();
    test_table_checks();
    return check_summary("test_config");
}
