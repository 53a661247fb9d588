/* core/toml: the TOML subset parser on its own: every value form, tables, dotted keys, comments, CRLF, and one
 * error per rule with the line it names. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/toml.h"
#include "tests/check.h"

static const cpt_toml_entry *get(const cpt_toml_doc *d, const char *key) {
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->entries[i].key, key)) return &d->entries[i];
    return NULL;
}

static void test_values(void) {
    const char *text =
        "# leading comment\n"
        "title = \"tab\\there \\\"q\\\" \\u00e9 \\U0001F600 back\\\\slash\"   # trailing comment\n"
        "lit = 'C:\\path\\no escapes'\n"
        "\"quoted key\" = 1\n"
        "dotted.inner . deep = true\n"
        "\n"
        "[nums]\n"
        "a = 1_000_000\n"
        "b = -42\n"
        "c = +7\n"
        "d = 0xff_ff\n"
        "e = 0o17\n"
        "f = 0b1010\n"
        "g = 9223372036854775807\n"
        "h = -9223372036854775808\n"
        "z = 0\n"
        "[floats]\n"
        "a = 1.5\n"
        "b = -2.5e-3\n"
        "c = 6E2\n"
        "d = 1_000.000_1\n"
        "e = inf\n"
        "f = -inf\n"
        "g = nan\n"
        "h = 0.0\n"
        "[a.b]   # nested table\n"
        "s = []\n"
        "t = [ \"x\", 'y' ,\n"
        "      \"z\", # comment inside\n"
        "    ]\n"
        "u = [1, -2, 3_0]\n"
        "\n"
        "v = false\r\n"
        "w = [\r\n1.5,\r\n2.5]\r\n";
    cpt_toml_doc d;
    cpt_err err = {{0}};
    int rc = cpt_toml_parse(text, strlen(text), "t.toml", &d, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    const cpt_toml_entry *e;
    CHECK((e = get(&d, "title")) && e->value.type == CPT_TOML_STR && e->line == 2);
    if (e) CHECK_EQ_STR(e->value.s, "tab\there \"q\" \xc3\xa9 \xf0\x9f\x98\x80 back\\slash");
    CHECK((e = get(&d, "lit")) && !strcmp(e->value.s, "C:\\path\\no escapes"));
    CHECK((e = get(&d, "quoted key")) && e->value.type == CPT_TOML_INT && e->value.i == 1);
    CHECK((e = get(&d, "dotted.inner.deep")) && e->value.type == CPT_TOML_BOOL && e->value.b == 1);
    CHECK((e = get(&d, "nums.a")) && e->value.i == 1000000 && e->line == 8);
    CHECK((e = get(&d, "nums.b")) && e->value.i == -42);
    CHECK((e = get(&d, "nums.c")) && e->value.i == 7);
    CHECK((e = get(&d, "nums.d")) && e->value.i == 0xffff);
    CHECK((e = get(&d, "nums.e")) && e->value.i == 15);
    CHECK((e = get(&d, "nums.f")) && e->value.i == 10);
    CHECK((e = get(&d, "nums.g")) && e->value.i == INT64_MAX);
    CHECK((e = get(&d, "nums.h")) && e->value.i == INT64_MIN);
    CHECK((e = get(&d, "nums.z")) && e->value.type == CPT_TOML_INT && e->value.i == 0);
    CHECK((e = get(&d, "floats.a")) && e->value.type == CPT_TOML_FLOAT && e->value.f == 1.5);
    CHECK((e = get(&d, "floats.b")) && e->value.f == -2.5e-3);
    CHECK((e = get(&d, "floats.c")) && e->value.type == CPT_TOML_FLOAT && e->value.f == 600.0);
    CHECK((e = get(&d, "floats.d")) && e->value.f == 1000.0001);
    CHECK((e = get(&d, "floats.e")) && isinf(e->value.f) && e->value.f > 0);
    CHECK((e = get(&d, "floats.f")) && isinf(e->value.f) && e->value.f < 0);
    CHECK((e = get(&d, "floats.g")) && isnan(e->value.f));
    CHECK((e = get(&d, "floats.h")) && e->value.type == CPT_TOML_FLOAT && e->value.f == 0.0);
    CHECK((e = get(&d, "a.b.s")) && e->value.type == CPT_TOML_ARRAY && e->value.n == 0);
    CHECK((e = get(&d, "a.b.t")) && e->value.n == 3 && !strcmp(e->value.items[1].s, "y") &&
          !strcmp(e->value.items[2].s, "z"));
    CHECK((e = get(&d, "a.b.u")) && e->value.n == 3 && e->value.items[1].i == -2 && e->value.items[2].i == 30);
    CHECK((e = get(&d, "a.b.v")) && e->value.type == CPT_TOML_BOOL && e->value.b == 0 && e->line == 33);
    CHECK((e = get(&d, "a.b.w")) && e->value.n == 2 && e->value.items[1].f == 2.5 && e->line == 34);
    CHECK_EQ_INT(d.n, 26);
    cpt_toml_free(&d);
}

/* Each bad document must fail with a message containing want (which includes the line). */
static void expect_error(const char *text, const char *want) {
    cpt_toml_doc d;
    cpt_err err = {{0}};
    int rc = cpt_toml_parse(text, strlen(text), "bad.toml", &d, &err);
    CHECK_MSG(rc == -1, "accepted: %s", text);
    CHECK_MSG(strstr(err.msg, want) != NULL, "for %s: got '%s', want '%s'", text, err.msg, want);
    CHECK(d.n == 0 && d.entries == NULL);
    if (rc == 0) cpt_toml_free(&d);
}

