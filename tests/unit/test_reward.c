/* Reward providers: math and countdown through extra JSON, format (PCRE2), length penalty, the weighted
 * combination from config, and errors that name the item. */
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "reward/reward.h"
#include "tests/check.h"

static double part(const cpt_reward_result *r, const char *name) {
    for (int i = 0; i < r->n_parts; i++)
        if (!strcmp(r->parts[i].name, name)) return r->parts[i].value;
    return -999;
}

static void test_math_provider(void) {
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    cpt_err err;
    cpt_reward *r = cpt_reward_builtin("math", &o, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (!r) return;
    cpt_reward_item items[7] = {
        {"What is 6*7?", "6*7 = 42, so \\boxed{42}", "{\"answer\": \"42\"}"},
        {"What is 6*7?", "#### 41", "{\"answer\": 42}"},              /* number gold */
        {"Half?", "\\boxed{\\frac12}", "{\"answer\": 0.5}"},
        {"Sum?", "no idea", "{\"answer\": \"#### 3\"}"},
        /* golds that are not binary fractions: graded as the number the file wrote */
        {"A tenth?", "\\boxed{0.1}", "{\"answer\": 0.1}"},
        {"2.3?", "#### 2.3", "{\"answer\": 2.3}"},
        {"Small?", "\\boxed{0.0000001}", "{\"answer\": 1e-7}"},
    };
    cpt_reward_result res[7];
    CHECK(cpt_reward_score_batch(r, 7, items, res, &err) == 0);
    CHECK_NEAR(res[0].value, 1.0, 0);
    CHECK_NEAR(res[1].value, 0.0, 0);
    CHECK_NEAR(res[2].value, 1.0, 0);
    CHECK_NEAR(res[3].value, 0.0, 0);
    for (int i = 4; i < 7; i++) CHECK_MSG(res[i].value == 1.0, "numeric gold %s: reward %g", items[i].extra, res[i].value);
    CHECK_NEAR(part(&res[3], "math/answer_found"), 0.0, 0);
    CHECK_NEAR(part(&res[1], "math/answer_found"), 1.0, 0);
    /* a record without the gold answer is an error naming the item and the field */
    cpt_reward_item bad[2] = {{"p", "\\boxed{1}", "{\"answer\": \"1\"}"}, {"p", "\\boxed{1}", "{\"solution\": 1}"}};
    CHECK(cpt_reward_score_batch(r, 2, bad, res, &err) == -1);
    CHECK(strstr(err.msg, "item 1") && strstr(err.msg, "'answer'"));
    cpt_reward_item empty_gold = {"p", "\\boxed{}", "{\"answer\": \"\"}"};
    CHECK(cpt_reward_score_batch(r, 1, &empty_gold, res, &err) == -1);
    CHECK(strstr(err.msg, "non-empty") != NULL);
    cpt_reward_item bad_json = {"p", "x", "{\"answer\": "};
    CHECK(cpt_reward_score_batch(r, 1, &bad_json, res, &err) == -1);
    CHECK(strstr(err.msg, "extra JSON") != NULL);
    CHECK_EQ_STR(cpt_reward_name(r), "math");
    cpt_reward_free(r);
}

static void test_countdown_provider(void) {
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    o.countdown_format_score = 0.1;
    cpt_err err;
    cpt_reward *r = cpt_reward_builtin("countdown", &o, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (!r) return;
    const char *extra = "{\"nums\": [3, 7, 25, 50], \"target\": 75}";
    cpt_reward_result res;
    CHECK(cpt_reward_score(r, "", "<answer>50 + 25</answer>", extra, &res, &err) == 0);
    CHECK_NEAR(res.value, 1.0, 0);
    CHECK(cpt_reward_score(r, "", "<answer>50 + 3</answer>", extra, &res, &err) == 0);
    CHECK_NEAR(res.value, 0.1, 1e-15); /* valid but wrong: the format score */
    CHECK_NEAR(part(&res, "countdown/valid"), 1.0, 0);
    CHECK(cpt_reward_score(r, "", "<answer>50 + 50 - 25</answer>", extra, &res, &err) == 0);
    CHECK_NEAR(res.value, 0.0, 0);
    CHECK(cpt_reward_score(r, "", "x", "{\"numbers\": [1], \"target\": \"1\"}", &res, &err) == -1);
    CHECK(strstr(err.msg, "target") != NULL);
    cpt_reward_free(r);
}

static void test_format_and_length(void) {
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    o.format_regex = "^<think>.*</think>\\s*<answer>.*</answer>\\s*$";
    cpt_err err;
    cpt_reward *f = cpt_reward_builtin("format", &o, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    cpt_reward_result res;
    if (f) {
        CHECK(cpt_reward_score(f, "", "<think>a\nb</think>\n<answer>1</answer>", NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, 1.0, 0);
        CHECK(cpt_reward_score(f, "", "<answer>1</answer>", NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, 0.0, 0);
        cpt_reward_free(f);
    }
    o.format_dotall = 0; /* '.' stops at newlines now */
    f = cpt_reward_builtin("format", &o, &err);
    if (f) {
        CHECK(cpt_reward_score(f, "", "<think>a\nb</think>\n<answer>1</answer>", NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, 0.0, 0);
        cpt_reward_free(f);
    }
    o.format_regex = "(unclosed";
    CHECK(cpt_reward_builtin("format", &o, &err) == NULL);
    CHECK(strstr(err.msg, "reward.format_regex at offset") != NULL);
    o.format_regex = "";
    CHECK(cpt_reward_builtin("format", &o, &err) == NULL);

    o.length_target = 10;
    o.length_penalty = 0.01;
    o.length_max_penalty = 0.5;
    cpt_reward *l = cpt_reward_builtin("length", &o, &err);
    if (l) {
        CHECK(cpt_reward_score(l, "", "0123456789", NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, 0.0, 0);
        CHECK(cpt_reward_score(l, "", "0123456789abcde", NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, -0.05, 1e-12);
        char big[200];
        memset(big, 'a', 199);
        big[199] = 0;
        CHECK(cpt_reward_score(l, "", big, NULL, &res, &err) == 0);
        CHECK_NEAR(res.value, -0.5, 1e-12); /* capped */
        cpt_reward_free(l);
    }
    o.length_tokens = 1;
    l = cpt_reward_builtin("length", &o, &err);
    if (l) {
        CHECK(cpt_reward_score(l, "", "short", "{\"n_tokens\": 30}", &res, &err) == 0);
        CHECK_NEAR(res.value, -0.2, 1e-12);
        CHECK(cpt_reward_score(l, "", "short", "{}", &res, &err) == -1);
        CHECK(strstr(err.msg, "n_tokens") != NULL);
        cpt_reward_free(l);
    }
    CHECK(cpt_reward_builtin("nope", &o, &err) == NULL);
    CHECK(strstr(err.msg, "math|countdown") != NULL);
}

static void test_combined_from_config(void) {
    const char *toml =
        "[reward]\n"
        "type = \"combined\"\n"
        "combine = [\"math:1\", \"format:0.5\", \"length:2\"]\n"
        "format_regex = \"\\\\\\\\boxed\"\n"
        "length_target = 20\n"
        "length_penalty = 0.01\n";
    cpt_err err;
    cpt_config *cfg = cpt_config_load_text(toml, strlen(toml), "test.toml", 0, NULL, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (!cfg) return;
    cpt_reward *r = cpt_reward_from_config(cfg, &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (r) {
        cpt_reward_result res;
        /* 30 bytes: math 1, format 1, length -0.1 -> 1 + 0.5 - 0.2 */
        const char *c = "so the answer is \\boxed{12}...";
        CHECK_EQ_INT(strlen(c), 30);
        CHECK(cpt_reward_score(r, "", c, "{\"answer\": \"12\"}", &res, &err) == 0);
        CHECK_NEAR(res.value, 1.3, 1e-12);
        CHECK_NEAR(part(&res, "math"), 1.0, 0);
        CHECK_NEAR(part(&res, "format"), 1.0, 0);
        CHECK_NEAR(part(&res, "length"), -0.1, 1e-12);
        CHECK(cpt_reward_score(r, "", "12", "{\"answer\": \"12\"}", &res, &err) == 0);
        CHECK_NEAR(res.value, 0.0, 1e-12);
        cpt_reward_free(r);
    }
    cpt_config_free(cfg);

    const char *bad = "[reward]\ntype = \"combined\"\ncombine = [\"math:x\"]\n";
    cfg = cpt_config_load_text(bad, strlen(bad), "bad.toml", 0, NULL, &err);
    if (cfg) {
        CHECK(cpt_reward_from_config(cfg, &err) == NULL);
        CHECK(strstr(err.msg, "reward.combine[0]") && strstr(err.msg, "math:x"));
        cpt_config_free(cfg);
    }
    const char *empty = "[reward]\ntype = \"combined\"\n";
    cfg = cpt_config_load_text(empty, strlen(empty), "empty.toml", 0, NULL, &err);
    if (cfg) {
        CHECK(cpt_reward_from_config(cfg, &err) == NULL);
        CHECK(strstr(err.msg, "reward.combine") != NULL);
        cpt_config_free(cfg);
    }
    char name[32];
    double w;
    CHECK(cpt_reward_parse_weighted("format", name, sizeof name, &w, &err) == 0);
    CHECK_EQ_STR(name, "format");
    CHECK_NEAR(w, 1.0, 0);
    CHECK(cpt_reward_parse_weighted("format:-0.25", name, sizeof name, &w, &err) == 0);
    CHECK_NEAR(w, -0.25, 0);
    CHECK(cpt_reward_parse_weighted(":1", name, sizeof name, &w, &err) == -1);
}

int main(void) {
    test_math_provider();
    test_countdown_provider();
    test_format_and_length();
    test_combined_from_config();
    return check_summary("test_reward");
}
