/* Synthetic arithmetic and countdown tasks (see core/synth.h). */
#include "core/synth.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNTH_STREAM 0x73796e7400000000ULL /* "synt" << 32, + task */

int cpt_synth_task_parse(const char *name, cpt_synth_task *out) {
    if (!strcmp(name, "arithmetic")) *out = CPT_SYNTH_ARITHMETIC;
    else if (!strcmp(name, "arithmetic-1digit")) *out = CPT_SYNTH_ARITHMETIC_1DIGIT;
    else if (!strcmp(name, "multiply-2digit")) *out = CPT_SYNTH_MULTIPLY_2DIGIT;
    else if (!strcmp(name, "countdown")) *out = CPT_SYNTH_COUNTDOWN;
    else return -1;
    return 0;
}

int cpt_synth_format_parse(const char *name, cpt_synth_format *out) {
    if (!strcmp(name, "sft")) *out = CPT_SYNTH_SFT;
    else if (!strcmp(name, "rl")) *out = CPT_SYNTH_RL;
    else if (!strcmp(name, "tool-sft")) *out = CPT_SYNTH_TOOL_SFT;
    else return -1;
    return 0;
}

int cpt_synth_split_parse(const char *name, cpt_synth_split *out) {
    if (!strcmp(name, "all")) *out = CPT_SYNTH_ALL;
    else if (!strcmp(name, "train")) *out = CPT_SYNTH_TRAIN;
    else if (!strcmp(name, "eval")) *out = CPT_SYNTH_EVAL;
    else if (!strcmp(name, "sft")) *out = CPT_SYNTH_SFT_PART;
    else if (!strcmp(name, "rl")) *out = CPT_SYNTH_RL_PART;
    else return -1;
    return 0;
}

/* The generator's own check: the solution uses only the given numbers, each at most once, and equals target. */
static int verify(const cpt_synth_item *it, cpt_err *err) {
    int64_t num, den;
    if (cpt_synth_eval(it->solution, it->numbers, it->n_numbers, &num, &den, err))
        return cpt_err_prefix(err, "synth: generated an invalid solution '%s'", it->solution);
    if (den != 1 || num != it->target)
        return cpt_errf(err, "synth: solution '%s' gives %lld/%lld, not %lld", it->solution, (long long)num,
                        (long long)den, (long long)it->target);
    return 0;
}

/* Fills prompt, answer and reply of "a op b" (target already set). */
static int finish_binary(cpt_synth_item *it, int a, char op, int b, cpt_err *err);

int cpt_synth_arithmetic(cpt_rng *rng, cpt_synth_item *it, cpt_err *err) {
    memset(it, 0, sizeof *it);
    int a, b;
    char op;
    switch (cpt_rng_below(rng, 3)) {
    case 0:
        op = '+';
        a = 1 + (int)cpt_rng_below(rng, 99);
        b = 1 + (int)cpt_rng_below(rng, 99);
        it->target = a + b;
        break;
    case 1: /* never negative: b <= a */
        op = '-';
        a = 1 + (int)cpt_rng_below(rng, 99);
        b = 1 + (int)cpt_rng_below(rng, (uint64_t)a);
        it->target = a - b;
        break;
    default:
        op = '*';
        a = 2 + (int)cpt_rng_below(rng, 19);
        b = 2 + (int)cpt_rng_below(rng, 8);
        it->target = a * b;
        break;
    }
    return finish_binary(it, a, op, b, err);
}

int cpt_synth_arithmetic_1digit(cpt_rng *rng, cpt_synth_item *it, cpt_err *err) {
    memset(it, 0, sizeof *it);
    int a = 10 + (int)cpt_rng_below(rng, 990), b = 1 + (int)cpt_rng_below(rng, 9);
    char op = cpt_rng_below(rng, 2) ? '-' : '+';
    it->target = op == '+' ? a + b : a - b;
    return finish_binary(it, a, op, b, err);
}

int cpt_synth_multiply_2digit(cpt_rng *rng, cpt_synth_item *it, cpt_err *err) {
    memset(it, 0, sizeof *it);
    int a = 10 + (int)cpt_rng_below(rng, 90), b = 10 + (int)cpt_rng_below(rng, 90);
    it->target = (int64_t)a * b;
    return finish_binary(it, a, '*', b, err);
}

static int finish_binary(cpt_synth_item *it, int a, char op, int b, cpt_err *err) {
    it->numbers[0] = a;
    it->numbers[1] = b;
    it->n_numbers = 2;
    snprintf(it->solution, sizeof it->solution, "%d %c %d", a, op, b);
    snprintf(it->prompt, sizeof it->prompt, "What is %s?", it->solution);
    snprintf(it->answer, sizeof it->answer, "%lld", (long long)it->target);
    snprintf(it->reply, sizeof it->reply, "%s = %s\n#### %s", it->solution, it->answer, it->answer);
    return verify(it, err);
}