static void test_errors(void) {
    expect_error("a = 1\nb = \n", "bad.toml:2: missing value");
    expect_error("a = 1\na = 2\n", "bad.toml:2: duplicate key 'a' (first set at line 1)");
    expect_error("[t]\nx = 1\n[u]\n[t]\n", "bad.toml:4: table [t] is defined twice");
    expect_error("t.x = 1\n\n[t]\nx = 2\n", "bad.toml:4: duplicate key 't.x' (first set at line 1)");
    expect_error("x = \"abc\n", "bad.toml:1: unterminated string");
    expect_error("\n\nx = \"a\\qb\"\n", "bad.toml:3: unknown escape '\\q'");
    expect_error("x = \"\\uD800\"\n", "not a usable Unicode scalar value");
    expect_error("x = \"\\u00\"\n", "expected 4 hex digits");
    expect_error("x = \"\\u0000\"\n", "not a usable Unicode");
    expect_error("x = abc\n", "bad.toml:1: bad value 'abc' (strings need quotes)");
    expect_error("x = 1 2\n", "expected end of line");
    expect_error("x 1\n", "expected '=' after the key");
    expect_error("= 1\n", "where a key was expected");
    expect_error("[t\nx=1\n", "expected ']'");
    expect_error("[[t]]\n", "arrays of tables");
    expect_error("x = {a = 1}\n", "inline tables are not supported");
    expect_error("x = \"\"\"long\"\"\"\n", "multi-line strings");
    expect_error("x = [1, \"a\"]\n", "array mixes integer and string");
    expect_error("x = [[1]]\n", "nested arrays");
    expect_error("x = [1, 2\ny = 3\n", "expected ',' or ']'");
    expect_error("x = [1,\n2,\n", "unterminated array (opened at line 1)");
    expect_error("x = 1__0\n", "bad value");
    expect_error("x = _1\n", "bad value");
    expect_error("x = 1_\n", "bad value");
    expect_error("x = 012\n", "leading zeros");
    expect_error("x = 1.\n", "digits needed after '.'");
    expect_error("x = .5\n", "bad value");
    expect_error("x = 1e\n", "exponent");
    expect_error("x = 9223372036854775808\n", "does not fit in 64 bits");
    expect_error("x = -9223372036854775809\n", "does not fit in 64 bits");
    expect_error("x = 0xffffffffffffffff\n", "does not fit in 64 bits");
    expect_error("x = -0x10\n", "sign is not allowed");
    expect_error("x = 0x\n", "bad");
    expect_error("x = 1e999\n", "out of range");
    expect_error("x = 1979-05-27\n", "dates and times are not supported");
    expect_error("x = 07:32:00\n", "dates and times");
    expect_error("\nx = 0x1p-3q\n", "bad.toml:2: not a number: '0x1p-3q'");
    expect_error("x = truee\n", "bad value");
    expect_error("x = \"a\x01" "b\"\n", "control character 0x01");
    expect_error("x = \"\xff\xfe\"\n", "not valid UTF-8");
    expect_error("x = \"\xc0\xaf\"\n", "not valid UTF-8"); /* overlong '/' */
    expect_error("x = 1\ry = 2\n", "expected end of line");
    expect_error("x = 'abc\n", "unterminated string");
}

