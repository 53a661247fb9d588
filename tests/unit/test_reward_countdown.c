/* Countdown expressions: parsing, number use, exact rational arithmetic, extraction from completions. */
#include <stdlib.h>
#include <string.h>

#include "reward/countdown.h"
#include "tests/check.h"

typedef struct {
    const char *completion;
    int64_t nums[6];
    int n;
    int64_t target;
    int use_all;
    int want, want_valid;
} cd_case;

static const cd_case cases[] = {
    {"<answer>(25 - 5) * 3 + 4</answer>", {25, 5, 3, 4}, 4, 64, 0, 1, 1},
    {"<answer>25 - 5 * 3 + 4</answer>", {25, 5, 3, 4}, 4, 14, 0, 1, 1},
    {"<answer>(25 - 5) * 3</answer>", {25, 5, 3, 4}, 4, 60, 0, 1, 1},
    {"<answer>(25 - 5) * 3</answer>", {25, 5, 3, 4}, 4, 60, 1, 0, 0},      /* 4 unused */
    {"<answer>5 * 5</answer>", {25, 5, 3, 4}, 4, 25, 0, 0, 0},             /* 5 used twice */
    {"<answer>6 / 4 * 2</answer>", {6, 4, 2}, 3, 3, 0, 1, 1},               /* exact rationals */
    {"<answer>7 / 2</answer>", {7, 2}, 2, 3, 0, 0, 1},                     /* 3.5, not 3 */
    {"<answer>(7 + 1) / 2</answer>", {7, 1, 2}, 3, 4, 0, 1, 1},
    {"<answer>8 / (3 - 3)</answer>", {8, 3, 3}, 3, 0, 0, 0, 0},             /* division by zero */
    {"<answer>3 - 3</answer>", {3, 3}, 2, 0, 0, 1, 1},                       /* duplicates given twice */
    {"<answer>-3 + 5</answer>", {3, 5}, 2, 2, 0, 0, 0},                      /* no unary minus */
    {"<answer>2 ** 3</answer>", {2, 3}, 2, 8, 0, 0, 0},
    {"<answer>2 ^ 3</answer>", {2, 3}, 2, 8, 0, 0, 0},
    {"<answer>10 + 7</answer>", {10, 2}, 2, 17, 0, 0, 0},                    /* 7 not given */
    {"<answer>1.5 * 2</answer>", {1, 5, 2}, 3, 3, 0, 0, 0},
    {"<answer>((((4))))</answer>", {4}, 1, 4, 0, 1, 1},
    {"<answer>(4 + 2</answer>", {4, 2}, 2, 6, 0, 0, 0},
    {"<answer>4 + 2)</answer>", {4, 2}, 2, 6, 0, 0, 0},
    {"<answer>4 + 2 = 6</answer>", {4, 2}, 2, 6, 0, 1, 1},                   /* trailing "= target" */
    {"<answer>4 \\times 2 \\div 8</answer>", {4, 2, 8}, 3, 1, 0, 1, 1},
    {"<answer>4 \xc3\x97 2 \xc3\xb7 8</answer>", {4, 2, 8}, 3, 1, 0, 1, 1},
    {"<answer>4 x 2</answer>", {4, 2}, 2, 8, 0, 1, 1},
    {"Let me think. <answer>1 + 2</answer> no wait <answer>2 * 3</answer>", {1, 2, 3}, 3, 6, 0, 1, 1},
    {"<answer>2 * 3", {2, 3}, 2, 6, 0, 0, 0},                                 /* unterminated tag */
    {"So the expression is \\boxed{(9 - 1) * 3}", {9, 1, 3}, 3, 24, 0, 1, 1},
    {"I tried a lot.\n9 * 3 - 3\n", {9, 3, 3}, 3, 24, 0, 1, 1},              /* last line */
    {"<answer></answer>", {1}, 1, 1, 0, 0, 0},
    {"<answer>99 + 1</answer>", {99, 1, 50}, 3, 100, 1, 0, 0},
    {"<answer>(99 + 1) / 50 * 50 - 50</answer>", {99, 1, 50, 50, 50}, 5, 50, 1, 1, 1},
    {"<answer>1000000000000 * 1000000000000 * 1000000000000 * 1000000000000</answer>",
     {1000000000000, 1000000000000, 1000000000000, 1000000000000}, 4, 1, 0, 0, 0},  /* overflow is an error */
};

static void test_cases(void) {
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const cd_case *c = &cases[i];
        int valid = -1;
        char why[160];
        int got = cpt_countdown_grade(c->completion, strlen(c->completion), c->nums, c->n, c->target, c->use_all,
                                      &valid, why, sizeof why);
        CHECK_MSG(got == c->want && valid == c->want_valid, "case %d \"%s\": got %d valid %d (%s), want %d valid %d", i,
                  c->completion, got, valid, why, c->want, c->want_valid);
    }
    CHECK(n >= 20);
    printf("test_reward_countdown: %d cases\n", n);
}

static void test_eval_details(void) {
    int64_t nums[4] = {6, 4, 2, 5}, num, den;
    char why[160];
    CHECK(cpt_countdown_eval("6 / 4", 5, nums, 4, 0, &num, &den, why, sizeof why) == 0);
    CHECK_EQ_INT(num, 3);
    CHECK_EQ_INT(den, 2);
    CHECK(cpt_countdown_eval("6 - 4 - 2", 9, nums, 4, 0, &num, &den, why, sizeof why) == 0); /* left-assoc */
    CHECK_EQ_INT(num, 0);
    CHECK(cpt_countdown_eval("6 / 4 / 2", 9, nums, 4, 0, &num, &den, why, sizeof why) == 0);
    CHECK_EQ_INT(num, 3);
    CHECK_EQ_INT(den, 4);
    CHECK(cpt_countdown_eval("6 + 7", 5, nums, 4, 0, &num, &den, why, sizeof why) == -1);
    CHECK(strstr(why, "7 is not one of the given numbers") != NULL);
    CHECK(strstr(why, "byte") != NULL);
    CHECK(cpt_countdown_eval("6 + 6", 5, nums, 4, 0, &num, &den, why, sizeof why) == -1);
    CHECK(strstr(why, "used more often") != NULL);
    /* deep nesting is refused, not a stack overflow */
    char deep[400];
    memset(deep, '(', 200);
    deep[200] = '6';
    memset(deep + 201, ')', 199);
    CHECK(cpt_countdown_eval(deep, 400, nums, 4, 0, &num, &den, why, sizeof why) == -1);
    CHECK(strstr(why, "deeper") != NULL);
    /* bounded by len: "6 + 4" of "6 + 4 + 2" */
    CHECK(cpt_countdown_eval("6 + 4 + 2", 5, nums, 4, 0, &num, &den, why, sizeof why) == 0);
    CHECK_EQ_INT(num, 10);
    char *e = cpt_countdown_extract("blah <answer> 1 + 2 = 3 </answer>", 33);
    CHECK_EQ_STR(e, "1 + 2");
    free(e);
}

int main(void) {
    test_cases();
    test_eval_details();
    return check_summary("test_reward_countdown");
}