/* A partial expression while combining numbers: its value, text, and how it binds. */
typedef struct part {
    int64_t v;
    char text[96];
    int prec; /* 3 atom, 2 product or quotient, 1 sum or difference */
    char op;  /* top-level operator, 0 for an atom */
} part;

static void wrap(char *out, size_t cap, const part *p, int parens) {
    snprintf(out, cap, parens ? "(%s)" : "%s", p->text);
}

static int combine(const part *a, const part *b, char op, part *out) {
    char l[100], r[100];
    int lp = 0, rp = 0;
    switch (op) {
    case '+': out->v = a->v + b->v; break;
    case '-': out->v = a->v - b->v; rp = b->prec == 1; break;
    case '*': out->v = a->v * b->v; lp = a->prec == 1; rp = b->prec == 1 || b->op == '/'; break;
    default: out->v = a->v / b->v; lp = a->prec == 1; rp = b->prec <= 2; break;
    }
    wrap(l, sizeof l, a, lp);
    wrap(r, sizeof r, b, rp);
    int n = snprintf(out->text, sizeof out->text, "%s %c %s", l, op, r);
    out->prec = op == '+' || op == '-' ? 1 : 2;
    out->op = op;
    return n > 0 && (size_t)n < sizeof out->text ? 0 : -1;
}