static void test_value_only(void) {
    cpt_toml_value v;
    cpt_err err = {{0}};
    CHECK(cpt_toml_parse_value(" [ 1, 2 ,3 ] ", &v, &err) == 0 && v.type == CPT_TOML_ARRAY && v.n == 3 &&
          v.items[2].i == 3);
    cpt_toml_value_free(&v);
    CHECK(cpt_toml_parse_value("\"a b\"", &v, &err) == 0 && v.type == CPT_TOML_STR && !strcmp(v.s, "a b"));
    cpt_toml_value_free(&v);
    CHECK(cpt_toml_parse_value("3e-4", &v, &err) == 0 && v.type == CPT_TOML_FLOAT && v.f == 3e-4);
    /* hexadecimal floats (an extension: `optim.lr=0x1p-3` on a command line) */
    CHECK(cpt_toml_parse_value("0x1p-3", &v, &err) == 0 && v.type == CPT_TOML_FLOAT && v.f == 0.125);
    CHECK(cpt_toml_parse_value("-0x1.8p1", &v, &err) == 0 && v.type == CPT_TOML_FLOAT && v.f == -3.0);
    CHECK(cpt_toml_parse_value("+0xAp+2", &v, &err) == 0 && v.type == CPT_TOML_FLOAT && v.f == 40.0);
    CHECK(cpt_toml_parse_value("0x.8P0", &v, &err) == 0 && v.type == CPT_TOML_FLOAT && v.f == 0.5);
    CHECK(cpt_toml_parse_value("0x10", &v, &err) == 0 && v.type == CPT_TOML_INT && v.i == 16);
    CHECK(cpt_toml_parse_value("0x1p", &v, &err) == -1 && strstr(err.msg, "not a number: '0x1p'"));
    CHECK(cpt_toml_parse_value("0x1p-3z", &v, &err) == -1 && strstr(err.msg, "not a number"));
    CHECK(cpt_toml_parse_value("0xp3", &v, &err) == -1 && strstr(err.msg, "not a number"));
    CHECK(cpt_toml_parse_value("0x1p99999", &v, &err) == -1 && strstr(err.msg, "out of range"));
    CHECK(cpt_toml_parse_value("1 2", &v, &err) == -1 && strstr(err.msg, "unexpected text after the value"));
    CHECK(cpt_toml_parse_value("", &v, &err) == -1 && strstr(err.msg, "missing value"));
}

static void test_writers(void) {
    cpt_strbuf b = {0};
    const double vals[] = {0.1, 1e-5, 3.0, -2.5e300, 1.0 / 3.0, 5e-324, 123456789.0, 0.0};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        b.len = 0;
        CHECK(cpt_toml_write_float(&b, vals[i]) == 0);
        cpt_toml_value v;
        cpt_err err;
        CHECK_MSG(cpt_toml_parse_value(b.data, &v, &err) == 0 && v.type == CPT_TOML_FLOAT && v.f == vals[i],
                  "%s", b.data);
    }
    b.len = 0;
    cpt_toml_write_float(&b, 3.0);
    CHECK_EQ_STR(b.data, "3.0");
    b.len = 0;
    cpt_toml_write_float(&b, 1e-5);
    CHECK_EQ_STR(b.data, "1e-05");
    b.len = 0;
    const char *s = "q\"\\\n\t\x01\xc3\xa9";
    CHECK(cpt_toml_write_string(&b, s) == 0);
    CHECK_EQ_STR(b.data, "\"q\\\"\\\\\\n\\t\\u0001\xc3\xa9\"");
    cpt_toml_value v;
    cpt_err err;
    CHECK(cpt_toml_parse_value(b.data, &v, &err) == 0 && !strcmp(v.s, s));
    cpt_toml_value_free(&v);
    free(b.data);
}

int main(void) {
    test_values();
    test_errors();
    test_value_only();
    test_writers();
    return check_summary("test_config_toml");
}
