/* Math answer extraction and equivalence on real-looking solutions, including the tricky forms. */
#include <stdlib.h>
#include <string.h>

#include "reward/math_answer.h"
#include "tests/check.h"

typedef struct {
    const char *completion, *gold;
    int want;
} grade_case;

static const grade_case cases[] = {
    {"So the total is 6 * 7 = 42. The answer is \\boxed{42}.", "42", 1},
    {"The answer is \\boxed{42}.", "43", 0},
    {"Natalia sold 48/2 = 24 clips in May.\n48 + 24 = 72\n#### 72", "72", 1},
    {"He earns 1,234 dollars.\n#### 1,234", "1234", 1},
    {"#### 3.50", "3.5", 1},
    {"\\boxed{\\frac{1}{2}}", "0.5", 1},
    {"\\boxed{\\dfrac{3}{4}}", "3/4", 1},
    {"\\boxed{0.50}", "1/2", 1},
    {"\\boxed{-3}", "-3.0", 1},
    {"\\boxed{3}", "-3", 0},
    {"\\boxed{\\$18.00}", "18", 1},
    {"It costs $\\boxed{18}$ dollars.", "18", 1},
    {"\\boxed{18 \\text{ dollars}}", "18", 1},
    {"\\boxed{5\\text{ cm}}", "5", 1},
    {"\\boxed{x = 5}", "5", 1},
    {"\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}", 1},
    {"\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{2}}{2}", 0},
    {"\\boxed{{2}^{3}}", "{2}^{3}", 1},
    {"First \\boxed{3}, wait, I made an error: \\boxed{4}", "4", 1},
    {"First \\boxed{3}, wait, I made an error: \\boxed{4}", "3", 0},
    {"I think it is 42", "42", 0},
    {"so \\boxed{42", "42", 0},
    {"\\boxed{1,000,000}", "1000000", 1},
    {"\\boxed{1,00}", "100", 0},
    {"\\boxed{2.5}", "\\frac52", 1},
    {"\\boxed{2\\frac{1}{2}}", "2.5", 1},
    {"\\boxed{-\\frac{1}{3}}", "-1/3", 1},
    {"\\boxed{\\frac{-1}{3}}", "-1/3", 1},
    {"\\boxed{0.333}", "1/3", 0},
    {"\\boxed{50\\%}", "50", 1},
    {"\\boxed{90^\\circ}", "90", 1},
    {"\\boxed{\\text{(B)}}", "(B)", 1},
    {"\\boxed{B}", "C", 0},
    {"The answer is \\boxed 7.", "7", 1},
    {"\\fbox{12}", "12", 1},
    {"\\boxed{1e3}", "1000", 1},
    {"\\boxed{+5}", "5", 1},
    {"\\boxed{05}", "5", 1},
    {"\\boxed{5.}", "5", 1},
    {"\\boxed{.5}", "0.5", 1},
    {"\\boxed{(1,2)}", "(1, 2)", 1},
    {"\\boxed{(1,2)}", "(2,1)", 0},
    {"\\boxed{\\left( 3, 4 \\right)}", "(3,4)", 1},
    {"\\boxed{123456789012345678901234567890}", "123,456,789,012,345,678,901,234,567,890", 1},
    {"\\boxed{123456789012345678901234567890}", "123456789012345678901234567891", 0},
    {"\\boxed{0.1000000000000000000001}", "0.1", 0},
    {"#### 7", "The answer is \\boxed{7}", 1},
    {"\\boxed{\\text{yes}}", "yes", 1},
    {"\\boxed{\xe2\x88\x92" "4}", "-4", 1},
    {"\\boxed{3/4}", "0.75", 1},
    {"\\boxed{2x}", "2", 0},
    {"\\(\\boxed{8}\\)", "8", 1},
    {"\\boxed{\\$1,234.50}", "1234.5", 1},
    {"\\boxed{\\frac{6}{8}}", "\\frac{3}{4}", 1},
    {"\\boxed{-0}", "0", 1},
    {"\\boxed{1/0}", "1", 0},
    {"\\boxed{10}", "1,0", 0},
    {"\\boxed{\\frac{1}{2}}", "\\frac{1}{3}", 0},
    {"#### -12", "-12", 1},
    {"####", "0", 0},
};

static void test_grading(void) {
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        int got = cpt_math_grade(cases[i].completion, strlen(cases[i].completion), cases[i].gold, NULL);
        CHECK_MSG(got == cases[i].want, "case %d: completion \"%s\" gold \"%s\": got %d want %d", i,
                  cases[i].completion, cases[i].gold, got, cases[i].want);
    }
    CHECK(n >= 40);
    printf("test_reward_math: %d grading cases\n", n);
}

static void check_extract(const char *text, const char *want) {
    char *a = cpt_math_extract_answer(text, strlen(text));
    if (want) CHECK_EQ_STR(a, want);
    else CHECK_MSG(a == NULL, "extract(\"%s\") = \"%s\", want none", text, a);
    free(a);
}

static void test_extraction(void) {
    check_extract("a \\boxed{b{c}d} e", "b{c}d");
    check_extract("\\boxed{\\{1\\}}", "\\{1\\}");
    check_extract("x \\boxed{1} y \\boxed{2} z", "2");
    check_extract("x \\boxed{1} y \\boxed{2", "1"); /* the last well-formed one */
    check_extract("line\n#### 42 \nmore", "42");
    check_extract("no answer here", NULL);
    check_extract("#### \n", NULL);
    check_extract("", NULL);
    check_extract("\\boxed{ }", NULL);
    check_extract("\\boxed{7} then \\boxed{}", "7");
    /* bounded: the length excludes the boxed answer */
    const char *t = "#### 5 \\boxed{6}";
    char *a = cpt_math_extract_answer(t, 6);
    CHECK_EQ_STR(a, "5");
    free(a);
    char *g = cpt_math_gold_answer("Work... #### 1,234");
    CHECK_EQ_STR(g, "1,234");
    free(g);
    char *nrm = cpt_math_normalize("$\\left( 1, 2 \\right)$.");
    CHECK_EQ_STR(nrm, "(1,2)");
    free(nrm);
    int found = -1;
    CHECK(cpt_math_grade("nothing", 7, "1", &found) == 0);
    CHECK_EQ_INT(found, 0);
    CHECK(cpt_math_grade("\\boxed{2}", 9, "1", &found) == 0);
    CHECK_EQ_INT(found, 1);
}

int main(void) {
    test_grading();
    test_extraction();
    /* equivalence is symmetric and reflexive on every case's answers */
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char *a = cpt_math_extract_answer(cases[i].completion, strlen(cases[i].completion));
        char *g = cpt_math_gold_answer(cases[i].gold);
        if (a && g) {
            CHECK_EQ_INT(cpt_math_answers_equal(a, g), cpt_math_answers_equal(g, a));
            CHECK(cpt_math_answers_equal(a, a));
        }
        free(a);
        free(g);
    }
    return check_summary("test_reward_math");
}