int cpt_synth_countdown(cpt_rng *rng, cpt_synth_item *it, cpt_err *err) {
    for (int attempt = 0; attempt < 1000; attempt++) {
        memset(it, 0, sizeof *it);
        int n = 2 + (int)cpt_rng_below(rng, 3);
        part parts[CPT_SYNTH_MAX_NUMBERS];
        for (int i = 0; i < n; i++) {
            /* Mostly small numbers, sometimes a round large one, as in the TV game. */
            int v = cpt_rng_below(rng, 5) == 0 ? 25 * (1 + (int)cpt_rng_below(rng, 4)) : 1 + (int)cpt_rng_below(rng, 20);
            it->numbers[i] = v;
            parts[i] = (part){.v = v, .prec = 3};
            snprintf(parts[i].text, sizeof parts[i].text, "%d", v);
        }
        it->n_numbers = n;
        int m = n, ok = 1;
        while (m > 1 && ok) {
            int i = (int)cpt_rng_below(rng, (uint64_t)m), j = (int)cpt_rng_below(rng, (uint64_t)(m - 1));
            if (j >= i) j++;
            const part *a = &parts[i], *b = &parts[j];
            char ops[4];
            int k = 0;
            ops[k++] = '+';
            if (a->v > b->v) ops[k++] = '-';
            if (a->v > 1 && b->v > 1 && a->v * b->v <= 10000) ops[k++] = '*';
            if (b->v > 1 && a->v % b->v == 0) ops[k++] = '/';
            part c;
            if (combine(a, b, ops[cpt_rng_below(rng, (uint64_t)k)], &c)) ok = 0;
            /* Replace a and b by c. */
            int hi = i > j ? i : j, lo = i > j ? j : i;
            parts[lo] = c;
            parts[hi] = parts[m - 1];
            m--;
        }
        int64_t t = parts[0].v;
        if (!ok || t < 10 || t > 999) continue;
        int trivial = 0;
        for (int i = 0; i < n; i++) trivial |= it->numbers[i] == t;
        if (trivial) continue;
        it->target = t;
        snprintf(it->solution, sizeof it->solution, "%s", parts[0].text);
        snprintf(it->answer, sizeof it->answer, "%lld", (long long)t);
        char list[64];
        int o = 0;
        for (int i = 0; i < n; i++) o += snprintf(list + o, sizeof list - (size_t)o, "%s%d", i ? ", " : "", it->numbers[i]);
        snprintf(it->prompt, sizeof it->prompt,
                 "Using the numbers [%s], create an expression that equals %lld. You may use +, -, *, / and "
                 "parentheses, and each number at most once.",
                 list, (long long)t);
        snprintf(it->reply, sizeof it->reply, "%s = %lld\n#### %s", it->solution, (long long)t, it->solution);
        return verify(it, err);
    }
    return cpt_errf(err, "synth: no countdown instance found in 1000 attempts");
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

int cpt_synth_uses_tool(const char *prompt) {
    /* The split takes the hash modulo 10; this takes the next digit, independent of the split. */
    return (fnv1a(prompt) / 10) % 2 == 0;
}

/* segments of a tool-sft record: a call, its observation (not trained) and the copied answer, or the answer. */
static json_t *tool_segments(const cpt_synth_item *it) {
    char expr[sizeof it->solution], call[sizeof expr + 32], obs[sizeof it->answer + 40], ans[sizeof it->answer + 8];
    size_t k = 0;
    for (const char *p = it->solution; *p; p++)
        if (*p != ' ') expr[k++] = *p;
    expr[k] = '\0';
    snprintf(call, sizeof call, "%s%s%s", CPT_SYNTH_CALL_START, expr, CPT_SYNTH_CALL_END);
    snprintf(obs, sizeof obs, "%s%s%s", CPT_SYNTH_OBS_BEFORE, it->answer, CPT_SYNTH_OBS_AFTER);
    snprintf(ans, sizeof ans, "#### %s", it->answer);
    if (!cpt_synth_uses_tool(it->prompt)) return json_pack("[{s:s, s:b}]", "text", ans, "train", 1);
    return json_pack("[{s:s, s:b}, {s:s, s:b}, {s:s, s:b}]", "text", call, "train", 1, "text", obs, "train", 0,
                     "text", ans, "train", 1);
}

static int in_split(const cpt_synth_item *it, cpt_synth_split split) {
    if (split == CPT_SYNTH_ALL) return 1;
    uint64_t bucket = fnv1a(it->prompt) % 10;
    switch (split) {
    case CPT_SYNTH_EVAL: return bucket == 0;
    case CPT_SYNTH_RL_PART: return bucket == 1 || bucket == 2;
    case CPT_SYNTH_SFT_PART: return bucket >= 3;
    default: return bucket != 0; /* train = rl + sft */
    }
}

static json_t *record_json(const cpt_synth_item *it, cpt_synth_task task, cpt_synth_format format) {
    json_t *o = json_object();
    if (!o) return NULL;
    int bad = 0;
    if (format == CPT_SYNTH_SFT) {
        json_t *msgs = json_array();
        json_t *u = json_pack("{s:s, s:s}", "role", "user", "content", it->prompt);
        json_t *a = json_pack("{s:s, s:s}", "role", "assistant", "content", it->reply);
        bad |= !msgs || !u || !a || json_array_append_new(msgs, u) || json_array_append_new(msgs, a) ||
               json_object_set_new(o, "messages", msgs);
    } else {
        bad |= json_object_set_new(o, "prompt", json_string(it->prompt)) ||
               json_object_set_new(o, "answer", json_string(it->answer));
        if (format == CPT_SYNTH_TOOL_SFT) {
            json_t *seg = tool_segments(it);
            bad |= !seg || json_object_set_new(o, "segments", seg);
        }
        if (task == CPT_SYNTH_COUNTDOWN) {
            json_t *nums = json_array();
            for (int i = 0; nums && i < it->n_numbers; i++) bad |= json_array_append_new(nums, json_integer(it->numbers[i]));
            bad |= !nums || json_object_set_new(o, "numbers", nums) ||
                   json_object_set_new(o, "target", json_integer(it->target)) ||
                   json_object_set_new(o, "solution", json_string(it->solution));
        }
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cpt_synth_write(FILE *out, cpt_synth_task task, cpt_synth_format format, cpt_synth_split split, long n,
                    uint64_t seed, cpt_err *err) {
    if (n < 0) return cpt_errf(err, "synth: --n must be >= 0");
    if (format == CPT_SYNTH_TOOL_SFT && task == CPT_SYNTH_COUNTDOWN)
        return cpt_errf(err, "synth: --format tool-sft is for the arithmetic tasks, not countdown");
    cpt_rng rng;
    cpt_rng_seed(&rng, seed, SYNTH_STREAM + (uint64_t)task);
    for (long i = 0; i < n;) {
        cpt_synth_item it;
        int rc = task == CPT_SYNTH_ARITHMETIC          ? cpt_synth_arithmetic(&rng, &it, err)
                 : task == CPT_SYNTH_ARITHMETIC_1DIGIT ? cpt_synth_arithmetic_1digit(&rng, &it, err)
                 : task == CPT_SYNTH_MULTIPLY_2DIGIT   ? cpt_synth_multiply_2digit(&rng, &it, err)
                                                       : cpt_synth_countdown(&rng, &it, err);
        if (rc) return -1;
        if (!in_split(&it, split)) continue;
        json_t *o = record_json(&it, task, format);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!line) return cpt_errf(err, "synth: out of memory");
        int w = fputs(line, out) < 0 || fputc('\n', out) == EOF;
        free(line);
        if (w) return cpt_errno(err, "synth: write failed");
        i++;
    }
    if (fflush(out) || ferror(out)) return cpt_errno(err, "synth: write failed");
    return 0;
}
