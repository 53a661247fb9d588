/* The calculator's expression language (reward/env_expr.h, reward/env_tools.h): values as Python gives them,
 * precedence, //, %, **, floats printed like repr, 64-bit overflow and every error with a clear reason, and bounds
 * on length and depth that hold without recursion running away. In-process: no sandbox. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reward/env_expr.h"
#include "reward/env_tools.h"

static void value(const char *expr, const char *want) {
    char obs[256];
    int ok = cpt_env_calculator_observe(expr, strlen(expr), obs, sizeof obs);
    CHECK_MSG(ok == 1 && !strcmp(obs, want), "%s: got ok=%d \"%s\", want \"%s\"", expr, ok, obs, want);
}

static void error(const char *expr, const char *want_part) {
    char obs[256];
    int ok = cpt_env_calculator_observe(expr, strlen(expr), obs, sizeof obs);
    CHECK_MSG(ok == 0 && !strncmp(obs, "error: ", 7) && strstr(obs, want_part), "%s: got ok=%d \"%s\", want \"%s\"",
              expr, ok, obs, want_part);
}

static void test_values(void) {
    /* each pair checked against Python 3 */
    static const char *const cases[][2] = {
        {"12*34", "408"}, {"1+2*3", "7"}, {"(1+2)*3", "9"}, {"-2**2", "-4"}, {"2**-1", "0.5"},
        {"2**3**2", "512"}, {"7/2", "3.5"}, {"4/2", "2.0"}, {"7//2", "3"}, {"-7//2", "-4"}, {"7//-2", "-4"},
        {"-7%3", "2"}, {"7%-3", "-2"}, {"7.5//2", "3.0"}, {"-7.5//2", "-4.0"}, {"7.5%-2", "-0.5"},
        {"2**62", "4611686018427387904"}, {"9223372036854775807", "9223372036854775807"}, {"1e16", "1e+16"},
        {"1e15", "1000000000000000.0"}, {"0.0001", "0.0001"}, {"0.00001", "1e-05"}, {"1.5e-7", "1.5e-07"},
        {"0.1+0.2", "0.30000000000000004"}, {"10/3", "3.3333333333333335"}, {"-0.0", "-0.0"},
        {"2.0**0.5", "1.4142135623730951"}, {"1_000*3", "3000"}, {".5+2.", "2.5"}, {"3-4", "-1"},
        {"5%0.5", "0.0"}, {"1/3*3", "1.0"}, {"100000000000000000.0", "1e+17"},
        {"123456789012345678.0", "1.2345678901234568e+17"}, {"2.5e-5", "2.5e-05"}, {"-(3)", "-3"},
        {"+-+3", "-3"}, {"2*-3", "-6"}, {"2**-2**2", "0.0625"}, {"-5//2.0", "-3.0"}, {"0.0*-1", "-0.0"},
        {"  ( 12 + 30 )\n* 2 ", "84"}, {"1**100000000000", "1"}, {"(-1)**99999999999", "-1"},
        {"-9223372036854775807-1", "-9223372036854775808"}, {"3 % -5", "-2"}, {"2**0", "1"}, {"0**0", "1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) value(cases[i][0], cases[i][1]);
}

static void test_errors(void) {
    error("1/0", "division by zero");
    error("1//0", "division by zero");
    error("1%0", "division by zero");
    error("1.5/0.0", "division by zero");
    error("2**63", "does not fit in 64 bits");
    error("9223372036854775807+1", "does not fit in 64 bits");
    error("3037000500*3037000500", "does not fit in 64 bits");
    error("(-9223372036854775807-1)//-1", "does not fit in 64 bits");
    error("-(-9223372036854775807-1)", "does not fit in 64 bits");
    error("99999999999999999999", "integer literal does not fit in 64 bits");
    error("10.0**400", "number too large");
    error("1e400", "number too large");
    error("0**-1", "zero cannot be raised to a negative power");
    error("(-8)**0.5", "complex");
    error("", "empty expression");
    error("1+", "ends early");
    error("(1+2", "'(' is never closed (at byte 0)");
    error("1+2)", "unmatched ')' (at byte 3)");
    error("2^3", "'^' is not supported");
    error("12*34=", "'=' is not supported");
    error("x+1", "names are not supported");
    error("__import__('os')", "names are not supported");
    error("1 2", "unexpected '2' after the expression (at byte 2)");
    error("3e", "unexpected 'e' after a number");
    error("1..2", "unexpected '.'");
}

static void test_bounds(void) {
    /* nesting: 100 levels work, one more is a clear error, and a megabyte of parentheses is refused by length
     * before any parsing */
    char buf[CPT_ENV_EXPR_MAX_LEN + 2];
    int d = CPT_ENV_EXPR_MAX_DEPTH - 1;
    size_t n = 0;
    for (int i = 0; i < d; i++) buf[n++] = '(';
    buf[n++] = '7';
    for (int i = 0; i < d; i++) buf[n++] = ')';
    buf[n] = 0;
    value(buf, "7");
    n = 0;
    for (int i = 0; i <= d; i++) buf[n++] = '(';
    buf[n++] = '7';
    for (int i = 0; i <= d; i++) buf[n++] = ')';
    buf[n] = 0;
    error(buf, "nested deeper than 100 levels");
    n = 0;
    for (int i = 0; i < 300; i++) buf[n++] = '-';
    buf[n++] = '1';
    buf[n] = 0;
    error(buf, "nested deeper than 100 levels");
    n = 0;
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(buf + n, sizeof buf - n, "2**");
    buf[n++] = '1';
    buf[n] = 0;
    error(buf, "nested deeper than 100 levels");
    size_t big = (size_t)1 << 20;
    char *huge = malloc(big + 1);
    memset(huge, '(', big);
    huge[big] = 0;
    char obs[256];
    CHECK(cpt_env_calculator_observe(huge, big, obs, sizeof obs) == 0);
    CHECK_MSG(strstr(obs, "expression too long: 1048576 bytes, at most 4096") != NULL, "%s", obs);
    /* a long flat sum is fine up to the length bound: no recursion per term */
    n = 0;
    while (n + 3 < CPT_ENV_EXPR_MAX_LEN) {
        buf[n++] = '1';
        buf[n++] = '+';
    }
    buf[n++] = '1';
    buf[n] = 0;
    char want[32];
    snprintf(want, sizeof want, "%zu", n / 2 + 1);
    value(buf, want);
    free(huge);
}

static void test_countdown(void) {
    int64_t nums[4] = {4, 6, 1, 1};
    char obs[256];
    const char *e = "4*6*1";
    CHECK(cpt_env_countdown_observe(e, strlen(e), nums, 4, 24, 0, obs, sizeof obs) == 1);
    CHECK_EQ_STR(obs, "= 24 (uses 4 6 1; target 24 reached)");
    e = "4*6-1";
    CHECK(cpt_env_countdown_observe(e, strlen(e), nums, 4, 24, 0, obs, sizeof obs) == 1);
    CHECK_EQ_STR(obs, "= 23 (uses 4 6 1; target 24 not reached)");
    e = "4*7-4";
    CHECK(cpt_env_countdown_observe(e, strlen(e), nums, 4, 24, 0, obs, sizeof obs) == 1);
    CHECK_MSG(!strncmp(obs, "= 24 (number 7 is not one of the given numbers", 46) &&
              strstr(obs, "target 24 not reached)"), "%s", obs);
    e = "6/4*16";
    int64_t n2[3] = {6, 4, 16};
    CHECK(cpt_env_countdown_observe(e, strlen(e), n2, 3, 24, 0, obs, sizeof obs) == 1);
    CHECK_EQ_STR(obs, "= 24 (uses 6 4 16; target 24 reached)");
    e = "6/4";
    CHECK(cpt_env_countdown_observe(e, strlen(e), n2, 3, 24, 0, obs, sizeof obs) == 1);
    CHECK_EQ_STR(obs, "= 1.5 (uses 6 4; target 24 not reached)");
    e = "4*6";
    CHECK(cpt_env_countdown_observe(e, strlen(e), nums, 4, 24, 1, obs, sizeof obs) == 1);
    CHECK_MSG(strstr(obs, "number 1 is not used") && strstr(obs, "target 24 not reached"), "%s", obs);
    e = "4/(1-1)";
    CHECK(cpt_env_countdown_observe(e, strlen(e), nums, 4, 24, 0, obs, sizeof obs) == 0);
    CHECK_MSG(!strncmp(obs, "error: division by zero", 23), "%s", obs);
}

int main(void) {
    test_values();
    test_errors();
    test_bounds();
    test_countdown();
    return check_summary("test_env_expr");
}
